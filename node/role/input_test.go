package role_test

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
)

func TestEvalInterval(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{10 * time.Second, 2500 * time.Millisecond},
		{time.Second, 250 * time.Millisecond},
		{40 * time.Millisecond, 20 * time.Millisecond},
		{time.Minute, 5 * time.Second},
	} {
		if got := role.EvalInterval(tc.in); got != tc.want {
			t.Errorf("EvalInterval(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestNewInput: the node's own directory entry is replaced by its live
// state while serving and dropped otherwise; capacities are clamped, megas
// marked; no ring gives no home.
func TestNewInput(t *testing.T) {
	self := fakeID(0)
	snap := &directory.Snapshot{Entries: []directory.Entry{
		{Announcement: protocol.Announcement{ID: self, Role: protocol.RoleSupernode, Capacity: 5, Load: 5}},
		{Announcement: protocol.Announcement{ID: fakeID(1), Role: protocol.RoleSupernode, Capacity: 4_000_000_000, Load: 7}},
		{Announcement: protocol.Announcement{ID: fakeID(2), Role: protocol.RoleMega, Capacity: 300, Load: 20}},
	}}
	v := role.View{Now: t0, Self: self, Serving: true, Reachability: network.ReachabilityPublic, Uptime: time.Hour,
		Capacity: 60, Load: 9, Snapshot: snap}
	in := role.NewInput(v)
	want := []role.Entry{
		{ID: fakeID(1), Capacity: cluster.MaxCapacity, Load: 7},
		{ID: fakeID(2), Mega: true, Capacity: 300, Load: 20},
		{ID: self, Capacity: 60, Load: 9},
	}
	if len(in.Supernodes) != len(want) {
		t.Fatalf("entries %+v, want %+v", in.Supernodes, want)
	}
	for i := range want {
		if in.Supernodes[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, in.Supernodes[i], want[i])
		}
	}
	if in.Home != nil || in.Capacity != 60 || !in.Serving || in.Uptime != time.Hour || !in.Now.Equal(t0) {
		t.Errorf("input %+v", in)
	}
	v.Serving = false
	if es := role.NewInput(v).Supernodes; len(es) != 2 || es[1].ID != fakeID(2) {
		t.Errorf("ordinary: entries %+v, want the two others", es)
	}
	if es := role.Entries(nil, self, false, 60, 0); len(es) != 0 {
		t.Errorf("no directory: %+v", es)
	}
}
