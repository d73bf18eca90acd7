package group

import (
	"slices"
	"testing"
	"time"

	"github.com/overlayd/overlayd/protocol/pb"
)

// TestHomeGroupRefreshDoesNotPullAMemberBack: a member that moved (a fresh
// join at Y) stays at Y when its old supernode X, not yet aware that it
// left, refreshes it; X's leave then changes nothing. A refresh still
// records a member the home does not know, or whose record expired.
func TestHomeGroupRefreshDoesNotPullAMemberBack(t *testing.T) {
	m, x, y := "member", "old-supernode", "new-supernode"
	now := time.Unix(1000, 0)
	exp := now.Add(3 * time.Second)
	hg := newHomeGroup(1)
	hg.join(m, x, exp)
	hg.join(m, y, exp) // the member moved: a fresh join
	hg.refresh(m, x, exp, now)
	if hg.at[m] != y {
		t.Fatalf("a refresh from the old supernode moved the member back to %s", hg.at[m])
	}
	hg.leave(m, x)
	if hg.at[m] != y || hg.bySN[y] != 1 || hg.bySN[x] != 0 {
		t.Fatalf("after the old supernode's leave: at %q, by supernode %v", hg.at[m], hg.bySN)
	}
	// A refresh records an unknown member, and one whose record expired.
	other := "other"
	hg.refresh(other, x, exp, now)
	if hg.at[other] != x {
		t.Fatal("a refresh did not record an unknown member")
	}
	later := exp.Add(time.Second)
	hg.refresh(m, x, later.Add(3*time.Second), later)
	if hg.at[m] != x {
		t.Fatal("a refresh did not move a member whose record had expired")
	}
}

// TestRecreatedHomeGroupHasANewerEpoch: a group whose home forgot it (idle
// with no members) and recreates it numbers from 1 again, so it must do so
// in a newer epoch: members drop a (group, epoch, seq) they have seen, and
// would silently lose every message of the recreated group otherwise.
func TestRecreatedHomeGroupHasANewerEpoch(t *testing.T) {
	c := newTestCore(t, nil)
	now := time.Unix(1000, 0) // a clock that does not move
	first := c.newHomeGroup(now, "g")
	second := c.newHomeGroup(now, "g")
	if first.epoch == 0 || second.epoch <= first.epoch {
		t.Fatalf("epochs %d then %d: a recreated group must get a newer epoch", first.epoch, second.epoch)
	}
	now = now.Add(time.Hour)
	if third := c.newHomeGroup(now, "g"); third.epoch != uint64(now.UnixNano()) {
		t.Fatalf("epoch %d, want the clock's %d when it has moved on", third.epoch, now.UnixNano())
	}
}

// TestFailedLogAppendIsNotAcknowledged: a home whose replay log refuses a
// message (disk full, a write error) is not one of the majority that holds
// it; acknowledged on the replicas alone, a crash of the one replica that
// holds it loses it. The publisher is told BUSY and retries.
func TestFailedLogAppendIsNotAcknowledged(t *testing.T) {
	log := &memLog{fail: true}
	c := newTestCore(t, log)
	now := time.Unix(1000, 0)
	c.HomePublish(now, &pb.GroupPublish{Group: "g", Id: []byte("0123456789abcdef"), Signed: []byte("signed"), From: []byte("client"), Origin: []byte("self")})
	// The new home's sync ends: both peers have nothing.
	for _, p := range []string{"r1", "r2"} {
		c.ReplicaSync(now, p, &pb.ReplicaSync{Group: "g", Done: true})
	}
	c.ReplicaAck("r1", &pb.ReplicaAck{Group: "g", Epoch: c.epoch, Seq: 1})
	local := c.cfg.Local.(*fakeLocal)
	if len(local.results) != 1 || local.results[0].GetStatus() != pb.Result_STATUS_BUSY {
		t.Fatalf("results %v, want one BUSY", local.results)
	}
}

