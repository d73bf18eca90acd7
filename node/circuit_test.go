package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	relayclient "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/config"
)

// reservedOn returns the supernode n holds a relay reservation on ("" if none).
func reservedOn(n *Node) peer.ID {
	r, ok := n.relay.Reservation()
	if !ok {
		return ""
	}
	return r.Relay
}

func relayService(n *Node) (reservations, circuits int) {
	s := n.relayStatus().Service
	if s == nil {
		return -1, -1
	}
	return s.Reservations, s.Circuits
}

// semaphoreRefused reads overlayd_supernode_semaphore_refused_total for one
// semaphore label from the node's registry.
func semaphoreRefused(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	return counter(t, n, "overlayd_supernode_semaphore_refused_total", "semaphore", name)
}

// counter reads the counter family from the node's registry: its series
// whose label is value (label "": its only series).
func counter(t *testing.T, n *Node, family, label, value string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s series with %s=%q", family, label, value)
	return 0
}

// refused is the relay's count of refusals of kind (circuit.Refused*).
func refused(n *Node, kind string) float64 {
	return float64(n.relay.Refused(kind))
}

// TestRelayReachesPrivatePeer: a private client reserves a slot on its
// supernode; another client reaches it through that supernode's relay on
// a limited connection; the reservation follows a failover; a public
// client reserves nothing.
func TestRelayReachesPrivatePeer(t *testing.T) {
	sns := supernodes(t, 2, 10)
	boot := p2pAddr(sns[0])
	a := startClient(t, boot, WithReachability(network.ReachabilityPrivate))
	b := startClient(t, boot, WithReachability(network.ReachabilityPublic))
	waitFor(t, 10*time.Second, "both attached", func() bool { return a.attachmentForTest() != "" && b.attachmentForTest() != "" })
	waitFor(t, 5*time.Second, "A reserved on its supernode", func() bool { return reservedOn(a) == a.attachmentForTest() })
	rsv, _ := a.relay.Reservation()
	snA := byID(sns, a.attachmentForTest())
	if r, _ := relayService(snA); r != 1 {
		t.Fatalf("A's supernode holds %d reservations, want 1", r)
	}
	st := a.Status().Relay
	if st == nil || st.Reservation == nil || len(st.Reservation.Addrs) == 0 || st.Reachability != "Private" {
		t.Fatalf("A's relay status %+v", st)
	}
	t.Logf("A reserved on %s in %v (%v after attaching); relayed addrs %v", snA.ID().ShortString(), rsv.Took, rsv.Since.Sub(attachedSince(a)), st.Reservation.Addrs)

	ping := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		res, err := b.Ping(ctx, a.ID(), 5, 0)
		if err != nil {
			t.Fatalf("%s: ping A through the relay: %v", what, err)
		}
		if res.Path != "relayed" || res.Relay != a.attachmentForTest().String() {
			t.Fatalf("%s: ping went %s via %s, want relayed via A's supernode %s", what, res.Path, res.Relay, a.attachmentForTest())
		}
		for _, c := range b.Host().Network().ConnsToPeer(a.ID()) {
			if !c.Stat().Limited {
				t.Fatalf("%s: B holds a direct connection to A (%s)", what, c.RemoteMultiaddr())
			}
		}
		t.Logf("%s: relayed via %s, connect %.2f ms, RTT %v ms", what, res.Relay[len(res.Relay)-6:], res.ConnectMs, res.RTTMs)
	}
	ping("first")
	if reservedOn(b) != "" {
		t.Fatal("a public client holds a relay reservation")
	}

	// Failover: A's supernode dies; A's reservation moves with it.
	old := snA.ID()
	if err := snA.CloseAbruptlyForTest(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "A failed over and re-reserved", func() bool {
		at := a.attachmentForTest()
		return at != "" && at != old && reservedOn(a) == at
	})
	if r, _ := relayService(byID(sns, a.attachmentForTest())); r != 1 {
		t.Fatalf("A's new supernode holds %d reservations, want 1", r)
	}
	waitFor(t, 10*time.Second, "B attached to a live supernode", func() bool {
		at := b.attachmentForTest()
		return at != "" && at != old
	})
	// Forget A's direct addresses, learnt by identify over the circuit:
	// on loopback they would work, behind a NAT they would not.
	_ = b.Host().Network().ClosePeer(a.ID())
	b.Host().Peerstore().ClearAddrs(a.ID())
	// Presence of A's new session reaches its home cluster within a
	// refresh; retry the ping until then.
	waitFor(t, 10*time.Second, "B locates A at its new supernode", func() bool {
		ai, err := b.Locate(t.Context(), a.ID())
		return err == nil && ai.ID == a.attachmentForTest()
	})
	ping("after failover")

	// The same pair directly, for comparison.
	_ = b.Host().Network().ClosePeer(a.ID())
	if err := b.Host().Connect(t.Context(), peer.AddrInfo{ID: a.ID(), Addrs: a.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Ping(t.Context(), a.ID(), 5, 0)
	if err != nil || res.Path != "direct" {
		t.Fatalf("direct ping: %+v %v", res, err)
	}
	t.Logf("direct: RTT %v ms", res.RTTMs)
}

func rawHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestRelayRefusalsCounted: the relay's limits refuse and count: a
// reservation past the per-IP limit, a circuit past the total bound (the
// relays semaphore's size), a reservation from a peer not attached.
func TestRelayRefusalsCounted(t *testing.T) {
	t.Run("per IP", func(t *testing.T) {
		c := attachConfig(t, config.RoleSupernode, "")
		c.Capacity = 3
		c.ConnsPerIP = 1
		sn := startNode(t, c)
		boot := p2pAddr(sn)
		a1 := startClient(t, boot, WithReachability(network.ReachabilityPrivate))
		a2 := startClient(t, boot, WithReachability(network.ReachabilityPrivate))
		waitFor(t, 10*time.Second, "one reservation refused", func() bool { return refused(sn, circuit.RefusedReservation) >= 1 })
		waitFor(t, 5*time.Second, "one reservation held", func() bool {
			r, _ := relayService(sn)
			return r == 1 && (reservedOn(a1) == sn.ID()) != (reservedOn(a2) == sn.ID())
		})
		if got := sn.Status().Relay.Refused[circuit.RefusedReservation]; got < 1 {
			t.Fatalf("status shows %d reservation refusals", got)
		}
	})
	t.Run("circuits and strangers", func(t *testing.T) {
		c := attachConfig(t, config.RoleSupernode, "")
		c.Capacity = 1
		sn := startNode(t, c)
		a := startClient(t, p2pAddr(sn), WithReachability(network.ReachabilityPrivate))
		waitFor(t, 10*time.Second, "A reserved", func() bool { return reservedOn(a) == sn.ID() })
		max := sn.relayStatus().Service.MaxCircuits
		if max != 4 {
			t.Fatalf("max circuits %d, want 4 (RelaysPerPeer × capacity 1)", max)
		}
		through := circuit.Through(peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()})
		dial := func(h host.Host) error {
			ctx, cancel := context.WithTimeout(network.WithAllowLimitedConn(t.Context(), "test"), 5*time.Second)
			defer cancel()
			return h.Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: through})
		}
		for i := range max {
			if err := dial(rawHost(t)); err != nil {
				t.Fatalf("circuit %d: %v", i, err)
			}
		}
		if _, circuits := relayService(sn); circuits != max {
			t.Fatalf("%d circuits open, want %d", circuits, max)
		}
		if err := dial(rawHost(t)); err == nil {
			t.Fatal("a circuit past the bound was relayed")
		}
		if got := refused(sn, circuit.RefusedCircuit); got != 1 {
			t.Fatalf("circuit refusals %v, want 1", got)
		}
		if got := semaphoreRefused(t, sn, "relay_circuit"); got != 1 {
			t.Fatalf("admission refusals (semaphore family) for relay_circuit %v, want 1", got)
		}
		// A stranger (not attached) cannot reserve.
		h := rawHost(t)
		_, err := relayclient.Reserve(t.Context(), h, peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()})
		var re relayclient.ReservationError
		if !errors.As(err, &re) || re.Status != pbv2.Status_PERMISSION_DENIED {
			t.Fatalf("stranger's reservation: %v, want PERMISSION_DENIED", err)
		}
		if got := refused(sn, circuit.RefusedNotAttached); got != 1 {
			t.Fatalf("not_attached refusals %v, want 1", got)
		}
	})
}

// TestReachabilityDrivesReservation: an unpinned client on loopback is
// Unknown (AutoNAT tests no private address) and reserves; when AutoNAT
// says public it lets the reservation go, and takes one again when private.
func TestReachabilityDrivesReservation(t *testing.T) {
	sns := supernodes(t, 1, 10)
	a := startClient(t, p2pAddr(sns[0]))
	waitFor(t, 10*time.Second, "unknown client reserved", func() bool { return reservedOn(a) == sns[0].ID() })
	if a.Reachability() != network.ReachabilityUnknown {
		t.Fatalf("reachability %v on loopback", a.Reachability())
	}
	a.setReachabilityForTest(network.ReachabilityPublic)
	waitFor(t, 5*time.Second, "public client released", func() bool { return reservedOn(a) == "" })
	a.setReachabilityForTest(network.ReachabilityPrivate)
	waitFor(t, 5*time.Second, "private client reserved again", func() bool { return reservedOn(a) == sns[0].ID() })
}
