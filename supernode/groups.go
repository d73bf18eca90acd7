package supernode

import (
	"bytes"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/store"
)

// Groups: a group's home is the ring owner of its name. The home keeps the
// members grouped by the supernode each is attached to, numbers every
// publish, and sends ONE frame per supernode holding members (Manifold).
// Each of those supernodes wraps the message once and fans it out to its
// local members through the fanout engine.

// homeGroup is the group home's view of one group.
type homeGroup struct {
	// epoch and seq number the group's messages at this home. A group
	// the home forgot (idle, no members) and recreates gets a newer
	// epoch, so its (epoch, seq) never repeat: members drop repeats.
	epoch   uint64
	seq     uint64
	at      map[peer.ID]peer.ID   // member → its supernode
	seen    map[peer.ID]time.Time // member → when its record expires
	bySN    map[peer.ID]int       // supernode → members there
	lastUse time.Time
	// counts is the router's count of memberships by supernode, kept up
	// to date by join and leave; nil in tests of a lone homeGroup.
	counts *originCounts
	// claims and claimSeq are each member's newest verified claim and
	// its seq: a refresh carrying the same claim is not verified again.
	claims   map[peer.ID][]byte
	claimSeq map[peer.ID]uint64
	// replaying are the supernodes being replayed the group (replay.go):
	// they get no live frame until their replay is done.
	replaying map[peer.ID]bool
	// syncing: the home is gathering the group's replicas (replica.go)
	// and numbers nothing yet; waiting are the publishes that came
	// meanwhile (at most maxWaitingPublishes), numbered when it ends.
	syncing bool
	waiting []*pb.GroupPublish
	// numbered and acked remember the position given to each publish ID,
	// and which were acknowledged, so that a retry is numbered once.
	numbered, acked publishIDs
	// away: made while this supernode's ring named another home (a
	// membership from a supernode whose ring did): its sync may have
	// missed what that home numbered, so a ring that makes this
	// supernode the home drops it for a takeover (RingChanged).
	away bool
}

func newHomeGroup(epoch uint64) *homeGroup {
	return &homeGroup{epoch: epoch, at: map[peer.ID]peer.ID{}, seen: map[peer.ID]time.Time{}, bySN: map[peer.ID]int{},
		claims: map[peer.ID][]byte{}, claimSeq: map[peer.ID]uint64{}, replaying: map[peer.ID]bool{}}
}

// verified reports whether claim is the one already verified for member m
// recorded at sn.
func (hg *homeGroup) verified(m, sn peer.ID, claim []byte) bool {
	return hg.at[m] == sn && len(claim) > 0 && bytes.Equal(hg.claims[m], claim)
}

// newHomeGroupLocked creates the home record of group g with an epoch
// newer than every one this router gave before (the clock's nanoseconds,
// or one more than the last when the clock has not moved on) and than any
// its replay log holds, and gathers the replicas the other members of the
// group's home cluster hold (replica.go) before it numbers.
func (r *Router) newHomeGroupLocked(g string) *homeGroup {
	r.epoch = max(r.epoch+1, uint64(r.cfg.Now().UnixNano()))
	hg := newHomeGroup(r.epoch)
	hg.counts = r.membersBy
	hg.away = !r.isGroupHome(g)
	r.homes[g] = hg
	r.adoptLogLocked(hg, g)
	r.startSyncLocked(hg, g)
	r.log.Debug("group home record created", "group", g, "epoch", hg.epoch, "syncing", hg.syncing)
	return hg
}

// homeRecordLocked returns this supernode's record of group g as its
// home, nil when there is none or when it was made while another
// supernode was the home and the ring now names this one (dropped: a
// takeover makes it anew; RingChanged does the same when told of the
// ring). r.mu is held.
func (r *Router) homeRecordLocked(g string) *homeGroup {
	hg := r.homes[g]
	if hg != nil && hg.away && len(hg.waiting) == 0 && r.isGroupHome(g) {
		delete(r.homes, g)
		delete(r.syncs, g)
		return nil
	}
	return hg
}

