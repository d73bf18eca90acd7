package group

import (
	"bytes"
	"time"

	"github.com/overlayd/overlayd/protocol/pb"
)

// A group's home is the ring owner of its name. The home keeps the
// members grouped by the supernode each is attached to, numbers every
// publish, and sends ONE frame per supernode holding members (Manifold).

// homeGroup is the group home's view of one group.
type homeGroup struct {
	// epoch and seq number the group's messages at this home. A group
	// the home forgot (idle, no members) and recreates gets a newer
	// epoch, so its (epoch, seq) never repeat: members drop repeats.
	epoch   uint64
	seq     uint64
	at      map[string]string    // member → its supernode
	seen    map[string]time.Time // member → when its record expires
	bySN    map[string]int       // supernode → members there
	lastUse time.Time
	// counts is the core's count of memberships by supernode, kept up to
	// date by join and leave; nil in tests of a lone homeGroup.
	counts *originCounts
	// claims and claimSeq are each member's newest verified claim and
	// its seq: a refresh carrying the same claim is not verified again.
	claims   map[string][]byte
	claimSeq map[string]uint64
	// replaying are the supernodes being replayed the group: they get no
	// live frame until their replay is done.
	replaying map[string]bool
	// resumed are the supernodes whose own resume this record took:
	// each is replayed to once while it has members here.
	resumed map[string]bool
	// keepResumed: Mutations.NoResumedReset.
	keepResumed bool

	// syncing: the home is gathering the group's replicas and numbers
	// nothing yet; waiting are the publishes that came meanwhile (at most
	// MaxWaitingPublishes), numbered when it ends.
	syncing bool
	// syncedAfter is the log position the record's sync asked after
	// (synced: it asked): what the log holds past it came from the sync
	// or was numbered here.
	syncedAfter Pos
	synced      bool
	waiting     []*pb.GroupPublish
	// numbered and acked remember the position given to each publish ID,
	// and which were acknowledged, so that a retry is numbered once.
	numbered, acked publishIDs
	// unreleased are the messages numbered here and not released yet
	// (Core.release), in the order they were numbered: each is in the
	// core's pendingPubs until it is released or dropped.
	unreleased []pubKey
	// away: made while this supernode's ring named another home (a
	// membership from a supernode whose ring did): its sync may have
	// missed what that home numbered, so a ring that makes this
	// supernode the home drops it for a takeover.
	away bool
}

func newHomeGroup(epoch uint64) *homeGroup {
	return &homeGroup{epoch: epoch, at: map[string]string{}, seen: map[string]time.Time{}, bySN: map[string]int{},
		claims: map[string][]byte{}, claimSeq: map[string]uint64{}, replaying: map[string]bool{}, resumed: map[string]bool{}}
}

// verified reports whether claim is the one already verified for member m
// recorded at sn.
func (hg *homeGroup) verified(m, sn string, claim []byte) bool {
	return hg.at[m] == sn && len(claim) > 0 && bytes.Equal(hg.claims[m], claim)
}

func (hg *homeGroup) join(m, sn string, expires time.Time) {
	if old, ok := hg.at[m]; ok {
		if old == sn {
			hg.seen[m] = expires
			return
		}
		hg.leave(m, old)
	}
	hg.at[m], hg.seen[m] = sn, expires
	hg.bySN[sn]++
	hg.counts.add(sn)
}

// refresh renews a standing membership. Where the member is recorded at
// another supernode and that record has not expired, the member has moved
// and this is its old supernode's refresh, sent before it saw the member
// leave: ignoring it keeps the member where its fresh join put it.
func (hg *homeGroup) refresh(m, sn string, expires, now time.Time) {
	if old, ok := hg.at[m]; ok && old != sn && now.Before(hg.seen[m]) {
		return
	}
	hg.join(m, sn, expires)
}

func (hg *homeGroup) leave(m, sn string) {
	if hg.at[m] != sn {
		return
	}
	delete(hg.at, m)
	delete(hg.seen, m)
	delete(hg.claims, m)
	delete(hg.claimSeq, m)
	hg.counts.remove(sn)
	if hg.bySN[sn]--; hg.bySN[sn] <= 0 {
		delete(hg.bySN, sn)
		if !hg.keepResumed {
			// Gone from the record, the supernode gets no frames: its
			// next resume here is replayed to. Kept, a supernode whose
			// memberships expired here (its refreshes went to another
			// home while its ring flapped) came back with a resume that
			// was not taken as new, and its members never got what was
			// numbered while it was away (found by testnet/groupsim,
			// Mutations.NoResumedReset).
			delete(hg.resumed, sn)
		}
	}
}