// TestReleaseAfterMajority: a home fans out, logs and acknowledges a
// message only once a replica holds it, in the order it numbered them; a
// message no replica holds reaches no member. Fanned out as numbered, a
// supernode whose ring dropped the live home for a moment delivered in a
// new epoch what its replicas refused (testnet/groupsim).
func TestReleaseAfterMajority(t *testing.T) {
	log := &memLog{}
	c := newTestCore(t, log)
	net := c.cfg.Net.(*fakeNet)
	local := c.cfg.Local.(*fakeLocal)
	now := time.Unix(1000, 0)
	publish := func(id string) {
		c.HomePublish(now, &pb.GroupPublish{Group: "g", Id: []byte(id + "0123456789abcde"), Signed: []byte("signed"), From: []byte("client"), Origin: []byte("self")})
	}
	publish("a") // makes the record, which syncs first: a waits
	c.homes["g"].join("m", "x", now.Add(time.Hour))
	for _, p := range []string{"r1", "r2"} {
		c.ReplicaSync(now, p, &pb.ReplicaSync{Group: "g", Done: true})
	}
	fanned := func() (seqs []uint64) {
		for _, s := range net.sent {
			if gm := s.f.GetGroupMessage(); gm != nil && s.to == "x" {
				seqs = append(seqs, gm.GetSeq())
			}
		}
		return seqs
	}
	publish("b")
	epoch := c.homes["g"].epoch
	if got := fanned(); len(got) != 0 || len(local.results) != 0 || len(log.logs["g"]) != 0 {
		t.Fatalf("before any replica acked: fanned out %v, answered %v, logged %d", got, local.results, len(log.logs["g"]))
	}
	c.ReplicaAck("r1", &pb.ReplicaAck{Group: "g", Epoch: epoch, Seq: 2})
	if got := fanned(); len(got) != 0 || len(local.results) != 0 {
		t.Fatalf("the second held, the first not: fanned out %v, answered %v; want nothing before the first", got, local.results)
	}
	c.ReplicaAck("r2", &pb.ReplicaAck{Group: "g", Epoch: epoch, Seq: 1})
	if got := fanned(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("fanned out %v, want 1 then 2", got)
	}
	if len(local.results) != 2 || local.results[0].GetSeq() != 1 || local.results[1].GetSeq() != 2 || local.results[1].GetStatus() != pb.Result_STATUS_OK {
		t.Fatalf("answers %v, want OK for 1 then 2", local.results)
	}
	if len(log.logs["g"]) != 2 {
		t.Fatalf("logged %d, want 2", len(log.logs["g"]))
	}
	// One no replica acks in time is dropped: never fanned out, the
	// publisher told BUSY, its retry numbered anew.
	publish("c")
	c.Tick(now.Add(ReplicationTimeout + time.Second))
	if got := fanned(); len(got) != 2 {
		t.Fatalf("a message no replica held was fanned out: %v", got)
	}
	if last := local.results[len(local.results)-1]; last.GetStatus() != pb.Result_STATUS_BUSY {
		t.Fatalf("answer %v, want BUSY", last)
	}
	// The record went with the timeout (TestHomeRetakesAfterReplication-
	// Timeout): the retry waits for a takeover's sync, then is numbered
	// anew, in a newer epoch.
	publish("c")
	for _, p := range []string{"r1", "r2"} {
		c.ReplicaSync(now, p, &pb.ReplicaSync{Group: "g", Done: true})
	}
	if hg := c.homes["g"]; hg == nil || hg.epoch <= epoch || hg.seq != 1 {
		t.Fatalf("the retry of a dropped message: record %+v, want seq 1 in an epoch after %d (numbered anew)", hg, epoch)
	}
}

// TestResumeCatchUp: a member held while a home replays to it is let in
// only when the replay reached the position of the supernode, whose
// other members kept getting the frames of the home that numbers (its
// ring had dropped that home for a moment, and the resume went to
// another). Let in at the other home's end, it missed what lay between
// (testnet/groupsim seeds 493 and 800). Its resume goes to the home the
// position follows, from the first replay's end.
func TestResumeCatchUp(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Ring = fakeRing{home: "h2", cluster: []string{"h2", "self", "r"}}
		c.cfg.Mutations.NoResumeCatchUp = mutated
		net := c.cfg.Net.(*fakeNet)
		now := time.Unix(1000, 0)
		const e = 7
		c.local["g"] = map[string]bool{"other": true}
		c.pos["g"], c.posFrom["g"] = Pos{Epoch: e, Seq: 48}, "h1"
		c.joined["m"] = map[string][]byte{"g": []byte("claim")}
		c.resuming["m"] = map[string]*heldResume{"g": {home: "h2", pos: Pos{Epoch: e, Seq: 34}, until: now.Add(time.Hour)}}
		c.ReplayDone(now, "h2", &pb.ReplayDone{Member: []byte("m"), Resumed: &pb.Resumed{Group: "g", Epoch: e, Seq: 43}})
		if mutated {
			if !c.local["g"]["m"] {
				t.Fatal("with NoResumeCatchUp: the member was not let in at the first ReplayDone")
			}
			continue
		}
		if c.local["g"]["m"] {
			t.Fatal("the member was let in at 43 with the supernode at 48: it missed 44 to 48")
		}
		var asked *pb.MembershipRecord
		for _, s := range net.sent {
			if b := s.f.GetMembership(); b != nil && s.to == "h1" {
				asked = b.GetRecords()[0]
			}
		}
		if asked == nil || !asked.GetResume() || string(asked.GetMember()) != "m" || asked.GetResumeEpoch() != e || asked.GetResumeSeq() != 43 {
			t.Fatalf("resume sent to the followed home: %v, want m's resume after %d.43", asked, e)
		}
		c.ReplayDone(now, "h1", &pb.ReplayDone{Member: []byte("m"), Resumed: &pb.Resumed{Group: "g", Epoch: e, Seq: 48}})
		if !c.local["g"]["m"] || c.resuming["m"] != nil {
			t.Fatal("the followed home's ReplayDone did not let the member in")
		}
	}
}

