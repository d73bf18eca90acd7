package node

import (
	"context"
	"time"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
)

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
		ms := cluster.Members(s)
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
