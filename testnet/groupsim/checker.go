package groupsim

import (
	"fmt"
	"time"

	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
)

// checker holds a run to the written guarantee. It records every publish,
// every acknowledgement with the position it got, and every delivery at
// every member (after the client's dedup: what the application sees).
type checker struct {
	s     *sim
	pubs  map[string]*pubRec // by publisher/id
	order []string
	ms    map[memberKey]*memberState
	// forged publishes (by publisher/id) and forged members (IDs) that
	// must never be delivered or applied.
	forgedPubs    map[string]bool
	forgedMembers map[string]bool
	forgedSeen    map[string]bool

	failures, beyond         []string
	failGroups, beyondGroups map[string]bool
	ackedN, checked          int
	lost, lostBeyond, told   int
}

type pubRec struct {
	c     *client
	p     *pub
	acked bool
	pos   group.Pos
	at    time.Duration
}

type memberKey struct {
	c *client
	g string
}

type memberState struct {
	active bool
	since  time.Duration
	got    map[string]int
	last   group.Pos
	gaps   []time.Duration
}

func newChecker(s *sim) *checker {
	return &checker{s: s, pubs: map[string]*pubRec{}, ms: map[memberKey]*memberState{},
		forgedPubs: map[string]bool{}, forgedMembers: map[string]bool{}, forgedSeen: map[string]bool{},
		failGroups: map[string]bool{}, beyondGroups: map[string]bool{}}
}

func pubKeyOf(from string, id []byte) string { return from + "/" + string(id) }

func (k *checker) fail(g, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	k.failures = append(k.failures, msg)
	if g != "" {
		k.failGroups[g] = true
	}
	k.s.tracef("CHK", "FAIL %s", msg)
}

func (k *checker) state(c *client, g string) *memberState {
	key := memberKey{c, g}
	m := k.ms[key]
	if m == nil {
		m = &memberState{got: map[string]int{}}
		k.ms[key] = m
	}
	return m
}

// joined is a client's join of g. A join after a leave starts afresh
// (overlay/member forgets the position at a leave), so the order the
// member sees is checked within each membership: a fresh join replays the
// log, and the messages from before the first membership that the member
// never got come first (seed 1641). Once still holds across them.
func (k *checker) joined(c *client, g string) {
	m := k.state(c, g)
	m.active, m.since, m.last = true, k.s.now, group.Pos{}
	k.s.tracef(c.name, "JOIN g=%s", g)
}

func (k *checker) left(c *client, g string) {
	k.state(c, g).active = false
	k.s.tracef(c.name, "LEAVE g=%s", g)
}

func (k *checker) gap(c *client, g string) {
	m := k.state(c, g)
	m.gaps = append(m.gaps, k.s.now)
}

func (k *checker) published(c *client, p *pub) {
	key := pubKeyOf(c.id, p.id)
	k.pubs[key] = &pubRec{c: c, p: p}
	k.order = append(k.order, key)
	if p.forged {
		k.forgedPubs[key] = true
	}
}

func (k *checker) acked(c *client, p *pub, pos group.Pos) {
	r := k.pubs[pubKeyOf(c.id, p.id)]
	if r == nil || r.acked {
		return
	}
	r.acked, r.pos, r.at = true, pos, k.s.now
	k.ackedN++
	if p.forged {
		k.fail(p.g, "g=%s forged publish %s acknowledged OK at %d.%d", p.g, k.s.pubName([]byte(c.id), p.id), pos.Epoch, pos.Seq)
	}
}

// raw is every group message a supernode hands a client, before the
// client's checks: a forged one must never get this far.
func (k *checker) raw(c *client, gm *pb.GroupMessage) {
	key := pubKeyOf(string(gm.GetFrom()), gm.GetId())
	if k.forgedPubs[key] && !k.forgedSeen[key+"/"+c.id] {
		k.forgedSeen[key+"/"+c.id] = true
		k.fail(gm.GetGroup(), "g=%s forged publish %s delivered to %s", gm.GetGroup(), k.s.gmString(gm), c.name)
	}
}

// delivered is a message the client's application got.
func (k *checker) delivered(c *client, gm *pb.GroupMessage) {
	g := gm.GetGroup()
	m := k.state(c, g)
	key := pubKeyOf(string(gm.GetFrom()), gm.GetId())
	m.got[key]++
	if m.got[key] == 2 {
		k.fail(g, "g=%s %s delivered twice to %s", g, k.s.gmString(gm), c.name)
	}
	p := group.Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}
	if m.last != (group.Pos{}) && !p.After(m.last) {
		k.fail(g, "g=%s %s delivered to %s out of order: after %d.%d", g, k.s.gmString(gm), c.name, m.last.Epoch%1000, m.last.Seq)
	}
	if p.After(m.last) {
		m.last = p
	}
}

// forgedApplied checks that no home holds a forged member.
func (k *checker) forgedApplied(n *snode) {
	if len(k.forgedMembers) == 0 || n.core == nil {
		return
	}
	for _, g := range k.s.groups {
		members, _ := n.core.Members(g)
		for _, m := range members {
			if k.forgedMembers[m] && !k.forgedSeen[m+g] {
				k.forgedSeen[m+g] = true
				k.fail(g, "g=%s forged membership of %s applied at %s", g, k.s.short(m), n.name)
			}
		}
	}
}

// check runs at the end: every acknowledged publish reached every member
// joined from before it was published (a refresh's grace: a join is not
// acknowledged) to the end, unless the member was told of a gap after it
// was published. Losses in a group whose home cluster lost two members
// within a flush are beyond the guarantee.
func (k *checker) check() {
	for _, n := range k.s.nodes {
		if n.up {
			k.forgedApplied(n)
		}
	}
	grace := 2 * k.s.p.Refresh
	var keys []memberKey
	for _, c := range k.s.cls {
		for _, g := range k.s.groups {
			if m := k.ms[memberKey{c, g}]; m != nil && m.active {
				keys = append(keys, memberKey{c, g})
			}
		}
	}
	for _, pk := range k.order {
		r := k.pubs[pk]
		if !r.acked || r.p.forged {
			continue
		}
		g := r.p.g
		for _, mk := range keys {
			m := k.ms[mk]
			if mk.g != g || m.since+grace > r.p.first {
				continue
			}
			k.checked++
			if m.got[pk] > 0 {
				continue
			}
			if told(m.gaps, r.p.first) {
				k.told++
				continue
			}
			at := "-"
			if mk.c.at != nil {
				at = mk.c.at.name
			}
			msg := fmt.Sprintf("g=%s %s acked %d.%d (sent %.3fs, acked %.3fs) never delivered to %s (now at %s, joined %.3fs)",
				g, k.s.pubName([]byte(r.c.id), r.p.id), r.pos.Epoch%1000, r.pos.Seq, r.p.first.Seconds(), r.at.Seconds(), mk.c.name, at, m.since.Seconds())
			if k.beyondGroups[g] {
				k.lostBeyond++
				k.beyond = append(k.beyond, msg)
				continue
			}
			k.lost++
			k.fail(g, "%s", msg)
		}
	}
}

// told reports whether a gap notice came after a message published at t:
// the member was told it may have missed it.
func told(gaps []time.Duration, t time.Duration) bool {
	for _, at := range gaps {
		if at >= t {
			return true
		}
	}
	return false
}