func (hg *homeGroup) expire(now time.Time) {
	for m, t := range hg.seen {
		if !now.Before(t) {
			hg.leave(m, hg.at[m])
		}
	}
}

// newHomeGroup creates the home record of group g with an epoch newer
// than every one this core gave before (the clock's nanoseconds, or one
// more than the last when the clock has not moved on) and than any its
// replay log holds, and gathers the replicas the other members of the
// group's home cluster hold before it numbers.
func (c *Core) newHomeGroup(now time.Time, g string) *homeGroup {
	c.epoch = max(c.epoch+1, uint64(now.UnixNano()))
	hg := newHomeGroup(c.epoch)
	hg.counts = c.membersBy
	hg.keepResumed = c.cfg.Mutations.NoResumedReset
	hg.away = !c.isGroupHome(g)
	c.homes[g] = hg
	c.adoptLog(hg, g)
	c.startSync(now, hg, g)
	c.log.Debug("group home record created", "group", g, "epoch", hg.epoch, "syncing", hg.syncing)
	return hg
}

// homeRecord returns this supernode's record of group g as its home, nil
// when there is none or when it was made while another supernode was the
// home and the ring now names this one (dropped: a takeover makes it
// anew; RingChanged does the same when told of the ring).
func (c *Core) homeRecord(g string) *homeGroup {
	hg := c.homes[g]
	if hg != nil && hg.away && !c.cfg.Mutations.NoAwayDrop && len(hg.waiting) == 0 && c.isGroupHome(g) {
		c.forgetHome(g, notHome)
		return nil
	}
	return hg
}

// Membership records what supernode from says about its own clients
// (a MembershipBatch on its link, or this supernode's own).
func (c *Core) Membership(now time.Time, from string, b *pb.MembershipBatch) {
	expires := now.Add(3 * c.cfg.Refresh)
	for _, rec := range b.GetRecords() {
		m := string(rec.GetMember())
		if m == "" || !c.validGroup(rec.GetGroup()) || string(rec.GetSupernode()) != from {
			continue
		}
		hg := c.homeRecord(rec.GetGroup())
		if rec.GetJoin() && from != c.self && (hg == nil || hg.at[m] != from) {
			// A new membership from another supernode, within the
			// bounds; a refresh of a held one always passes.
			switch {
			case c.membersBy.total >= c.cfg.MaxMemberships:
				c.stats.MembershipsFull.Add(1)
				continue
			case c.membersBy.by[from] >= c.cfg.MaxMembershipsPerOrigin:
				c.stats.MembershipsOriginFull.Add(1)
				continue
			case hg == nil && len(c.homes) >= c.cfg.MaxHomeGroups:
				c.stats.HomeGroupsFull.Add(1)
				continue
			}
		}
		if !rec.GetJoin() {
			// Unsigned leaves are fine: a supernode can only remove a
			// member recorded at itself, which dropping its frames
			// would do as well.
			if hg != nil {
				hg.lastUse = now
				hg.leave(m, from)
			}
			continue
		}
		// A join moves a member only on the member's word: its claim,
		// for this group, at the sending supernode, checked before any
		// state is made for it. A refresh of the claim already verified
		// is let through.
		claim := rec.GetClaim()
		var mc Claim
		verified := hg != nil && hg.verified(m, from, claim)
		if !verified {
			var err error
			mc, err = c.cfg.Verifier.VerifyMembership(claim, m, rec.GetGroup())
			if err != nil || mc.Supernode != from || !mc.Join {
				c.stats.MembershipRefused.Add(1)
				c.log.Debug("membership refused", "group", rec.GetGroup(), "err", err)
				continue
			}
		}
		if hg == nil {
			hg = c.newHomeGroup(now, rec.GetGroup())
		}
		hg.lastUse = now
		// A supernode new to the group here (this home is new to the
		// group, or the supernode is) may resume all its members.
		// A supernode asks for its resume only while its position
		// does not follow this home (member.go, movesPos): each is
		// answered.
		snNew := !hg.resumed[from] && !hg.replaying[from]
		if c.cfg.Mutations.NoPosHandoff {
			snNew = hg.bySN[from] == 0 && !hg.replaying[from]
		}
		if !verified && mc.Seq < hg.claimSeq[m] {
			// An older claim (replayed by a supernode the member
			// left) renews at most; it never moves the member.
			if hg.at[m] == from {
				hg.seen[m] = expires
			}
			continue
		}
		if rec.GetRefresh() {
			hg.refresh(m, from, expires, now)
		} else {
			hg.join(m, from, expires)
		}
		if hg.at[m] != from {
			continue
		}
		if !verified {
			hg.claimSeq[m], hg.claims[m] = mc.Seq, claim
		}
		if rec.GetResume() {
			pos := Pos{Epoch: rec.GetResumeEpoch(), Seq: rec.GetResumeSeq()}
			switch {
			case rec.GetSupernodeResume() && (snNew || !rec.GetRefresh() && !hg.replaying[from] && !c.cfg.Mutations.NoHoldBack):
				// Its own resume, new here, or its ask after it held
				// live frames back (member.go, holdsBack).
				hg.resumed[from] = true
				c.startReplay(hg, replayKey{group: rec.GetGroup(), sn: from}, pos)
			case !rec.GetSupernodeResume() && !rec.GetRefresh():
				c.startReplay(hg, replayKey{group: rec.GetGroup(), sn: from, member: m}, pos)
			}
		} else if rec.GetRefresh() && snNew && !c.cfg.Mutations.NoRecordReplay {
			// A supernode with members but no position (no message
			// reached it since they joined) refreshes a record that did
			// not know it: what this record numbered before is replayed
			// to it. Its members joined at an earlier home, and this one
			// took the group over and numbered before the refresh came
			// (found by testnet/groupsim, Mutations.NoRecordReplay).
			hg.resumed[from] = true
			k := replayKey{group: rec.GetGroup(), sn: from}
			c.startReplay(hg, k, Pos{Epoch: hg.epoch})
			if j := c.replays[k]; j != nil {
				j.record = true
				j.fromSync = !c.cfg.Mutations.NoReplayFromSync
			}
		}
	}
}

