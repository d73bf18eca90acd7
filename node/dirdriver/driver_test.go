package dirdriver

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// testDriver is a Driver on a mocknet host at 127.0.0.1 (a local-only
// node: no subnet limit on its ring), with a fresh directory and ring; it
// never serves and has no announcer. published counts Config.Published.
type testDriver struct {
	*Driver
	dir       *directory.Directory
	rings     *ring.Published
	published atomic.Int64
}

func newTestDriver(t *testing.T, interval, debounce time.Duration) *testDriver {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	priv, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := mn.AddPeer(priv, ma.StringCast("/ip4/127.0.0.1/tcp/20001"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	td := &testDriver{dir: directory.New(), rings: &ring.Published{}}
	d, err := New(Config{
		Host:             h,
		Dir:              td.dir,
		Rings:            td.rings,
		AnnounceInterval: interval,
		Debounce:         debounce,
		Serving:          func() bool { return false },
		Load:             func() int { return 0 },
		Published:        func() { td.published.Add(1) },
		Now:              time.Now,
		Seed:             func() uint64 { return 1 },
		Log:              slog.New(slog.DiscardHandler),
		Metrics:          m,
	})
	if err != nil {
		t.Fatal(err)
	}
	td.Driver = d
	return td
}

// announce puts a made-up supernode at addrs in the directory.
func (td *testDriver) announce(t *testing.T, addrs []ma.Multiaddr, seq uint64, now time.Time) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	a := protocol.Announcement{ID: id, Addrs: addrs, Role: protocol.RoleSupernode, Capacity: 100,
		Version: protocol.Version, Seq: seq, Interval: time.Minute}
	if _, err := td.dir.Apply(id, a, now); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitUntil polls cond until it holds, for at most within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %v", what, within)
		case <-tick.C:
		}
	}
}

// TestPublishRing: PublishRing counts a rebuild, exports the ring's
// version (or the version it is given) on overlayd_ring_info before it
// publishes the ring, tells Config.Published, and publishes no ring for
// no members.
func TestPublishRing(t *testing.T) {
	td := newTestDriver(t, time.Second, 0)
	ms := []ring.Member{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}}
	td.PublishRing(ms, "")
	r := td.rings.Load()
	if r == nil || r.Len() != 2 {
		t.Fatalf("ring %v, want 2 members", r)
	}
	if v := testutil.ToFloat64(td.m.ringInfo.WithLabelValues(r.Version())); v != 1 {
		t.Fatalf("ring_info{version=%s} = %v, want 1", r.Version(), v)
	}
	td.PublishRing(ms, "server-version")
	if v := testutil.ToFloat64(td.m.ringInfo.WithLabelValues("server-version")); v != 1 {
		t.Fatalf("ring_info of the given version = %v, want 1", v)
	}
	if k := testutil.CollectAndCount(td.m.ringInfo); k != 1 {
		t.Fatalf("%d ring_info series, want the live ring's alone", k)
	}
	td.PublishRing(nil, "")
	if td.rings.Load() != nil || testutil.CollectAndCount(td.m.ringInfo) != 0 {
		t.Fatal("no members: want no ring and no ring_info series")
	}
	if got := testutil.ToFloat64(td.m.ringRebuilds); got != 3 {
		t.Fatalf("%v rebuilds counted, want 3", got)
	}
	if got := td.published.Load(); got != 3 {
		t.Fatalf("Published called %d times, want 3", got)
	}
}

// TestRingLoopDebounced: a burst of directory changes costs the ring loop
// one rebuild, and the ring then holds the whole burst (the driver-level
// half of node's TestRingRebuildDebounced).
func TestRingLoopDebounced(t *testing.T) {
	td := newTestDriver(t, 2*time.Second, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); td.ringLoop(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	now := time.Now()
	addrs := td.cfg.Host.Addrs()
	td.announce(t, addrs, 1, now)
	waitUntil(t, 3*time.Second, "first ring", func() bool { r := td.rings.Load(); return r != nil && r.Len() == 1 })
	before := testutil.ToFloat64(td.m.ringRebuilds)
	const burst = 50
	for i := range burst - 1 {
		td.announce(t, addrs, uint64(i+2), now)
	}
	waitUntil(t, 3*time.Second, fmt.Sprintf("ring of %d", burst), func() bool { r := td.rings.Load(); return r != nil && r.Len() == burst })
	if got := testutil.ToFloat64(td.m.ringRebuilds) - before; got != 1 {
		t.Fatalf("%v rebuilds for a burst of %d changes, want 1", got, burst)
	}
}
