package supernode

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/store"
)

// Group resume: a group's home keeps a replay log of the messages it
// numbered (and of those it holds as a replica for another home), in the
// store. A supernode whose member comes back on a new session (failover,
// return home) asks the home to resume the member from the last message it
// delivered; a supernode that finds its groups' home changed asks to resume
// all of its members of the group from the last message it fanned out. The
// home replays what came after that position, paced, before live traffic:
//
//   - a member's replay goes as GroupMessage frames with only = member,
//     while the member's supernode holds the member out of the group's
//     local fanout; the home's ReplayDone, which leaves after the last
//     replayed frame on the same link, lets it in.
//   - a supernode's replay goes as ordinary group frames, and the home
//     sends that supernode no live frame of the group until the replay is
//     done (homeGroup.replaying).
//
// The switch from replay to live happens under the router's lock, where
// publishes are numbered and appended to the log: no message is numbered
// between the last replayed frame and the first live one.

// ReplayLog is where a supernode keeps group messages for replay
// (*store.Store satisfies it).
type ReplayLog interface {
	AppendReplay(group string, entries ...store.Entry) error
	ReplayAfter(group string, epoch, seq uint64, limit int) ([]store.Entry, store.Pos, bool)
	ReplayLast(group string) (store.Pos, bool)
}

var _ ReplayLog = (*store.Store)(nil)

const (
	// replayTick is how often the replayer works while replays wait.
	replayTick = 10 * time.Millisecond
	// replayFramesPerTick bounds the frames all replays send in one tick:
	// 51,200 frames a second at most, so a thousand members resuming
	// together cost the home a steady trickle rather than a stall.
	replayFramesPerTick = 512
	// replayBatch is how many entries one replay reads at a time.
	replayBatch = 64
	// maxReplayJobs bounds the replays waiting at a home; past it a resume
	// is answered at once as not replayed (missed unknown).
	maxReplayJobs = 16384
	// replayTailMax bounds the entries sent in a replay's last step, under
	// the router's lock (the log's per-group bound).
	replayTailMax = 4096
	// resumeHold is how long a member's supernode holds a resuming member
	// out of the group's fanout waiting for the home's ReplayDone, in
	// refresh intervals, counted from the last time it asked: a resume
	// sent to a home that just crashed is sent again to the next home once
	// the ring drops the dead one, which takes the directory three
	// announce intervals (= refresh intervals) and the next refresh one
	// more; two more are margin.
	resumeHold = 6
)

// Replay log entries carry one byte before the encoded GroupMessage: who
// stamped it.
const (
	entrySelf    = 'h' // numbered and stamped by this supernode
	entryReplica = 'r' // a replica: stamped by another home
)

func encodeEntry(kind byte, gm *pb.GroupMessage) []byte {
	b, err := proto.MarshalOptions{}.MarshalAppend([]byte{kind}, gm)
	if err != nil {
		panic("encode replay entry: " + err.Error())
	}
	return b
}

func decodeEntry(b []byte) (kind byte, gm *pb.GroupMessage, ok bool) {
	if len(b) < 2 || (b[0] != entrySelf && b[0] != entryReplica) {
		return 0, nil, false
	}
	gm = &pb.GroupMessage{}
	if proto.Unmarshal(b[1:], gm) != nil {
		return 0, nil, false
	}
	return b[0], gm, true
}

func after(a, b store.Pos) bool {
	return a.Epoch > b.Epoch || a.Epoch == b.Epoch && a.Seq > b.Seq
}

// replayKey names a replay: to supernode sn, for member (empty: for all of
// sn's members of the group).
type replayKey struct {
	group  string
	sn     peer.ID
	member peer.ID
}

type replayJob struct {
	key   replayKey
	after store.Pos // the last position sent (or asked from)
	// counted: missed and unknown were computed from the log's first
	// position when the replay started.
	counted bool
	missed  uint64
	unknown bool
}

