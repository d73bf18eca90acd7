package node

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multistream"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/config"
)

const echoProto = protocol.ID("/overlayd-test/echo")

// relayedEcho dials a circuit from h to dst and echoes n bytes on a stream
// over it (the relayed connection, checked). It returns how many bytes came
// back and the first error.
func relayedEcho(t *testing.T, h host.Host, dst peer.ID, circuit []ma.Multiaddr, n int) (int, error) {
	t.Helper()
	// A new circuit: the connection of an earlier one closed first. h
	// reaches dst only through the circuit (see circuitOnly).
	_ = h.Network().ClosePeer(dst)
	if err := dialCircuit(t, h, dst, circuit); err != nil {
		return 0, err
	}
	// On the relayed connection even if a direct one appeared.
	var rc network.Conn
	for _, c := range h.Network().ConnsToPeer(dst) {
		if c.Stat().Limited {
			rc = c
		}
	}
	if rc == nil {
		t.Fatal("no relayed connection")
	}
	ctx, cancel := context.WithTimeout(network.WithAllowLimitedConn(t.Context(), "test"), 10*time.Second)
	defer cancel()
	s, err := rc.NewStream(ctx)
	if err != nil {
		return 0, err
	}
	defer s.Reset()
	if err := multistream.SelectProtoOrFail(echoProto, s); err != nil {
		return 0, err
	}
	_ = s.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		_, _ = s.Write(make([]byte, n))
	}()
	got, err := io.ReadFull(s, make([]byte, n))
	return got, err
}

// circuitOnly is a connection gater that lets its host dial the relay
// directly and every other peer only through a /p2p-circuit address. The
// direct addresses identify taught the host over an earlier circuit stay in
// its peerstore, and clearing them races identify's handling of that
// circuit's close, which re-adds them: the gater, not the peerstore, keeps
// the next dial on the relay.
type circuitOnly struct{ relay peer.ID }

var _ connmgr.ConnectionGater = circuitOnly{}

func (circuitOnly) InterceptPeerDial(peer.ID) bool { return true }
func (g circuitOnly) InterceptAddrDial(p peer.ID, a ma.Multiaddr) bool {
	if p == g.relay {
		return true
	}
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}
func (circuitOnly) InterceptAccept(network.ConnMultiaddrs) bool { return true }
func (circuitOnly) InterceptSecured(network.Direction, peer.ID, network.ConnMultiaddrs) bool {
	return true
}
func (circuitOnly) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

// circuitHost is a bare host that reaches every peer but relay only
// through relay circuits.
func circuitHost(t *testing.T, relay peer.ID) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(),
		libp2p.ConnectionGater(circuitOnly{relay: relay}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func serveEcho(n *Node) {
	n.Host().SetStreamHandler(echoProto, func(s network.Stream) {
		_, _ = io.Copy(s, s)
		_ = s.Close()
	})
}

// TestRelayBudgetCutsPeer: a supernode with a 256 KiB per-peer byte budget
// (two full default circuits): X relays 100 KiB each way to A on a first
// circuit, within budget; on a second circuit X and A go over: the relay
// resets the circuit mid-transfer; then circuits from X (to another peer)
// and to A (from another peer, and a tunnel from B) are refused, the
// tunnel side with a clear error, while Y and A2, within their budgets,
// still relay.
func TestRelayBudgetCutsPeer(t *testing.T) {
	c := attachConfig(t, config.RoleSupernode, "")
	c.Capacity = 4
	c.RelayPeerBytes = 256 << 10
	c.RelayPeerRate = -1
	sn := startNode(t, c)
	a := startClient(t, p2pAddr(sn), WithReachability(network.ReachabilityPrivate))
	a2 := startClient(t, p2pAddr(sn), WithReachability(network.ReachabilityPrivate))
	b := startClient(t, p2pAddr(sn))
	waitFor(t, 10*time.Second, "A and A2 reserved", func() bool { return reservedOn(a) == sn.ID() && reservedOn(a2) == sn.ID() })
	waitFor(t, 10*time.Second, "B attached", func() bool { return b.attachmentForTest() != "" })
	serveEcho(a)
	serveEcho(a2)
	through := circuit.Through(peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()})
	x, y := circuitHost(t, sn.ID()), circuitHost(t, sn.ID())

	if got, err := relayedEcho(t, x, a.ID(), through, 100<<10); err != nil {
		t.Fatalf("first circuit, within budget: %d bytes back, %v", got, err)
	}
	got, err := relayedEcho(t, x, a.ID(), through, 100<<10)
	if err == nil {
		t.Fatal("a second 100 KiB echo crossed the relay past the 256 KiB budget")
	}
	t.Logf("second circuit cut after %d bytes back: %v", got, err)
	_ = x.Network().ClosePeer(a.ID())
	waitFor(t, 10*time.Second, "the cut counted", func() bool {
		return counter(t, sn, "overlayd_relay_budget_cuts_total", "budget", "bytes") >= 1 &&
			counter(t, sn, "overlayd_relay_budget_streams_reset_total", "", "") >= 1
	})

	if got, err := relayedEcho(t, y, a2.ID(), through, 10<<10); err != nil {
		t.Fatalf("Y to A2, both within budget: %d bytes back, %v", got, err)
	}
	if err := dialCircuit(t, x, a2.ID(), through); err == nil {
		t.Fatal("a circuit from X, over budget, was admitted")
	}
	if err := dialCircuit(t, y, a.ID(), through); err == nil {
		t.Fatal("a circuit to A, over budget, was admitted")
	}
	if refused(sn, circuit.RefusedBudget) < 2 {
		t.Fatalf("budget refusals %v", refused(sn, circuit.RefusedBudget))
	}

	if _, err := a.Tunnels().Expose("echo", tunnelEcho(t), []peer.ID{b.ID()}, false); err != nil {
		t.Fatal(err)
	}
	tc, err := b.Tunnels().Connect(t.Context(), a.ID(), "echo", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := tunnelRoundTrip(t, tc.Listen); err == nil {
		t.Fatal("a tunnel reached A, over budget, through the relay")
	}
	if l := b.Tunnels().List().Connects[0]; !strings.Contains(l.LastError, "relay budget exhausted") {
		t.Fatalf("the connecting side says %q, want relay budget exhausted", l.LastError)
	}
}