func (hg *homeGroup) join(m, sn peer.ID, expires time.Time) {
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
func (hg *homeGroup) refresh(m, sn peer.ID, expires, now time.Time) {
	if old, ok := hg.at[m]; ok && old != sn && now.Before(hg.seen[m]) {
		return
	}
	hg.join(m, sn, expires)
}

func (hg *homeGroup) leave(m, sn peer.ID) {
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
	}
}

func (hg *homeGroup) expire(now time.Time) {
	for m, t := range hg.seen {
		if !now.Before(t) {
			hg.leave(m, hg.at[m])
		}
	}
}

type membershipUpdate struct {
	group  string
	member peer.ID
	join   bool
	claim  []byte // the member's signed claim (joins; a leave may have none)
	// refresh: a periodic re-send, which must not move a member that a
	// fresh join recorded at another supernode (see homeGroup.refresh).
	refresh bool
	// resume asks the home to replay after pos: the member's position
	// (its GroupOp), or with snResume this supernode's (replay.go).
	resume, snResume bool
	pos              store.Pos
}

// isGroupHome reports whether this supernode's ring makes it the home of
// group.
func (r *Router) isGroupHome(group string) bool {
	h, ok := r.groupHome(group)
	return ok && h == r.self()
}

// groupHome returns the ring owner of a group.
func (r *Router) groupHome(group string) (peer.ID, bool) {
	return cluster.GroupHome(r.cfg.Ring(), group)
}

// onGroupOp joins or leaves a group for a local client.
func (r *Router) onGroupOp(client peer.ID, op *pb.GroupOp) {
	g := op.GetGroup()
	if protocol.CheckGroupName(g) != nil {
		return
	}
	// Forward only what the group's home will accept: the client's own
	// claim, for this group, at this supernode.
	mc, err := protocol.VerifyMembership(op.GetClaim(), client, g)
	if err != nil || mc.Supernode != r.self() || mc.Join != op.GetJoin() {
		r.stats.MembershipRefused.Add(1)
		r.log.Debug("group op refused: membership claim", "client", client.ShortString(), "group", g, "err", err)
		return
	}
	sink, ok := r.adm.Sink(client)
	if !ok {
		return
	}
	r.mu.Lock()
	if op.GetJoin() {
		if r.joined[client] == nil {
			r.joined[client] = map[string][]byte{}
		}
		r.joined[client][g] = op.GetClaim()
		if op.GetResume() {
			// Held out of the group's fanout until the home's replay
			// of what it missed is done (replay.go).
			if r.resuming[client] == nil {
				r.resuming[client] = map[string]*heldResume{}
			}
			home, _ := r.groupHome(g)
			r.resuming[client][g] = &heldResume{home: home, pos: store.Pos{Epoch: op.GetResumeEpoch(), Seq: op.GetResumeSeq()},
				until: r.cfg.Now().Add(resumeHold * r.cfg.Refresh)}
			if lg := r.local[g]; lg != nil {
				lg.Remove(string(client))
			}
		} else {
			delete(r.resuming[client], g)
			lg := r.local[g]
			if lg == nil {
				lg = r.cfg.Fanout.NewGroup()
				r.local[g] = lg
			}
			lg.Add(string(client), sink)
		}
	} else {
		delete(r.joined[client], g)
		delete(r.resuming[client], g)
		if lg := r.local[g]; lg != nil {
			lg.Remove(string(client))
			if lg.Len() == 0 {
				delete(r.local, g)
				delete(r.pos, g)
			}
		}
	}
	r.mu.Unlock()
	r.sendMembership([]membershipUpdate{{group: g, member: client, join: op.GetJoin(), claim: op.GetClaim(),
		resume: op.GetJoin() && op.GetResume(), pos: store.Pos{Epoch: op.GetResumeEpoch(), Seq: op.GetResumeSeq()}}})
}

