package node

import (
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/protocol"
)

// TestRingRebuildDebounced: a burst of directory changes costs one ring
// rebuild, and readers see the complete ring afterwards. The node is one
// that builds its ring from its whole directory (node/dirdriver's ring loop): an auto node
// that does not serve. A pinned ordinary node builds its ring from views
// instead (view.go), and a serving supernode of an open network keeps
// unconfirmed supernodes, as these made-up ones are, off its ring
// (node/dirdriver/confirm.go).
func TestRingRebuildDebounced(t *testing.T) {
	c := testConfig(t, config.RoleAuto)
	neverServes(&c)                      // so its ring stays its whole directory's
	c.AnnounceInterval = 2 * time.Second // debounce: 200 ms
	n := startNode(t, c)
	now := time.Now()
	announce := func(seq uint64) {
		t.Helper()
		id := newIDForTest(t)
		a := protocol.Announcement{ID: id, Addrs: n.Host().Addrs(), Role: protocol.RoleSupernode, Capacity: 100,
			Version: protocol.Version, Seq: seq, Interval: time.Minute}
		if _, err := n.Directory().Apply(id, a, now); err != nil {
			t.Fatal(err)
		}
	}
	announce(1)
	waitFor(t, 3*time.Second, "first ring", func() bool { r := n.Ring(); return r != nil && r.Len() == 1 })
	before := n.metricForTest(t, "overlayd_ring_rebuilds_total")
	const burst = 50
	for i := range burst - 1 {
		announce(uint64(i + 2))
	}
	waitFor(t, 3*time.Second, "ring with the whole burst", func() bool { r := n.Ring(); return r != nil && r.Len() == burst })
	if got := n.metricForTest(t, "overlayd_ring_rebuilds_total") - before; got != 1 {
		t.Fatalf("%v rebuilds for a burst of %d changes, want 1", got, burst)
	}
	if n.metricForTest(t, "overlayd_ring_info", "version", n.Ring().Version()) != 1 {
		t.Fatal("ring version not exported")
	}
}
