package capacity

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRefusalCollectorJoinsTheSemaphoreFamily: refusals counted elsewhere
// appear in the same refused_total family as the semaphores' own, on the
// same registry, with their own semaphore label.
func TestRefusalCollectorJoinsTheSemaphoreFamily(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New("attached", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, s); err != nil {
		t.Fatal(err)
	}
	s.TryAcquire()
	s.TryAcquire() // refused
	var n atomic.Uint64
	n.Store(3)
	c, err := RefusalCollector("relay_circuit", n.Load)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(c); err != nil {
		t.Fatalf("the refusal series does not fit the family: %v", err)
	}
	want := `
# HELP overlayd_supernode_semaphore_refused_total Acquisitions refused because the semaphore was at capacity (BUSY).
# TYPE overlayd_supernode_semaphore_refused_total counter
overlayd_supernode_semaphore_refused_total{semaphore="attached"} 1
overlayd_supernode_semaphore_refused_total{semaphore="relay_circuit"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "overlayd_supernode_semaphore_refused_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := RefusalCollector("Bad-Name", n.Load); err == nil {
		t.Fatal("a bad name was accepted")
	}
	if _, err := RefusalCollector("x", nil); err == nil {
		t.Fatal("a nil count was accepted")
	}
}