// sendMembership tells each group's home, one batch per home.
func (r *Router) sendMembership(ups []membershipUpdate) {
	batches := map[peer.ID][]*pb.MembershipRecord{}
	self := r.self()
	told := map[string]peer.ID{}
	for _, u := range ups {
		h, ok := r.groupHome(u.group)
		if !ok {
			continue
		}
		batches[h] = append(batches[h], &pb.MembershipRecord{Group: u.group, Member: []byte(u.member), Supernode: []byte(self), Join: u.join, Refresh: u.refresh, Claim: u.claim,
			Resume: u.resume, SupernodeResume: u.snResume, ResumeEpoch: u.pos.Epoch, ResumeSeq: u.pos.Seq})
		if u.join {
			told[u.group] = h
		}
	}
	r.noteToldHomes(told)
	for h, recs := range batches {
		for _, b := range membershipBatches(recs) {
			if h == self {
				r.applyMembership(self, b)
				continue
			}
			r.links.send(h, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Membership{Membership: b}}))
		}
	}
}

// membershipBatches splits recs into batches that each fit a relay frame
// (see splitRecords).
func membershipBatches(recs []*pb.MembershipRecord) []*pb.MembershipBatch {
	var out []*pb.MembershipBatch
	for _, b := range splitRecords(recs) {
		out = append(out, &pb.MembershipBatch{Records: b})
	}
	return out
}

// applyMembership records what supernode from says about its own clients.
func (r *Router) applyMembership(from peer.ID, b *pb.MembershipBatch) {
	now := r.cfg.Now()
	expires := now.Add(3 * r.cfg.Refresh)
	self := r.self()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range b.GetRecords() {
		m, err := peer.IDFromBytes(rec.GetMember())
		if err != nil || protocol.CheckGroupName(rec.GetGroup()) != nil || peer.ID(rec.GetSupernode()) != from {
			continue
		}
		hg := r.homeRecordLocked(rec.GetGroup())
		if rec.GetJoin() && from != self && (hg == nil || hg.at[m] != from) {
			// A new membership from another supernode, within the
			// bounds (records.go); a refresh of a held one always passes.
			full, originFull := r.membersBy.room(from, r.bounds.memberships, r.bounds.membershipsPerOrigin)
			switch {
			case full:
				r.stats.MembershipsFull.Add(1)
				continue
			case originFull:
				r.stats.MembershipsOriginFull.Add(1)
				continue
			case hg == nil && len(r.homes) >= r.bounds.homeGroups:
				r.stats.HomeGroupsFull.Add(1)
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
		var mc protocol.Membership
		verified := hg != nil && hg.verified(m, from, claim)
		if !verified {
			mc, err = protocol.VerifyMembership(claim, m, rec.GetGroup())
			if err != nil || mc.Supernode != from || !mc.Join {
				r.stats.MembershipRefused.Add(1)
				r.log.Debug("membership refused", "member", m.ShortString(), "group", rec.GetGroup(), "from", from.ShortString(), "err", err)
				continue
			}
		}
		if hg == nil {
			hg = r.newHomeGroupLocked(rec.GetGroup())
		}
		hg.lastUse = now
		// A supernode new to the group here (this home is new to the
		// group, or the supernode is) may resume all its members.
		snNew := hg.bySN[from] == 0 && !hg.replaying[from]
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
			pos := store.Pos{Epoch: rec.GetResumeEpoch(), Seq: rec.GetResumeSeq()}
			switch {
			case rec.GetSupernodeResume() && snNew:
				r.startReplayLocked(hg, replayKey{group: rec.GetGroup(), sn: from}, pos)
			case !rec.GetSupernodeResume() && !rec.GetRefresh():
				r.startReplayLocked(hg, replayKey{group: rec.GetGroup(), sn: from, member: m}, pos)
			}
		}
	}
}

// onPublish relays a local client's publish to the group's home.
func (r *Router) onPublish(client peer.ID, p *pb.GroupPublish) {
	switch {
	case len(p.GetId()) != protocol.MessageIDLen:
		r.result(client, p.GetId(), pb.Result_STATUS_INVALID, "message id must be 16 bytes")
		return
	case protocol.CheckGroupName(p.GetGroup()) != nil:
		r.result(client, p.GetId(), pb.Result_STATUS_INVALID, protocol.CheckGroupName(p.GetGroup()).Error())
		return
	case len(p.GetPayload()) > 0:
		r.result(client, p.GetId(), pb.Result_STATUS_INVALID, "plaintext payload: a publish carries its payload in signed")
		return
	case len(p.GetSigned()) == 0 || len(p.GetSigned()) > protocol.MaxSignedPublish:
		r.result(client, p.GetId(), pb.Result_STATUS_INVALID, fmt.Sprintf("signed publish of %d bytes, want 1 to %d", len(p.GetSigned()), protocol.MaxSignedPublish))
		return
	}
	pub := &pb.GroupPublish{Group: p.GetGroup(), Id: p.GetId(), Signed: p.GetSigned(), From: []byte(client), Origin: []byte(r.self())}
	h, ok := r.groupHome(pub.Group)
	switch {
	case !ok:
		r.result(client, p.GetId(), pb.Result_STATUS_UNREACHABLE, "no ring yet: the group has no home")
	case h == r.self():
		r.homePublish(pub)
	case !r.links.send(h, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Publish{Publish: pub}})):
		r.result(client, p.GetId(), pb.Result_STATUS_UNREACHABLE, "group home cannot be reached")
	}
}

