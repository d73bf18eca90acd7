package circuit

import (
	"sync"
	"testing"
	"time"

	p2pmetrics "github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
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
func budgetsForTest(t *testing.T, s Settings) (*Budgets, *fakeClock, chan peer.ID) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	cuts := make(chan peer.ID, 16)
	b := &Budgets{}
	b.start(s, clk.now, nil, func(p peer.ID) { cuts <- p })
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

// TestBudgetRate: the rate budget is a token bucket of max(2 s of
// rate, one full circuit) refilled at the rate, on the injected clock; a
// peer over it is cut once and refused until the bucket is back at zero;
// another peer is not affected; other protocols are not counted.
func TestBudgetRate(t *testing.T) {
	b, clk, cuts := budgetsForTest(t, Settings{CircuitData: 16 << 10, PeerBytes: -1, PeerRate: 64 << 10})
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

// TestBudgetBytes: the byte budget refills over an hour.
func TestBudgetBytes(t *testing.T) {
	b, clk, cuts := budgetsForTest(t, Settings{CircuitData: 16 << 10, PeerBytes: 64 << 10, PeerRate: -1})
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

// TestBudgetDefaults: the defaults follow the circuit data limit;
// -1 is unlimited; inactive budgets count nothing.
func TestBudgetDefaults(t *testing.T) {
	for _, tc := range []struct {
		s           Settings
		bytes, rate int64
	}{
		{Settings{}, 64 << 20, 1 << 20},
		{Settings{CircuitData: 1 << 20}, 512 << 20, 8 << 20},
		{Settings{PeerBytes: -1, PeerRate: 5000}, 0, 5000},
	} {
		if b, r := tc.s.PeerBudgets(); b != tc.bytes || r != tc.rate {
			t.Errorf("%+v: %d, %d; want %d, %d", tc.s, b, r, tc.bytes, tc.rate)
		}
	}
	b, _, _ := budgetsForTest(t, Settings{PeerBytes: -1, PeerRate: -1})
	b.LogRecvMessageStream(1<<40, hopID, "p")
	if b.over("p") != "" || len(b.peers) != 0 {
		t.Fatal("unlimited budgets counted")
	}
}

// nopReporter is a reporter that does nothing: the floor.
type nopReporter struct{ Budgets }

func (*nopReporter) LogRecvMessageStream(int64, protocol.ID, peer.ID) {}

// BenchmarkRelayBudgetReporter: what the bandwidth reporter costs per
// stream read or write, against a reporter that does nothing: on a stream
// of another protocol (every non-relay stream of every node), on a relay
// stream of a node whose relay is not running, and on a relay stream while
// the budgets count (one call per relay copy of up to 2 KiB).
func BenchmarkRelayBudgetReporter(b *testing.B) {
	var nop p2pmetrics.Reporter = &nopReporter{}
	idle := &Budgets{}
	bud := &Budgets{}
	bud.start(Settings{}, time.Now, nil, nil)
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

// TestResourcesFollowLimits: go-libp2p's relay resources carry the limits:
// reservations and reservations per IP as LimitsFor says, circuits per
// peer, and the circuit limits of the settings.
func TestResourcesFollowLimits(t *testing.T) {
	for _, capacity := range []int{1, 10, 200, 10_000} {
		s := Settings{ConnsPerIP: 8}
		l := LimitsFor(s, capacity)
		r := resources(s, l)
		if r.MaxReservations != capacity || r.MaxReservationsPerIP != l.PerIP || r.MaxCircuits != circuitsPerPeer {
			t.Fatalf("capacity %d: go-libp2p resources %+v", capacity, r)
		}
		if r.Limit.Data != circuitData || r.Limit.Duration != circuitDuration {
			t.Fatalf("capacity %d: circuit limit %+v, want the defaults", capacity, r.Limit)
		}
	}
	r := resources(Settings{CircuitData: 1 << 20, CircuitDuration: time.Minute, ConnsPerIP: 8}, LimitsFor(Settings{ConnsPerIP: 8}, 10))
	if r.Limit.Data != 1<<20 || r.Limit.Duration != time.Minute {
		t.Fatalf("circuit limit %+v, want the settings'", r.Limit)
	}
}
