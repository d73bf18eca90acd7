package groupsim

import (
	"slices"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Suspect patterns: what the simulator saw in a run that matches a known
// way of losing acknowledged messages. They label failures for the
// report; they change nothing the checker decides.
const (
	// SuspectMaskedResume: a home's first record from a supernode for a
	// group was a member's join or resume, not the supernode's own refresh
	// with its position; the supernode's resume that came next was not
	// taken as new (snNew false), so what the home numbered before it
	// knew the supernode was never replayed to its other members.
	SuspectMaskedResume = "masked-supernode-resume"
	// SuspectFlapHome: a supernode whose ring had dropped a live home for
	// a moment (a flap) numbered and replicated a group's messages; the
	// real home never learnt of them.
	SuspectFlapHome = "flap-home-numbered"
	// SuspectLogHole: an entry came to a replay log below its last
	// position, at a position the log does not hold, and was ignored (the
	// log appends only after its last): a sync answered first by a peer
	// missing a message, then by one holding it, keeps the hole; and a
	// live replica below the last (the log holds a newer epoch, numbered
	// by a home of a flap) is ignored yet acknowledged (Core.Replica acks
	// whatever AppendReplay did not refuse), so the home counts a replica
	// that holds nothing.
	SuspectLogHole = "log-hole"
	// SuspectNoPosition: a supernode refreshed a group's membership with
	// no position (no supernode resume) while members there had delivered
	// messages of the group: its members all came back by resume, whose
	// replay (per member) does not move the supernode's position, so a new
	// home does not replay to it what it numbered before the refresh.
	SuspectNoPosition = "refresh-without-position"
)

type firstKey struct {
	h, inc, sn int
	g          string
}

type diag struct {
	// first: the first record a home had from a supernode for a group;
	// masked when it was a member's while other members there had
	// delivered messages of the group (they have a position to resume).
	first map[firstKey]firstRecord
	seen  map[string]bool // "pattern g"
}

type firstRecord struct{ own, masking bool }

func newDiag() *diag { return &diag{first: map[firstKey]firstRecord{}, seen: map[string]bool{}} }

func (d *diag) flag(s *sim, pattern, g string) {
	k := pattern + " " + g
	if !d.seen[k] {
		d.seen[k] = true
		s.tracef("DIAG", "%s g=%s", pattern, g)
	}
}

// membership notes the first join record from each supernode at a node
// while the node is the group's home by its ring, and flags a supernode
// resume masked by it.
func (d *diag) membership(s *sim, h, from *snode, b *pb.MembershipBatch) {
	for _, r := range b.GetRecords() {
		g := r.GetGroup()
		if home, ok := h.Home(g); !ok || home != h.id || !r.GetJoin() {
			continue
		}
		if r.GetRefresh() && !r.GetResume() {
			for c := range from.local[g] {
				if cl := s.cByID[c]; cl != nil && cl.hasPos(g) {
					d.flag(s, SuspectNoPosition, g)
					break
				}
			}
		}
		k := firstKey{h.i, h.inc, from.i, g}
		own := r.GetRefresh() && r.GetSupernodeResume()
		first, ok := d.first[k]
		if !ok {
			masking := false
			if !own {
				for c := range from.local[g] {
					if cl := s.cByID[c]; cl != nil && c != string(r.GetMember()) && cl.hasPos(g) {
						masking = true
					}
				}
			}
			d.first[k] = firstRecord{own: own, masking: masking}
			continue
		}
		if own && !first.own {
			if first.masking {
				d.flag(s, SuspectMaskedResume, g)
			}
			d.first[k] = firstRecord{own: true}
		}
	}
}

// ringChanged forgets the first records at h of the groups whose home h
// became: a new home record learns every supernode anew.
func (d *diag) ringChanged(s *sim, h *snode, before map[string]string) {
	for _, g := range s.groups {
		now, _ := h.Home(g)
		if now == h.id && before[g] != h.id {
			for k := range d.first {
				if k.h == h.i && k.g == g {
					delete(d.first, k)
				}
			}
		}
	}
}

// replica notes a home numbering while its ring lacks a live supernode
// that a flap took out and that would be the group's home.
func (d *diag) replica(s *sim, n *snode, gm *pb.GroupMessage) {
	if n.flapped == 0 {
		return
	}
	g := gm.GetGroup()
	if home, ok := n.Home(g); !ok || home != n.id {
		return
	}
	r := s.ringOf(n.view | n.flapped)
	if s.str[r.Lookup([]byte(g))] != n.id {
		d.flag(s, SuspectFlapHome, g)
	}
}

// suspects returns the patterns seen, as "pattern g".
func (d *diag) suspects() []string {
	out := sortedKeys(d.seen)
	slices.Sort(out)
	return out
}

// explained reports whether every failed group has a suspect.
func (d *diag) explained(groups map[string]bool) bool {
	for g := range groups {
		if !d.seen[SuspectMaskedResume+" "+g] && !d.seen[SuspectFlapHome+" "+g] && !d.seen[SuspectLogHole+" "+g] && !d.seen[SuspectNoPosition+" "+g] {
			return false
		}
	}
	return true
}