// Publish is a local client's publish, already checked for form by the
// shell (ID length, group name, size); the core relays it to the group's
// home or numbers it here.
func (c *Core) Publish(now time.Time, client string, p *pb.GroupPublish) {
	pub := &pb.GroupPublish{Group: p.GetGroup(), Id: p.GetId(), Signed: p.GetSigned(), From: []byte(client), Origin: []byte(c.self)}
	h, ok := c.groupHome(pub.Group)
	switch {
	case !ok:
		c.result(client, p.GetId(), pb.Result_STATUS_UNREACHABLE, "no ring yet: the group has no home")
	case h == c.self:
		c.HomePublish(now, pub)
	case !c.cfg.Net.Send(h, &pb.RelayFrame{Kind: &pb.RelayFrame_Publish{Publish: pub}}):
		c.result(client, p.GetId(), pb.Result_STATUS_UNREACHABLE, "group home cannot be reached")
	}
}

func (c *Core) result(client string, id []byte, st pb.Result_Status, detail string) {
	c.cfg.Local.ToClient(client, &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: &pb.Result{Id: id, Status: st, Detail: detail}}})
}

// HomePublish numbers a publish (from a local client or relayed by
// another supernode, whose form the shell checked) and sends it once to
// each supernode holding members.
func (c *Core) HomePublish(now time.Time, p *pb.GroupPublish) {
	// Number only what the publisher signed: a supernode relaying a
	// publish cannot publish in a client's name.
	if err := c.cfg.Verifier.VerifyPublish(p.GetSigned(), string(p.GetFrom()), p.GetGroup(), p.GetId()); err != nil {
		c.stats.PublishRefused.Add(1)
		c.log.Debug("publish refused", "err", err)
		c.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_INVALID, Detail: "publish not signed by its publisher"})
		return
	}
	// The home's fanout job: refused before a sequence number is spent.
	if !c.cfg.Fanout.TryAcquire() {
		c.stats.FanoutRefused.Add(1)
		c.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "group home fanout at capacity"})
		return
	}
	defer func() { _ = c.cfg.Fanout.Release() }()
	hg := c.homeRecord(p.GetGroup())
	busy := ""
	switch {
	case !c.settled():
		// Just started: its ring may lack the supernodes that hold the
		// group's replicas (Config.Settled).
		c.stats.HomeUnsettled.Add(1)
		busy = "group home starting: its directory is still filling; retry with the same message id"
	case !c.isGroupHome(p.GetGroup()):
		// Sent by a supernode whose ring lags: a home numbers nothing
		// once its own ring moves the group, so that what it answers a
		// new home's sync is all it numbered.
		busy = notHome
	case hg == nil && len(c.homes) >= c.cfg.MaxHomeGroups:
		c.stats.HomeGroupsFull.Add(1)
		busy = "group home holds too many groups"
	case len(c.pendingPubs) >= MaxPendingPublishes:
		busy = "group home: too many publishes waiting for replicas"
	}
	if busy != "" {
		c.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: busy})
		return
	}
	if hg == nil {
		hg = c.newHomeGroup(now, p.GetGroup())
	}
	if hg.syncing {
		// Numbered when the replicas are in (endSync), in order.
		if len(hg.waiting) < MaxWaitingPublishes {
			hg.waiting = append(hg.waiting, p)
			return
		}
		c.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "group home taking over: gathering replicas; retry with the same message id"})
		return
	}
	if retry, res := c.retryPublish(hg, p); retry {
		if res != nil {
			c.publishResult(p, res)
		}
		return
	}
	hg.seq++
	hg.lastUse = now
	seq, epoch := hg.seq, hg.epoch
	stamp, err := c.cfg.Signer.Stamp(p.GetGroup(), epoch, seq, p.GetSigned())
	if err != nil {
		hg.seq--
		c.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_UNREACHABLE, Detail: "group home cannot sign"})
		return
	}
	c.stats.GroupPublishes.Add(1)
	gm := &pb.GroupMessage{Group: p.GetGroup(), Epoch: epoch, Seq: seq, From: p.GetFrom(), Id: p.GetId(), Publish: p.GetSigned(), Stamp: stamp}
	hg.numbered.put(publishIDKey(p.GetFrom(), p.GetId()), Pos{Epoch: epoch, Seq: seq})
	if c.cfg.Mutations.NoReleaseAfterMajority {
		// The rule before: logged and fanned out as numbered.
		if c.cfg.Replay != nil {
			if err := c.cfg.Replay.AppendReplay(p.GetGroup(), Entry{Epoch: epoch, Seq: seq, Data: EncodeEntry(entrySelf, gm)}); err != nil {
				c.stats.ReplayLogFailed.Add(1)
				c.sendNumbered(hg, gm)
				c.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "group home could not log the message; retry with the same message id"})
				return
			}
		}
		c.sendNumbered(hg, gm)
	}
	c.replicate(now, hg, p, gm)
	c.release(p.GetGroup())
}

