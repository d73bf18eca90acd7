package node

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
)

// ringPolicy is the ring membership policy of this node: the default ramp
// and subnet limit for its announce interval, with loopback and private
// addresses exempt from the subnet limit when the node itself has only
// such addresses (an in-process or container testnet, a LAN).
func (n *Node) ringPolicy() cluster.Policy {
	return cluster.DefaultPolicy(n.cfg.AnnounceInterval, cluster.LocalOnly(n.host.Addrs()))
}

// ringLoop keeps the published ring in step with the directory, off the
// lookup path: a membership change starts a debounce window, and at its end
// one ring is built from the then-current snapshot, so a burst of
// announcements costs one rebuild. Readers keep using the previous ring
// until the new one is published with one atomic store. New supernodes'
// weights ramp up (cluster.RampWeight) in steps that fall on a grid shared
// by all entries, so the ramp costs at most one rebuild per grid step
// however many supernodes are ramping; a rebuild whose members did not
// change publishes nothing.
func (n *Node) ringLoop(ctx context.Context) {
	changes, cancel := n.dir.Subscribe()
	defer cancel()
	var built uint64       // membership version of the published ring
	var confirmed uint64   // confirmation generation it was built with
	var last []ring.Member // members of the published ring
	var step time.Time     // next ramp step, zero if none
	rebuild := func() {
		s := n.dir.Snapshot()
		gen := n.confirm.generation()
		if n.confirmsRing() {
			s = n.filterConfirmed(s)
		}
		now := n.now()
		p := n.ringPolicy()
		step = cluster.NextRampStep(s, now, p)
		ms := cluster.Members(s, now, p)
		if s.Membership == built && gen == confirmed && slices.Equal(ms, last) && (n.rings.Load() != nil || s.Len() == 0) {
			return
		}
		built, confirmed, last = s.Membership, gen, ms
		n.publishRing(ms, "")
	}
	rebuild()
	ramp := time.NewTimer(0)
	defer ramp.Stop()
	for {
		// Arm the ramp timer for the next step, or park it.
		ramp.Reset(time.Hour * 24 * 365)
		if !step.IsZero() {
			ramp.Reset(max(step.Sub(n.now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-ramp.C:
		case <-n.confirm.changed:
		case <-changes:
			if s := n.dir.Snapshot(); s.Membership == built {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.debounc):
		}
		rebuild()
	}
}

// publishRing builds the ring of members and publishes it (none for no
// members). version is the ring version to report, when the members are
// a partial view of a larger ring (view.go); "" reports the built ring's
// own. A ring that cannot be built keeps the old one.
func (n *Node) publishRing(ms []ring.Member, version string) {
	n.m.ringRebuilds.Inc()
	if len(ms) == 0 {
		n.m.ringInfo.Reset()
		n.rings.Publish(nil)
		n.ringChanged()
		return
	}
	r, err := ring.New(ms)
	if err != nil {
		// cluster.Members bounds members and weights so that this cannot
		// happen for a whole directory; view.Members bounds a view's.
		n.log.Error("ring rebuild", "err", err)
		return
	}
	// The gauge first: whoever sees the new ring sees its version exported.
	n.m.ringInfo.Reset()
	n.m.ringInfo.WithLabelValues(cmp.Or(version, r.Version())).Set(1)
	n.rings.Publish(r)
	n.ringChanged()
	n.log.Debug("ring published", "version", r.Version(), "members", r.Len())
}

// ringChanged tells the supernode's router (when this node runs one) that
// the ring was published: it drops its records of the groups the ring no
// longer makes it home to (supernode.Router.RingChanged).
func (n *Node) ringChanged() {
	if n.router != nil {
		n.router.RingChanged()
	}
}
