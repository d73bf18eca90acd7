package testnet

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/protocol"
)

// The in-process network of BenchmarkRecovery: regular supernodes, the
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

// recNet is one running network.
type recNet struct {
	sc    recScale
	tm    recTiming
	seed  uint64
	dir   string
	op    crypto.PrivKey
	opPub string
	boot  string
	rec   *recRecorder

	regKeys []crypto.PrivKey
	regs    []*node.Node // regular supernodes by slot; a restart replaces the slot
	megas   []*node.Node // would-be mega-supernodes
	clients []*node.Node

	mu  sync.Mutex
	all []*node.Node // every node started, for Close
}

func (n *recNet) config(name string, role node.Role, capacity int) node.Config {
	c := node.DefaultConfig()
	c.DataDir = filepath.Join(n.dir, name) // unused: identities are injected and the API is off
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.APIListen = node.APIOff
	c.Role = role
	c.Capacity = capacity
	c.AnnounceInterval = n.tm.AnnounceInterval
	c.Keepalive = n.tm.Keepalive
	c.BusyRetryAfter = n.tm.BusyRetryAfter
	c.RetryBase = n.tm.RetryBase
	c.RetryMax = n.tm.RetryMax
	c.ReturnInterval = n.tm.ReturnInterval
	c.DrainPeriod = n.tm.DrainPeriod
	c.OperatorPubkeys = []string{n.opPub}
	c.NetworkMode = node.NetworkOpen // the operator key certifies the megas only
	if n.boot != "" {
		c.Bootstrap = []string{n.boot}
	}
	return c
}

// start starts one node and remembers it for close.
func (n *recNet) start(ctx context.Context, c node.Config, key crypto.PrivKey, seed uint64, opts ...node.Option) (*node.Node, error) {
	opts = append([]node.Option{node.WithIdentity(key), node.WithSeed(seed), node.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	// Loopback peers reach each other directly: no relay reservations.
	nd, err := node.New(c, append(opts, node.WithReachability(network.ReachabilityPublic))...)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.all = append(n.all, nd)
	n.mu.Unlock()
	if err := nd.Start(ctx); err != nil {
		return nil, err
	}
	return nd, nil
}

// recStartNetwork starts the supernodes and the would-be megas, waits until
// every supernode's ring holds all of them, then starts the clients. It
// does not wait for the clients to attach. tb's cleanup closes everything.
func recStartNetwork(ctx context.Context, tb testing.TB, sc recScale, tm recTiming, seed uint64) *recNet {
	tb.Helper()
	n := &recNet{sc: sc, tm: tm, seed: seed, dir: tb.TempDir(), rec: &recRecorder{}}
	tb.Cleanup(n.close)
	var err error
	if n.op, err = recKey(seed, "operator", 0); err != nil {
		tb.Fatal(err)
	}
	if n.opPub, err = protocol.EncodeKey(n.op.GetPublic()); err != nil {
		tb.Fatal(err)
	}
	for i := range sc.Supernodes {
		key, err := recKey(seed, "supernode", i)
		if err != nil {
			tb.Fatal(err)
		}
		sn, err := n.start(ctx, n.config(fmt.Sprintf("sn%d", i), node.RoleSupernode, sc.Capacity), key, seed+uint64(i))
		if err != nil {
			tb.Fatalf("start supernode %d: %v", i, err)
		}
		n.regKeys, n.regs = append(n.regKeys, key), append(n.regs, sn)
		if i == 0 {
			n.boot = fmt.Sprintf("%s/p2p/%s", sn.Host().Addrs()[0], sn.ID())
		}
	}
	for i := range sc.Megas {
		key, err := recKey(seed, "mega", i)
		if err != nil {
			tb.Fatal(err)
		}
		m, err := n.start(ctx, n.config(fmt.Sprintf("mega%d", i), node.RoleSupernode, sc.MegaRegularCapacity), key, seed+1000+uint64(i))
		if err != nil {
			tb.Fatalf("start mega-supernode %d: %v", i, err)
		}
		n.megas = append(n.megas, m)
	}
	members := sc.Supernodes + sc.Megas
	err = waitFor(ctx, 30*time.Second, 20*time.Millisecond, func() bool {
		for _, sn := range n.supernodes() {
			if r := sn.Ring(); r == nil || r.Len() != members {
				return false
			}
		}
		return true
	})
	if err != nil {
		tb.Fatalf("supernode rings did not hold all %d supernodes: %v", members, err)
	}
	n.clients = make([]*node.Node, sc.Clients)
	errs := make([]error, sc.Clients)
	sem := make(chan struct{}, recStartParallel)
	var wg sync.WaitGroup
	for i := range sc.Clients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			key, err := recKey(seed, "client", i)
			if err == nil {
				n.clients[i], err = n.start(ctx, n.config(fmt.Sprintf("c%d", i), node.RoleOrdinary, 0), key,
					seed+10_000+uint64(i), node.WithObserver(n.rec.observe))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
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
	sn, err := n.start(ctx, n.config(fmt.Sprintf("sn%d-restarted", i), node.RoleSupernode, n.sc.Capacity), n.regKeys[i], n.seed+100+uint64(i))
	if err != nil {
		return nil, fmt.Errorf("restart supernode %d: %w", i, err)
	}
	n.regs[i] = sn
	return sn, nil
}

// cert returns an operator certificate for m.
func (n *recNet) cert(m *node.Node, capacity int, serial uint64) ([]byte, error) {
	now := time.Now()
	return protocol.SealMegaCert(protocol.MegaCert{Subject: m.ID(), Capacity: uint32(capacity),
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), Serial: serial}, n.op)
}

// close stops every node: clients first (so they do not fail over while
// the supernodes stop), then the rest, concurrently.
func (n *recNet) close() {
	n.mu.Lock()
	all := n.all
	n.all = nil
	n.mu.Unlock()
	isClient := map[*node.Node]bool{}
	for _, c := range n.clients {
		isClient[c] = true
	}
	var wg sync.WaitGroup
	for _, first := range []bool{true, false} {
		for _, nd := range all {
			if isClient[nd] == first {
				wg.Go(func() { _ = nd.Close() })
			}
		}
		wg.Wait()
	}
}

// recHealth says whether a surviving supernode is up: it answers Status,
// it is in the directory of a client (so its announce loop runs), and its
// libp2p host answers a ping from that client's host. Each check is
// retried, each try bounded by 3 s, until it passes or within has passed:
// the whole network shares one process, and a starved process must not
// pass for a failed supernode. It returns the result and how long the
// checks took.
func recHealth(ctx context.Context, sn, probe *node.Node, within time.Duration) (r recHealthResult, took time.Duration) {
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
			_, r.InDirectory = probe.Directory().Snapshot().Get(sn.ID())
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

// recInDirectories reports whether every node of nodes lists every id.
func recInDirectories(nodes []*node.Node, ids []peer.ID) bool {
	for _, nd := range nodes {
		s := nd.Directory().Snapshot()
		for _, id := range ids {
			if _, ok := s.Get(id); !ok {
				return false
			}
		}
	}
	return true
}
