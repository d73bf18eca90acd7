package testnet

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/testnet/report"
)

// Kinds of member.
const (
	KindSupernode = "supernode"
	KindMega      = "mega"
	KindClient    = "client"
)

// member is one slot of the network: a name and identity that survive
// restarts, and the node running in it (nil while down).
type member struct {
	name  string
	kind  string
	key   crypto.PrivKey
	seed  uint64
	side  int // partition side, 0 or 1
	index int // number within its kind
	lives int // nodes started in this slot so far

	reg *prometheus.Registry // the running node's, with Config.Registries

	node *node.Node
	lis  *client.Listener
	// refusedBase is the attach refusals of this slot's earlier lives, so
	// that the network's total never goes backwards.
	refusedBase uint64
	lastRefused uint64
}

// Network is a running in-process network.
type Network struct {
	cfg   Config
	dir   string
	log   *slog.Logger
	op    crypto.PrivKey
	opPub string
	boot  []string
	gate  *partition
	t0    time.Time

	rngMu sync.Mutex
	rng   *rand.Rand

	attempts *attemptLog
	sent     atomic.Uint64
	deliv    atomic.Uint64
	dups     atomic.Uint64
	// groupSeen is each client's last group sequence number, for the
	// exactly-once-in-order check (guarded by mu).
	groupSeen map[string]seqPos
	// loss records every client's deliveries while a Publisher runs
	// (loss.go; guarded by mu).
	loss     *lossLog
	outOfOrd atomic.Uint64

	mu      sync.Mutex
	members []*member
	started []*node.Node // every node ever started, for Close
	serial  uint64
	wg      sync.WaitGroup
	closed  bool
}

// seqPos is a position in a group's sequence: a new epoch (the group's
// home moved) starts its numbering again.
type seqPos struct{ epoch, seq uint64 }

// GroupName is the group every client of a scenario joins.
const GroupName = "testnet"

// Start starts the supernodes and megas, then the clients, all
// bootstrapping through the first supernode of each partition side. On
// error it closes what it started.
func Start(ctx context.Context, cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "overlayd-testnet-")
	if err != nil {
		return nil, err
	}
	n := &Network{cfg: cfg, dir: dir, log: cfg.Logger, gate: newPartition(), t0: time.Now(), boot: slices.Clone(cfg.Bootstrap),
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		attempts: &attemptLog{}, groupSeen: map[string]seqPos{}}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.op, err = deriveKey(cfg.Seed, "operator", 0); err != nil {
		return nil, err
	}
	if n.opPub, err = protocol.EncodeKey(n.op.GetPublic()); err != nil {
		return nil, err
	}
	fail := func(err error) (*Network, error) {
		n.Close()
		return nil, err
	}
	for i := range cfg.Supernodes {
		m, err := n.newMember(KindSupernode, i, cfg.Supernodes, nil)
		if err != nil {
			return fail(err)
		}
		if err := n.startMember(ctx, m, nil); err != nil {
			return fail(err)
		}
		// The first supernode of each side is everyone's bootstrap peer.
		if i == 0 || i == cfg.Supernodes/2 && cfg.Supernodes > 1 && !cfg.SingleBootstrap {
			n.boot = append(n.boot, fmt.Sprintf("%s/p2p/%s", m.node.Host().Addrs()[0], m.node.ID()))
		}
	}
	for i := range cfg.Megas {
		m, err := n.newMember(KindMega, i, cfg.Megas, nil)
		if err != nil {
			return fail(err)
		}
		if err := n.startMember(ctx, m, nil); err != nil {
			return fail(err)
		}
	}
	if _, err := n.startClients(ctx, 0, cfg.Clients, nil, nil); err != nil {
		return fail(err)
	}
	return n, nil
}

// deriveKey derives identity i of kind from seed, so a seed names a
// network's peer IDs, hence its ring and home clusters.
func deriveKey(seed uint64, kind string, i int) (crypto.PrivKey, error) {
	h := sha256.Sum256(fmt.Appendf(nil, "overlayd-testnet/%d/%s/%d", seed, kind, i))
	return crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(h[:]))
}