// TestRingChangeKeepsGathered: a supernode whose ring named it a group's
// home for a moment gathers the answers to its sync. When its ring names
// the other home again, what it gathered goes into its log: dropped with
// the sync, the next live replica was appended after a hole, and this
// supernode, home again later, synced after that replica and replayed
// past the hole (testnet/groupsim seed 662).
func TestRingChangeKeepsGathered(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		log := &memLog{}
		c := newTestCore(t, log)
		c.cfg.Mutations.NoKeepGathered = mutated
		now := time.Unix(1000, 0)
		// Its ring names it home: a publish makes the record, which syncs.
		c.HomePublish(now, &pb.GroupPublish{Group: "g", Id: []byte("0123456789abcdef"), Signed: []byte("signed"), From: []byte("client"), Origin: []byte("self")})
		if c.syncs["g"] == nil {
			t.Fatal("no sync started")
		}
		const e = 7
		replica := func(seq uint64, answer bool) *pb.GroupMessage {
			return &pb.GroupMessage{Group: "g", Epoch: e, Seq: seq, From: []byte("client"), Id: []byte{byte(seq)}, Replay: answer}
		}
		c.Replica("r1", replica(1, true)) // r1's answer to the sync
		c.Replica("r1", replica(2, true))
		// Its ring names r1 home again: the record and its sync go.
		c.cfg.Ring = fakeRing{home: "r1", cluster: []string{"r1", "self", "r2"}}
		c.RingChanged(time.Unix(0, 0), c.cfg.Ring)
		c.Replica("r1", replica(3, false)) // a live replica
		var seqs []uint64
		for _, en := range log.logs["g"] {
			seqs = append(seqs, en.Seq)
		}
		if mutated {
			if !slices.Equal(seqs, []uint64{3}) {
				t.Fatalf("with NoKeepGathered: log %v, want the hole before 3", seqs)
			}
			continue
		}
		if !slices.Equal(seqs, []uint64{1, 2, 3}) {
			t.Fatalf("log %v, want 1, 2, 3 (what the sync gathered, then the live replica)", seqs)
		}
	}
}

// claimVerifier takes every membership claim as a join at supernode sn.
type claimVerifier struct {
	okVerifier
	sn string
}

func (v claimVerifier) VerifyMembership(_ []byte, _, _ string) (Claim, error) {
	return Claim{Supernode: v.sn, Join: true}, nil
}

// TestRecordReplayFromSync: a supernode whose ring still named a dead
// home sent its member's join there; meanwhile another home numbered
// messages that never reached it (that home never learnt the member). The
// dead home back, its record's sync takes those messages in from a
// replica, and its replay to the supernode (no position: nothing reached
// it) starts where the sync began, not at the record's own epoch
// (testnet/groupsim seeds 105, 1757, 2381).
func TestRecordReplayFromSync(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		log := &memLog{}
		c := newTestCore(t, log)
		c.cfg.Verifier = claimVerifier{sn: "sn"}
		c.cfg.Mutations.NoReplayFromSync = mutated
		net := c.cfg.Net.(*fakeNet)
		now := time.Unix(1000, 0)
		_ = log.AppendReplay("g", Entry{Epoch: 3, Seq: 1, Data: EncodeEntry(EntryReplica, &pb.GroupMessage{Group: "g", Epoch: 3, Seq: 1})})
		// The supernode's refresh, with no position, makes the record,
		// which syncs after 3.1.
		c.Membership(now, "sn", &pb.MembershipBatch{Records: []*pb.MembershipRecord{{Group: "g", Member: []byte("m"), Supernode: []byte("sn"), Join: true, Refresh: true, Claim: []byte("claim")}}})
		if c.syncs["g"] == nil {
			t.Fatal("no sync started")
		}
		// The other home's messages, from a replica's answer.
		for seq := uint64(1); seq <= 2; seq++ {
			c.Replica("r1", &pb.GroupMessage{Group: "g", Epoch: 5, Seq: seq, From: []byte("client"), Id: []byte{byte(seq)}, Replay: true})
		}
		c.ReplicaSync(now, "r1", &pb.ReplicaSync{Group: "g", Epoch: 5, AfterSeq: 2, Done: true})
		c.ReplicaSync(now, "r2", &pb.ReplicaSync{Group: "g", Epoch: 3, AfterSeq: 1, Done: true})
		if c.homes["g"].syncing {
			t.Fatal("the sync did not end")
		}
		for range 3 {
			c.Tick(now)
		}
		var got []Pos
		for _, s := range net.sent {
			if gm := s.f.GetGroupMessage(); gm != nil && s.to == "sn" {
				got = append(got, Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()})
			}
		}
		want := []Pos{{5, 1}, {5, 2}}
		if mutated {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Fatalf("mutated=%v: replayed to the supernode %v, want %v", mutated, got, want)
		}
	}
}