// homePublish numbers a publish and sends it once to each supernode
// holding members: the frame is encoded once and the same bytes go to
// every link.
func (r *Router) homePublish(p *pb.GroupPublish) {
	// A publish relayed by another supernode was not checked by us: one
	// whose message no member could read is refused before it is
	// numbered (its sender's supernode is told INVALID).
	if len(p.GetId()) != protocol.MessageIDLen || protocol.CheckGroupName(p.GetGroup()) != nil || len(p.GetSigned()) > protocol.MaxSignedPublish ||
		!fitsSession(&pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: &pb.GroupMessage{
			Group: p.GetGroup(), Epoch: ^uint64(0), Seq: ^uint64(0), From: p.GetFrom(), Id: p.GetId(), Publish: p.GetSigned(), Stamp: make([]byte, protocol.MaxStamp)}}}) {
		r.stats.OversizeGroup.Add(1)
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_INVALID, Detail: "invalid or too large group message"})
		return
	}
	// Number only what the publisher signed: a supernode relaying a
	// publish cannot publish in a client's name.
	from, err := peer.IDFromBytes(p.GetFrom())
	if err == nil {
		_, err = protocol.VerifyPublish(p.GetSigned(), from, p.GetGroup(), p.GetId())
	}
	if err != nil {
		r.stats.PublishRefused.Add(1)
		r.log.Debug("publish refused", "err", err)
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_INVALID, Detail: "publish not signed by its publisher"})
		return
	}
	// The home's fanout job: refused before a sequence number is spent.
	if !r.cfg.Sems.Fanout.TryAcquire() {
		r.stats.FanoutRefused.Add(1)
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "group home fanout at capacity"})
		return
	}
	defer r.cfg.Sems.Fanout.Release()
	// Numbering and queueing happen under one lock, so publishes that
	// race each other leave the home in sequence order on every link and
	// into the local fanout (queueing never blocks).
	r.mu.Lock()
	hg := r.homeRecordLocked(p.GetGroup())
	busy := ""
	switch {
	case !r.settled():
		// Just started: its ring may lack the supernodes that hold the
		// group's replicas (RouterConfig.Settled).
		r.stats.HomeUnsettled.Add(1)
		busy = "group home starting: its directory is still filling; retry with the same message id"
	case !r.isGroupHome(p.GetGroup()):
		// Sent by a supernode whose ring lags: a home numbers nothing
		// once its own ring moves the group, so that what it answers a
		// new home's sync is all it numbered (replica.go).
		busy = "not the group's home by this supernode's ring; retry with the same message id"
	case hg == nil && len(r.homes) >= r.bounds.homeGroups:
		r.stats.HomeGroupsFull.Add(1)
		busy = "group home holds too many groups"
	case len(r.pendingPubs) >= maxPendingPublishes:
		busy = "group home: too many publishes waiting for replicas"
	}
	if busy != "" {
		r.mu.Unlock()
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: busy})
		return
	}
	if hg == nil {
		hg = r.newHomeGroupLocked(p.GetGroup())
	}
	if hg.syncing {
		// Numbered when the replicas are in (endSyncLocked), in order.
		if len(hg.waiting) < maxWaitingPublishes {
			hg.waiting = append(hg.waiting, p)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "group home taking over: gathering replicas; retry with the same message id"})
		return
	}
	if retry, res := r.retryPublishLocked(hg, p); retry {
		r.mu.Unlock()
		if res != nil {
			r.publishResult(p, res)
		}
		return
	}
	hg.seq++
	hg.lastUse = r.cfg.Now()
	seq, epoch := hg.seq, hg.epoch
	r.stats.GroupPublishes.Add(1)
	stamp, err := protocol.Stamp(r.key, p.GetGroup(), epoch, seq, p.GetSigned())
	if err != nil {
		hg.seq--
		r.mu.Unlock()
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_UNREACHABLE, Detail: "group home cannot sign"})
		return
	}
	gm := &pb.GroupMessage{Group: p.GetGroup(), Epoch: hg.epoch, Seq: seq, From: p.GetFrom(), Id: p.GetId(), Publish: p.GetSigned(), Stamp: stamp}
	hg.numbered.put(publishIDKey(p.GetFrom(), p.GetId()), store.Pos{Epoch: epoch, Seq: seq})
	if r.cfg.Store != nil {
		if err := r.cfg.Store.AppendReplay(p.GetGroup(), store.Entry{Epoch: epoch, Seq: seq, Data: encodeEntry(entrySelf, gm)}); err != nil {
			// Delivered live all the same; a member that resumes past
			// it is told it missed it.
			r.stats.ReplayLogFailed.Add(1)
			r.log.Debug("replay log append failed", "group", p.GetGroup(), "err", err)
		}
	}
	self := r.self()
	if r.cfg.PerMemberFanoutForTest {
		// The naive design: one frame, encoded anew, per member.
		for m, sn := range hg.at {
			if hg.replaying[sn] {
				continue
			}
			one := &pb.GroupMessage{Group: gm.Group, Epoch: gm.Epoch, Seq: gm.Seq, From: gm.From, Id: gm.Id, Publish: gm.Publish, Stamp: gm.Stamp, Only: []byte(m)}
			if sn == self {
				r.deliverOnly(one)
			} else if r.links.sendGroup(sn, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: one}})) {
				r.stats.GroupFramesSent.Add(1)
			}
		}
	} else {
		frame := encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: gm}})
		for sn := range hg.bySN {
			if hg.replaying[sn] {
				continue // its replay ends with what was numbered until then
			}
			if sn == self {
				r.fanoutLocalLocked(gm, true)
				continue
			}
			if r.links.sendGroup(sn, frame) {
				r.stats.GroupFramesSent.Add(1)
			}
		}
	}
	acked := r.replicateLocked(p, gm)
	if acked {
		hg.acked.put(publishIDKey(p.GetFrom(), p.GetId()), store.Pos{Epoch: epoch, Seq: seq})
	}
	r.mu.Unlock()
	if acked {
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_OK, Seq: seq, Epoch: epoch})
	}
}