// startReplayLocked queues a replay of group to sn after position from.
// r.mu is held.
func (r *Router) startReplayLocked(hg *homeGroup, k replayKey, from store.Pos) {
	if r.cfg.Store == nil {
		// No replay log: nothing to replay. A member's supernode is told
		// at once (it lets the member in, who learns the gap is unknown);
		// a supernode's resume changes nothing, it stays live.
		if k.member != "" {
			r.sendReplayDoneLocked(k, &pb.Resumed{Group: k.group, Epoch: from.Epoch, Seq: from.Seq, MissedUnknown: true})
		}
		return
	}
	if old := r.replays[k]; old == nil && len(r.replays) >= maxReplayJobs {
		r.stats.ReplaysRefused.Add(1)
		r.sendReplayDoneLocked(k, &pb.Resumed{Group: k.group, Epoch: from.Epoch, Seq: from.Seq, MissedUnknown: true})
		return
	}
	if k.member == "" {
		hg.replaying[k.sn] = true
	}
	r.replays[k] = &replayJob{key: k, after: from}
	r.log.Debug("group replay started", "group", k.group, "to", k.sn.ShortString(), "member", k.member.ShortString(), "after_epoch", from.Epoch, "after_seq", from.Seq)
	r.stats.ReplaysStarted.Add(1)
	r.wakeReplayer()
}

