package group

import (
	"slices"
	"testing"
	"time"

	"github.com/overlayd/overlayd/protocol/pb"
)

// syncAsked returns the peers n was given a sync request (not a fill, not
// an answer) for, in order.
func syncAsked(n *fakeNet) []string {
	var out []string
	for _, s := range n.sent {
		if rs := s.f.GetReplicaSync(); rs != nil && !rs.GetDone() && !rs.GetFill() && !slices.Contains(out, s.to) {
			out = append(out, s.to)
		}
	}
	return out
}

func testPublish(id string) *pb.GroupPublish {
	return &pb.GroupPublish{Group: "g", Id: []byte(id + "0123456789abcdef")[:16], Signed: []byte("signed"), From: []byte("client"), Origin: []byte("self")}
}

// TestSyncCountsThePastRings: a supernode whose ring has just dropped the
// two holders of a group's newest messages (a flap) and made it the
// group's home asks them too, as the sync peers of the ring it had a
// moment before; its sync is not endorsed by the peers of its live ring
// alone, and once a holder answers it gathers the messages and numbers
// after them. The ring it had stops counting RecentRings refreshes after
// it was replaced. With Mutations.NoPastRings it numbered past them
// (testnet/groupsim, seed 12695).
func TestSyncCountsThePastRings(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		log := &memLog{}
		c := newTestCore(t, log)
		c.cfg.Refresh = time.Second
		c.cfg.Mutations.NoPastRings = mutated
		net := c.cfg.Net.(*fakeNet)
		now := time.Unix(1000, 0)
		before := fakeRing{home: "self", cluster: []string{"self", "a", "b"}}
		flapped := fakeRing{home: "self", cluster: []string{"self", "c", "d"}}
		c.cfg.Ring = before
		c.RingChanged(now, before)
		now = now.Add(500 * time.Millisecond)
		c.cfg.Ring = flapped
		c.RingChanged(now, flapped)

		c.HomePublish(now, testPublish("p1"))
		asked := syncAsked(net)
		c.ReplicaSync(now, "c", &pb.ReplicaSync{Group: "g", Done: true})
		c.ReplicaSync(now, "d", &pb.ReplicaSync{Group: "g", Done: true})
		hv, _ := c.HomeForTest("g")
		if mutated {
			if !slices.Equal(asked, []string{"c", "d"}) || hv.Syncing {
				t.Fatalf("NoPastRings: asked %v, still syncing %v; want c and d asked and the sync ended by their answers", asked, hv.Syncing)
			}
			continue
		}
		if !slices.Equal(asked, []string{"c", "d", "a", "b"}) {
			t.Fatalf("the sync asked %v, want the live ring's peers c, d, then the past ring's a, b", asked)
		}
		if !hv.Syncing {
			t.Fatal("the sync ended on the live ring's peers alone: no majority of the past ring's cluster answered")
		}
		// a held messages 5.1 and 5.2 of the home before.
		for seq := uint64(1); seq <= 2; seq++ {
			c.Replica("a", &pb.GroupMessage{Group: "g", Epoch: 5, Seq: seq, From: []byte("client"), Id: []byte{byte(seq)}, Replay: true})
		}
		c.ReplicaSync(now, "a", &pb.ReplicaSync{Group: "g", Epoch: 5, AfterSeq: 2, Done: true})
		if hv, _ := c.HomeForTest("g"); hv.Syncing || hv.Epoch <= 5 {
			t.Fatalf("after a's answer: syncing %v, epoch %d; want the sync ended and numbering after epoch 5", hv.Syncing, hv.Epoch)
		}
		if last, _ := log.ReplayLast("g"); last != (Pos{Epoch: 5, Seq: 2}) {
			t.Fatalf("the log's last is %v, want a's 5.2 gathered", last)
		}

		// Three refreshes after the flap, the ring before no longer
		// counts: a new sync is endorsed by the live ring's cluster.
		c.forgetHome("g", notHome)
		now = now.Add(RecentRings*time.Second + time.Millisecond)
		net.sent = nil
		c.HomePublish(now, testPublish("p2"))
		if asked := syncAsked(net); !slices.Equal(asked, []string{"c", "d"}) {
			t.Fatalf("after RecentRings refreshes the sync asked %v, want c and d only", asked)
		}
	}
}

