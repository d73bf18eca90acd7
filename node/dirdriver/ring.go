package dirdriver

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
func (d *Driver) ringPolicy() cluster.Policy {
	return cluster.DefaultPolicy(d.cfg.AnnounceInterval, cluster.LocalOnly(d.cfg.Host.Addrs()))
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
func (d *Driver) ringLoop(ctx context.Context) {
	dir := d.cfg.Dir
	changes, cancel := dir.Subscribe()
	defer cancel()
	var built uint64       // membership version of the published ring
	var confirmed uint64   // confirmation generation it was built with
	var last []ring.Member // members of the published ring
	var step time.Time     // next ramp step, zero if none
	rebuild := func() {
		s := dir.Snapshot()
		gen := d.confirm.generation()
		if d.confirmsRing() {
			s = d.filterConfirmed(s)
		}
		now := d.now()
		p := d.ringPolicy()
		step = cluster.NextRampStep(s, now, p)
		ms := cluster.Members(s, now, p)
		if s.Membership == built && gen == confirmed && slices.Equal(ms, last) && (d.cfg.Rings.Load() != nil || s.Len() == 0) {
			return
		}
		built, confirmed, last = s.Membership, gen, ms
		d.PublishRing(ms, "")
	}
	rebuild()
	ramp := time.NewTimer(0)
	defer ramp.Stop()
	for {
		// Arm the ramp timer for the next step, or park it.
		ramp.Reset(time.Hour * 24 * 365)
		if !step.IsZero() {
			ramp.Reset(max(step.Sub(d.now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-ramp.C:
		case <-d.confirm.changed:
		case <-changes:
			if s := dir.Snapshot(); s.Membership == built {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.cfg.Debounce):
		}
		rebuild()
	}
}

// PublishRing builds the ring of members and publishes it (none for no
// members), then calls Config.Published. version is the ring version to
// report, when the members are a partial view of a larger ring
// (node/viewclient's Config.Publish); "" reports the built ring's own. A
// ring that cannot be built keeps the old one.
func (d *Driver) PublishRing(ms []ring.Member, version string) {
	d.m.ringRebuilds.Inc()
	if len(ms) == 0 {
		d.m.ringInfo.Reset()
		d.cfg.Rings.Publish(nil)
		d.cfg.Published()
		return
	}
	r, err := ring.New(ms)
	if err != nil {
		// cluster.Members bounds members and weights so that this cannot
		// happen for a whole directory; view.Members bounds a view's.
		d.log.Error("ring rebuild", "err", err)
		return
	}
	// The gauge first: whoever sees the new ring sees its version exported.
	d.m.ringInfo.Reset()
	d.m.ringInfo.WithLabelValues(cmp.Or(version, r.Version())).Set(1)
	d.cfg.Rings.Publish(r)
	d.cfg.Published()
	d.log.Debug("ring published", "version", r.Version(), "members", r.Len())
}