// TestFreshJoinIsToldThePosition: a member's fresh join is told where its
// supernode stands in the group (a Resumed notice), so that a member that
// loses its session before its first message resumes from there and is
// replayed what was published while it was away (testnet/groupsim seeds
// 2056, 2478, 2933). A supernode with no position has nothing to tell.
func TestFreshJoinIsToldThePosition(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Verifier = claimVerifier{sn: "self"}
		c.cfg.Mutations.NoJoinStart = mutated
		local := c.cfg.Local.(*fakeLocal)
		now := time.Unix(1000, 0)
		c.GroupOp(now, "first", &pb.GroupOp{Group: "g", Join: true, Claim: []byte("claim")})
		if len(local.resumed) != 0 {
			t.Fatalf("told %v with no position here", local.resumed)
		}
		c.pos["g"] = Pos{Epoch: 7, Seq: 12}
		c.GroupOp(now, "m", &pb.GroupOp{Group: "g", Join: true, Claim: []byte("claim")})
		if mutated {
			if len(local.resumed) != 0 {
				t.Fatalf("with NoJoinStart: told %v", local.resumed)
			}
			continue
		}
		if len(local.resumed) != 1 || local.resumed[0].GetGroup() != "g" || local.resumed[0].GetEpoch() != 7 || local.resumed[0].GetSeq() != 12 || local.resumed[0].GetMissed() != 0 {
			t.Fatalf("told %v, want one Resumed at 7.12 with nothing missed", local.resumed)
		}
	}
}

// TestReplicaFillsItsHole: a live replica that comes past a hole in the
// replica's log (it refused the ones before while its ring lagged) is not
// appended nor acknowledged; the replica asks the home to fill the hole
// from its log, appends the answer in order, and takes live replicas
// again. Appended past the hole, the log kept it, and as the next home the
// replica replayed past it (testnet/groupsim seeds 126, 253, 1409).
func TestReplicaFillsItsHole(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		log := &memLog{}
		c := newTestCore(t, log)
		c.cfg.Ring = fakeRing{home: "h", cluster: []string{"h", "self", "r"}}
		c.cfg.Mutations.NoReplicaFill = mutated
		net := c.cfg.Net.(*fakeNet)
		const e = 7
		gm := func(seq uint64, replay bool) *pb.GroupMessage {
			return &pb.GroupMessage{Group: "g", Epoch: e, Seq: seq, From: []byte("client"), Id: []byte{byte(seq)}, Replay: replay}
		}
		seqs := func() (s []uint64) {
			for _, en := range log.logs["g"] {
				s = append(s, en.Seq)
			}
			return s
		}
		acks := func() (s []uint64) {
			for _, x := range net.sent {
				if a := x.f.GetReplicaAck(); a != nil {
					s = append(s, a.GetSeq())
				}
			}
			return s
		}
		c.Replica("h", gm(1, false))
		c.Replica("h", gm(3, false)) // 2 was refused while the ring lagged
		if mutated {
			if !slices.Equal(seqs(), []uint64{1, 3}) || !slices.Equal(acks(), []uint64{1, 3}) {
				t.Fatalf("with NoReplicaFill: log %v, acks %v, want 1 and 3 appended past the hole", seqs(), acks())
			}
			continue
		}
		if !slices.Equal(seqs(), []uint64{1}) || !slices.Equal(acks(), []uint64{1}) {
			t.Fatalf("log %v, acks %v: 3 was taken past the hole at 2", seqs(), acks())
		}
		var ask *pb.ReplicaSync
		for _, x := range net.sent {
			if s := x.f.GetReplicaSync(); s != nil && x.to == "h" {
				ask = s
			}
		}
		if ask == nil || !ask.GetFill() || ask.GetDone() || ask.GetEpoch() != e || ask.GetAfterSeq() != 1 {
			t.Fatalf("asked the home %v, want a fill after %d.1", ask, e)
		}
		now := time.Unix(1000, 0)
		c.Replica("h", gm(2, true)) // the home's answer
		c.Replica("h", gm(3, true))
		c.ReplicaSync(now, "h", &pb.ReplicaSync{Group: "g", Epoch: e, AfterSeq: 3, Done: true, Fill: true})
		c.Replica("h", gm(4, false))
		if !slices.Equal(seqs(), []uint64{1, 2, 3, 4}) || !slices.Equal(acks(), []uint64{1, 4}) || len(c.fills) != 0 {
			t.Fatalf("after the fill: log %v, acks %v, fills %d; want 1 to 4, acks 1 and 4 (a fill is not acknowledged), none pending", seqs(), acks(), len(c.fills))
		}
	}
}

