package testnet

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/overlay/cluster"
)

// The in-process network of BenchmarkRecovery, a testnet.Network: regular supernodes, the
// would-be mega-supernodes (started as small regular supernodes), and
// ordinary nodes, all trusting one operator key, all bootstrapping through
// the first regular supernode. Identities are derived from the seed, so both
// runs of one invocation have the same peer IDs, hence the same ring, home
// clusters and killed supernodes.

// recStartParallel is how many nodes start at once.
const recStartParallel = 32

// recTiming are the node settings of the scenario.
type recTiming struct {
	AnnounceInterval time.Duration
	Keepalive        time.Duration
	BusyRetryAfter   time.Duration
	RetryBase        time.Duration
	RetryMax         time.Duration
	ReturnInterval   time.Duration
	DrainPeriod      time.Duration
}

// recKey derives the Ed25519 identity number i of kind from seed.
func recKey(seed uint64, kind string, i int) (crypto.PrivKey, error) {
	h := sha256.Sum256(fmt.Appendf(nil, "overlayd-recovery/%d/%s/%d", seed, kind, i))
	return crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(h[:]))
}

// recRecorder counts the clients' attach attempts and session ends per
// phase. Observers must not block: it only loads and adds atomically.
type recRecorder struct {
	phase atomic.Int32
	// killed are the killed supernodes, set at the failure.
	killed atomic.Pointer[map[peer.ID]bool]
	// counts[phase][result]
	counts [recPhases][recResults]atomic.Int64
}

// Phases of a run, and the attempt results counted.
const (
	recPhaseSetup = iota
	recPhaseBefore
	recPhaseRecovery
	recPhaseRestart
	recPhaseHandBack
	recPhases
)

const (
	recAccept = iota
	recBusy
	recRedirect
	recError
	recSessionEnd  // every session end
	recEndKilled   // the supernode was killed
	recEndReturned // the client moved back home
	recEndDetached // the supernode detached the client (hand-back)
	recEndLost     // anything else: keepalive silence or a stream error on a live supernode
	recResults
)

var recPhaseNames = [recPhases]string{"setup", "before", "recovery", "restart", "handback"}

func (r *recRecorder) observe(e client.Event) {
	res := -1
	switch {
	case e.Kind == client.EventSessionEnd:
		res = recSessionEnd
		kind := recEndLost
		switch k := r.killed.Load(); {
		case k != nil && (*k)[e.Supernode]:
			kind = recEndKilled
		case e.Result == "returned home":
			kind = recEndReturned
		case strings.HasPrefix(e.Result, "detached by supernode"):
			kind = recEndDetached
		}
		r.counts[r.phase.Load()][kind].Add(1)
	case e.Kind != client.EventAttempt:
	case e.Result == "accept":
		res = recAccept
	case e.Result == "busy":
		res = recBusy
	case e.Result == "redirect":
		res = recRedirect
	default:
		res = recError
	}
	if res >= 0 {
		r.counts[r.phase.Load()][res].Add(1)
	}
}

// attempts returns the counts of one phase.
func (r *recRecorder) attempts(phase int) recAttempts {
	c := &r.counts[phase]
	return recAttempts{Accept: c[recAccept].Load(), Busy: c[recBusy].Load(), Redirect: c[recRedirect].Load(),
		Error: c[recError].Load(), SessionEnds: c[recSessionEnd].Load(), EndsKilled: c[recEndKilled].Load(),
		EndsReturned: c[recEndReturned].Load(), EndsDetached: c[recEndDetached].Load(), EndsLost: c[recEndLost].Load()}
}

// recNet is one running network: a testnet.Network and the benchmark's
// view of its slots.
type recNet struct {
	*Network
	sc   recScale
	tm   recTiming
	seed uint64
	rec  *recRecorder

	regs    []*node.Node // regular supernodes by slot; a restart replaces the slot
	megas   []*node.Node // would-be mega-supernodes
	clients []*node.Node
}

// recStartNetwork starts the supernodes and the would-be megas (testnet's
// megas, capacity 1 until promoted), waits until every supernode's ring
// holds all of them, then starts the clients, recStartParallel at a time.
// It does not wait for the clients to attach. Everyone bootstraps through
// sn0; node seeds are seed+i for sn<i>, seed+100+i for its restart,
// seed+1000+i for mega<i> and seed+10000+i for c<i>. tb's cleanup closes
// everything.
func recStartNetwork(ctx context.Context, tb testing.TB, sc recScale, tm recTiming, seed uint64) *recNet {
	tb.Helper()
	if sc.MegaRegularCapacity != 1 {
		tb.Fatalf("mega regular capacity %d: testnet runs would-be megas at capacity 1", sc.MegaRegularCapacity)
	}
	n := &recNet{sc: sc, tm: tm, seed: seed, rec: &recRecorder{}}
	net, err := Start(ctx, Config{
		Supernodes: sc.Supernodes, Megas: sc.Megas, Capacity: sc.Capacity, MegaCapacity: sc.MegaCapacity,
		AnnounceInterval: tm.AnnounceInterval, Keepalive: tm.Keepalive, BusyRetryAfter: tm.BusyRetryAfter,
		RetryBase: tm.RetryBase, RetryMax: tm.RetryMax, ReturnInterval: tm.ReturnInterval, DrainPeriod: tm.DrainPeriod,
		Seed: seed, SingleBootstrap: true, NoGroup: true, StartParallel: recStartParallel,
		FullDirectory: os.Getenv("OVERLAYD_RECOVERY_FULL_DIRECTORY") == "1",
		Identity:      func(kind string, i int) (crypto.PrivKey, error) { return recKey(seed, kind, i) },
		Options: func(s Slot) []node.Option {
			switch {
			case s.Kind == KindClient:
				return []node.Option{node.WithSeed(seed + 10_000 + uint64(s.Index)), node.WithObserver(n.rec.observe)}
			case s.Kind == KindMega:
				return []node.Option{node.WithSeed(seed + 1000 + uint64(s.Index))}
			case s.Life > 0:
				return []node.Option{node.WithSeed(seed + 100 + uint64(s.Index))}
			}
			return []node.Option{node.WithSeed(seed + uint64(s.Index))}
		},
	})
	if err != nil {
		tb.Fatalf("start supernodes: %v", err)
	}
	n.Network = net
	tb.Cleanup(func() { net.Close() })
	all := net.Supernodes()
	n.regs, n.megas = all[:sc.Supernodes:sc.Supernodes], all[sc.Supernodes:]
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := net.WaitRings(rctx); err != nil {
		tb.Fatal(err)
	}
	if n.clients, err = net.StartClients(ctx, sc.Clients, nil); err != nil {
		tb.Fatalf("start clients: %v", err)
	}
	return n
}