// publishResult sends a publish's outcome to the publisher, through its
// supernode.
func (r *Router) publishResult(p *pb.GroupPublish, res *pb.Result) {
	self := r.self()
	origin := peer.ID(p.GetOrigin())
	if origin == self {
		if to, err := peer.IDFromBytes(p.GetFrom()); err == nil {
			r.toClient(to, &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: res}}, &r.stats.OversizeOther)
		}
		return
	}
	r.links.send(origin, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_PublishResult{PublishResult: &pb.PublishResult{To: p.GetFrom(), Result: res}}}))
}

// fanoutLocal delivers a group message to this supernode's local members:
// wrapped once, fanned out by the engine. movePos: the message is from
// the group's home by this supernode's ring, and its position becomes
// this supernode's in the group when it is later.
func (r *Router) fanoutLocal(gm *pb.GroupMessage, movePos bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fanoutLocalLocked(gm, movePos)
}

// fanoutLocalLocked is fanoutLocal with r.mu held: the engine's Fanout
// only queues, and calling it under the lock keeps the order in which
// messages were numbered or received.
func (r *Router) fanoutLocalLocked(gm *pb.GroupMessage, movePos bool) {
	if len(gm.GetOnly()) > 0 {
		r.deliverOnly(gm)
		return
	}
	lg := r.local[gm.GetGroup()]
	if lg == nil {
		return
	}
	if p := (store.Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}); movePos && after(p, r.pos[gm.GetGroup()]) {
		r.pos[gm.GetGroup()] = p
	}
	// The engine's job queue is bounded; a full queue drops the message
	// here (counted) and the members' sequence numbers show the gap.
	sf := &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: gm}}
	if !fitsSession(sf) {
		// A group home (another supernode) sent a message no member
		// could read: dropped for all of them, not forwarded.
		r.stats.OversizeGroup.Add(1)
		return
	}
	frame := encodeSession(sf)
	if err := r.cfg.Fanout.Fanout(lg, frame, nil); err != nil {
		r.stats.FanoutRefused.Add(1)
		return
	}
	r.stats.GroupFanouts.Add(1)
}