// TestHomeAnswersAFill: a home answers a replica's fill from its log,
// replayed frames then done and fill; a supernode whose ring does not
// name it the home answers nothing.
func TestHomeAnswersAFill(t *testing.T) {
	log := &memLog{}
	c := newTestCore(t, log)
	net := c.cfg.Net.(*fakeNet)
	for seq := uint64(1); seq <= 3; seq++ {
		_ = log.AppendReplay("g", Entry{Epoch: 7, Seq: seq, Data: EncodeEntry(EntryReplica, &pb.GroupMessage{Group: "g", Epoch: 7, Seq: seq})})
	}
	now := time.Unix(1000, 0)
	c.ReplicaSync(now, "r1", &pb.ReplicaSync{Group: "g", Epoch: 7, AfterSeq: 1, Fill: true})
	var got []uint64
	var done *pb.ReplicaSync
	for _, x := range net.sent {
		if gm := x.f.GetReplica(); gm != nil && x.to == "r1" {
			if !gm.GetReplay() {
				t.Fatalf("fill frame %d not marked replay", gm.GetSeq())
			}
			got = append(got, gm.GetSeq())
		}
		if s := x.f.GetReplicaSync(); s != nil && x.to == "r1" {
			done = s
		}
	}
	if !slices.Equal(got, []uint64{2, 3}) || done == nil || !done.GetDone() || !done.GetFill() || done.GetAfterSeq() != 3 {
		t.Fatalf("answered %v then %v, want 2, 3 then done and fill at 3", got, done)
	}
	net.sent = nil
	c.cfg.Ring = fakeRing{home: "other", cluster: []string{"other", "self", "r1"}}
	c.ReplicaSync(now, "r1", &pb.ReplicaSync{Group: "g", Epoch: 7, AfterSeq: 1, Fill: true})
	if len(net.sent) != 0 {
		t.Fatalf("not the home by its ring, it answered %d frames", len(net.sent))
	}
}

// TestSyncGathersAnswersOnly: a syncing supernode gathers only answers to
// its sync (marked replay). A live replica from a peer it waits for (that
// peer's ring still names it the home) is taken as live: past a hole in
// the log it is refused and the hole filled; gathered, it was appended
// past the hole when the sync ended without that peer, and members that
// resumed here missed what the hole held (testnet/groupsim seed 1346).
func TestSyncGathersAnswersOnly(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		log := &memLog{}
		c := newTestCore(t, log)
		c.cfg.Mutations.NoSyncAnswersOnly = mutated
		now := time.Unix(1000, 0)
		const e = 7
		gm := func(seq uint64, answer bool) *pb.GroupMessage {
			return &pb.GroupMessage{Group: "g", Epoch: e, Seq: seq, From: []byte("client"), Id: []byte{byte(seq)}, Replay: answer}
		}
		_ = log.AppendReplay("g", Entry{Epoch: e, Seq: 1, Data: EncodeEntry(EntryReplica, gm(1, false))})
		c.HomePublish(now, &pb.GroupPublish{Group: "g", Id: []byte("0123456789abcdef"), Signed: []byte("signed"), From: []byte("client"), Origin: []byte("self")})
		sync := c.syncs["g"]
		if sync == nil {
			t.Fatal("no sync started")
		}
		c.Replica("r1", gm(3, false)) // r1 numbers on: its ring names it the home
		c.Replica("r2", gm(2, true))  // r2's answer
		var got []uint64
		for p := range sync.got {
			got = append(got, p.Seq)
		}
		slices.Sort(got)
		if mutated {
			if !slices.Equal(got, []uint64{2, 3}) {
				t.Fatalf("with NoSyncAnswersOnly: gathered %v, want 2 and 3", got)
			}
			continue
		}
		if !slices.Equal(got, []uint64{2}) {
			t.Fatalf("gathered %v, want r2's answer 2 alone", got)
		}
	}
}

