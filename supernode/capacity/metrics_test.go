package capacity

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// gatherText gathers g and renders the named families (all if none) in the
// text exposition format. (prometheus/testutil would do this, but it pulls in
// a module that is not in go.sum.)
func gatherText(tb testing.TB, g prometheus.Gatherer, names ...string) string {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if len(names) > 0 && !slices.Contains(names, mf.GetName()) {
			continue
		}
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			tb.Fatalf("render %s: %v", mf.GetName(), err)
		}
	}
	return b.String()
}

func compareText(tb testing.TB, got, want string) {
	tb.Helper()
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		tb.Fatalf("metrics mismatch\n--- got\n%s\n--- want\n%s", got, want)
	}
}

func TestCollector(t *testing.T) {
	s := mustNew(t, "relays", 2)
	s.TryAcquire()
	s.TryAcquire()
	s.TryAcquire() // refused
	_ = s.Release()
	_ = s.Release()
	_ = s.Release() // not held
	s.TryAcquire()

	const want = `
# HELP overlayd_supernode_semaphore_acquired_total Successful acquisitions of the semaphore.
# TYPE overlayd_supernode_semaphore_acquired_total counter
overlayd_supernode_semaphore_acquired_total{semaphore="relays"} 3
# HELP overlayd_supernode_semaphore_in_use Slots of the semaphore currently held.
# TYPE overlayd_supernode_semaphore_in_use gauge
overlayd_supernode_semaphore_in_use{semaphore="relays"} 1
# HELP overlayd_supernode_semaphore_max Current maximum number of slots of the semaphore.
# TYPE overlayd_supernode_semaphore_max gauge
overlayd_supernode_semaphore_max{semaphore="relays"} 2
# HELP overlayd_supernode_semaphore_refused_total Acquisitions refused because the semaphore was at capacity (BUSY).
# TYPE overlayd_supernode_semaphore_refused_total counter
overlayd_supernode_semaphore_refused_total{semaphore="relays"} 1
# HELP overlayd_supernode_semaphore_unheld_releases_total Releases of a slot that was not held (caller bugs).
# TYPE overlayd_supernode_semaphore_unheld_releases_total counter
overlayd_supernode_semaphore_unheld_releases_total{semaphore="relays"} 1
`
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, s); err != nil {
		t.Fatal(err)
	}
	compareText(t, gatherText(t, reg), want)
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	set, err := NewSet(DefaultLimits(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Register(reg); err != nil {
		t.Fatalf("Set.Register: %v", err)
	}
	set.Attached.TryAcquire()
	if err := set.Fanout.SetMax(0); err != nil {
		t.Fatal(err)
	}
	set.Fanout.TryAcquire()

	const want = `
# HELP overlayd_supernode_semaphore_in_use Slots of the semaphore currently held.
# TYPE overlayd_supernode_semaphore_in_use gauge
overlayd_supernode_semaphore_in_use{semaphore="attached_peers"} 1
overlayd_supernode_semaphore_in_use{semaphore="fanout_jobs"} 0
overlayd_supernode_semaphore_in_use{semaphore="lookups"} 0
overlayd_supernode_semaphore_in_use{semaphore="relays"} 0
# HELP overlayd_supernode_semaphore_max Current maximum number of slots of the semaphore.
# TYPE overlayd_supernode_semaphore_max gauge
overlayd_supernode_semaphore_max{semaphore="attached_peers"} 100
overlayd_supernode_semaphore_max{semaphore="fanout_jobs"} 0
overlayd_supernode_semaphore_max{semaphore="lookups"} 200
overlayd_supernode_semaphore_max{semaphore="relays"} 400
# HELP overlayd_supernode_semaphore_refused_total Acquisitions refused because the semaphore was at capacity (BUSY).
# TYPE overlayd_supernode_semaphore_refused_total counter
overlayd_supernode_semaphore_refused_total{semaphore="attached_peers"} 0
overlayd_supernode_semaphore_refused_total{semaphore="fanout_jobs"} 1
overlayd_supernode_semaphore_refused_total{semaphore="lookups"} 0
overlayd_supernode_semaphore_refused_total{semaphore="relays"} 0
`
	compareText(t, gatherText(t, reg,
		"overlayd_supernode_semaphore_in_use",
		"overlayd_supernode_semaphore_max",
		"overlayd_supernode_semaphore_refused_total",
	), want)
	if got := strings.Count(gatherText(t, reg), `semaphore="relays"`); got != 5 {
		t.Fatalf("relays exposes %d series, want 5", got)
	}

	// A second semaphore with a name already registered is rejected.
	dup := mustNew(t, NameRelays, 1)
	err = Register(reg, dup)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("Register duplicate = %v, want AlreadyRegisteredError", err)
	}
	if err := Register(reg, nil); err == nil {
		t.Fatal("Register(nil semaphore) succeeded")
	}
	if err := Register(nil, dup); err != nil {
		t.Fatalf("Register with nil registerer: %v", err)
	}
}