// supernodes returns the regular supernodes and the megas, in that order.
func (n *recNet) supernodes() []*node.Node {
	return append(append([]*node.Node(nil), n.regs...), n.megas...)
}

// restart starts a new supernode in slot i with the killed one's identity
// and capacity.
func (n *recNet) restart(ctx context.Context, i int) (*node.Node, error) {
	sn, err := n.RestartSupernode(ctx, i)
	if err != nil {
		return nil, fmt.Errorf("restart supernode %d: %w", i, err)
	}
	n.regs[i] = sn
	return sn, nil
}

// recHealth says whether a surviving supernode is up: it answers Status,
// it is in the directory of supernode dir (so its announce loop runs; a
// client's partial view need not list it, issue 21), and its libp2p host
// answers a ping from the host of client probe. Each check is
// retried, each try bounded by 3 s, until it passes or within has passed:
// the whole network shares one process, and a starved process must not
// pass for a failed supernode. It returns the result and how long the
// checks took.
func recHealth(ctx context.Context, sn, probe, dir *node.Node, within time.Duration) (r recHealthResult, took time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	h := probe.Host()
	for ctx.Err() == nil && !r.ok() {
		try, done := context.WithTimeout(ctx, 3*time.Second)
		if !r.StatusOK {
			answer := make(chan bool, 1)
			go func() { st := sn.Status(); answer <- st.PeerID == sn.ID().String() }()
			select {
			case r.StatusOK = <-answer:
			case <-try.Done():
			}
		}
		if !r.InDirectory {
			_, r.InDirectory = dir.Directory().Snapshot().Get(sn.ID())
		}
		if !r.PingOK {
			h.Peerstore().AddAddrs(sn.ID(), sn.Host().Addrs(), time.Minute)
			select {
			case res := <-ping.Ping(try, h, sn.ID()):
				r.PingOK = res.Error == nil
			case <-try.Done():
			}
		}
		done()
		if !r.ok() {
			pause(ctx, 500*time.Millisecond)
		}
	}
	return r, time.Since(start)
}

// recIDs returns the peer IDs of nodes as strings.
func recIDs(nodes []*node.Node) map[string]bool {
	out := make(map[string]bool, len(nodes))
	for _, nd := range nodes {
		out[nd.ID().String()] = true
	}
	return out
}

// recInDirectories reports whether the network knows every id: every
// supernode of sns lists them all in its directory, and every client's
// home cluster on its ring is the one sns[0] computes for the client's
// key. Since issue 21 a client keeps a partial view (its ring
// neighbourhood, spares and megas) instead of the whole directory, so
// what can be asked of it is that its view gives the supernodes' home,
// not that it lists every supernode.
func recInDirectories(sns, clients []*node.Node, ids []peer.ID) bool {
	return recNotKnown(sns, clients, ids) == ""
}

// recNotKnown says why recInDirectories does not hold ("" when it does).
func recNotKnown(sns, clients []*node.Node, ids []peer.ID) string {
	for _, nd := range sns {
		s := nd.Directory().Snapshot()
		for _, id := range ids {
			if _, ok := s.Get(id); !ok {
				return fmt.Sprintf("supernode %s does not list %s", nd.ID().ShortString(), id.ShortString())
			}
		}
	}
	if len(sns) == 0 {
		if len(clients) > 0 {
			return "no supernode"
		}
		return ""
	}
	// A client's home must be one a supernode computes: supernodes' rings
	// may differ for a while (one that started first ramps the weights of
	// those it saw join after its warm-up), and a client with a view
	// routes by the ring of the supernode it took the view from.
	bad, first := 0, ""
	for _, c := range clients {
		got := cluster.Home(c.Ring(), []byte(c.ID()))
		if len(got) == 0 || !slices.ContainsFunc(sns, func(sn *node.Node) bool { return slices.Equal(got, cluster.Home(sn.Ring(), []byte(c.ID()))) }) {
			if bad++; bad == 1 {
				first = fmt.Sprintf("client %s has home %v, supernode %s computes %v", c.ID().ShortString(), got, sns[0].ID().ShortString(), cluster.Home(sns[0].Ring(), []byte(c.ID())))
			}
		}
	}
	if bad > 0 {
		return fmt.Sprintf("%d of %d clients' homes disagree, e.g. %s", bad, len(clients), first)
	}
	return ""
}