// TestPositionFollowsPastTheReplay: a supernode's own replay from one home
// that ends before its position (another home's live frames brought it
// there) leaves the position following that other home, so that a member
// held meanwhile and replayed to the same end catches up there instead of
// being let in past the frames fanned out while it was held
// (testnet/groupsim seed 1346).
func TestPositionFollowsPastTheReplay(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Ring = fakeRing{home: "h2", cluster: []string{"h2", "self", "r"}}
		c.cfg.Mutations.NoFollowedPastReplay = mutated
		now := time.Unix(1000, 0)
		const e = 7
		c.local["g"] = map[string]bool{"other": true}
		c.pos["g"], c.posFrom["g"] = Pos{Epoch: e, Seq: 39}, "h1"
		c.joined["m"] = map[string][]byte{"g": []byte("claim")}
		c.resuming["m"] = map[string]*heldResume{"g": {home: "h2", pos: Pos{Epoch: e, Seq: 36}, until: now.Add(time.Hour)}}
		// This supernode's own replay from h2, then the member's, both
		// ending at 38.
		c.ReplayDone(now, "h2", &pb.ReplayDone{Resumed: &pb.Resumed{Group: "g", Epoch: e, Seq: 38}})
		c.ReplayDone(now, "h2", &pb.ReplayDone{Member: []byte("m"), Resumed: &pb.Resumed{Group: "g", Epoch: e, Seq: 38}})
		if mutated {
			if c.posFrom["g"] != "h2" || !c.local["g"]["m"] {
				t.Fatalf("with NoFollowedPastReplay: follows %q, let in %v; want h2 and the member let in at 38", c.posFrom["g"], c.local["g"]["m"])
			}
			continue
		}
		if c.posFrom["g"] != "h1" || c.pos["g"] != (Pos{Epoch: e, Seq: 39}) {
			t.Fatalf("position %v from %q, want 39 from h1", c.pos["g"], c.posFrom["g"])
		}
		if c.local["g"]["m"] || c.resuming["m"]["g"] == nil || c.resuming["m"]["g"].home != "h1" {
			t.Fatal("the member was let in at 38 with the supernode at 39, or not sent to catch up at h1")
		}
	}
}

// TestToldHomesFrameThatSkipsIsHeldBack: a frame from a home this
// supernode told (its ring does not name it, and its position follows
// another) that skips past its position is held back and the home asked
// for a replay; fanned out, it moved the members past what that home
// numbered while a partition cut this supernode off (testnet/groupsim,
// partitions). Its next frame in order is fanned out.
func TestToldHomesFrameThatSkipsIsHeldBack(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Ring = fakeRing{home: "h1", cluster: []string{"h1", "self", "r"}}
		c.cfg.Refresh = time.Second
		c.cfg.Mutations.NoToldHoldBack = mutated
		net := c.cfg.Net.(*fakeNet)
		now := time.Unix(1000, 0)
		const e = 7
		c.local["g"] = map[string]bool{"m": true}
		c.joined["m"] = map[string][]byte{"g": []byte("claim")}
		c.pos["g"], c.posFrom["g"] = Pos{Epoch: e, Seq: 52}, "h1"
		c.noteToldHome(now, "g", "h2")
		c.GroupMessage(now, "h2", &pb.GroupMessage{Group: "g", Epoch: e, Seq: 65})
		var asked bool
		for _, s := range net.sent {
			if b := s.f.GetMembership(); b != nil && s.to == "h2" && b.GetRecords()[0].GetSupernodeResume() {
				asked = true
			}
		}
		if mutated {
			if c.holding["g"] != "" || asked {
				t.Fatal("with NoToldHoldBack: the frame was held back")
			}
			continue
		}
		if c.holding["g"] != "h2" || !asked {
			t.Fatalf("holding %q, asked %v: the frame skipping 53 to 64 was not held back with a replay asked of h2", c.holding["g"], asked)
		}
	}
	c := newTestCore(t, &memLog{})
	c.cfg.Ring = fakeRing{home: "h1", cluster: []string{"h1", "self", "r"}}
	c.cfg.Refresh = time.Second
	now := time.Unix(1000, 0)
	c.local["g"] = map[string]bool{"m": true}
	c.pos["g"], c.posFrom["g"] = Pos{Epoch: 7, Seq: 52}, "h1"
	c.noteToldHome(now, "g", "h2")
	c.GroupMessage(now, "h2", &pb.GroupMessage{Group: "g", Epoch: 7, Seq: 53})
	if c.holding["g"] != "" {
		t.Fatal("the next frame in order was held back")
	}
}

