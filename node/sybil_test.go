package node

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// deadNet is where the made-up supernodes claim to listen: TEST-NET-1, a
// public-looking /24 that nobody answers on.
var deadNet = &net.IPNet{IP: net.IPv4(192, 0, 2, 0), Mask: net.CIDRMask(24, 32)}

// unreachable refuses dials into deadNet at once, as a network answering
// with a reset or an ICMP unreachable would, so that a test's clients
// spend no attempt timeout on each fake.
type unreachable struct{}

func (unreachable) InterceptPeerDial(peer.ID) bool { return true }
func (unreachable) InterceptAddrDial(_ peer.ID, a ma.Multiaddr) bool {
	ip, err := manet.ToIP(a)
	return err != nil || !deadNet.Contains(ip)
}
func (unreachable) InterceptAccept(network.ConnMultiaddrs) bool { return true }
func (unreachable) InterceptSecured(network.Direction, peer.ID, network.ConnMultiaddrs) bool {
	return true
}
func (unreachable) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

// sybils announces made-up identities through one GossipSub connection,
// every interval, until stopped: each claims the largest capacity and the
// longest interval, and a dead address.
type sybils struct {
	r    *rogue
	keys []crypto.PrivKey
	ids  []peer.ID
	stop chan struct{}
	wg   sync.WaitGroup
}

func newSybils(t *testing.T, r *rogue, k int, interval time.Duration) *sybils {
	t.Helper()
	s := &sybils{r: r, stop: make(chan struct{})}
	for range k {
		key, id := newKey(t)
		s.keys, s.ids = append(s.keys, key), append(s.ids, id)
	}
	s.wg.Add(1)
	go s.run(interval)
	t.Cleanup(s.close)
	return s
}

func (s *sybils) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

