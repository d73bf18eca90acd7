package group

import (
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Group resume: a group's home keeps a replay log of the messages it
// numbered (and of those it holds as a replica for another home). A
// supernode whose member comes back on a new session (failover, return
// home) asks the home to resume the member from the last message it
// delivered; a supernode that finds its groups' home changed asks to
// resume all of its members of the group from the last message it fanned
// out. The home replays what came after that position, paced, before live
// traffic:
//
//   - a member's replay goes as GroupMessage frames with only = member,
//     while the member's supernode holds the member out of the group's
//     local fanout; the home's ReplayDone, which leaves after the last
//     replayed frame on the same link, lets it in.
//   - a supernode's replay goes as ordinary group frames, and the home
//     sends that supernode no live frame of the group until the replay is
//     done (homeGroup.replaying).
//
// The switch from replay to live happens in one event, where publishes are
// numbered and appended to the log: no message is numbered between the
// last replayed frame and the first live one.

const (
	// ReplayTick is how often the driver ticks the core while it is Busy.
	ReplayTick = 10 * time.Millisecond
	// ReplayFramesPerTick bounds the frames all replays send in one tick:
	// 51,200 frames a second at most, so a thousand members resuming
	// together cost the home a steady trickle rather than a stall.
	ReplayFramesPerTick = 512
	// replayBatch is how many entries one replay reads at a time.
	replayBatch = 64
	// MaxReplayJobs bounds the replays waiting at a home; past it a resume
	// is answered at once as not replayed (missed unknown).
	MaxReplayJobs = 16384
	// ReplayTailMax bounds the entries sent in a replay's last step (the
	// log's per-group bound).
	ReplayTailMax = 4096
	// ResumeHold is how long a member's supernode holds a resuming member
	// out of the group's fanout waiting for the home's ReplayDone, in
	// refresh intervals, counted from the last time it asked: a resume
	// sent to a home that just crashed is sent again to the next home once
	// the ring drops the dead one, which takes the directory three
	// announce intervals (= refresh intervals) and the next refresh one
	// more; two more are margin.
	ResumeHold = 6
)

// Replay log entries carry one byte before the encoded GroupMessage: who
// stamped it.
const (
	EntrySelf    = 'h' // numbered and stamped by this supernode
	EntryReplica = 'r' // a replica: stamped by another home
	entrySelf    = EntrySelf
)

// EncodeEntry is a replay log entry's bytes.
func EncodeEntry(kind byte, gm *pb.GroupMessage) []byte {
	b, err := proto.MarshalOptions{}.MarshalAppend([]byte{kind}, gm)
	if err != nil {
		panic("encode replay entry: " + err.Error())
	}
	return b
}

// DecodeEntry reads a replay log entry; ok is false for bytes that are
// not one (every byte read back from a store is input).
func DecodeEntry(b []byte) (kind byte, gm *pb.GroupMessage, ok bool) {
	if len(b) < 2 || (b[0] != EntrySelf && b[0] != EntryReplica) {
		return 0, nil, false
	}
	gm = &pb.GroupMessage{}
	if proto.Unmarshal(b[1:], gm) != nil || gm.GetGroup() == "" {
		return 0, nil, false // a message of no group is not one a home logged
	}
	return b[0], gm, true
}

// replayKey names a replay: to supernode sn, for member (empty: for all of
// sn's members of the group).
type replayKey struct {
	group  string
	sn     string
	member string
}

func (k replayKey) compare(o replayKey) int {
	switch {
	case k.group != o.group:
		return compareStrings(k.group, o.group)
	case k.sn != o.sn:
		return compareStrings(k.sn, o.sn)
	}
	return compareStrings(k.member, o.member)
}

type replayJob struct {
	key   replayKey
	start Pos // the position asked from
	after Pos // the last position sent (or asked from)
	// counted: missed and unknown were computed from the log's first
	// position when the replay started.
	counted bool
	missed  uint64
	unknown bool
	// record: a replay of this record's own messages (after its epoch,
	// seq 0) to a supernode with no position; having sent none, it ends
	// with no position either: an epoch that numbered nothing is no
	// position, and a later home's may be older (clocks differ).
	record bool
	sent   bool
	// fromSync: a record's replay starts, once the record's sync is
	// over, where the sync began, not at the record's own epoch: what
	// the sync took in was numbered by a home that never learnt this
	// supernode's members, whose joins came here while its ring still
	// named this supernode, dead (found by testnet/groupsim, seed 1757,
	// Mutations.NoReplayFromSync).
	fromSync bool
}

// startReplay queues a replay of group to sn after position from.
func (c *Core) startReplay(hg *homeGroup, k replayKey, from Pos) {
	if c.cfg.Replay == nil {
		// No replay log: nothing to replay. A member's supernode is told
		// at once (it lets the member in, who learns the gap is unknown);
		// a supernode's resume changes nothing, it stays live.
		if k.member != "" {
			c.sendReplayDone(k, &pb.Resumed{Group: k.group, Epoch: from.Epoch, Seq: from.Seq, MissedUnknown: true})
		}
		return
	}
	if old := c.replays[k]; old == nil && len(c.replays) >= MaxReplayJobs {
		c.stats.ReplaysRefused.Add(1)
		c.sendReplayDone(k, &pb.Resumed{Group: k.group, Epoch: from.Epoch, Seq: from.Seq, MissedUnknown: true})
		return
	}
	if old := c.replays[k]; old != nil && k.member != "" && old.start == from {
		return // the same resume again (resendHeld): the replay under way answers it
	}
	if k.member == "" {
		hg.replaying[k.sn] = true
	}
	c.replays[k] = &replayJob{key: k, start: from, after: from}
	c.log.Debug("group replay started", "group", k.group, "after_epoch", from.Epoch, "after_seq", from.Seq)
	c.stats.ReplaysStarted.Add(1)
}

// Tick does the timed work: one tick of replays (ReplayFramesPerTick
// frames at most, under a fanout slot), then the publishes waiting for
// replicas and the syncs.
func (c *Core) Tick(now time.Time) {
	c.replayStep()
	c.sweepReplication(now)
}

func (c *Core) replayStep() {
	if c.cfg.Replay == nil || len(c.replays) == 0 {
		return
	}
	jobs := make([]*replayJob, 0, len(c.replays))
	for _, j := range c.replays {
		if hg := c.homes[j.key.group]; hg != nil && hg.syncing {
			continue // the home is still gathering its log
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return
	}
	slices.SortFunc(jobs, func(a, b *replayJob) int { return a.key.compare(b.key) })
	if !c.cfg.Fanout.TryAcquire() {
		return
	}
	defer func() { _ = c.cfg.Fanout.Release() }()
	budget := c.replayBudget
	// Start where the last tick stopped, so that every replay moves.
	c.replayTurn++
	start := int(c.replayTurn % uint64(len(jobs)))
	for i := range jobs {
		if budget <= 0 {
			break
		}
		budget -= c.replayJobStep(jobs[(start+i)%len(jobs)], budget)
	}
}

// replayJobStep sends up to budget frames of job j and returns how many.
// When the log holds nothing more after j's position it finishes j.
func (c *Core) replayJobStep(j *replayJob, budget int) int {
	if c.replays[j.key] != j {
		return 0 // finished or replaced during this tick
	}
	if j.fromSync {
		j.fromSync = false
		if hg := c.homes[j.key.group]; hg != nil && hg.synced && j.after.After(hg.syncedAfter) {
			j.after = hg.syncedAfter
		}
	}
	n := min(replayBatch, budget)
	entries, first, ok := c.cfg.Replay.ReplayAfter(j.key.group, j.after, n)
	if !j.counted {
		j.counted = true
		j.missed, j.unknown = missedBefore(j.after, first, ok)
	}
	sent := 0
	for _, e := range entries {
		if !c.sendReplayEntry(j.key, e) {
			return sent + 1 // the link is full: try again next tick
		}
		j.after = Pos{Epoch: e.Epoch, Seq: e.Seq}
		j.sent = true
		sent++
	}
	if len(entries) < n {
		c.finishReplay(j)
	}
	return max(sent, 1)
}

// missedBefore counts what a member at position at misses given the log's
// oldest entry first: the messages of first's epoch before it, when the
// member is in that epoch; unknown when the member is in an older epoch,
// or the log is empty but the member has a position.
func missedBefore(at, first Pos, ok bool) (missed uint64, unknown bool) {
	switch {
	case !ok:
		return 0, at != (Pos{})
	case first.Epoch == at.Epoch && first.Seq > at.Seq+1:
		return first.Seq - at.Seq - 1, false
	case first.Epoch > at.Epoch && at != (Pos{}):
		return first.Seq - 1, true
	}
	return 0, false
}

// finishReplay sends what the log gained since j's last read and the
// ReplayDone, and lets live traffic flow, in one step so that no publish
// is numbered in between.
func (c *Core) finishReplay(j *replayJob) {
	entries, _, _ := c.cfg.Replay.ReplayAfter(j.key.group, j.after, ReplayTailMax)
	for _, e := range entries {
		if !c.sendReplayEntry(j.key, e) {
			return // next tick
		}
		j.after = Pos{Epoch: e.Epoch, Seq: e.Seq}
		j.sent = true
	}
	end := j.after
	if j.record && !j.sent {
		end = Pos{}
	}
	// The end of the replay must reach the member's supernode, which
	// holds the member until it does: on a full link, next tick.
	if !c.sendReplayDone(j.key, &pb.Resumed{Group: j.key.group, Epoch: end.Epoch, Seq: end.Seq, Missed: j.missed, MissedUnknown: j.unknown}) {
		return
	}
	delete(c.replays, j.key)
	if hg := c.homes[j.key.group]; hg != nil && j.key.member == "" {
		delete(hg.replaying, j.key.sn)
	}
	c.stats.ReplaysDone.Add(1)
	if j.missed > 0 || j.unknown {
		c.stats.ReplaysGap.Add(1)
	}
}

// sendReplayEntry sends one logged message to a replay's supernode: for
// one member (only) or for all of its members. An entry another home
// stamped is stamped again by this one: members' supernodes accept group
// frames only from a home of the group (toldHome).
func (c *Core) sendReplayEntry(k replayKey, e Entry) bool {
	gm := c.replayMessage(k.group, e)
	if gm == nil {
		return true // undecodable: skipped (counted)
	}
	gm.Replay = true
	sent := true
	switch {
	case k.member != "":
		one := proto.CloneOf(gm)
		one.Only = []byte(k.member)
		if k.sn == c.self {
			c.deliverOnly(one)
		} else {
			sent = c.cfg.Net.SendGroup(k.sn, &pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: one}})
		}
	case k.sn != c.self:
		sent = c.cfg.Net.SendGroup(k.sn, &pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: gm}})
	default:
		c.fanoutLocal(gm, c.self)
	}
	if sent {
		c.stats.Replayed.Add(1)
	}
	return sent
}