// replayLoop runs the replays, replayFramesPerTick frames a tick, and
// sweeps the publishes waiting for replicas.
func (r *Router) replayLoop(ctx context.Context) {
	t := time.NewTicker(replayTick)
	defer t.Stop()
	for {
		r.mu.Lock()
		idle := len(r.replays) == 0 && len(r.pendingPubs) == 0 && len(r.syncs) == 0
		r.mu.Unlock()
		if idle {
			select {
			case <-ctx.Done():
				return
			case <-r.replayWake:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.replayStep()
		r.sweepReplication()
	}
}

// replayStep does one tick of replay work, under a fanout slot: a home at
// its fanout capacity replays nothing until it has room.
func (r *Router) replayStep() {
	if r.cfg.Store == nil {
		return
	}
	r.mu.Lock()
	jobs := make([]*replayJob, 0, len(r.replays))
	for _, j := range r.replays {
		if hg := r.homes[j.key.group]; hg != nil && hg.syncing {
			continue // the home is still gathering its log
		}
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	if !r.cfg.Sems.Fanout.TryAcquire() {
		return
	}
	defer r.cfg.Sems.Fanout.Release()
	budget := r.replayBudget
	// Start where the last tick stopped, so that every replay moves.
	start := int(r.replayTurn.Add(1)) % len(jobs)
	for i := range jobs {
		if budget <= 0 {
			break
		}
		budget -= r.replayJobStep(jobs[(start+i)%len(jobs)], budget)
	}
}

// replayJobStep sends up to budget frames of job j and returns how many.
// When the log holds nothing more after j's position it finishes j.
func (r *Router) replayJobStep(j *replayJob, budget int) int {
	n := min(replayBatch, budget)
	entries, first, ok := r.cfg.Store.ReplayAfter(j.key.group, j.after.Epoch, j.after.Seq, n)
	if !j.counted {
		j.counted = true
		j.missed, j.unknown = missedBefore(j.after, first, ok)
	}
	sent := 0
	for _, e := range entries {
		if !r.sendReplayEntry(j.key, e, false) {
			return sent + 1 // the link is full: try again next tick
		}
		j.after = store.Pos{Epoch: e.Epoch, Seq: e.Seq}
		sent++
	}
	if len(entries) < n {
		r.finishReplay(j)
	}
	return max(sent, 1)
}

// missedBefore counts what a member at position at misses given the log's
// oldest entry first: the messages of first's epoch before it, when the
// member is in that epoch; unknown when the member is in an older epoch,
// or the log is empty but the member has a position.
func missedBefore(at, first store.Pos, ok bool) (missed uint64, unknown bool) {
	switch {
	case !ok:
		return 0, at != (store.Pos{})
	case first.Epoch == at.Epoch && first.Seq > at.Seq+1:
		return first.Seq - at.Seq - 1, false
	case first.Epoch > at.Epoch && at != (store.Pos{}):
		return first.Seq - 1, true
	}
	return 0, false
}

// finishReplay sends what the log gained since j's last read and the
// ReplayDone, and lets live traffic flow, all under r.mu so that no
// publish is numbered in between.
func (r *Router) finishReplay(j *replayJob) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.replays[j.key] != j {
		return // replaced by a newer resume of the same member
	}
	entries, _, _ := r.cfg.Store.ReplayAfter(j.key.group, j.after.Epoch, j.after.Seq, replayTailMax)
	for _, e := range entries {
		if !r.sendReplayEntry(j.key, e, true) {
			return // next tick
		}
		j.after = store.Pos{Epoch: e.Epoch, Seq: e.Seq}
	}
	// The end of the replay must reach the member's supernode, which
	// holds the member until it does: on a full link, next tick.
	if !r.sendReplayDoneLocked(j.key, &pb.Resumed{Group: j.key.group, Epoch: j.after.Epoch, Seq: j.after.Seq, Missed: j.missed, MissedUnknown: j.unknown}) {
		return
	}
	delete(r.replays, j.key)
	if hg := r.homes[j.key.group]; hg != nil && j.key.member == "" {
		delete(hg.replaying, j.key.sn)
	}
	r.stats.ReplaysDone.Add(1)
	if j.missed > 0 || j.unknown {
		r.stats.ReplaysGap.Add(1)
	}
}

// sendReplayEntry sends one logged message to a replay's supernode: for
// one member (only) or for all of its members. An entry another home
// stamped is stamped again by this one: members' supernodes accept group
// frames only from a home of the group (toldHome). locked: r.mu is held.
func (r *Router) sendReplayEntry(k replayKey, e store.Entry, locked bool) bool {
	gm := r.replayMessage(k.group, e)
	if gm == nil {
		return true // undecodable: skipped (counted)
	}
	sent := true
	switch {
	case k.member != "":
		one := proto.CloneOf(gm)
		one.Only = []byte(k.member)
		if k.sn == r.self() {
			r.deliverOnly(one)
		} else {
			sent = r.links.sendGroup(k.sn, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: one}}))
		}
	case k.sn != r.self():
		sent = r.links.sendGroup(k.sn, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: gm}}))
	case locked:
		r.fanoutLocalLocked(gm, true)
	default:
		r.fanoutLocal(gm, true)
	}
	if sent {
		r.stats.Replayed.Add(1)
	}
	return sent
}

// replayMessage decodes a log entry, stamping it anew when another home
// stamped it (cached: a thousand members resuming cost one signature per
// message, not a thousand).
func (r *Router) replayMessage(group string, e store.Entry) *pb.GroupMessage {
	kind, gm, ok := decodeEntry(e.Data)
	if !ok || gm.GetGroup() != group {
		r.stats.ReplayLogFailed.Add(1)
		return nil
	}
	if kind == entrySelf {
		return gm
	}
	key := restampKey{group: group, epoch: gm.GetEpoch(), seq: gm.GetSeq()}
	r.restampMu.Lock()
	stamp, ok := r.restamped[key]
	r.restampMu.Unlock()
	if !ok {
		var err error
		stamp, err = protocol.Stamp(r.key, group, gm.GetEpoch(), gm.GetSeq(), gm.GetPublish())
		if err != nil {
			return nil
		}
		r.restampMu.Lock()
		if len(r.restamped) >= maxRestamped {
			clear(r.restamped)
		}
		r.restamped[key] = stamp
		r.restampMu.Unlock()
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

// sendReplayDoneLocked tells the replay's supernode that it is complete;
// false when the link would not take it.
func (r *Router) sendReplayDoneLocked(k replayKey, res *pb.Resumed) bool {
	if k.sn == r.self() {
		if k.member != "" {
			r.resumeDoneLocked(k.member, res)
		}
		return true
	}
	return r.links.send(k.sn, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_ReplayDone{ReplayDone: &pb.ReplayDone{Member: []byte(k.member), Resumed: res}}}))
}