// newMember makes slot i of kind (of total) and registers it; key, if not
// nil, is its identity.
func (n *Network) newMember(kind string, i, total int, key crypto.PrivKey) (*member, error) {
	var err error
	switch {
	case key != nil:
	case n.cfg.Identity != nil:
		key, err = n.cfg.Identity(kind, i)
	default:
		key, err = deriveKey(n.cfg.Seed, kind, i)
	}
	if err != nil {
		return nil, err
	}
	name := map[string]string{KindSupernode: "sn", KindMega: "mega", KindClient: "c"}[kind] + fmt.Sprint(i)
	side := 0
	if i >= (total+1)/2 && total > 1 {
		side = 1
	}
	m := &member{name: name, kind: kind, key: key, seed: n.cfg.Seed ^ uint64(len(kind))<<56 ^ uint64(i), side: side, index: i}
	n.mu.Lock()
	n.members = append(n.members, m)
	n.mu.Unlock()
	return m, nil
}

// startClients starts clients first..first+count-1, Config.StartParallel
// at a time, and returns them in slot order (nil where a start failed);
// keys[i], where given and not nil, is client first+i's identity.
func (n *Network) startClients(ctx context.Context, first, count int, keys []crypto.PrivKey, gate <-chan struct{}) ([]*node.Node, error) {
	out := make([]*node.Node, count)
	errs := make([]error, count)
	par := n.cfg.StartParallel
	if par <= 0 {
		par = defaultStartParallel
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range count {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var key crypto.PrivKey
			if i < len(keys) {
				key = keys[i]
			}
			m, err := n.newMember(KindClient, first+i, first+count, key)
			if err == nil {
				err = n.startMember(ctx, m, gate)
			}
			if err == nil {
				n.mu.Lock()
				out[i] = m.node
				n.mu.Unlock()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (n *Network) config(m *member) node.Config {
	c := config.Default()
	c.DataDir = filepath.Join(n.dir, m.name) // unused: identities are injected and the API is off
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.APIListen = config.APIOff
	c.Role = config.RoleOrdinary
	c.Capacity = 0
	switch m.kind {
	case KindSupernode:
		c.Role, c.Capacity = config.RoleSupernode, n.cfg.Capacity
	case KindMega:
		c.Role, c.Capacity = config.RoleSupernode, 1
	}
	c.AnnounceInterval = n.cfg.AnnounceInterval
	c.FullDirectory = n.cfg.FullDirectory
	setIf := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	setIf(&c.Keepalive, n.cfg.Keepalive)
	setIf(&c.BusyRetryAfter, n.cfg.BusyRetryAfter)
	setIf(&c.RetryBase, n.cfg.RetryBase)
	setIf(&c.RetryMax, n.cfg.RetryMax)
	setIf(&c.ReturnInterval, n.cfg.ReturnInterval)
	setIf(&c.DrainPeriod, n.cfg.DrainPeriod)
	c.OperatorPubkeys = []string{n.opPub}
	c.NetworkMode = config.NetworkOpen // the operator key certifies the megas only
	c.Bootstrap = slices.Clone(n.boot)
	c.MDNS = false // the testnet joins its nodes explicitly
	return c
}

// startMember starts the node of slot m; a client joins GroupName and
// counts what it receives. gate, if not nil, holds a client's first attach.
func (n *Network) startMember(ctx context.Context, m *member, gate <-chan struct{}) error {
	opts := []node.Option{
		node.WithIdentity(m.key),
		node.WithSeed(m.seed),
		node.WithLogger(n.log.With("node", m.name)),
		node.WithConnectionGater(n.gate.gaterFor(m)),
	}
	var reg *prometheus.Registry
	if n.cfg.Registries {
		reg = prometheus.NewRegistry()
		opts = append(opts, node.WithRegistry(reg))
	}
	if n.cfg.PerMemberFanout && m.kind != KindClient {
		opts = append(opts, node.WithPerMemberGroupFanoutForTest())
	}
	if n.cfg.NoResume && m.kind != KindClient {
		opts = append(opts, node.WithoutStoreForTest())
	}
	if m.kind == KindClient {
		opts = append(opts, node.WithObserver(n.attempts.observe))
		if n.cfg.NoJitter {
			opts = append(opts, node.WithoutJitterForTest(max(n.cfg.RetryBase, 10*time.Millisecond)))
		}
		if gate != nil {
			opts = append(opts, node.WithAttachGateForTest(gate))
		}
	}
	// Every node reaches every other directly on loopback: no node needs
	// a relay reservation.
	opts = append(opts, node.WithReachability(network.ReachabilityPublic))
	n.mu.Lock()
	slot := Slot{Kind: m.kind, Index: m.index, Name: m.name, Life: m.lives}
	m.lives++
	n.mu.Unlock()
	if n.cfg.Options != nil {
		opts = append(opts, n.cfg.Options(slot)...)
	}
	nd, err := node.New(n.config(m), opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	n.mu.Lock()
	n.started = append(n.started, nd)
	n.mu.Unlock()
	if n.cfg.ProfileLabels {
		pprof.Do(ctx, pprof.Labels(RoleLabel, m.kind), func(ctx context.Context) { err = nd.Start(ctx) })
	} else {
		err = nd.Start(ctx)
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", m.name, err)
	}
	n.gate.register(nd.ID(), m.side)
	var lis *client.Listener
	if m.kind == KindClient && !n.cfg.NoGroup {
		lis = nd.Client().Listen()
		if err := nd.Client().Join(GroupName); err != nil {
			return fmt.Errorf("%s: join: %w", m.name, err)
		}
	}
	n.mu.Lock()
	m.node, m.lis, m.reg = nd, lis, reg
	n.mu.Unlock()
	if lis != nil {
		n.wg.Go(func() { n.count(m.name, lis) })
	}
	return nil
}

// count counts the deliveries of one client's listener until it closes.
func (n *Network) count(name string, l *client.Listener) {
	for in := range l.C {
		switch in.Kind {
		case "group":
			n.mu.Lock()
			last := n.groupSeen[name]
			switch {
			// An epoch names one home's numbering (a moved home starts
			// again); order is checked within an epoch.
			case in.Epoch != last.epoch || in.Seq > last.seq:
				n.groupSeen[name] = seqPos{in.Epoch, in.Seq}
			case in.Epoch == last.epoch && in.Seq == last.seq:
				n.dups.Add(1)
			default:
				n.outOfOrd.Add(1)
			}
			ours := n.loss.recordLocked(name, delivery{id: string(in.ID), epoch: in.Epoch, seq: in.Seq})
			n.mu.Unlock()
			if !ours {
				n.deliv.Add(1)
			}
		case "direct":
			n.deliv.Add(1)
		case client.KindGap:
			if in.Group == GroupName {
				n.mu.Lock()
				if n.loss != nil {
					n.loss.gaps[name]++
				}
				n.mu.Unlock()
			}
		}
	}
}

// Seed returns the network's seed.
func (n *Network) Seed() uint64 { return n.cfg.Seed }

// Config returns the network's configuration.
func (n *Network) Config() Config { return n.cfg }

// live returns the running nodes of the given kinds, in slot order.
func (n *Network) live(kinds ...string) []*node.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*node.Node
	for _, m := range n.members {
		if m.node != nil && slices.Contains(kinds, m.kind) {
			out = append(out, m.node)
		}
	}
	return out
}

// Supernodes returns the running supernodes, megas included.
func (n *Network) Supernodes() []*node.Node { return n.live(KindSupernode, KindMega) }

// Clients returns the running ordinary nodes.
func (n *Network) Clients() []*node.Node { return n.live(KindClient) }

// All returns every running node, supernodes first.
func (n *Network) All() []*node.Node { return n.live(KindSupernode, KindMega, KindClient) }

// Name returns the testnet's name of a node (sn0, mega0, c3).
func (n *Network) Name(nd *node.Node) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.members {
		if m.node == nd {
			return m.name
		}
	}
	return "?"
}

// Converged reports whether every node's directory is complete: one that
// holds the whole directory holds exactly the given supernodes; one that
// keeps a partial view (an ordinary node, issue 21) has a ring and holds
// only supernodes among them (RingsAgree checks its homes).
func Converged(nodes []*node.Node, supers []peer.ID) bool {
	for _, nd := range nodes {
		s := nd.Directory().Snapshot()
		if nd.PartialView() {
			if nd.Ring() == nil || s.Len() == 0 {
				return false
			}
			for _, e := range s.Entries {
				if !slices.Contains(supers, e.ID) {
					return false
				}
			}
			continue
		}
		if s.Len() != len(supers) {
			return false
		}
		for _, id := range supers {
			if _, ok := s.Get(id); !ok {
				return false
			}
		}
	}
	return true
}

// WaitConverged waits until every node's directory lists every running
// supernode and every node's ring has the same version, calling progress
// (if not nil) with the number of complete directories whenever it changes.
func (n *Network) WaitConverged(ctx context.Context, progress func(complete, total int)) error {
	last := -1
	complete, total := 0, 0
	err := poll(ctx, 10*time.Millisecond, func() bool {
		var ids []peer.ID
		for _, s := range n.Supernodes() {
			ids = append(ids, s.ID())
		}
		all := n.All()
		complete, total = 0, len(all)
		for _, nd := range all {
			if Converged([]*node.Node{nd}, ids) {
				complete++
			}
		}
		if progress != nil && complete != last {
			progress(complete, total)
			last = complete
		}
		return complete == total && RingsAgree(all)
	})
	if err != nil {
		return fmt.Errorf("network did not converge: %d of %d directories complete: %w", complete, total, err)
	}
	return nil
}

// RingsAgree reports whether every node has a ring and all route by the
// same one: the nodes that hold the whole directory have rings of one
// version, and every node that keeps a partial view took it from a ring
// of that version and computes its own home cluster on it as they do.
func RingsAgree(all []*node.Node) bool {
	var ref *ring.Ring
	for _, nd := range all {
		r := nd.Ring()
		if r == nil {
			return false
		}
		if nd.PartialView() {
			continue
		}
		if ref == nil {
			ref = r
		} else if r.Version() != ref.Version() {
			return false
		}
	}
	for _, nd := range all {
		if !nd.PartialView() || ref == nil {
			continue
		}
		key := []byte(nd.ID())
		if nd.RingVersion() != ref.Version() || !slices.Equal(cluster.Home(nd.Ring(), key), cluster.Home(ref, key)) {
			return false
		}
	}
	return true
}

// Attached counts the running clients with a session on a running
// supernode (a client of a crashed supernode counts as detached at once,
// before it notices).
func (n *Network) Attached() (attached, total int) {
	live := n.liveSupernodeIDs()
	for _, c := range n.Clients() {
		total++
		if a := c.Status().Attachment; a != nil && live[a.Supernode] {
			attached++
		}
	}
	return attached, total
}

// liveSupernodeIDs returns the running supernodes' peer IDs.
func (n *Network) liveSupernodeIDs() map[string]bool {
	live := map[string]bool{}
	for _, s := range n.Supernodes() {
		live[s.ID().String()] = true
	}
	return live
}

// WaitAttached waits until every running ordinary node is attached to a
// supernode, calling progress (if not nil) when the count changes.
func (n *Network) WaitAttached(ctx context.Context, progress func(attached, total int)) error {
	last := -1
	attached, total := 0, 0
	err := poll(ctx, 10*time.Millisecond, func() bool {
		attached, total = n.Attached()
		if progress != nil && attached != last {
			progress(attached, total)
			last = attached
		}
		return attached == total
	})
	if err != nil {
		return fmt.Errorf("%d of %d clients attached: %w", attached, total, err)
	}
	return nil
}

// poll calls cond every tick until it holds or ctx ends.
func poll(ctx context.Context, tick time.Duration, cond func() bool) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// pick returns k distinct indexes of [0, n) chosen by the network's seed.
func (n *Network) pick(k, total int) []int {
	n.rngMu.Lock()
	defer n.rngMu.Unlock()
	p := n.rng.Perm(total)[:k]
	slices.Sort(p)
	return p
}

// membersOf returns the slots of a kind, in order.
func (n *Network) membersOf(kind string, running bool) []*member {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*member
	for _, m := range n.members {
		if m.kind == kind && (m.node != nil) == running {
			out = append(out, m)
		}
	}
	return out
}

// groupHome returns the running supernode that is GroupName's home by the
// first supernode's ring.
func (n *Network) groupHome() *node.Node {
	sns := n.Supernodes()
	if len(sns) == 0 {
		return nil
	}
	h, ok := cluster.GroupHome(sns[0].Ring(), GroupName)
	if !ok {
		return nil
	}
	for _, s := range sns {
		if s.ID() == h {
			return s
		}
	}
	return nil
}

// Publish publishes one group message from a running client chosen by the
// seed; it returns how many deliveries it should produce (the members the
// home knows).
func (n *Network) Publish(ctx context.Context, text string) error {
	live := n.membersOf(KindClient, true)
	if len(live) == 0 {
		return errors.New("testnet: no client to publish from")
	}
	from := live[n.pick(1, len(live))[0]].node
	if _, err := from.Client().Publish(ctx, GroupName, []byte(text)); err != nil {
		return err
	}
	n.sent.Add(1)
	return nil
}

// SendDirect sends one direct message between two running clients chosen
// by the seed and waits for its acknowledgement, or for the recipient's
// home cluster to store it: a recipient between sessions (moving home,
// handed back by a mega) is attached nowhere for a moment. Either way it
// counts as sent; the checks that follow wait for its delivery, which for
// a stored message comes when the recipient's presence reaches the
// replicas.
func (n *Network) SendDirect(ctx context.Context, text string) error {
	live := n.membersOf(KindClient, true)
	if len(live) < 2 {
		return errors.New("testnet: need two clients for a direct message")
	}
	p := n.pick(2, len(live))
	if _, err := live[p[0]].node.Client().Send(ctx, live[p[1]].node.ID(), []byte(text)); err != nil {
		return err
	}
	n.sent.Add(1)
	return nil
}

// Counters are the network's message counters.
type Counters struct {
	Sent, Delivered, Duplicates, OutOfOrder uint64
}

// Counters returns the message counters.
func (n *Network) Counters() Counters {
	return Counters{Sent: n.sent.Load(), Delivered: n.deliv.Load(), Duplicates: n.dups.Load(), OutOfOrder: n.outOfOrd.Load()}
}

// Elapsed is the time since the network started: the time base of its
// samples and of a scenario's events.
func (n *Network) Elapsed() time.Duration { return time.Since(n.t0) }

// Sample reads the network's state now; t is seconds since start.
func (n *Network) Sample() report.Sample {
	s := report.Sample{T: time.Since(n.t0).Seconds(), Sent: n.sent.Load(), Delivered: n.deliv.Load()}
	live := n.liveSupernodeIDs()
	n.mu.Lock()
	ms := slices.Clone(n.members)
	n.mu.Unlock()
	for _, m := range ms {
		n.mu.Lock()
		nd := m.node
		n.mu.Unlock()
		if nd == nil {
			if m.kind != KindClient {
				s.Refusals += m.refusedBase
			}
			continue
		}
		st := nd.Status()
		if m.kind == KindClient {
			s.Clients++
			if a := st.Attachment; a != nil && live[a.Supernode] {
				s.Attached++
			}
			continue
		}
		s.Supernodes++
		var refused uint64
		for _, sem := range st.Semaphores {
			if sem.Name == "attached" {
				refused = sem.Refused
			}
		}
		n.mu.Lock()
		m.lastRefused = refused
		n.mu.Unlock()
		s.Refusals += m.refusedBase + refused
		s.Load = append(s.Load, report.Load{Name: m.name, Attached: st.AttachedClients, Capacity: st.Capacity, Mega: st.Mega != nil})
	}
	return s
}

// Close stops every node, clients first (so they do not fail over while
// the supernodes stop), and removes the network's files.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	started := n.started
	clients := map[*node.Node]bool{}
	var lis []*client.Listener
	for _, m := range n.members {
		if m.kind == KindClient && m.node != nil {
			clients[m.node] = true
		}
		if m.lis != nil {
			lis = append(lis, m.lis)
		}
	}
	n.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	var mu sync.Mutex
	var errs []error
	for _, first := range []bool{true, false} {
		var wg sync.WaitGroup
		for _, nd := range started {
			if clients[nd] == first {
				wg.Go(func() {
					if err := nd.Close(); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
	}
	n.wg.Wait()
	errs = append(errs, os.RemoveAll(n.dir))
	return errors.Join(errs...)
}
