package node

import (
	"context"
	"time"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// WeightUnit is the capacity, in attached peers, of one unit of ring weight:
// a supernode of capacity c has weight max(1, round(c / WeightUnit)), capped
// at MaxWeight, so points scale with capacity without a big supernode
// costing thousands of points.
const (
	WeightUnit = 100
	MaxWeight  = 64
)

// weight maps an announced capacity to a ring weight.
func weight(capacity uint32) int {
	w := (int(capacity) + WeightUnit/2) / WeightUnit
	return min(max(w, 1), MaxWeight)
}

// ringMembers returns the regular supernodes of a snapshot as ring members.
// Mega-supernodes are the fallback tier and are not on the cluster ring.
func ringMembers(s *directory.Snapshot) []ring.Member {
	ms := make([]ring.Member, 0, s.Len())
	for _, e := range s.Entries {
		if e.Role != protocol.RoleSupernode {
			continue
		}
		ms = append(ms, ring.Member{ID: e.ID.String(), Weight: weight(e.Capacity)})
	}
	return ms
}

// ringLoop keeps the published ring in step with the directory, off the
// lookup path: a membership change starts a debounce window, and at its end
// one ring is built from the then-current snapshot, so a burst of
// announcements costs one rebuild. Readers keep using the previous ring
// until the new one is published with one atomic store.
func (n *Node) ringLoop(ctx context.Context) {
	changes, cancel := n.dir.Subscribe()
	defer cancel()
	var built uint64 // membership version of the published ring
	rebuild := func() {
		s := n.dir.Snapshot()
		if s.Membership == built && (n.rings.Load() != nil || s.Len() == 0) {
			return
		}
		built = s.Membership
		ms := ringMembers(s)
		n.m.ringRebuilds.Inc()
		n.m.ringInfo.Reset()
		if len(ms) == 0 {
			n.rings.Publish(nil)
			return
		}
		r, err := ring.New(ms)
		if err != nil {
			n.log.Error("ring rebuild", "err", err)
			return
		}
		n.rings.Publish(r)
		n.m.ringInfo.WithLabelValues(r.Version()).Set(1)
		n.log.Debug("ring published", "version", r.Version(), "members", r.Len())
	}
	rebuild()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
		if s := n.dir.Snapshot(); s.Membership == built {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.debounc):
		}
		rebuild()
	}
}