// replayMessage decodes a log entry, stamping it anew when another home
// stamped it (cached: a thousand members resuming cost one signature per
// message, not a thousand).
func (c *Core) replayMessage(group string, e Entry) *pb.GroupMessage {
	kind, gm, ok := DecodeEntry(e.Data)
	if !ok || gm.GetGroup() != group {
		c.stats.ReplayLogFailed.Add(1)
		return nil
	}
	if kind == EntrySelf {
		return gm
	}
	key := restampKey{group: group, epoch: gm.GetEpoch(), seq: gm.GetSeq()}
	stamp, ok := c.restamped[key]
	if !ok {
		var err error
		stamp, err = c.cfg.Signer.Stamp(group, gm.GetEpoch(), gm.GetSeq(), gm.GetPublish())
		if err != nil {
			return nil
		}
		if len(c.restamped) >= maxRestamped {
			clear(c.restamped)
		}
		c.restamped[key] = stamp
	}
	gm.Stamp = stamp
	return gm
}

type restampKey struct {
	group      string
	epoch, seq uint64
}

// maxRestamped bounds the cache of stamps given to other homes' messages
// (~200 bytes each).
const maxRestamped = 65536

// sendReplayDone tells the replay's supernode that it is complete; false
// when the link would not take it.
func (c *Core) sendReplayDone(k replayKey, res *pb.Resumed) bool {
	if k.sn == c.self {
		if k.member != "" {
			c.resumeDone(k.member, c.self, res)
		} else {
			c.replayedTo(k.group, c.self, res)
		}
		return true
	}
	return c.cfg.Net.Send(k.sn, &pb.RelayFrame{Kind: &pb.RelayFrame_ReplayDone{ReplayDone: &pb.ReplayDone{Member: []byte(k.member), Resumed: res}}})
}

