package protocol

import (
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol/pb"
)

func TestGroupMessageSignatures(t *testing.T) {
	pubKey, publisher := edKey(t)
	homeKey, home := edKey(t)
	attackerKey, attacker := edKey(t)
	id := NewMessageID()
	signed, err := SignPublish(pubKey, "team", id, []byte("hello team"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := VerifyPublish(signed, publisher, "team", id); err != nil || string(got) != "hello team" {
		t.Fatalf("VerifyPublish = %q, %v", got, err)
	}
	stamp, err := Stamp(homeKey, "team", 7, 42, signed)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *pb.GroupMessage {
		return &pb.GroupMessage{Group: "team", Epoch: 7, Seq: 42, From: []byte(publisher), Id: id, Publish: signed, Stamp: stamp}
	}
	is := func(want peer.ID) func(peer.ID) bool { return func(p peer.ID) bool { return p == want } }
	if got, err := OpenGroupMessage(good(), is(home)); err != nil || string(got) != "hello team" {
		t.Fatalf("OpenGroupMessage = %q, %v", got, err)
	}
	forgedPublish, _ := SignPublish(attackerKey, "team", id, []byte("I am the publisher"))
	attackerStamp, _ := Stamp(attackerKey, "team", 7, 43, signed)
	for _, tc := range []struct {
		name string
		edit func(*pb.GroupMessage)
		home string
	}{
		{"stamped by a supernode that is not the home", func(gm *pb.GroupMessage) { gm.Stamp = attackerStamp; gm.Seq = 43 }, ""},
		{"renumbered", func(gm *pb.GroupMessage) { gm.Seq = 43 }, ""},
		{"moved to another epoch", func(gm *pb.GroupMessage) { gm.Epoch = 8 }, ""},
		{"moved to another group", func(gm *pb.GroupMessage) { gm.Group = "other" }, ""},
		{"payload swapped for the attacker's", func(gm *pb.GroupMessage) { gm.Publish = forgedPublish }, ""},
		{"shown as from another publisher", func(gm *pb.GroupMessage) { gm.From = []byte(attacker) }, ""},
		{"unstamped", func(gm *pb.GroupMessage) { gm.Stamp = nil }, ""},
		{"checked against another home", func(*pb.GroupMessage) {}, "attacker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gm := good()
			tc.edit(gm)
			h := home
			if tc.home == "attacker" {
				h = attacker
			}
			if _, err := OpenGroupMessage(gm, is(h)); !errors.Is(err, ErrGroupSignature) {
				t.Fatalf("OpenGroupMessage = %v, want ErrGroupSignature", err)
			}
		})
	}
	if _, err := VerifyPublish(forgedPublish, publisher, "team", id); !errors.Is(err, ErrGroupSignature) {
		t.Fatalf("a publish signed by the attacker in the publisher's name: %v", err)
	}
}

func FuzzOpenGroupMessage(f *testing.F) {
	pubKey, publisher := edKey(f)
	homeKey, home := edKey(f)
	id := NewMessageID()
	signed, _ := SignPublish(pubKey, "g", id, []byte("p"))
	stamp, _ := Stamp(homeKey, "g", 1, 1, signed)
	f.Add(signed, stamp)
	f.Fuzz(func(t *testing.T, publish, stamp []byte) {
		gm := &pb.GroupMessage{Group: "g", Epoch: 1, Seq: 1, From: []byte(publisher), Id: id, Publish: publish, Stamp: stamp}
		if payload, err := OpenGroupMessage(gm, func(p peer.ID) bool { return p == home }); err == nil && string(payload) != "p" {
			t.Fatalf("opened a message nobody signed: %q", payload)
		}
	})
}