// TestSyncPresumesGoneWhatTheLiveRingLacks: once a sync's wait has
// ended, a past ring's cluster member that the live ring no longer holds
// counts as gone (two of a cluster that crashed together would hold the
// takeover for RecentRings refreshes); one the live ring still holds must
// answer.
func TestSyncPresumesGoneWhatTheLiveRingLacks(t *testing.T) {
	for _, onLiveRing := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Refresh = time.Minute
		now := time.Unix(1000, 0)
		before := fakeRing{home: "a", cluster: []string{"a", "b", "self"}}
		after := fakeRing{home: "self", cluster: []string{"self", "c", "d"}}
		if onLiveRing {
			after.others = []string{"a", "b"}
		}
		c.cfg.Ring = before
		c.RingChanged(now, before)
		c.cfg.Ring = after
		c.RingChanged(now, after)
		c.HomePublish(now, testPublish("p1"))
		c.ReplicaSync(now, "c", &pb.ReplicaSync{Group: "g", Done: true})
		c.ReplicaSync(now, "d", &pb.ReplicaSync{Group: "g", Done: true})
		if hv, _ := c.HomeForTest("g"); !hv.Syncing {
			t.Fatalf("on the live ring %v: the sync ended before its wait without the past cluster's majority", onLiveRing)
		}
		c.Tick(now.Add(SyncTimeout + time.Millisecond))
		if hv, _ := c.HomeForTest("g"); hv.Syncing != onLiveRing {
			t.Fatalf("a and b on the live ring %v: after the wait, syncing %v", onLiveRing, hv.Syncing)
		}
	}
}

// TestSyncAsksTheNewRingsPeers: a ring that changes while a sync waits
// adds its sync peers to those the sync waits for, and its cluster to
// those that must endorse it.
func TestSyncAsksTheNewRingsPeers(t *testing.T) {
	c := newTestCore(t, &memLog{})
	c.cfg.Refresh = time.Second
	net := c.cfg.Net.(*fakeNet)
	now := time.Unix(1000, 0)
	first := fakeRing{home: "self", cluster: []string{"self", "a", "b"}}
	c.cfg.Ring = first
	c.RingChanged(now, first)
	c.HomePublish(now, testPublish("p1"))
	second := fakeRing{home: "self", cluster: []string{"self", "a", "e"}}
	c.cfg.Ring = second
	c.RingChanged(now, second)
	if asked := syncAsked(net); !slices.Equal(asked, []string{"a", "b", "e"}) {
		t.Fatalf("asked %v, want a, b, then the new ring's e", asked)
	}
	c.ReplicaSync(now, "b", &pb.ReplicaSync{Group: "g", Done: true})
	if hv, _ := c.HomeForTest("g"); !hv.Syncing {
		t.Fatal("the sync ended without e, a peer of the live ring")
	}
	c.ReplicaSync(now, "e", &pb.ReplicaSync{Group: "g", Done: true})
	if hv, _ := c.HomeForTest("g"); !hv.Syncing {
		t.Fatal("the sync ended before a, a peer of the live ring, answered or its wait ended")
	}
	// Its wait ends: b and e endorse both rings' clusters.
	c.Tick(now.Add(SyncTimeout + time.Millisecond))
	if hv, _ := c.HomeForTest("g"); hv.Syncing {
		t.Fatal("the sync goes on after its wait though both rings' clusters endorsed it (b, e)")
	}
}

// TestHomeRetakesAfterReplicationTimeout: a home whose replicas did not
// hold a message in time drops the group's record, so that numbering
// again is a takeover with a sync: their rings may have dropped it for a
// while, and another home numbered with their acks (testnet/groupsim,
// seed 10660). With Mutations.NoRetakeOnTimeout it numbered on in its old
// epoch.
func TestHomeRetakesAfterReplicationTimeout(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Mutations.NoRetakeOnTimeout = mutated
		local := c.cfg.Local.(*fakeLocal)
		now := time.Unix(1000, 0)
		c.HomePublish(now, testPublish("p1"))
		c.ReplicaSync(now, "r1", &pb.ReplicaSync{Group: "g", Done: true})
		c.ReplicaSync(now, "r2", &pb.ReplicaSync{Group: "g", Done: true})
		if hv, ok := c.HomeForTest("g"); !ok || hv.Syncing || hv.Seq != 1 {
			t.Fatalf("home record %+v (%v), want p1 numbered", hv, ok)
		}
		c.Tick(now.Add(ReplicationTimeout + time.Millisecond))
		if n := len(local.results); n != 1 || local.results[0].GetStatus() != pb.Result_STATUS_BUSY {
			t.Fatalf("results %v, want p1 answered BUSY", local.results)
		}
		_, kept := c.HomeForTest("g")
		if kept != mutated {
			t.Fatalf("NoRetakeOnTimeout %v: record kept %v after the replicas did not ack in time", mutated, kept)
		}
		if !mutated {
			c.HomePublish(now.Add(3*time.Second), testPublish("p2"))
			if hv, _ := c.HomeForTest("g"); !hv.Syncing {
				t.Fatal("the next publish numbered without a takeover's sync")
			}
		}
	}
}