// ReplayDone is a home's ReplayDone at a member's supernode. It is taken
// from the home the member's resume was sent to, or from the home by this
// supernode's ring: a ring that moved the group away for a moment when
// the answer came refused it, and the member stayed held out of the group
// until its hold ran out (a gap notice) while the messages numbered
// meanwhile reached it neither live nor replayed.
func (c *Core) ReplayDone(now time.Time, from string, d *pb.ReplayDone) {
	res := d.GetResumed()
	g := res.GetGroup()
	m := string(d.GetMember())
	if m == "" {
		if h, _ := c.groupHome(g); h == from || c.toldHome(now, g, from) {
			c.replayedTo(g, from, res)
		}
		return
	}
	h, ok := c.groupHome(g)
	held := c.resuming[m][g]
	fromAsked := held != nil && held.home == from && !c.cfg.Mutations.NoReplayDoneFromAsked
	if (!ok || h != from) && !fromAsked {
		return
	}
	if c.catchUp(now, m, from, res) {
		return
	}
	c.resumeDone(m, from, res)
}

// catchUp keeps a member held when the home that replayed to it is not
// the home this supernode's position follows and that position is past
// the replay's end: the frames between were fanned out here while the
// member was held, and the replaying home never had them (a ring that
// dropped the numbering home for a moment sent the member's resume to
// another; found by testnet/groupsim, Mutations.NoResumeCatchUp). The
// member's resume goes to the home the position follows, after the
// replay's end; it is let in at that home's ReplayDone. It reports
// whether the member stays held.
func (c *Core) catchUp(now time.Time, m, from string, res *pb.Resumed) bool {
	g := res.GetGroup()
	held := c.resuming[m][g]
	src := c.posFrom[g]
	pos, has := c.pos[g]
	claim, joined := c.joined[m][g]
	if c.cfg.Mutations.NoResumeCatchUp || held == nil || !has || !joined || src == "" || src == from {
		return false
	}
	end := Pos{Epoch: res.GetEpoch(), Seq: res.GetSeq()}
	if held.pos.After(end) {
		end = held.pos
	}
	if !pos.After(end) {
		return false
	}
	held.home, held.pos = src, end
	c.stats.ResumesResent.Add(1)
	c.noteToldHome(now, g, src)
	r := &pb.MembershipRecord{Group: g, Member: []byte(m), Supernode: []byte(c.self), Join: true, Claim: claim,
		Resume: true, ResumeEpoch: end.Epoch, ResumeSeq: end.Seq}
	c.sendRecords(now, src, []*pb.MembershipRecord{r})
	return true
}

