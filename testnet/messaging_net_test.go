package testnet

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node"
)

// The in-process network of the messaging benchmarks, a testnet.Network:
// k supernodes (the first is everyone's bootstrap peer) and ordinary
// nodes, each a full node.Node on 127.0.0.1, configured as docs/BENCHMARKS.md ("Messaging end
// to end") describes: announce interval 1 s (OVERLAYD_MSG_ANNOUNCE), keepalive 2 s, return
// interval 1 h, no local API.

// msgStartParallel is how many ordinary nodes start at once.
const msgStartParallel = 32

// msgNet is one running network: a testnet.Network of supernodes, each
// with its own registry, and the clients started on it.
type msgNet struct {
	*Network
	sns     []*node.Node
	regs    []*prometheus.Registry // per supernode, injected
	clients []*node.Node
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

// msgStartSupernodes starts k supernodes (sn0 is everyone's bootstrap
// peer), each with its own registry and a fresh identity, with node seeds
// seed+i; clients started later get the seeds clientSeed+i. perMember
// gives the supernodes the naive per-member group fan-out. Every node
// starts under its role's pprof label (messaging_cpu_test.go). It waits
// until every supernode's ring holds all k. tb's cleanup closes the
// network.
func msgStartSupernodes(ctx context.Context, tb testing.TB, k, capacity int, announce time.Duration, seed, clientSeed uint64, perMember bool) *msgNet {
	tb.Helper()
	net, err := Start(ctx, Config{
		Supernodes: k, Capacity: capacity,
		AnnounceInterval: announce, Keepalive: 2 * time.Second, ReturnInterval: time.Hour,
		Seed: seed, SingleBootstrap: true, NoGroup: true, Registries: true, PerMemberFanout: perMember,
		ProfileLabels: true, StartParallel: msgStartParallel,
		Identity: func(string, int) (crypto.PrivKey, error) { k, _, err := msgKey(); return k, err },
		Options: func(s Slot) []node.Option {
			if s.Kind == KindClient {
				return []node.Option{node.WithSeed(clientSeed + uint64(s.Index))}
			}
			return []node.Option{node.WithSeed(seed + uint64(s.Index))}
		},
	})
	if err != nil {
		tb.Fatalf("start supernodes: %v", err)
	}
	tb.Cleanup(func() { net.Close() })
	n := &msgNet{Network: net, sns: net.Supernodes()}
	for _, sn := range n.sns {
		n.regs = append(n.regs, net.Registry(sn))
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := net.WaitRings(rctx); err != nil {
		tb.Fatal(err)
	}
	return n
}

// startClients starts one ordinary node per key (a fresh identity where
// keys[i] is nil), msgStartParallel at a time, and appends them to
// n.clients in key order. It does not wait for them to attach.
func (n *msgNet) startClients(ctx context.Context, tb testing.TB, keys []crypto.PrivKey) []*node.Node {
	tb.Helper()
	out, err := n.StartClients(ctx, len(keys), keys)
	for _, c := range out {
		if c != nil {
			n.clients = append(n.clients, c)
		}
	}
	if err != nil {
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
			len(pending), len(cs), within, processCPU().Seconds(), err)
	}
	return at
}

// msgRouterCounts are a snapshot of the router counters the benchmarks
// use, read from a supernode's injected registry
// (supernode.Router.Collector).
type msgRouterCounts struct {
	GroupPublishes, GroupFramesSent, GroupFanouts, FanoutRefused uint64
	Relayed, DeliveredLocal                                      uint64
}

func msgReadRouter(reg *prometheus.Registry) msgRouterCounts {
	v := gather(reg)
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
