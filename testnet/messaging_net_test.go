package testnet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node"
)

// The in-process network of the messaging benchmarks: k supernodes (the
// first is everyone's bootstrap peer) and ordinary nodes, each a full
// node.Node on 127.0.0.1, configured as docs/BENCHMARKS.md ("Messaging end
// to end") describes: announce interval 1 s (OVERLAYD_MSG_ANNOUNCE), keepalive 2 s, return
// interval 1 h, no local API.

// msgStartParallel is how many ordinary nodes start at once.
const msgStartParallel = 32

// msgNet is one running network.
type msgNet struct {
	announce  time.Duration // every node's announce interval
	dir       string
	closeOnce sync.Once
	sns       []*node.Node
	regs      []*prometheus.Registry // per supernode, injected
	clients   []*node.Node
}

// msgConfig is the configuration of every node of the benchmarks.
func msgConfig(dir string, role node.Role, capacity int, boot string, announce time.Duration) node.Config {
	c := node.DefaultConfig()
	c.DataDir = dir // unused: identities are injected and the API is off
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.Role = role
	c.Capacity = capacity
	c.AnnounceInterval = announce
	c.Keepalive = 2 * time.Second
	c.ReturnInterval = time.Hour
	c.APIListen = node.APIOff
	if boot != "" {
		c.Bootstrap = []string{boot}
	}
	return c
}

// msgKey returns a fresh Ed25519 identity.
func msgKey() (crypto.PrivKey, peer.ID, error) {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	id, err := peer.IDFromPrivateKey(k)
	return k, id, err
}

// msgStartNode starts one node with its goroutines labelled with role.
func msgStartNode(ctx context.Context, role string, c node.Config, opts ...node.Option) (*node.Node, error) {
	// Loopback peers reach each other directly: no relay reservations.
	nd, err := node.New(c, append(opts, node.WithReachability(network.ReachabilityPublic))...)
	if err != nil {
		return nil, err
	}
	msgWithRole(ctx, role, func(ctx context.Context) { err = nd.Start(ctx) })
	if err != nil {
		nd.Close()
		return nil, err
	}
	return nd, nil
}