// replayedTo is the end of this supernode's own replay of group g at
// home: its position is where the replay ended, and follows that home
// from here (movesPos).
func (c *Core) replayedTo(g, home string, res *pb.Resumed) {
	if len(c.local[g]) == 0 {
		return
	}
	p := Pos{Epoch: res.GetEpoch(), Seq: res.GetSeq()}
	at, has := c.pos[g]
	if p.After(at) {
		c.pos[g] = p
	}
	// A position past the replay's end was brought there by another
	// home's live frames (a ring that dropped the numbering home for a
	// moment sent this supernode's resume elsewhere): it still follows
	// that home. Taken to follow the replaying one, a member held here
	// meanwhile was let in at the replay's end and missed the frames
	// between, fanned out while it was held (catchUp saw no other home;
	// found by testnet/groupsim, seed 1346).
	if !has || !at.After(p) || c.posFrom[g] == "" || c.cfg.Mutations.NoFollowedPastReplay {
		c.posFrom[g] = home
	}
	if c.holding[g] == home {
		delete(c.holding, g) // its live frames carry on from the replay
	}
}

// resumeDone lets a resuming member into its group's local fanout and
// tells it the resume is complete. A supernode with no position in the
// group takes the member's, following the home that replayed to it:
// with none, its refreshes asked no replay, and a home that took the
// group over after the member's resume (a new record: it knew nothing of
// this supernode) never sent it what it numbered before the first
// refresh (found by testnet/groupsim, Mutations.NoMemberResumePos). A
// hold that ran out (home "") gives no position.
func (c *Core) resumeDone(m, home string, res *pb.Resumed) {
	g := res.GetGroup()
	if _, held := c.resuming[m][g]; !held {
		return
	}
	delete(c.resuming[m], g)
	if len(c.resuming[m]) == 0 {
		delete(c.resuming, m)
	}
	if _, joined := c.joined[m][g]; !joined {
		return
	}
	if !c.cfg.Local.Attached(m) {
		return
	}
	c.joinLocal(g, m)
	if _, has := c.pos[g]; !has && home != "" && !c.cfg.Mutations.NoMemberResumePos {
		c.pos[g] = Pos{Epoch: res.GetEpoch(), Seq: res.GetSeq()}
		c.posFrom[g] = home
	}
	c.cfg.Local.ToClient(m, &pb.SessionFrame{Kind: &pb.SessionFrame_Resumed{Resumed: res}})
}

