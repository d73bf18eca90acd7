package supernode

import (
	"fmt"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
)

// TestLargeGroupMembershipReachesHome: a supernode with 1,500 members of
// one group (all signed joins, as its refresh re-sends them) gets every one
// recorded at the group's home. A batch of batchLimit records with their
// claims is larger than a relay frame may be (302,007 bytes against
// protocol.MaxRelayFrame, 262,144): sent whole, the home refused the frame
// and reset the link, and past ~870 memberships at one home a supernode
// never got them all there (found by BenchmarkHomeCost at 10,000 members).
func TestLargeGroupMembershipReachesHome(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	dir := &peerSet{}
	cfg := func() supernodeConfig {
		return supernodeConfig{capacity: 4, router: &RouterConfig{Ring: rp.Load, IsSupernode: dir.has, MaxMemberships: 1 << 16}}
	}
	a, b := newSupernode(t, n, cfg()), newSupernode(t, n, cfg())
	dir.add(a.h.ID(), b.h.ID())
	rp.Publish(newRing(t, a.h.ID(), b.h.ID()))
	home, from := a, b
	g := ""
	for i := 0; ; i++ {
		g = fmt.Sprintf("big-%d", i)
		if h, ok := a.r.groupHome(g); ok && h == a.h.ID() {
			break
		}
	}
	const members = 1500
	ups := make([]membershipUpdate, 0, members)
	for range members {
		m := newPeerID(t)
		claim, err := protocol.SignMembership(keyOf(t, m), protocol.Membership{Group: g, Supernode: from.h.ID(), Join: true, Seq: 1})
		if err != nil {
			t.Fatal(err)
		}
		ups = append(ups, membershipUpdate{group: g, member: m, join: true, refresh: true, claim: claim})
	}
	from.r.sendMembership(ups)
	waitFor(t, fmt.Sprintf("the home to record %d members", members), func() bool {
		hv, ok := home.r.homeRecord(g)
		return ok && len(hv.At) == members
	})
}

// TestMembershipBatchesFit: every membership frame sendMembership makes
// fits a relay frame, and holds at most batchLimit records.
func TestMembershipBatchesFit(t *testing.T) {
	claim := make([]byte, 300)
	var recs []*pb.MembershipRecord
	for i := range 5000 {
		recs = append(recs, &pb.MembershipRecord{Group: "g", Member: []byte(peer.ID(fmt.Sprintf("member-%034d", i))), Supernode: make([]byte, 38), Join: true, Claim: claim})
	}
	total := 0
	for _, b := range group.SplitBatches(recs, batchBytes) {
		total += len(b.GetRecords())
		if len(b.GetRecords()) > batchLimit {
			t.Fatalf("batch of %d records, want at most %d", len(b.GetRecords()), batchLimit)
		}
		if f := encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Membership{Membership: b}}); len(f) > protocol.MaxRelayFrame {
			t.Fatalf("membership frame of %d bytes, want at most %d", len(f), protocol.MaxRelayFrame)
		}
	}
	if total != len(recs) {
		t.Fatalf("%d records in the batches, want %d", total, len(recs))
	}
}

// TestPresenceBatchesFit: presence records with signed claims are split
// by bytes too, so a supernode with more than ~930 clients whose presence
// goes to one home member never sends a frame that member refuses.
func TestPresenceBatchesFit(t *testing.T) {
	claim := make([]byte, 250)
	var recs []*pb.PresenceRecord
	for i := range 5000 {
		recs = append(recs, &pb.PresenceRecord{Client: []byte(peer.ID(fmt.Sprintf("client-%034d", i))), Location: make([]byte, 38), SessionSeq: uint64(i), Attached: true, Claim: claim})
	}
	total := 0
	for _, b := range presenceBatches(recs) {
		total += len(b.GetRecords())
		if len(b.GetRecords()) > batchLimit {
			t.Fatalf("batch of %d records, want at most %d", len(b.GetRecords()), batchLimit)
		}
		if f := encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Presence{Presence: b}}); len(f) > protocol.MaxRelayFrame {
			t.Fatalf("presence frame of %d bytes, want at most %d", len(f), protocol.MaxRelayFrame)
		}
	}
	if total != len(recs) {
		t.Fatalf("%d records in the batches, want %d", total, len(recs))
	}
}
