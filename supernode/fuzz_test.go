package supernode

import (
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/store"
)

// FuzzRelayFrame drives the relay handler itself, not only the decoder:
// arbitrary bytes, decoded as a RelayFrame the way handleRelay reads one,
// are acted on by a router as if a directory supernode had sent them. The
// router must not panic, and no record reaches its state without its
// originator's signature (the fuzzer cannot sign as the test's clients).
func FuzzRelayFrame(f *testing.F) {
	n := newTestNet(f)
	var rp ring.Published
	st, err := store.Open(filepath.Join(f.TempDir(), "store.db"), store.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() }) // after the router's
	sn := newSupernode(f, n, supernodeConfig{router: &RouterConfig{Ring: rp.Load, Store: st}})
	other := newPeerID(f)
	rp.Publish(newRing(f, sn.h.ID(), other))
	victim := newPeerID(f)
	for _, fr := range []*pb.RelayFrame{
		{Kind: &pb.RelayFrame_Presence{Presence: &pb.PresenceBatch{Records: []*pb.PresenceRecord{{Client: []byte(victim), Location: []byte(other), SessionSeq: 9, Attached: true}}}}},
		{Kind: &pb.RelayFrame_Membership{Membership: &pb.MembershipBatch{Records: []*pb.MembershipRecord{{Group: "g", Member: []byte(victim), Supernode: []byte(other), Join: true}}}}},
		{Kind: &pb.RelayFrame_Publish{Publish: &pb.GroupPublish{Group: "g", Id: protocol.NewMessageID(), From: []byte(victim)}}},
		{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: &pb.GroupMessage{Group: "g", Epoch: 1, Seq: 1}}},
		{Kind: &pb.RelayFrame_Deliver{Deliver: &pb.DirectMessage{Id: protocol.NewMessageID(), To: []byte(victim)}}},
		{Kind: &pb.RelayFrame_Nack{Nack: &pb.DirectMessage{Id: protocol.NewMessageID(), To: []byte(victim)}}},
		{Kind: &pb.RelayFrame_Ack{Ack: &pb.Ack{Id: protocol.NewMessageID(), To: []byte(victim)}}},
		{Kind: &pb.RelayFrame_Membership{Membership: &pb.MembershipBatch{Records: []*pb.MembershipRecord{{Group: "g", Member: []byte(victim), Supernode: []byte(other), Join: true, Resume: true, SupernodeResume: true, ResumeEpoch: 1, ResumeSeq: 2}}}}},
		{Kind: &pb.RelayFrame_Replica{Replica: &pb.GroupMessage{Group: "g", Epoch: 1, Seq: 1, From: []byte(victim), Id: protocol.NewMessageID()}}},
		{Kind: &pb.RelayFrame_ReplicaAck{ReplicaAck: &pb.ReplicaAck{Group: "g", Epoch: 1, Seq: 1}}},
		{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: "g", Epoch: 1, AfterSeq: 0}}},
		{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: "g", Done: true}}},
		{Kind: &pb.RelayFrame_ReplayDone{ReplayDone: &pb.ReplayDone{Member: []byte(victim), Resumed: &pb.Resumed{Group: "g", Epoch: 1, Seq: 3}}}},
		{Kind: &pb.RelayFrame_Store{Store: &pb.StoreRequest{Message: &pb.DirectMessage{Id: protocol.NewMessageID(), From: []byte(victim), To: []byte(other), Sealed: []byte("not signed")}, ExpiresUnixMs: 1 << 50}}},
		{Kind: &pb.RelayFrame_StoreResult{StoreResult: &pb.StoreResult{Id: protocol.NewMessageID(), From: []byte(victim), Status: pb.Result_STATUS_STORED}}},
	} {
		b, err := proto.Marshal(fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > protocol.MaxRelayFrame {
			return // the frame reader refuses it before decoding
		}
		var fr pb.RelayFrame
		if proto.Unmarshal(b, &fr) != nil {
			return
		}
		sn.r.onRelay(other, &fr)
		if m := st.Stats().OfflineMessages; m > 0 {
			t.Fatalf("%d messages stored that no sender signed", m)
		}
		if p, ok := presenceOf(sn.r, victim); ok {
			t.Fatalf("an unsigned presence record was stored: %+v", p)
		}
		if hv, ok := sn.r.homeRecord("g"); ok && len(hv.At) > 0 {
			t.Fatalf("an unsigned membership was stored: %v", hv.At)
		}
		if p, ok := st.ReplayLast("g"); ok {
			t.Fatalf("an unsigned replica was logged at %v", p)
		}
	})
}