// heldResume is a member held out of a group's local fanout while the
// group's home replays what it missed: the home its resume went to, the
// position it resumes from, when it was last asked, and when the hold
// ends without an answer.
type heldResume struct {
	home  string
	pos   Pos
	asked time.Time
	until time.Time
}

// resendHeld asks the group's current home again for the held members
// whose resume went to another home (it crashed, and the ring has moved
// the group since), restarting their hold, and asks the same home again
// for those it has not answered within a refresh, keeping their hold's
// end; it returns the membership records to send.
//
// A resume is one frame on a link, and a link loses what it wrote into a
// connection that had died unnoticed, or that the other end reset: after
// a partition healed, the first frames to a supernode of the other side
// went into the connection the partition had killed. Asked once, the
// member stayed held until its hold ran out while the home, alive and
// holding every message, numbered more, and the member was let in with a
// gap (TestScenarios/partition, 75/85 deliveries; Mutations.NoHeldResend).
// The home keeps a member's replay under way when the same resume comes
// again (startReplay), so asking twice costs one frame.
func (c *Core) resendHeld(now time.Time) []membershipUpdate {
	var ups []membershipUpdate
	for _, m := range sortedKeys(c.resuming) {
		gs := c.resuming[m]
		for _, g := range sortedKeys(gs) {
			h := gs[g]
			home, ok := c.groupHome(g)
			claim, joined := c.joined[m][g]
			switch {
			case !ok || !joined:
				continue
			case home != h.home:
				h.home, h.until = home, now.Add(ResumeHold*c.cfg.Refresh)
			case now.Sub(h.asked) < c.cfg.Refresh || c.cfg.Mutations.NoHeldResend:
				continue
			}
			h.asked = now
			c.stats.ResumesResent.Add(1)
			ups = append(ups, membershipUpdate{group: g, member: m, join: true, claim: claim, resume: true, pos: h.pos})
		}
	}
	return ups
}

// releaseHeld lets in the members held past their deadline: the home
// never answered (it died, or refused the replay). They are told the
// resume is complete with what they missed unknown.
func (c *Core) releaseHeld(now time.Time) {
	for _, m := range sortedKeys(c.resuming) {
		gs := c.resuming[m]
		for _, g := range sortedKeys(gs) {
			if now.Before(gs[g].until) {
				continue
			}
			c.stats.ResumesTimedOut.Add(1)
			c.resumeDone(m, "", &pb.Resumed{Group: g, MissedUnknown: true})
		}
	}
}
