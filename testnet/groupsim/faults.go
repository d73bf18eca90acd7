package groupsim

import (
	"fmt"
	"time"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// plan draws the run's workload and faults and schedules them.
func (s *sim) plan() {
	p := s.p
	for _, k := range FaultKinds {
		if k != FaultPartition && k != FaultReconnectLoss {
			s.on[k] = s.chance(p.Faults[k])
		}
	}
	s.dupP, s.failP = 0.003, 0.01
	s.forgeKey = s.newKey()

	var members, publishers []*client
	for i := range p.Members {
		members = append(members, s.newClient(len(s.cls), fmt.Sprintf("m%d", i)))
	}
	for i := range p.Publishers {
		publishers = append(publishers, s.newClient(len(s.cls), fmt.Sprintf("p%d", i)))
	}
	for _, c := range s.cls {
		c.attach(s.nodes[s.rng.IntN(len(s.nodes))])
	}
	span := p.Span
	// Members: one or two groups from the start, maybe one more later,
	// maybe a leave.
	for _, c := range members {
		c := c
		n := 1 + s.rng.IntN(2)
		for _, gi := range s.rng.Perm(len(s.groups))[:min(n, len(s.groups))] {
			g := s.groups[gi]
			s.after(s.dur(0, 500*time.Millisecond), func() { c.join(g) })
		}
		if s.chance(0.3) {
			g := s.groups[s.rng.IntN(len(s.groups))]
			s.after(s.dur(time.Second, span-3*time.Second), func() { c.join(g) })
		}
		if s.chance(0.15) {
			g := s.groups[s.rng.IntN(len(s.groups))]
			s.after(s.dur(time.Second, span-time.Second), func() { c.leave(g) })
		}
	}
	for _, c := range publishers {
		c := c
		var loop func()
		loop = func() {
			if s.stop {
				return
			}
			c.publish(s.groups[s.rng.IntN(len(s.groups))], false)
			s.after(s.dur(p.PublishEvery/2, 3*p.PublishEvery/2), loop)
		}
		s.after(s.dur(200*time.Millisecond, 400*time.Millisecond), loop)
	}

	if s.on[FaultCrash] {
		for range 1 + s.rng.IntN(3) {
			s.after(s.dur(time.Second, span-3*time.Second), s.crashOne)
		}
	}
	if s.on[FaultDoubleCrash] {
		s.after(s.dur(2*time.Second, span-3*time.Second), s.crashTwo)
	}
	if s.on[FaultFlap] {
		for range 1 + s.rng.IntN(6) {
			s.after(s.dur(time.Second, span-time.Second), s.flap)
		}
	}
	if s.on[FaultHomeFlap] {
		for range 1 + s.rng.IntN(2) {
			s.after(s.dur(time.Second, span-3*time.Second), s.homeFlap)
		}
	}
	if s.on[FaultSlowRing] {
		s.fault(FaultSlowRing)
	}
	if s.on[FaultForgePub] {
		for range 1 + s.rng.IntN(3) {
			c := publishers[s.rng.IntN(len(publishers))]
			s.after(s.dur(time.Second, span-time.Second), func() {
				s.fault(FaultForgePub)
				c.publish(s.groups[s.rng.IntN(len(s.groups))], true)
			})
		}
	}
	if s.on[FaultForgeMember] {
		for range 1 + s.rng.IntN(2) {
			fake := s.newClient(len(s.cls), fmt.Sprintf("f%d", len(s.cls)))
			s.chk.forgedMembers[fake.id] = true
			s.after(s.dur(time.Second, span-time.Second), func() { s.forgeMembership(fake) })
		}
	}
	if s.on[FaultMove] {
		for range 1 + s.rng.IntN(4) {
			c := members[s.rng.IntN(len(members))]
			s.after(s.dur(time.Second, span-time.Second), c.move)
		}
	}
	if f := p.Faults[FaultPartition]; f > 0 && s.prng.Float64() < f {
		s.on[FaultPartition] = true
		for range 1 + s.prng.IntN(2) {
			s.after(s.pdur(time.Second, span-3*time.Second), s.partition)
		}
	}
	s.at(span, s.quiet)
}

// pdur draws a duration in [lo, hi) from the partitions' stream.
func (s *sim) pdur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.prng.Int64N(int64(hi-lo)))
}

// across reports whether a partition separates a and b.
func (s *sim) across(a, b *snode) bool {
	return s.cut != 0 && (s.cut>>a.i)&1 != (s.cut>>b.i)&1
}

// partition cuts one or two live supernodes off from the others: frames
// across are lost (those in flight too), and each side's directory drops
// the other side's supernodes once it has not heard them for one to
// three announce intervals. Clients keep the sessions they have. It
// heals after 0.5 to 4 s.
func (s *sim) partition() {
	if s.stop || s.anyDown() || s.cut != 0 {
		return
	}
	up := s.upNodes()
	var names []string
	for _, i := range s.prng.Perm(len(up))[:1+s.prng.IntN(2)] {
		s.cut |= 1 << up[i].i
		names = append(names, up[i].name)
	}
	s.fault(FaultPartition)
	s.tracef("SIM", "partition %v from the others", names)
	cut := s.cut
	for _, a := range s.nodes {
		for _, b := range s.nodes {
			if !s.across(a, b) {
				continue
			}
			a.links[b.i].reset()
			a, b, inc := a, b, a.inc
			s.after(s.pdur(s.p.Refresh, 3*s.p.Refresh), func() {
				if s.cut == cut {
					a.event(inc, func() { a.setView(b, false) })
				}
			})
		}
	}
	s.after(s.pdur(500*time.Millisecond, 4*time.Second), s.heal)
}