// TestFillEndsWhereNumberingIsResolved: a home answers a fill with its log,
// then done at the position before its oldest message still waiting for a
// majority (the positions between were dropped), then those waiting
// messages as live replicas. The replica appends and acknowledges them
// past the dropped position: a fill that ended at the log's last left the
// replica refusing every later replica, and with the other replica cut
// off the group released nothing more (testnet/groupsim, partitions).
func TestFillEndsWhereNumberingIsResolved(t *testing.T) {
	const e = 7
	gm := func(seq uint64) *pb.GroupMessage {
		return &pb.GroupMessage{Group: "g", Epoch: e, Seq: seq, From: []byte("client"), Id: []byte{byte(seq)}}
	}
	for _, mutated := range []bool{false, true} {
		// The home: 1 and 2 logged, 3 dropped, 4 and 5 waiting.
		hlog := &memLog{}
		home := newTestCore(t, hlog)
		home.cfg.Mutations.NoFillResolved = mutated
		hnet := home.cfg.Net.(*fakeNet)
		for seq := uint64(1); seq <= 2; seq++ {
			_ = hlog.AppendReplay("g", Entry{Epoch: e, Seq: seq, Data: EncodeEntry(EntryReplica, gm(seq))})
		}
		hg := home.newHomeGroup(time.Unix(1000, 0), "g")
		hg.syncing, hg.epoch, hg.seq = false, e, 5
		delete(home.syncs, "g")
		for seq := uint64(4); seq <= 5; seq++ {
			k := pubKey{"g", e, seq}
			home.pendingPubs[k] = &pendingPublish{gm: gm(seq), need: 1, acked: map[string]bool{}, replicas: []string{"r1", "r2"},
				frame: &pb.RelayFrame{Kind: &pb.RelayFrame_Replica{Replica: gm(seq)}}}
			hg.unreleased = append(hg.unreleased, k)
		}
		hnet.sent = nil
		home.ReplicaSync(time.Unix(1000, 0), "r1", &pb.ReplicaSync{Group: "g", Epoch: e, AfterSeq: 2, Fill: true})

		// The replica r1: 1 and 2 logged; it asked the fill when 4 came.
		rlog := &memLog{}
		rnet := &fakeNet{}
		replica, err := New(Config{Self: "r1", Ring: fakeRing{home: "self", cluster: []string{"self", "r1", "r2"}},
			Net: rnet, Local: &fakeLocal{}, Verifier: okVerifier{}, Signer: fakeSigner{}, Fanout: freeSlots{}, Replay: rlog})
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= 2; seq++ {
			_ = rlog.AppendReplay("g", Entry{Epoch: e, Seq: seq, Data: EncodeEntry(EntryReplica, gm(seq))})
		}
		replica.Replica("self", gm(4))
		if replica.fills["g"] == nil {
			t.Fatal("the replica asked no fill for its hole at 3")
		}
		for _, x := range hnet.sent {
			if x.to != "r1" {
				continue
			}
			switch {
			case x.f.GetReplicaSync() != nil:
				replica.ReplicaSync(time.Unix(1000, 0), "self", x.f.GetReplicaSync())
			case x.f.GetReplica() != nil:
				replica.Replica("self", x.f.GetReplica())
			}
		}
		var seqs, acks []uint64
		for _, en := range rlog.logs["g"] {
			seqs = append(seqs, en.Seq)
		}
		for _, x := range rnet.sent {
			if a := x.f.GetReplicaAck(); a != nil {
				acks = append(acks, a.GetSeq())
			}
		}
		if mutated {
			if !slices.Equal(seqs, []uint64{1, 2}) || len(acks) != 0 {
				t.Fatalf("with NoFillResolved: log %v, acks %v; want 1, 2 and nothing acknowledged", seqs, acks)
			}
			continue
		}
		if !slices.Equal(seqs, []uint64{1, 2, 4, 5}) || !slices.Equal(acks, []uint64{4, 5}) {
			t.Fatalf("log %v, acks %v; want 1, 2, 4, 5 with 4 and 5 acknowledged", seqs, acks)
		}
	}
}