// deliverOnly delivers a per-member group message (the naive design).
func (r *Router) deliverOnly(gm *pb.GroupMessage) {
	m, err := peer.IDFromBytes(gm.GetOnly())
	if err != nil {
		return
	}
	gm = &pb.GroupMessage{Group: gm.Group, Epoch: gm.Epoch, Seq: gm.Seq, From: gm.From, Id: gm.Id, Publish: gm.Publish, Stamp: gm.Stamp}
	r.toClient(m, &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: gm}}, &r.stats.OversizeGroup)
}

// onMembersRequest answers a client's "members of group" from the home.
func (r *Router) onMembersRequest(client peer.ID, req *pb.MembersRequest) {
	reply := func(ms [][]byte, errText string) {
		f := &pb.SessionFrame{Kind: &pb.SessionFrame_Members{Members: &pb.Members{Id: req.GetId(), Group: req.GetGroup(), Members: ms, Error: errText}}}
		if !fitsSession(f) {
			// A list longer than a session frame holds (about 1,600
			// members) is refused rather than sent whole: sent, it
			// would reset the asking client's session.
			r.stats.OversizeOther.Add(1)
			f.GetMembers().Members = nil
			f.GetMembers().Error = "members list too large for a session frame"
		}
		r.adm.Send(client, encodeSession(f))
	}
	if err := protocol.CheckGroupName(req.GetGroup()); err != nil {
		reply(nil, err.Error())
		return
	}
	h, ok := r.groupHome(req.GetGroup())
	if !ok {
		reply(nil, "no ring yet: the group has no home")
		return
	}
	if h == r.self() {
		r.mu.Lock()
		var ms [][]byte
		if hg := r.homes[req.GetGroup()]; hg != nil {
			for m := range hg.at {
				ms = append(ms, []byte(m))
			}
		}
		r.mu.Unlock()
		reply(ms, "")
		return
	}
	if !r.cfg.Sems.Lookups.TryAcquire() {
		reply(nil, "supernode busy")
		return
	}
	r.wg.Go(func() {
		defer r.cfg.Sems.Lookups.Release()
		resp, err := r.lookup(h, &pb.LookupRequest{Group: req.GetGroup()})
		if err != nil {
			reply(nil, "group home unreachable: "+err.Error())
			return
		}
		reply(resp.GetMembers(), "")
	})
}