// msgStartSupernodes starts k supernodes, each with its own registry and
// the extra options, and waits until every one's ring holds all k. The
// network is closed by tb's cleanup.
func msgStartSupernodes(ctx context.Context, tb testing.TB, k, capacity int, announce time.Duration, seed uint64, extra ...node.Option) *msgNet {
	tb.Helper()
	n := &msgNet{dir: tb.TempDir(), announce: announce}
	tb.Cleanup(n.close)
	boot := ""
	for i := range k {
		key, _, err := msgKey()
		if err != nil {
			tb.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		opts := append([]node.Option{node.WithIdentity(key), node.WithRegistry(reg), node.WithSeed(seed + uint64(i))}, extra...)
		c := msgConfig(filepath.Join(n.dir, fmt.Sprintf("sn%d", i)), node.RoleSupernode, capacity, boot, announce)
		sn, err := msgStartNode(ctx, msgRoleSupernode, c, opts...)
		if err != nil {
			tb.Fatalf("start supernode %d: %v", i, err)
		}
		n.sns, n.regs = append(n.sns, sn), append(n.regs, reg)
		if boot == "" {
			boot = fmt.Sprintf("%s/p2p/%s", sn.Host().Addrs()[0], sn.ID())
		}
	}
	err := waitFor(ctx, 30*time.Second, 20*time.Millisecond, func() bool {
		for _, sn := range n.sns {
			if r := sn.Ring(); r == nil || r.Len() != k {
				return false
			}
		}
		return true
	})
	if err != nil {
		tb.Fatalf("supernode rings did not hold all %d supernodes: %v", k, err)
	}
	return n
}

func (n *msgNet) boot() string {
	return fmt.Sprintf("%s/p2p/%s", n.sns[0].Host().Addrs()[0], n.sns[0].ID())
}

// startClients starts one ordinary node per key (a fresh identity where
// keys[i] is nil), msgStartParallel at a time, and appends them to
// n.clients in key order. It does not wait for them to attach.
func (n *msgNet) startClients(ctx context.Context, tb testing.TB, keys []crypto.PrivKey, seed uint64) []*node.Node {
	tb.Helper()
	out := make([]*node.Node, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, msgStartParallel)
	var wg sync.WaitGroup
	first := len(n.clients)
	for i, key := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if key == nil {
				var err error
				if key, _, err = msgKey(); err != nil {
					errs[i] = err
					return
				}
			}
			c := msgConfig(filepath.Join(n.dir, fmt.Sprintf("c%d", first+i)), node.RoleOrdinary, 0, n.boot(), n.announce)
			out[i], errs[i] = msgStartNode(ctx, msgRoleClient, c, node.WithIdentity(key), node.WithSeed(seed+uint64(first+i)))
		})
	}
	wg.Wait()
	for _, c := range out {
		if c != nil {
			n.clients = append(n.clients, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("start clients: %v", err)
	}
	return out
}

// msgWaitAttached waits until every node of cs is attached (to want[i] when
// want is not nil), and returns each one's supernode.
func msgWaitAttached(ctx context.Context, tb testing.TB, cs []*node.Node, want []peer.ID, within time.Duration) []peer.ID {
	tb.Helper()
	at := make([]peer.ID, len(cs))
	pending := make([]int, len(cs))
	for i := range cs {
		pending[i] = i
	}
	err := waitFor(ctx, within, 100*time.Millisecond, func() bool {
		rest := pending[:0]
		for _, i := range pending {
			a := cs[i].Status().Attachment
			if a == nil {
				rest = append(rest, i)
				continue
			}
			id, err := peer.Decode(a.Supernode)
			if err != nil || (want != nil && id != want[i]) {
				rest = append(rest, i)
				continue
			}
			at[i] = id
		}
		pending = rest
		return len(pending) == 0
	})
	if err != nil {
		for k, i := range pending[:min(len(pending), 5)] {
			st := cs[i].Status()
			tb.Logf("not attached %d: %s: %d connected peers, directory %d, ring %q, failovers %d",
				k, st.PeerID, st.ConnectedPeers, st.DirectorySize, st.RingVersion, st.Failovers)
		}
		tb.Fatalf("%d of %d clients not attached as wanted after %v (process CPU so far %.0f s): %v",
			len(pending), len(cs), within, msgRusage().Seconds(), err)
	}
	return at
}

// close stops every node, clients first, concurrently; it is idempotent.
func (n *msgNet) close() { n.closeOnce.Do(n.closeAll) }

func (n *msgNet) closeAll() {
	var wg sync.WaitGroup
	for _, c := range n.clients {
		wg.Go(func() { _ = c.Close() })
	}
	wg.Wait()
	for _, sn := range n.sns {
		wg.Go(func() { _ = sn.Close() })
	}
	wg.Wait()
}

// msgRouterCounts are a snapshot of the router counters the benchmarks
// use, read from a supernode's injected registry
// (supernode.Router.Collector).
type msgRouterCounts struct {
	GroupPublishes, GroupFramesSent, GroupFanouts, FanoutRefused uint64
	Relayed, DeliveredLocal                                      uint64
}

func msgReadRouter(reg *prometheus.Registry) msgRouterCounts {
	v := msgGather(reg)
	u := func(name string) uint64 { return uint64(v[name]) }
	return msgRouterCounts{
		GroupPublishes:  u("overlayd_supernode_group_publishes_numbered_total"),
		GroupFramesSent: u("overlayd_supernode_group_frames_sent_total"),
		GroupFanouts:    u("overlayd_supernode_group_fanouts_total"),
		FanoutRefused:   u("overlayd_supernode_group_fanout_refused_total"),
		Relayed:         u(`overlayd_supernode_direct_messages_total{outcome="relayed"}`),
		DeliveredLocal:  u(`overlayd_supernode_direct_messages_total{outcome="delivered_local"}`),
	}
}

// msgGather reads every counter and gauge in reg once, by name for an
// unlabelled series and as name{label="value"} for a series with one
// label (an empty map when the registry cannot be read).
func msgGather(reg *prometheus.Registry) map[string]float64 {
	out := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			default:
				continue
			}
			switch ls := m.GetLabel(); len(ls) {
			case 0:
				out[mf.GetName()] = v
			case 1:
				out[fmt.Sprintf("%s{%s=%q}", mf.GetName(), ls[0].GetName(), ls[0].GetValue())] = v
			}
		}
	}
	return out
}

// msgCounter returns the value of an unlabelled counter or gauge in reg
// (0 when absent).
func msgCounter(reg *prometheus.Registry, name string) float64 { return msgGather(reg)[name] }
