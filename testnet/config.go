package testnet

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overlayd/overlayd/node"
)

// Config sizes a network and sets its nodes' timing.
type Config struct {
	Supernodes int
	Clients    int
	// Megas are operator-seeded mega-supernodes: they run as small regular
	// supernodes (capacity 1) until PromoteMegas gives them certificates of
	// MegaCapacity.
	Megas        int
	Capacity     int
	MegaCapacity int

	AnnounceInterval time.Duration
	Keepalive        time.Duration
	BusyRetryAfter   time.Duration
	RetryBase        time.Duration
	RetryMax         time.Duration
	ReturnInterval   time.Duration
	DrainPeriod      time.Duration

	// Seed drives every random choice of the network: identities, the
	// nodes' jitter, which supernodes a scenario kills.
	Seed uint64
	// NoJitter gives the clients the naive retry policy (fixed intervals,
	// no stagger), to show what the storm scenario guards against.
	NoJitter bool
	// NoResume starts the supernodes and megas without their store
	// (node.WithoutStoreForTest): no replay log, so no group resume and no
	// home replication, as before they existed. For comparison only: it
	// shows what the loss criterion guards against.
	NoResume bool
	// SpareHome keeps the group's home out of the supernodes that
	// KillSupernodes crashes, so that the members fail over while the
	// home goes on taking publishes. For comparison only: with the home
	// among the crashed, publishing stalls until the rings drop it, which
	// is after the members failed over, and a member's failover gap holds
	// no publish to lose (TestLossCriterionNeedsResume).
	SpareHome bool
	// FullDirectory keeps the ordinary nodes on the announcement topic
	// (node.Config.FullDirectory: the design before the partial view), to
	// compare the two.
	FullDirectory bool
	// Logger receives the nodes' logs (default: discarded).
	Logger *slog.Logger

	// The fields below serve the benchmark harnesses (testnet/*_test.go);
	// their zero values give the scenario runner's network.

	// Bootstrap are external bootstrap peers (multiaddrs ending in /p2p/),
	// added before the network's own. With Bootstrap set a network may
	// have no supernodes: clients of a supernode in another process.
	Bootstrap []string
	// SingleBootstrap makes the first supernode the only bootstrap peer of
	// the network, instead of the first supernode of each partition side.
	SingleBootstrap bool
	// NoGroup: clients neither join GroupName nor get the network's
	// counting listener, so Counters stay zero. For harnesses that listen
	// and join groups themselves.
	NoGroup bool
	// Registries gives every node its own Prometheus registry
	// (prometheus.NewRegistry: the node's metrics only, no Go or process
	// collectors), read with Network.Registry.
	Registries bool
	// PerMemberFanout starts every supernode and mega with
	// node.WithPerMemberGroupFanoutForTest: the naive group design that
	// sends one frame per member, for comparisons against it.
	PerMemberFanout bool
	// ProfileLabels starts each node inside pprof.Do with the label
	// RoleLabel set to its kind, so that the goroutines the node starts,
	// and theirs, are attributed to it in a CPU profile.
	ProfileLabels bool
	// StartParallel is how many clients start at once (default 16).
	StartParallel int
	// Identity, if not nil, returns the identity of slot i of a kind
	// (KindSupernode, KindMega, KindClient) instead of the one derived
	// from Seed. A restarted node keeps the identity of its slot.
	Identity func(kind string, i int) (crypto.PrivKey, error)
	// Options, if not nil, returns extra options for the node of a slot,
	// applied after the network's own: a WithSeed or WithObserver there
	// replaces the network's (a client's observer feeds the attempt log
	// that the storm scenario reads).
	Options func(Slot) []node.Option
}

// Slot names one member of a network for Config.Options.
type Slot struct {
	Kind  string // KindSupernode, KindMega or KindClient
	Index int    // the slot's number within its kind, from 0
	Name  string // sn0, mega0, c3
	// Life counts the slot's earlier starts: 0 for its first node, 1 for
	// the node of its first restart, and so on.
	Life int
}

// RoleLabel is the pprof label key that Config.ProfileLabels sets to a
// node's kind.
const RoleLabel = "overlayd_role"

// defaultStartParallel is how many clients start at once by default.
const defaultStartParallel = 16

// DefaultConfig is the network of the README's quick start: a few dozen
// nodes with fast timing, so that every scenario runs in under a minute.
func DefaultConfig() Config {
	return Config{
		Supernodes: 6, Clients: 30, Megas: 1, Capacity: 10, MegaCapacity: 40,
		AnnounceInterval: 500 * time.Millisecond,
		Keepalive:        500 * time.Millisecond,
		BusyRetryAfter:   500 * time.Millisecond,
		RetryBase:        250 * time.Millisecond,
		RetryMax:         2 * time.Second,
		ReturnInterval:   2 * time.Second,
		DrainPeriod:      2 * time.Second,
		Seed:             1,
	}
}

// MaxNodes is the most nodes Validate accepts in one process.
const MaxNodes = 2000

// Validate checks the sizes; the node settings are checked by each node.
func (c Config) Validate() error {
	switch {
	case c.Supernodes < 1 && len(c.Bootstrap) == 0:
		return fmt.Errorf("testnet: --supernodes %d: need at least 1", c.Supernodes)
	case c.Supernodes < 0:
		return fmt.Errorf("testnet: --supernodes %d: must not be negative", c.Supernodes)
	case c.Clients < 0:
		return fmt.Errorf("testnet: --clients %d: must not be negative", c.Clients)
	case c.Megas < 0:
		return fmt.Errorf("testnet: --megas %d: must not be negative", c.Megas)
	case c.Supernodes+c.Clients+c.Megas > MaxNodes:
		return fmt.Errorf("testnet: %d nodes: at most %d fit one process on this class of machine", c.Supernodes+c.Clients+c.Megas, MaxNodes)
	case c.Supernodes > 0 && c.Capacity < 1:
		return fmt.Errorf("testnet: --capacity %d: need at least 1", c.Capacity)
	case c.Megas > 0 && c.MegaCapacity < 1:
		return fmt.Errorf("testnet: --mega-capacity %d: need at least 1", c.MegaCapacity)
	case c.AnnounceInterval < 50*time.Millisecond:
		return fmt.Errorf("testnet: --interval %v: at least 50ms", c.AnnounceInterval)
	}
	return nil
}
