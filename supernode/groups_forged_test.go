package supernode

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// TestForgedPublishRefusedByTheHome: a supernode relaying a publish in a
// client's name without the client's signature gets it refused by the
// group's home before a sequence number is spent, and counted.
func TestForgedPublishRefusedByTheHome(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	sn := newSupernode(t, n, supernodeConfig{router: &RouterConfig{Ring: rp.Load}})
	rp.Publish(newRing(t, sn.h.ID()))
	r := sn.r
	victim, attacker := newPeerID(t), newPeerID(t)
	id := protocol.NewMessageID()
	forged, err := protocol.SignPublish(keyOf(t, attacker), "g", id, []byte("in the victim's name"))
	if err != nil {
		t.Fatal(err)
	}
	for name, signed := range map[string][]byte{"unsigned": nil, "signed by the attacker": forged} {
		r.homePublish(&pb.GroupPublish{Group: "g", Id: id, Signed: signed, From: []byte(victim), Origin: []byte(attacker)})
		if r.stats.GroupPublishes.Load() != 0 {
			t.Fatalf("%s: the home numbered a forged publish", name)
		}
	}
	if got := r.stats.PublishRefused.Load(); got != 2 {
		t.Fatalf("%d forged publishes counted, want 2", got)
	}
	genuine, err := protocol.SignPublish(keyOf(t, victim), "g", id, []byte("mine"))
	if err != nil {
		t.Fatal(err)
	}
	r.homePublish(&pb.GroupPublish{Group: "g", Id: id, Signed: genuine, From: []byte(victim), Origin: []byte(attacker)})
	if r.stats.GroupPublishes.Load() != 1 {
		t.Fatal("the home refused a genuine publish")
	}
}

// TestGroupMessageOnlyFromTheHome: a directory supernode that is not the
// group's home cannot have a group message fanned out, even with valid
// publisher signatures; nor can the home's frame be altered on the way.
func TestGroupMessageOnlyFromTheHome(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	sn := newSupernode(t, n, supernodeConfig{router: &RouterConfig{Ring: rp.Load}})
	home, other := newPeerID(t), newPeerID(t)
	rp.Publish(newRing(t, home))
	r := sn.r
	publisher := newPeerID(t)
	id := protocol.NewMessageID()
	publish, err := protocol.SignPublish(keyOf(t, publisher), "g", id, []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	stamped := func(by peer.ID, seq uint64) *pb.GroupMessage {
		st, err := protocol.Stamp(keyOf(t, by), "g", 1, seq, publish)
		if err != nil {
			t.Fatal(err)
		}
		return &pb.GroupMessage{Group: "g", Epoch: 1, Seq: seq, From: []byte(publisher), Id: id, Publish: publish, Stamp: st}
	}
	relay := func(from peer.ID, gm *pb.GroupMessage) {
		r.onRelay(from, &pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: gm}})
	}
	relay(other, stamped(other, 1)) // a supernode numbering for a group it is not home to
	relay(other, stamped(home, 1))  // the home's message, replayed by another supernode
	renumbered := stamped(home, 2)
	renumbered.Seq = 3 // altered on the way
	relay(home, renumbered)
	if got := r.stats.GroupRefused.Load(); got != 3 {
		t.Fatalf("%d forged group messages refused, want 3", got)
	}
	if r.stats.GroupFanouts.Load() != 0 {
		t.Fatal("a forged group message was fanned out")
	}
}