// onReplayDone is a home's ReplayDone at a member's supernode.
// It is taken from the home the member's resume was sent to, or from the
// home by this supernode's ring: a ring that moved the group away for a
// moment when the answer came refused it, and the member stayed held out
// of the group until its hold ran out (a gap notice) while the messages
// numbered meanwhile reached it neither live nor replayed.
func (r *Router) onReplayDone(from peer.ID, d *pb.ReplayDone) {
	res := d.GetResumed()
	g := res.GetGroup()
	if len(d.GetMember()) == 0 {
		return
	}
	m, err := peer.IDFromBytes(d.GetMember())
	if err != nil {
		return
	}
	h, ok := r.groupHome(g)
	r.mu.Lock()
	defer r.mu.Unlock()
	if held := r.resuming[m][g]; (!ok || h != from) && (held == nil || held.home != from) {
		return
	}
	r.resumeDoneLocked(m, res)
}

// resumeDoneLocked lets a resuming member into its group's local fanout
// and tells it the resume is complete.
func (r *Router) resumeDoneLocked(m peer.ID, res *pb.Resumed) {
	g := res.GetGroup()
	if _, held := r.resuming[m][g]; !held {
		return
	}
	delete(r.resuming[m], g)
	if len(r.resuming[m]) == 0 {
		delete(r.resuming, m)
	}
	if _, joined := r.joined[m][g]; !joined {
		return
	}
	sink, ok := r.adm.Sink(m)
	if !ok {
		return
	}
	lg := r.local[g]
	if lg == nil {
		lg = r.cfg.Fanout.NewGroup()
		r.local[g] = lg
	}
	lg.Add(string(m), sink)
	r.toClient(m, &pb.SessionFrame{Kind: &pb.SessionFrame_Resumed{Resumed: res}}, &r.stats.OversizeOther)
}

// heldResume is a member held out of a group's local fanout while the
// group's home replays what it missed: the home its resume went to, the
// position it resumes from, and when the hold ends without an answer.
type heldResume struct {
	home  peer.ID
	pos   store.Pos
	until time.Time
}

// resendHeldLocked asks the group's current home again for the held
// members whose resume went to another home (it crashed, and the ring has
// moved the group since), restarting their hold; it returns the membership
// records to send. Without it a member that failed over from a crashed
// home would wait for an answer that never comes, be let in with its gap
// unknown, and miss what the next home sent its supernode meanwhile.
func (r *Router) resendHeldLocked(now time.Time) []membershipUpdate {
	var ups []membershipUpdate
	for m, gs := range r.resuming {
		for g, h := range gs {
			home, ok := r.groupHome(g)
			claim, joined := r.joined[m][g]
			if !ok || home == h.home || !joined {
				continue
			}
			h.home, h.until = home, now.Add(resumeHold*r.cfg.Refresh)
			r.stats.ResumesResent.Add(1)
			ups = append(ups, membershipUpdate{group: g, member: m, join: true, claim: claim, resume: true, pos: h.pos})
		}
	}
	return ups
}

// releaseHeldLocked lets in the members held past their deadline: the
// home never answered (it died, or refused the replay). They are told the
// resume is complete with what they missed unknown.
func (r *Router) releaseHeldLocked(now time.Time) {
	for m, gs := range r.resuming {
		for g, h := range gs {
			if now.Before(h.until) {
				continue
			}
			r.stats.ResumesTimedOut.Add(1)
			r.resumeDoneLocked(m, &pb.Resumed{Group: g, MissedUnknown: true})
		}
	}
}
