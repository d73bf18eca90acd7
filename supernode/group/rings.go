package group

import (
	"slices"
	"time"
)

// A new home's sync asks, and must be endorsed by, the home clusters of
// the rings this supernode had lately, not only of the ring it has now.
//
// A ring can lack live supernodes for a while (a directory entry late or
// missing: a flap). A supernode whose ring has just dropped the two live
// holders of a group's newest messages, and that the ring makes the
// group's home, asked only the supernodes its ring now placed at the
// group, all of them endorsing it (their rings named it home too, rightly)
// and none holding the messages: it numbered past them, and the members
// it served never got them (found by testnet/groupsim, seed 12695:
// Mutations.NoPastRings). A message is acknowledged with a majority of
// the home cluster by the acknowledging home's ring; a sync that hears
// from a majority of every cluster this supernode saw lately meets that
// majority as long as its rings of the last RecentRings include the
// acknowledging home's. This is the joint quorum of a configuration
// change (Raft's joint consensus) with the rings of a recent window as
// the configurations.

// RecentRings is, in refreshes, how long a ring this supernode had counts
// for its syncs after the next ring replaced it: a membership record
// lasts 3 refreshes, and so does a directory that lags.
const RecentRings = 3

// maxPastRings bounds the past rings kept: a ring that changes faster
// than this within RecentRings refreshes keeps only its newest.
const maxPastRings = 16

// pastRing is a ring this supernode had, until the next one came.
type pastRing struct {
	ring  Ring
	until time.Time
}

// ringChanged remembers the ring that r replaces, now.
func (c *Core) ringChanged(now time.Time, r Ring) {
	if c.ring != nil {
		c.past = append(c.past, pastRing{ring: c.ring, until: now})
	}
	c.ring = r
	c.prunePastRings(now)
}

// prunePastRings forgets the rings replaced more than RecentRings
// refreshes ago, and the oldest past maxPastRings.
func (c *Core) prunePastRings(now time.Time) {
	keep := now.Add(-RecentRings * c.cfg.Refresh)
	i := 0
	for i < len(c.past) && (c.past[i].until.Before(keep) || len(c.past)-i > maxPastRings) {
		c.past[i] = pastRing{}
		i++
	}
	c.past = c.past[i:]
}

// recentRings returns the rings a sync at now must be endorsed by: the
// live ring first, then the past rings, newest first.
func (c *Core) recentRings(now time.Time) []Ring {
	rings := []Ring{c.cfg.Ring}
	if c.cfg.Mutations.NoPastRings {
		return rings
	}
	c.prunePastRings(now)
	for i := len(c.past) - 1; i >= 0; i-- {
		rings = append(rings, c.past[i].ring)
	}
	return rings
}

// syncTargets are the peers a sync of group g asks at now: the sync
// peers of the live ring, then those of the past rings not among them,
// at most maxSyncAsked, this supernode left out.
func (c *Core) syncTargets(now time.Time, g string) []string {
	var out []string
	for _, r := range c.recentRings(now) {
		for _, p := range r.SyncPeers(g) {
			if p != c.self && !slices.Contains(out, p) && len(out) < maxSyncAsked {
				out = append(out, p)
			}
		}
	}
	return out
}

// endorsed reports whether half of group g's home cluster by each recent
// ring, this supernode left out, answered sync s (with this supernode, a
// majority of a cluster that holds it): only then may it number. Once the
// sync's wait has ended (final), a past ring's cluster member that the
// live ring no longer holds counts as gone: two supernodes of a cluster
// that crashed together held every takeover of its groups for RecentRings
// refreshes otherwise. It was asked all the same, and a live one answers
// within the wait.
func (c *Core) endorsed(now time.Time, g string, s *groupSync, final bool) bool {
	if c.cfg.Mutations.NoSyncEndorse {
		return true
	}
	for i, r := range c.recentRings(now) {
		cl := r.Cluster(g)
		n := 0
		for _, p := range cl {
			if p != c.self && (slices.Contains(s.answered, p) || final && i > 0 && !c.cfg.Ring.Has(p)) {
				n++
			}
		}
		if n < len(cl)/2 {
			return false
		}
	}
	return true
}

// liveAnswered reports whether every sync peer of the live ring that s
// asked has answered: with the sync endorsed, it ends without waiting for
// the past rings' peers (a supernode gone from the ring, crashed most
// often, would hold every takeover for SyncTimeout).
func (c *Core) liveAnswered(g string, s *groupSync) bool {
	for _, p := range c.cfg.Ring.SyncPeers(g) {
		if slices.Contains(s.waiting, p) {
			return false
		}
	}
	return true
}

// askNewSyncPeers asks the syncs under way of the peers the live ring
// adds to their targets.
func (c *Core) askNewSyncPeers(now time.Time) {
	if c.cfg.Mutations.NoPastRings {
		return
	}
	for _, g := range sortedKeys(c.syncs) {
		s := c.syncs[g]
		if s.pending || s.request == nil {
			continue
		}
		for _, p := range c.syncTargets(now, g) {
			if !slices.Contains(s.waiting, p) && !slices.Contains(s.answered, p) && len(s.waiting)+len(s.answered) < maxSyncAsked {
				s.waiting = append(s.waiting, p)
				c.cfg.Net.Send(p, s.request)
			}
		}
	}
}