// release logs at the home, fans out and answers OK the messages a
// majority of the home cluster holds, in the order they were numbered: a
// message waits for every one numbered before it to be released or
// dropped (its replicas did not ack in time).
//
// Fanned out as soon as numbered, a message reached members before any
// replica held it: a supernode whose ring dropped the live home for a
// moment numbered in a new epoch, its replicas (whose rings named the
// live home) refused, and its members moved to that epoch, past every
// message the live home numbered after (found by testnet/groupsim,
// Mutations.NoReleaseAfterMajority). Logged as soon as numbered, the
// home's log held messages never acknowledged, and replayed and synced
// them as if they had been.
func (c *Core) release(g string) {
	hg := c.homes[g]
	if hg == nil {
		return
	}
	for len(hg.unreleased) > 0 {
		k := hg.unreleased[0]
		pp := c.pendingPubs[k]
		if pp != nil && !pp.held() {
			return
		}
		hg.unreleased[0] = pubKey{}
		hg.unreleased = hg.unreleased[1:]
		if pp == nil {
			continue // dropped
		}
		delete(c.pendingPubs, k)
		c.releaseOne(hg, k, pp)
	}
}

// releaseOne logs, fans out and acknowledges one message a majority
// holds.
func (c *Core) releaseOne(hg *homeGroup, k pubKey, pp *pendingPublish) {
	id := publishIDKey(pp.p.GetFrom(), pp.p.GetId())
	if c.cfg.Replay != nil && !c.cfg.Mutations.NoReleaseAfterMajority {
		if err := c.cfg.Replay.AppendReplay(k.group, Entry{Epoch: k.epoch, Seq: k.seq, Data: EncodeEntry(entrySelf, pp.gm)}); err != nil {
			// The home's own copy is one of the majority it promises:
			// not delivered, not acknowledged. The publisher retries
			// with the same ID, numbered anew.
			c.stats.ReplayLogFailed.Add(1)
			c.log.Debug("replay log append failed", "group", k.group, "err", err)
			hg.numbered.del(id)
			c.publishResult(pp.p, &pb.Result{Id: pp.p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "group home could not log the message; retry with the same message id"})
			return
		}
	}
	if !c.cfg.Mutations.NoReleaseAfterMajority {
		c.sendNumbered(hg, pp.gm)
	}
	hg.acked.put(id, Pos{Epoch: k.epoch, Seq: k.seq})
	c.publishResult(pp.p, &pb.Result{Id: pp.p.GetId(), Status: pb.Result_STATUS_OK, Epoch: k.epoch, Seq: k.seq})
}