// Rings disagree for a while when supernodes come and go (announcements
// reach each supernode at its own time; a newcomer's weight ramps in
// steps each supernode takes at its own tick). A group's home sends its
// frames to the supernodes that told it their members; a supernode whose
// ring has meanwhile moved the group elsewhere, or moved it back, dropped
// them as not from the home, and nothing sent them again: the home
// replays only to supernodes new to it. So a supernode takes a group's
// frames from the home by its ring and from every supernode it told its
// members of the group to, for as long as that one keeps the record
// (three refresh intervals): its own ring named that one the home then.
// A supernode its ring never named cannot have a message fanned out here.

// noteToldHomes records that this supernode told its members of each
// group to the home given (a join or a refresh).
func (r *Router) noteToldHomes(told map[string]peer.ID) {
	if len(told) == 0 {
		return
	}
	until := r.cfg.Now().Add(3 * r.cfg.Refresh)
	r.mu.Lock()
	defer r.mu.Unlock()
	for g, h := range told {
		hs := r.toldHomes[g]
		if hs == nil {
			hs = map[peer.ID]time.Time{}
			r.toldHomes[g] = hs
		}
		hs[h] = until
	}
}

// toldHome reports whether this supernode told its members of group to
// supernode p and p's record of them lasts.
func (r *Router) toldHome(group string, p peer.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	until, ok := r.toldHomes[group][p]
	return ok && r.cfg.Now().Before(until)
}

// expireToldHomesLocked forgets the homes whose records of this
// supernode's members have lapsed. r.mu is held.
func (r *Router) expireToldHomesLocked(now time.Time) {
	for g, hs := range r.toldHomes {
		for h, until := range hs {
			if !now.Before(until) {
				delete(hs, h)
			}
		}
		if len(hs) == 0 {
			delete(r.toldHomes, g)
		}
	}
}

// RingChanged is told each time the ring is published. The groups this
// supernode is home to by its records but no longer by the new ring lose
// their records here (with the publishes that waited on a sync, answered
// BUSY, and the replays under way: the next home replays), and so do the
// records made while another supernode was the home, once the ring makes
// this one the home (the memberships come again within a refresh, and
// the members' resumes under way finish from the log). Kept, a record
// carried on when the ring named this supernode the home again: its old
// epoch and sequence, no sync, and the supernodes it knew not new, so
// never replayed to, while another home may have numbered messages in
// between that some of them missed, and members resume after the newest
// epoch they saw, so a message numbered in an older one after it is never
// replayed to them. Dropped, regaining the role is a takeover.
func (r *Router) RingChanged() {
	rg := r.cfg.Ring()
	self := r.self()
	var refused []*pb.GroupPublish
	r.mu.Lock()
	dropped := map[string]bool{}
	for g, hg := range r.homes {
		h, ok := cluster.GroupHome(rg, g)
		home := ok && h == self
		if home && !hg.away {
			continue
		}
		if !home {
			dropped[g] = true // the replays under way stop: the home's replay
		}
		refused = append(refused, hg.waiting...)
		delete(r.homes, g)
		delete(r.syncs, g)
		r.log.Debug("group home record dropped: the ring moved the group", "group", g, "epoch", hg.epoch, "seq", hg.seq, "home_now", home)
	}
	if len(dropped) > 0 {
		for k := range r.replays {
			if dropped[k.group] {
				delete(r.replays, k)
			}
		}
	}
	r.mu.Unlock()
	for _, p := range refused {
		r.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "not the group's home by this supernode's ring; retry with the same message id"})
	}
}
