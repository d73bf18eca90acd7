package supernode

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
)

// Test helpers over the Router's group core.

// homeRecord returns a snapshot of r's home record of group g.
func (r *Router) homeRecord(g string) (group.HomeView, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.HomeForTest(g)
}

// memberAt returns where r's home record of g has member m.
func (r *Router) memberAt(g string, m peer.ID) peer.ID {
	hv, ok := r.homeRecord(g)
	if !ok {
		return ""
	}
	return peer.ID(hv.At[string(m)])
}

// held reports whether member m is held out of g's local fanout at r.
func (r *Router) held(m peer.ID, g string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.HeldForTest(string(m), g)
}

// replaysUnderWay is the number of replays r runs as a home.
func (r *Router) replaysUnderWay() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.ReplaysForTest()
}

// applyMembership hands r a membership batch as if supernode from had
// sent it on its link.
func (r *Router) applyMembership(from peer.ID, b *pb.MembershipBatch) {
	r.withCore(func(c *group.Core, now time.Time) { c.Membership(now, string(from), b) })
}

// onReplayDone hands r a ReplayDone as if from had sent it.
func (r *Router) onReplayDone(from peer.ID, d *pb.ReplayDone) {
	r.withCore(func(c *group.Core, now time.Time) { c.ReplayDone(now, string(from), d) })
}

// membershipUpdate is a membership record a test makes a supernode send.
type membershipUpdate struct {
	group         string
	member        peer.ID
	join, refresh bool
	claim         []byte
}

// sendMembership sends membership records from r to each group's home by
// r's ring, as r's own refreshes would: one batch per home (split to fit
// a relay frame), applied locally when r is the home.
func (r *Router) sendMembership(ups []membershipUpdate) {
	byHome := map[peer.ID][]*pb.MembershipRecord{}
	for _, u := range ups {
		h, ok := r.groupHome(u.group)
		if !ok {
			continue
		}
		byHome[h] = append(byHome[h], &pb.MembershipRecord{Group: u.group, Member: []byte(u.member), Supernode: []byte(r.self()), Join: u.join, Refresh: u.refresh, Claim: u.claim})
	}
	for h, recs := range byHome {
		for _, b := range splitRecords(recs) {
			batch := &pb.MembershipBatch{Records: b}
			if h == r.self() {
				r.applyMembership(h, batch)
				continue
			}
			r.links.send(h, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Membership{Membership: batch}}))
		}
	}
}

// toldHome reports whether r takes g's frames from p as a home it told
// its members to.
func (r *Router) toldHome(g string, p peer.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.ToldHomeForTest(r.cfg.Now(), g, string(p))
}