func (s *sybils) run(interval time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	// A publish waits up to an interval for a peer on the topic; once the
	// honest nodes graylist the rogue every publish would, so stopping
	// ends the wait (else close waited for a whole round: 64 intervals).
	stopped, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	go func() {
		<-s.stop
		cancelAll()
	}()
	for seq := uint64(1); ; seq++ {
		for i, id := range s.ids {
			a := protocol.Announcement{
				ID: id, Role: protocol.RoleSupernode, Capacity: 4_000_000_000, Version: protocol.Version,
				Addrs: []ma.Multiaddr{ma.StringCast(fmt.Sprintf("/ip4/192.0.2.%d/tcp/1", 1+i%250))},
				Seq:   seq, Interval: protocol.MaxAnnounceInterval,
			}
			b, err := a.Marshal()
			if err != nil {
				panic(err)
			}
			ctx, cancel := context.WithTimeout(stopped, interval)
			_ = s.r.topic.Publish(ctx, b, pubsub.WithSecretKeyAndPeerId(s.keys[i], id), pubsub.WithReadiness(pubsub.MinTopicSize(1)))
			cancel()
			if stopped.Err() != nil {
				return
			}
		}
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// honestShare is the fraction of r's hash space owned by the honest
// supernodes.
func honestShare(r *ring.Ring, honest []*Node) float64 {
	if r == nil {
		return 0
	}
	share := 0.0
	for _, s := range r.Stats().Shares {
		for _, sn := range honest {
			if s.ID == sn.ID().String() {
				share += s.Share
			}
		}
	}
	return share
}

// TestSybilAnnouncementsGetNothing: one connection announces 8, then 64,
// made-up supernodes of capacity 4,000,000,000 at a dead address, against 3
// honest supernodes of capacity 200. Clients started afterwards attach to
// honest supernodes within a few keepalives, and the supernodes' rings,
// built from the polluted directory, hold no fake: none is confirmed
// serving overlayd at the address it announced.
// Before the clamp, the ramp, the subnet limit and the reserved slots,
// the fakes took 98.8% of the ring and every pass.
func TestSybilAnnouncementsGetNothing(t *testing.T) {
	for _, fakes := range []int{8, 64} {
		t.Run(fmt.Sprintf("%d fakes", fakes), func(t *testing.T) {
			sns := supernodes(t, 3, 200)
			interval := sns[0].cfg.AnnounceInterval
			// Let the honest supernodes' directories leave their warm-up,
			// so that what arrives next is new to them.
			<-time.After(protocol.MissedAnnouncements*interval + interval)
			s := newSybils(t, newRogue(t, sns[0]), fakes, interval)
			for _, sn := range sns {
				waitFor(t, 20*time.Second, "fakes in the directory of "+sn.ID().ShortString(), func() bool { return hasAll(sn, s.ids) })
			}
			<-time.After(2 * sns[0].debounc) // the ring rebuilt from them
			for _, sn := range sns {
				share := honestShare(sn.Ring(), sns)
				t.Logf("supernode %s: ring of %d members, honest share %.1f%%", sn.ID().ShortString(), sn.Ring().Len(), 100*share)
				// No fake is confirmed (none serves at its address), so
				// none is on a supernode's ring (node/dirdriver/confirm.go).
				if share < 0.999 {
					t.Errorf("honest share of %s's ring %.1f%%, want 100%%: a fake is on a supernode's ring", sn.ID().ShortString(), 100*share)
				}
			}
			const clients = 4
			var cs []*Node
			for range clients {
				cs = append(cs, startClient(t, p2pAddr(sns[0]), WithConnectionGater(unreachable{})))
			}
			// A client plans after one interval plus two debounce windows
			// (its wait for the directory); then a few keepalives.
			bound := 2*(interval+2*sns[0].debounc) + 10*testKeepalive
			start := time.Now()
			for _, c := range cs {
				waitFor(t, bound, "client attached", func() bool { return c.attachmentForTest() != "" })
				if byID(sns, c.attachmentForTest()) == nil {
					t.Fatalf("client attached to %s, not an honest supernode", c.attachmentForTest().ShortString())
				}
			}
			t.Logf("%d clients attached to honest supernodes within %v (bound %v); client ring: %d members, honest share %.1f%%",
				clients, time.Since(start).Round(time.Millisecond), bound, cs[0].Ring().Len(), 100*honestShare(cs[0].Ring(), sns))
		})
	}
}

// TestSybilCertifiedGetsNothing is the same attack on a certified network:
// the made-up supernodes (valid GossipSub signatures, no certificate) are
// refused by every node that hears the directory topic (the supernodes,
// and an auto node that does not serve), never enter a directory or a
// ring — an ordinary node's neither, whose view is served from a
// supernode's directory (issue 21) — and clients started afterwards
// attach to the honest, certified supernodes.
func TestSybilCertifiedGetsNothing(t *testing.T) {
	for _, fakes := range []int{8, 64} {
		t.Run(fmt.Sprintf("%d fakes", fakes), func(t *testing.T) {
			op := newOperator(t)
			sns, first := certifiedNetwork(t, op, 3, 200)
			hearer := trustingHearer(t, op, p2pAddr(sns[0]))
			waitFor(t, 10*time.Second, "hearer's ring", func() bool { r := hearer.Ring(); return r != nil && r.Len() == len(sns) })
			hearers := append([]*Node{hearer}, sns...)
			all := append([]*Node{first}, hearers...)
			before := make([]float64, len(hearers))
			for i, n := range hearers {
				before[i] = n.rejectedForTest(string(protocol.ReasonUncertified))
			}
			interval := sns[0].cfg.AnnounceInterval
			s := newSybils(t, newRogue(t, hearers...), fakes, interval)
			// Every node that hears the topic refuses them (after a few
			// rejected messages GossipSub graylists the forwarder, so not
			// every fake need arrive); the attack then runs for a few more
			// intervals, and the ordinary node refreshes its view.
			waitFor(t, 20*time.Second, "fakes refused by every node that hears the topic", func() bool {
				for i, n := range hearers {
					if n.rejectedForTest(string(protocol.ReasonUncertified)) <= before[i] {
						return false
					}
				}
				return true
			})
			<-time.After(3 * interval)
			afterViewRefreshes(t, first, 2, 10*time.Second)
			for _, n := range all {
				if !hasNone(n, s.ids) {
					t.Fatalf("%s: a fake entered the directory", n.ID().ShortString())
				}
				if r := n.Ring(); r == nil || r.Len() != len(sns) || honestShare(r, sns) < 0.999 {
					t.Fatalf("%s: ring %v is not the honest supernodes'", n.ID().ShortString(), r.Members())
				}
			}
			c := trustingClient(t, op, p2pAddr(sns[0]), func(c *Config) { c.Capacity = 0 })
			bound := 2*(interval+2*sns[0].debounc) + 10*testKeepalive
			waitFor(t, bound, "client attached", func() bool { return c.attachmentForTest() != "" })
			if byID(sns, c.attachmentForTest()) == nil {
				t.Fatalf("client attached to %s, not a certified supernode", c.attachmentForTest().ShortString())
			}
		})
	}
}
