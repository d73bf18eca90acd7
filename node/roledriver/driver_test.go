package roledriver

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// fakeAdmission detaches clients at once.
type fakeAdmission struct {
	mu     sync.Mutex
	load   int
	open   bool
	drains []int
}

func (a *fakeAdmission) Load() int { a.mu.Lock(); defer a.mu.Unlock(); return a.load }
func (a *fakeAdmission) SetOpen(o bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.open = o
}
func (a *fakeAdmission) Drain(k int, _ string, _ time.Duration) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	k = min(k, a.load)
	a.load -= k
	a.drains = append(a.drains, k)
	return k
}

// fakeRole records the calls of the driver, in order.
type fakeRole struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeRole) note(s string) { f.mu.Lock(); defer f.mu.Unlock(); f.calls = append(f.calls, s) }
func (f *fakeRole) Promote(int)   { f.note("promote") }
func (f *fakeRole) Serve(ctx context.Context) {
	f.note("serve")
	<-ctx.Done()
}
func (f *fakeRole) Retire(context.Context, int)    { f.note("retire") }
func (f *fakeRole) SetCapacity(int)                { f.note("capacity") }
func (f *fakeRole) Announce(context.Context) error { f.note("announce"); return nil }

var discard = slog.New(slog.DiscardHandler)

// TestDrain: the excess leaves in even steps, down to keep, and each is
// told the load before every step.
func TestDrain(t *testing.T) {
	for _, tc := range []struct{ load, keep, steps int }{{20, 0, 10}, {25, 20, 5}, {3, 5, 0}} {
		adm := &fakeAdmission{load: tc.load}
		var told []int
		Drain(t.Context(), adm, 50*time.Millisecond, tc.keep, "test", func(l int) { told = append(told, l) }, discard)
		if adm.load != min(tc.load, tc.keep) {
			t.Fatalf("%+v: load %d after the drain", tc, adm.load)
		}
		if len(adm.drains) != tc.steps || slices.Max(append(adm.drains, 0)) > (tc.load-tc.keep+9)/10 {
			t.Fatalf("%+v: detached %v per step", tc, adm.drains)
		}
		if len(told) == 0 || told[0] != tc.load {
			t.Fatalf("%+v: each told %v", tc, told)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	adm := &fakeAdmission{load: 10}
	Drain(ctx, adm, time.Hour, 0, "closing", nil, discard)
	if len(adm.drains) != 1 {
		t.Fatalf("a cancelled drain went on: %v", adm.drains)
	}
}

// TestPromoteDemote: a promotion opens admission, switches the role on
// and serves; a demotion closes admission, announces, drains every
// client, stops serving and retires the role, in that order.
func TestPromoteDemote(t *testing.T) {
	adm, sn := &fakeAdmission{load: 4}, &fakeRole{}
	d := newTestDriver(t, adm, sn)
	svc := d.promote(t.Context())
	if !adm.open {
		t.Fatal("admission closed after promotion")
	}
	d.demote(t.Context(), svc, "surplus")
	if adm.open || adm.load != 0 {
		t.Fatalf("after demotion: open %v, load %d", adm.open, adm.load)
	}
	sn.mu.Lock()
	served := slices.Contains(sn.calls, "serve") // on its own goroutine
	calls := slices.Compact(slices.DeleteFunc(slices.Clone(sn.calls), func(c string) bool { return c == "serve" }))
	sn.mu.Unlock()
	if want := []string{"promote", "capacity", "announce", "capacity", "retire"}; !slices.Equal(calls, want) || !served {
		t.Fatalf("calls %v (served %v), want %v", calls, served, want)
	}
	if why, _ := d.State(); why != "auto: role not evaluated yet" {
		t.Fatalf("state %q", why)
	}
}

// TestRunPinnedByMega: a node holding a mega certificate keeps its role
// whatever the rules say, and says why.
func TestRunPinnedByMega(t *testing.T) {
	adm, sn := &fakeAdmission{}, &fakeRole{}
	d := newTestDriver(t, adm, sn)
	// Each evaluation asks Mega first: its second call comes after the
	// first evaluation has set its decision.
	ctx, cancel := context.WithCancel(t.Context())
	asked := make(chan struct{})
	d.cfg.Mega = func() (protocol.MegaCert, bool) {
		select {
		case asked <- struct{}{}:
		case <-ctx.Done():
		}
		return protocol.MegaCert{Serial: 9}, true
	}
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	<-asked
	<-asked
	cancel()
	<-done
	if why, _ := d.State(); why != "auto: mega-supernode by operator certificate 9" {
		t.Fatalf("state %q", why)
	}
	if !d.ChangedAt().IsZero() || d.ChangeReason() != "" || len(sn.calls) != 0 {
		t.Fatal("a pinned mega changed role")
	}
}

func newTestDriver(t *testing.T, adm *fakeAdmission, sn *fakeRole) *Driver {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Capacity: 10, EvalInterval: time.Millisecond, DrainPeriod: 20 * time.Millisecond, Started: time.Now(),
		Dir: directory.New(), Ring: func() *ring.Ring { return nil },
		Reachability: func() network.Reachability { return network.ReachabilityPrivate },
		Serving:      func() bool { return false },
		Mega:         func() (protocol.MegaCert, bool) { return protocol.MegaCert{}, false },
		Admission:    adm, Supernode: sn, Announcer: sn, Metrics: m,
		Now: time.Now, Rand: rand.New(rand.NewPCG(1, 2)), Log: discard,
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New accepted an empty Config")
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