// TestHeldResumeAskedAgain: a held member's resume that the home never
// answered (the frame was lost in a connection a partition had killed)
// is sent again to the same home at the next refresh, with the hold's end
// kept. Asked once, the member stayed held while the home numbered on,
// and was let in with a gap (TestScenarios/partition, 75/85 after the
// heal). The home keeps the replay under way when the same resume comes
// again.
func TestHeldResumeAskedAgain(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Ring = fakeRing{home: "h", cluster: []string{"h", "self", "r"}}
		c.cfg.Refresh = time.Second
		c.cfg.Mutations.NoHeldResend = mutated
		net := c.cfg.Net.(*fakeNet)
		now := time.Unix(1000, 0)
		until := now.Add(6 * time.Second)
		c.joined["m"] = map[string][]byte{"g": []byte("claim")}
		c.resuming["m"] = map[string]*heldResume{"g": {home: "h", pos: Pos{Epoch: 7, Seq: 3}, asked: now, until: until}}
		asked := func() *pb.MembershipRecord {
			for _, s := range net.sent {
				for _, r := range s.f.GetMembership().GetRecords() {
					if s.to == "h" && string(r.GetMember()) == "m" && r.GetResume() && !r.GetSupernodeResume() && !r.GetRefresh() {
						return r
					}
				}
			}
			return nil
		}
		c.Refresh(now.Add(500 * time.Millisecond))
		if asked() != nil {
			t.Fatal("asked again within a refresh of the first ask")
		}
		c.Refresh(now.Add(time.Second))
		r := asked()
		if mutated {
			if r != nil {
				t.Fatal("with NoHeldResend: the resume was sent again")
			}
			continue
		}
		if r == nil || r.GetResumeEpoch() != 7 || r.GetResumeSeq() != 3 {
			t.Fatalf("resume asked again: %v, want m's after 7.3", r)
		}
		if h := c.resuming["m"]["g"]; h == nil || !h.until.Equal(until) {
			t.Fatal("asking the same home again moved the hold's end")
		}
	}
}

// TestReplayKeptOnSameResume: a home asked again for a member's replay
// from the same position keeps the replay under way (it would start over
// on every refresh of a long hold); from another position it starts
// anew.
func TestReplayKeptOnSameResume(t *testing.T) {
	c := newTestCore(t, &memLog{})
	hg := newHomeGroup(7)
	k := replayKey{group: "g", sn: "sn", member: "m"}
	c.startReplay(hg, k, Pos{Epoch: 7, Seq: 3})
	j := c.replays[k]
	j.after = Pos{Epoch: 7, Seq: 40}
	c.startReplay(hg, k, Pos{Epoch: 7, Seq: 3})
	if c.replays[k] != j || j.after != (Pos{Epoch: 7, Seq: 40}) {
		t.Fatal("the same resume again started the member's replay over")
	}
	c.startReplay(hg, k, Pos{Epoch: 7, Seq: 9})
	if c.replays[k] == j || c.replays[k].after != (Pos{Epoch: 7, Seq: 9}) {
		t.Fatal("a resume from another position kept the old replay")
	}
}

// TestFollowedHomesFramesAreTaken: a frame from the home this supernode's
// position follows is fanned out though its ring names another home and
// its record of telling that home has run out: refused, the members'
// position moved past it on the next frame, and the home, which had
// replayed to this supernode, never sent it again (testnet/groupsim,
// Mutations.NoFollowedHome).
func TestFollowedHomesFramesAreTaken(t *testing.T) {
	for _, mutated := range []bool{false, true} {
		c := newTestCore(t, &memLog{})
		c.cfg.Ring = fakeRing{home: "h2", cluster: []string{"h2", "self", "r"}}
		c.cfg.Refresh = time.Second
		c.cfg.Mutations.NoFollowedHome = mutated
		const e = 7
		c.local["g"] = map[string]bool{"m": true}
		c.joined["m"] = map[string][]byte{"g": []byte("claim")}
		c.pos["g"], c.posFrom["g"] = Pos{Epoch: e, Seq: 52}, "h1"
		refused := c.stats.GroupRefused.Load()
		c.GroupMessage(time.Unix(1000, 0), "h1", &pb.GroupMessage{Group: "g", Epoch: e, Seq: 53})
		taken := c.stats.GroupRefused.Load() == refused && c.pos["g"] == (Pos{Epoch: e, Seq: 53})
		if taken == mutated {
			t.Fatalf("mutated %v: frame 53 from the followed home taken %v (position %v from %q)", mutated, taken, c.pos["g"], c.posFrom["g"])
		}
	}
}
