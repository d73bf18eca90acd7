package node

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/host"
	p2pmetrics "github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multistream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// budgetsForTest starts budgets on a fake clock; cut reports on the channel.
func budgetsForTest(t *testing.T, c Config) (*relayBudgets, *fakeClock, chan peer.ID) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	cuts := make(chan peer.ID, 16)
	b := &relayBudgets{}
	b.start(c, clk.now, nil, func(p peer.ID) { cuts <- p })
	return b, clk, cuts
}

func wantCut(t *testing.T, cuts chan peer.ID, p peer.ID) {
	t.Helper()
	select {
	case got := <-cuts:
		if got != p {
			t.Fatalf("cut %s, want %s", got, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not cut", p)
	}
}

// TestRelayBudgetRate: the rate budget is a token bucket of max(2 s of
// rate, one full circuit) refilled at the rate, on the injected clock; a
// peer over it is cut once and refused until the bucket is back at zero;
// another peer is not affected; other protocols are not counted.
func TestRelayBudgetRate(t *testing.T) {
	b, clk, cuts := budgetsForTest(t, Config{RelayCircuitData: 16 << 10, RelayPeerBytes: -1, RelayPeerRate: 64 << 10})
	p, q := peer.ID("peer-p"), peer.ID("peer-q")
	b.LogRecvMessageStream(1<<20, "/other/1.0.0", p) // not a relay protocol
	b.LogRecvMessageStream(100<<10, hopID, p)
	b.LogSentMessageStream(100<<10, stopID, q)
	if o := b.over(p); o != "" {
		t.Fatalf("within the 128 KiB burst, over %q", o)
	}
	b.LogSentMessageStream(40<<10, hopID, p) // 140 KiB > 128 KiB
	wantCut(t, cuts, p)
	if o := b.over(p); o != budgetRate {
		t.Fatalf("over %q, want %q", o, budgetRate)
	}
	if o := b.over(q); o != "" {
		t.Fatalf("the other peer is over %q", o)
	}
	b.LogSentMessageStream(1<<10, hopID, p) // in flight: counted, no second cut
	clk.add(100 * time.Millisecond)         // +6.4 KiB: still in debt (-13 KiB)
	if o := b.over(p); o != budgetRate {
		t.Fatalf("after 100 ms over %q, want still %q", o, budgetRate)
	}
	clk.add(200 * time.Millisecond) // +12.8 KiB more: back above zero
	if o := b.over(p); o != "" {
		t.Fatalf("after 300 ms still over %q", o)
	}
	select {
	case p := <-cuts:
		t.Fatalf("a second cut of %s", p)
	default:
	}
}

// TestRelayBudgetBytes: the byte budget refills over an hour.
func TestRelayBudgetBytes(t *testing.T) {
	b, clk, cuts := budgetsForTest(t, Config{RelayCircuitData: 16 << 10, RelayPeerBytes: 64 << 10, RelayPeerRate: -1})
	p := peer.ID("peer-p")
	b.LogRecvMessageStream(60<<10, hopID, p)
	clk.add(time.Second) // the rate is unlimited: 1 s only refills 18 B
	b.LogSentMessageStream(8<<10, stopID, p)
	wantCut(t, cuts, p)
	clk.add(30 * time.Minute) // +32 KiB
	if o := b.over(p); o != "" {
		t.Fatalf("after half an hour over %q", o)
	}
	b.LogSentMessageStream(40<<10, stopID, p)
	wantCut(t, cuts, p)
	if o := b.over(p); o != budgetBytes {
		t.Fatalf("over %q, want %q", o, budgetBytes)
	}
}

// TestRelayBudgetDefaults: the defaults follow the circuit data limit;
// -1 is unlimited; inactive budgets count nothing.
func TestRelayBudgetDefaults(t *testing.T) {
	for _, tc := range []struct {
		c           Config
		bytes, rate int64
	}{
		{Config{}, 64 << 20, 1 << 20},
		{Config{RelayCircuitData: 1 << 20}, 512 << 20, 8 << 20},
		{Config{RelayPeerBytes: -1, RelayPeerRate: 5000}, 0, 5000},
	} {
		if b, r := relayPeerBudgets(tc.c); b != tc.bytes || r != tc.rate {
			t.Errorf("%+v: %d, %d; want %d, %d", tc.c, b, r, tc.bytes, tc.rate)
		}
	}
	b, _, _ := budgetsForTest(t, Config{RelayPeerBytes: -1, RelayPeerRate: -1})
	b.LogRecvMessageStream(1<<40, hopID, "p")
	if b.over("p") != "" || len(b.peers) != 0 {
		t.Fatal("unlimited budgets counted")
	}
}

// TestRelayBudgetConfig: budgets that no circuit could fit are refused
// with a message naming the flag.
func TestRelayBudgetConfig(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{RelayPeerBytes: -1, RelayPeerRate: -1}, ""},
		{Config{RelayPeerBytes: 256 << 10}, ""},
		{Config{RelayPeerBytes: 256<<10 - 1}, "--relay-peer-bytes"},
		{Config{RelayCircuitData: 1 << 20, RelayPeerBytes: 1 << 20}, "2 × --relay-circuit-data = 2097152"},
		{Config{RelayPeerBytes: -2}, "--relay-peer-bytes"},
		{Config{RelayPeerRate: 1023}, "--relay-peer-rate"},
		{Config{RelayPeerRate: -5}, "--relay-peer-rate"},
		{Config{RelayPeerRate: 1024}, ""},
	} {
		err := validateRelayBudgets(tc.c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.c, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error naming %q", tc.c, err, tc.want)
		}
	}
	// Validate runs it.
	c := attachConfig(t, RoleSupernode, "")
	c.RelayPeerBytes = 1000
	var ce *ConfigError
	if err := c.Validate(); !errors.As(err, &ce) || ce.Field != "--relay-peer-bytes" {
		t.Fatalf("Validate: %v", err)
	}
}

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
	c := attachConfig(t, RoleSupernode, "")
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
	circuit := circuitTo(peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()})
	x, y := circuitHost(t, sn.ID()), circuitHost(t, sn.ID())

	if got, err := relayedEcho(t, x, a.ID(), circuit, 100<<10); err != nil {
		t.Fatalf("first circuit, within budget: %d bytes back, %v", got, err)
	}
	got, err := relayedEcho(t, x, a.ID(), circuit, 100<<10)
	if err == nil {
		t.Fatal("a second 100 KiB echo crossed the relay past the 256 KiB budget")
	}
	t.Logf("second circuit cut after %d bytes back: %v", got, err)
	_ = x.Network().ClosePeer(a.ID())
	waitFor(t, 10*time.Second, "the cut counted", func() bool {
		return testutil.ToFloat64(sn.relay.m.budgetCuts.WithLabelValues(budgetBytes)) >= 1 &&
			testutil.ToFloat64(sn.relay.m.budgetResets) >= 1
	})

	if got, err := relayedEcho(t, y, a2.ID(), circuit, 10<<10); err != nil {
		t.Fatalf("Y to A2, both within budget: %d bytes back, %v", got, err)
	}
	if err := dialCircuit(t, x, a2.ID(), circuit); err == nil {
		t.Fatal("a circuit from X, over budget, was admitted")
	}
	if err := dialCircuit(t, y, a.ID(), circuit); err == nil {
		t.Fatal("a circuit to A, over budget, was admitted")
	}
	if refused(sn, refusedBudget) < 2 {
		t.Fatalf("budget refusals %v", refused(sn, refusedBudget))
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

// nopReporter is a reporter that does nothing: the floor.
type nopReporter struct{ relayBudgets }

func (*nopReporter) LogRecvMessageStream(int64, protocol.ID, peer.ID) {}

// BenchmarkRelayBudgetReporter: what the bandwidth reporter costs per
// stream read or write, against a reporter that does nothing: on a stream
// of another protocol (every non-relay stream of every node), on a relay
// stream of a node whose relay is not running, and on a relay stream while
// the budgets count (one call per relay copy of up to 2 KiB).
func BenchmarkRelayBudgetReporter(b *testing.B) {
	var nop p2pmetrics.Reporter = &nopReporter{}
	idle := &relayBudgets{}
	bud := &relayBudgets{}
	bud.start(Config{}, time.Now, nil, nil)
	var rep p2pmetrics.Reporter = bud
	p := peer.ID("peer-p")
	for _, bc := range []struct {
		name  string
		r     p2pmetrics.Reporter
		proto protocol.ID
	}{
		{"impl=nop/proto=hop", nop, hopID},
		{"impl=budgets/proto=other", rep, "/overlayd/attach/1.0.0"},
		{"impl=budgets-inactive/proto=hop", idle, hopID},
		{"impl=budgets/proto=hop", rep, hopID},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.r.LogRecvMessageStream(2048, bc.proto, p)
			}
		})
	}
}