// heal ends a partition: frames cross again (with FaultReconnectLoss,
// but the first on each link across, lost in the dead connection), and
// each side's directory hears the other's supernodes within an interval.
func (s *sim) heal() {
	if s.cut == 0 {
		return
	}
	stale := false
	if f := s.p.Faults[FaultReconnectLoss]; f > 0 && s.lrng.Float64() < f {
		stale = true
		s.fault(FaultReconnectLoss)
	}
	for _, a := range s.nodes {
		for _, b := range s.nodes {
			if s.across(a, b) && a.up {
				a.learnLater(b, s.pdur(20*time.Millisecond, s.p.Refresh))
				a.links[b.i].stale = stale
			}
		}
	}
	s.cut = 0
	s.tracef("SIM", "heal")
}

// quiet ends the span: no more faults or publishes; every supernode down
// comes back (clients fail over as ever).
func (s *sim) quiet() {
	s.stop = true
	s.tracef("SIM", "quiet")
	s.heal()
	for _, n := range s.nodes {
		n.restart()
	}
}

// anyDown reports whether a supernode is down: crashes come one at a
// time (but crashTwo's).
func (s *sim) anyDown() bool {
	for _, n := range s.nodes {
		if !n.up {
			return true
		}
	}
	return false
}

// crashOne crashes a supernode and restarts it a while later.
func (s *sim) crashOne() {
	if s.stop || s.anyDown() || s.cut != 0 {
		return
	}
	up := s.upNodes()
	n := up[s.rng.IntN(len(up))]
	s.fault(FaultCrash)
	n.crash()
	s.after(s.dur(500*time.Millisecond, 3*time.Second), n.restart)
}

// crashTwo crashes two of a group's home cluster within a flush interval:
// beyond the guarantee for every group whose cluster holds both.
func (s *sim) crashTwo() {
	if s.stop || s.anyDown() || s.cut != 0 {
		return
	}
	g := s.groups[s.rng.IntN(len(s.groups))]
	cl := s.trueCluster(g)
	if len(cl) < 3 {
		return
	}
	perm := s.rng.Perm(len(cl))
	a, b := cl[perm[0]], cl[perm[1]]
	for _, h := range s.groups {
		c := s.trueCluster(h)
		if contains(c, a) && contains(c, b) {
			s.chk.beyondGroups[h] = true
		}
	}
	s.fault(FaultDoubleCrash)
	s.tracef("SIM", "double crash g=%s %s %s", g, a.name, b.name)
	a.crash()
	s.after(s.dur(0, flushEvery), b.crash)
	s.after(s.dur(time.Second, 3*time.Second), a.restart)
	s.after(s.dur(time.Second, 3*time.Second), b.restart)
}

func contains(ns []*snode, n *snode) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}

// flap has a node's view drop a live supernode for a moment.
func (s *sim) flap() {
	if s.stop {
		return
	}
	up := s.upNodes()
	if len(up) < 2 {
		return
	}
	i := up[s.rng.IntN(len(up))]
	j := up[s.rng.IntN(len(up))]
	s.flapPair(i, j, s.dur(100*time.Millisecond, 600*time.Millisecond), FaultFlap)
}

// homeFlap has the next member of a group's home cluster drop the home
// from its view twice in a row: the group moves to it, back, to it and
// back (a home that regains the role, memberships made away).
func (s *sim) homeFlap() {
	if s.stop {
		return
	}
	g := s.groups[s.rng.IntN(len(s.groups))]
	cl := s.trueCluster(g)
	if len(cl) < 2 {
		return
	}
	i, j := cl[1], cl[0]
	s.flapPair(i, j, s.dur(150*time.Millisecond, 500*time.Millisecond), FaultHomeFlap)
	s.after(s.dur(700*time.Millisecond, 2*time.Second), func() {
		if !s.stop {
			s.flapPair(i, j, s.dur(150*time.Millisecond, 500*time.Millisecond), FaultHomeFlap)
		}
	})
}

// flapPair has i's view drop j for d.
func (s *sim) flapPair(i, j *snode, d time.Duration, kind string) {
	if i == j || !i.up || !j.up || i.view&(1<<j.i) == 0 {
		return
	}
	s.fault(kind)
	inc := i.inc
	i.event(inc, func() {
		i.flapped |= 1 << j.i
		i.setView(j, false)
	})
	s.after(d, func() {
		i.event(inc, func() {
			i.flapped &^= 1 << j.i
			i.setView(j, j.up)
		})
	})
}

// forgeMembership has a supernode relay a membership claim its member
// never signed (signed by another key) to the group's home.
func (s *sim) forgeMembership(fake *client) {
	up := s.upNodes()
	a := up[s.rng.IntN(len(up))]
	g := s.groups[s.rng.IntN(len(s.groups))]
	h, ok := a.Home(g)
	if !ok || h == a.id {
		return
	}
	claim, err := protocol.SignMembership(s.forgeKey, protocol.Membership{Group: g, Supernode: a.pid, Join: true, Seq: uint64(s.nowT().UnixNano())})
	if err != nil {
		panic(err)
	}
	s.fault(FaultForgeMember)
	a.send(h, &pb.RelayFrame{Kind: &pb.RelayFrame_Membership{Membership: &pb.MembershipBatch{Records: []*pb.MembershipRecord{
		{Group: g, Member: []byte(fake.id), Supernode: []byte(a.id), Join: true, Claim: claim},
	}}}})
}