// sendNumbered sends a message the home just numbered to every supernode
// holding members, but those being replayed the group (their replay ends
// with what was numbered until then).
func (c *Core) sendNumbered(hg *homeGroup, gm *pb.GroupMessage) {
	if c.cfg.PerMemberFanout {
		// The naive design: one frame, encoded anew, per member.
		for m, sn := range hg.at {
			if hg.replaying[sn] {
				continue
			}
			one := &pb.GroupMessage{Group: gm.Group, Epoch: gm.Epoch, Seq: gm.Seq, From: gm.From, Id: gm.Id, Publish: gm.Publish, Stamp: gm.Stamp, Only: []byte(m)}
			if sn == c.self {
				c.deliverOnly(one)
			} else if c.cfg.Net.SendGroup(sn, &pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: one}}) {
				c.stats.GroupFramesSent.Add(1)
			}
		}
		return
	}
	frame := &pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: gm}}
	for _, sn := range sortedKeys(hg.bySN) {
		if hg.replaying[sn] {
			continue
		}
		if sn == c.self {
			c.fanoutLocal(gm, c.self)
			continue
		}
		if c.cfg.Net.SendGroup(sn, frame) {
			c.stats.GroupFramesSent.Add(1)
		}
	}
}

// publishResult sends a publish's outcome to the publisher, through its
// supernode.
func (c *Core) publishResult(p *pb.GroupPublish, res *pb.Result) {
	origin := string(p.GetOrigin())
	if origin == c.self {
		if len(p.GetFrom()) > 0 {
			c.cfg.Local.ToClient(string(p.GetFrom()), &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: res}})
		}
		return
	}
	c.cfg.Net.Send(origin, &pb.RelayFrame{Kind: &pb.RelayFrame_PublishResult{PublishResult: &pb.PublishResult{To: p.GetFrom(), Result: res}}})
}

// Members returns the members of this supernode's home record of group;
// false when it keeps none.
func (c *Core) Members(group string) ([]string, bool) {
	hg := c.homes[group]
	if hg == nil {
		return nil, false
	}
	return sortedKeys(hg.at), true
}

// RingChanged is told each time the ring is published, with the new ring
// as a view that does not change (the live ring stays Config.Ring's): the
// syncs under way ask the new ring's sync peers too, and must be endorsed
// by its home cluster as well as by the rings before it (rings.go).
//
// The groups this supernode is home to by its records but no longer by
// the new ring lose their records here (with the publishes that waited on
// a sync, answered BUSY, and the replays under way: the next home
// replays), and so do the records made while another supernode was the
// home, once the ring makes this one the home (the memberships come again
// within a refresh, and the members' resumes under way finish from the
// log). Kept, a record carried on when the ring named this supernode the
// home again: its old epoch and sequence, no sync, and the supernodes it
// knew not new, so never replayed to, while another home may have
// numbered messages in between that some of them missed. Dropped,
// regaining the role is a takeover.
func (c *Core) RingChanged(now time.Time, r Ring) {
	c.ringChanged(now, r)
	defer c.askNewSyncPeers(now)
	if c.cfg.Mutations.NoRingChangedDrop {
		return
	}
	dropped := map[string]bool{}
	for _, g := range sortedKeys(c.homes) {
		hg := c.homes[g]
		home := c.isGroupHome(g)
		if home && (!hg.away || c.cfg.Mutations.NoAwayDrop) {
			continue
		}
		if !home {
			dropped[g] = true // the replays under way stop: the home's replay
		}
		c.forgetHome(g, notHome)
		c.log.Debug("group home record dropped: the ring moved the group", "group", g, "epoch", hg.epoch, "seq", hg.seq, "home_now", home)
	}
	if len(dropped) > 0 {
		for k := range c.replays {
			if dropped[k.group] {
				delete(c.replays, k)
			}
		}
	}
}

// notHome is the BUSY answer of a supernode that is not, or no longer,
// the group's home by its ring.
const notHome = "not the group's home by this supernode's ring; retry with the same message id"
