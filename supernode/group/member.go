package group

import (
	"cmp"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
)

// The member's-supernode side: the groups its clients joined, their local
// fanout, the position of the last group message fanned out here, the
// homes it told its members to, and members held while a home replays
// what they missed.

// membershipUpdate is one membership record to send to a group's home.
type membershipUpdate struct {
	group  string
	member string
	join   bool
	claim  []byte // the member's signed claim (joins; a leave may have none)
	// refresh: a periodic re-send, which must not move a member that a
	// fresh join recorded at another supernode (see homeGroup.refresh).
	refresh bool
	// resume asks the home to replay after pos: the member's position
	// (its GroupOp), or with snResume this supernode's.
	resume, snResume bool
	pos              Pos
}

// GroupOp joins or leaves a group for a local client. The shell checked
// the op's form; the claim is checked here: forwarded is only what the
// group's home will accept, the client's own claim for this group at this
// supernode.
func (c *Core) GroupOp(now time.Time, client string, op *pb.GroupOp) {
	g := op.GetGroup()
	if !c.validGroup(g) {
		return
	}
	mc, err := c.cfg.Verifier.VerifyMembership(op.GetClaim(), client, g)
	if err != nil || mc.Supernode != c.self || mc.Join != op.GetJoin() {
		c.stats.MembershipRefused.Add(1)
		c.log.Debug("group op refused: membership claim", "group", g, "err", err)
		return
	}
	if !c.cfg.Local.Attached(client) {
		return
	}
	pos := Pos{Epoch: op.GetResumeEpoch(), Seq: op.GetResumeSeq()}
	if op.GetJoin() {
		if c.joined[client] == nil {
			c.joined[client] = map[string][]byte{}
		}
		c.joined[client][g] = op.GetClaim()
		if op.GetResume() {
			// Held out of the group's fanout until the home's replay
			// of what it missed is done.
			if c.resuming[client] == nil {
				c.resuming[client] = map[string]*heldResume{}
			}
			home, _ := c.groupHome(g)
			c.resuming[client][g] = &heldResume{home: home, pos: pos, asked: now, until: now.Add(ResumeHold * c.cfg.Refresh)}
			c.leaveLocal(g, client, false)
		} else {
			delete(c.resuming[client], g)
			c.joinLocal(g, client)
			if at, ok := c.pos[g]; ok && !c.cfg.Mutations.NoJoinStart {
				// The member starts after this supernode's position: a
				// member that lost its session before its first message
				// came back with no position to resume from, and missed
				// what was published while it was away (found by
				// testnet/groupsim, seeds 2056, 2478, 2933).
				c.cfg.Local.ToClient(client, &pb.SessionFrame{Kind: &pb.SessionFrame_Resumed{Resumed: &pb.Resumed{Group: g, Epoch: at.Epoch, Seq: at.Seq}}})
			}
		}
	} else {
		delete(c.joined[client], g)
		delete(c.resuming[client], g)
		c.leaveLocal(g, client, true)
	}
	c.sendMembership(now, []membershipUpdate{{group: g, member: client, join: op.GetJoin(), claim: op.GetClaim(),
		resume: op.GetJoin() && op.GetResume(), pos: pos}})
}

func (c *Core) joinLocal(g, client string) {
	if c.local[g] == nil {
		c.local[g] = map[string]bool{}
	}
	c.local[g][client] = true
	c.cfg.Local.Join(g, client)
}

// leaveLocal takes client out of g's local fanout; forget: when the
// group has no local member left, this supernode's position in it goes.
func (c *Core) leaveLocal(g, client string, forget bool) {
	lg := c.local[g]
	if lg == nil {
		return
	}
	if lg[client] {
		delete(lg, client)
		c.cfg.Local.Leave(g, client)
	}
	if forget && len(lg) == 0 {
		delete(c.local, g)
		delete(c.pos, g)
		delete(c.posFrom, g)
		delete(c.holding, g)
	}
}

// Detached is told when a client's session here ends (and no newer one
// of it is attached here): it leaves every group it joined here.
func (c *Core) Detached(now time.Time, client string) {
	delete(c.resuming, client)
	groups := c.joined[client]
	delete(c.joined, client)
	var leave []membershipUpdate
	for _, g := range sortedKeys(groups) {
		c.leaveLocal(g, client, true)
		leave = append(leave, membershipUpdate{group: g, member: client, join: false})
	}
	c.sendMembership(now, leave)
}

// sendMembership tells each group's home, one batch per home.
func (c *Core) sendMembership(now time.Time, ups []membershipUpdate) {
	batches := map[string][]*pb.MembershipRecord{}
	var order []string
	type homeGroupKey struct{ home, group string }
	snAsked := map[homeGroupKey]bool{}
	for _, u := range ups {
		if u.snResume {
			if h, ok := c.groupHome(u.group); ok {
				snAsked[homeGroupKey{h, u.group}] = true
			}
		}
	}
	for _, u := range ups {
		h, ok := c.groupHome(u.group)
		if !ok {
			continue
		}
		if batches[h] == nil {
			order = append(order, h)
		}
		if k := (homeGroupKey{h, u.group}); u.join && !snAsked[k] && c.needsReplay(u.group, h) {
			// A home this supernode's position does not follow learns
			// of a member here: the supernode's own resume goes first,
			// in the same batch, so that the home replays to it before
			// it sends it a live frame (a live frame first moved the
			// position past what the home held and this supernode
			// missed, or reached the members before it; found by
			// testnet/groupsim).
			snAsked[k] = true
			if r := c.snResumeRecord(u.group); r != nil {
				batches[h] = append(batches[h], r)
			}
		}
		batches[h] = append(batches[h], &pb.MembershipRecord{Group: u.group, Member: []byte(u.member), Supernode: []byte(c.self), Join: u.join, Refresh: u.refresh, Claim: u.claim,
			Resume: u.resume, SupernodeResume: u.snResume, ResumeEpoch: u.pos.Epoch, ResumeSeq: u.pos.Seq})
		if u.join {
			c.noteToldHome(now, u.group, h)
		}
	}
	for _, h := range order {
		c.sendRecords(now, h, batches[h])
	}
}

// sendRecords sends membership records to home, in batches; to this
// supernode itself, straight into its own home side.
func (c *Core) sendRecords(now time.Time, home string, recs []*pb.MembershipRecord) {
	for _, b := range SplitBatches(recs, c.cfg.MaxBatchBytes) {
		if home == c.self {
			c.Membership(now, c.self, b)
			continue
		}
		c.cfg.Net.Send(home, &pb.RelayFrame{Kind: &pb.RelayFrame_Membership{Membership: b}})
	}
}

// batchLimit bounds the records of one membership batch.
const batchLimit = 1000

// SplitBatches splits membership records into batches of at most 1,000
// records and maxBytes encoded bytes (Config.MaxBatchBytes), so that each
// batch's relay frame fits what a supernode reads.
func SplitBatches(recs []*pb.MembershipRecord, maxBytes int) []*pb.MembershipBatch {
	var out []*pb.MembershipBatch
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && n < batchLimit {
			// A record in the batch: its tag, its length, its bytes.
			rs := proto.Size(recs[n])
			rs += 1 + protowire.SizeVarint(uint64(rs))
			if n > 0 && size+rs > maxBytes {
				break
			}
			size += rs
			n++
		}
		out = append(out, &pb.MembershipBatch{Records: recs[:n]})
		recs = recs[n:]
	}
	return out
}

// Rings disagree for a while when supernodes come and go. A group's home
// sends its frames to the supernodes that told it their members; a
// supernode whose ring has meanwhile moved the group elsewhere, or moved
// it back, dropped them as not from the home, and nothing sent them
// again: the home replays only to supernodes new to it. So a supernode
// takes a group's frames from the home by its ring and from every
// supernode it told its members of the group to, for as long as that one
// keeps the record (three refresh intervals). A supernode its ring never
// named cannot have a message fanned out here.

func (c *Core) noteToldHome(now time.Time, g, h string) {
	hs := c.toldHomes[g]
	if hs == nil {
		hs = map[string]time.Time{}
		c.toldHomes[g] = hs
	}
	hs[h] = now.Add(3 * c.cfg.Refresh)
}

func (c *Core) toldHome(now time.Time, g, p string) bool {
	if c.cfg.Mutations.NoToldHomes {
		return false
	}
	until, ok := c.toldHomes[g][p]
	return ok && now.Before(until)
}

// GroupMessage is a group frame from supernode from. Fanned out is only
// what a home of the group stamped: the home by this supernode's ring, or
// one it told its members to whose record of them lasts. (Members check
// the stamp and the publisher's signature again.)
func (c *Core) GroupMessage(now time.Time, from string, gm *pb.GroupMessage) {
	h, _ := c.groupHome(gm.GetGroup())
	// The home this supernode's position follows is taken too: a
	// supernode whose ring flapped refreshed its members elsewhere long
	// enough for its record of telling that home to run out, refused its
	// frames, then took the next ones, and its position (and members)
	// moved past the refused ones; the home, which had replayed to it,
	// never sent them again (found by testnet/groupsim,
	// Mutations.NoFollowedHome).
	follows := c.posFrom[gm.GetGroup()] == from && !c.cfg.Mutations.NoFollowedHome
	if h != from && !follows && !c.toldHome(now, gm.GetGroup(), from) {
		c.stats.GroupRefused.Add(1)
		c.log.Debug("group frame refused: not from a home of the group", "group", gm.GetGroup(), "epoch", gm.GetEpoch(), "seq", gm.GetSeq())
		return
	}
	if err := c.cfg.Verifier.VerifyStamp(gm, from); err != nil {
		c.stats.GroupRefused.Add(1)
		return
	}
	mover := ""
	if h == from || follows {
		mover = from
	}
	if c.holdsBack(now, gm, from, mover) {
		c.stats.GroupHeldBack.Add(1)
		return
	}
	c.fanoutLocal(gm, mover)
}

// holdsBack reports whether a live group frame from a home is held back
// (not fanned out) until that home has replayed to this supernode: the
// frame comes from a home its position does not follow, or skips past a
// message it did not get (it refused a frame while its ring named
// another home, a link dropped one, or the home dropped a position it
// could not replicate). The supernode asks the home at once to replay
// after its position (its own resume, marked as an ask: not a refresh),
// and the replay's frames (GroupMessage.replay) and its ReplayDone carry
// on from there. Fanned out, such a frame moved the members past what
// the replay brought later, and members never go back (overlay/member)
// (found by testnet/groupsim, Mutations.NoHoldBack).
func (c *Core) holdsBack(now time.Time, gm *pb.GroupMessage, from, mover string) bool {
	g := gm.GetGroup()
	if c.cfg.Mutations.NoHoldBack || c.cfg.Mutations.NoPosHandoff || gm.GetReplay() || len(gm.GetOnly()) > 0 || len(c.local[g]) == 0 {
		return false
	}
	if h, held := c.holding[g]; held {
		if h == from {
			return true
		}
		if mover != from {
			return false // another home's frame, not the ring's: as before
		}
		// The ring moved on while this supernode waited: ask the new
		// home.
	} else {
		pos, has := c.pos[g]
		if !has {
			return false
		}
		p := Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}
		next := p.Epoch == pos.Epoch && p.Seq == pos.Seq+1 || p.Epoch > pos.Epoch && p.Seq == 1
		if mover == "" && (next || c.cfg.Mutations.NoToldHoldBack) {
			return false
		}
		// A frame of a home this supernode told (its ring does not name
		// it) that skips past its position is held back too: after a
		// partition healed, the home of the side that kept the group
		// sent its next frame before this supernode's ring had it back,
		// and fanned out, it moved the members past what that home
		// numbered during the partition (found by testnet/groupsim,
		// partitions).
		if mover != "" && c.posFrom[g] == mover && (!p.After(pos) || next) {
			return false
		}
		if !p.After(pos) {
			return false // a copy: members drop it
		}
	}
	c.holding[g] = from
	c.askReplay(now, g, from)
	return true
}

// askReplay sends home this supernode's own resume of group g as an
// explicit ask (not a refresh): the home replays after its position.
func (c *Core) askReplay(now time.Time, g, home string) {
	r := c.snResumeRecord(g)
	if r == nil {
		return
	}
	r.Refresh = false
	c.noteToldHome(now, g, home)
	c.sendRecords(now, home, []*pb.MembershipRecord{r})
}

// needsReplay reports whether this supernode's own resume goes with a
// member's join or resume sent to home h: whenever it has a position in
// group g and members there. Sent only while its position did not follow
// h, it was missing when h's record of the group was new (h took the
// group over, or made its record anew) though this supernode's position
// followed h's earlier record: the member's record came first, h sent
// live frames, and the members here missed what h had numbered before
// (found by testnet/groupsim, Mutations.NoResumeWithJoin). A home
// replays to a supernode once per record, so the resume costs nothing
// more where h already has.
func (c *Core) needsReplay(g, h string) bool {
	if c.cfg.Mutations.NoPosHandoff {
		return false
	}
	_, has := c.pos[g]
	return has && len(c.local[g]) > 0 && (c.posFrom[g] != h || !c.cfg.Mutations.NoResumeWithJoin)
}

// snResumeRecord is a membership record carrying this supernode's own
// resume of group g, on behalf of one of its members there (the record
// format has no supernode-only form); nil when no member here has a claim.
func (c *Core) snResumeRecord(g string) *pb.MembershipRecord {
	for _, cl := range sortedKeys(c.local[g]) {
		if claim, ok := c.joined[cl][g]; ok {
			p := c.pos[g]
			return &pb.MembershipRecord{Group: g, Member: []byte(cl), Supernode: []byte(c.self), Join: true, Refresh: true, Claim: claim,
				Resume: true, SupernodeResume: true, ResumeEpoch: p.Epoch, ResumeSeq: p.Seq}
		}
	}
	return nil
}

// fanoutLocal delivers a group message to this supernode's local members.
// mover is the home by this supernode's ring that sent it (empty: another
// home): its position becomes this supernode's in the group when it is
// later and this supernode's position follows that home (posFrom).
func (c *Core) fanoutLocal(gm *pb.GroupMessage, mover string) {
	if len(gm.GetOnly()) > 0 {
		c.deliverOnly(gm)
		return
	}
	g := gm.GetGroup()
	if len(c.local[g]) == 0 {
		return
	}
	if p := (Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}); c.movesPos(g, mover) && p.After(c.pos[g]) {
		c.pos[g] = p
	}
	c.cfg.Local.Fanout(gm)
}

// A supernode's position in a group is what it resumes from at a new
// home: a new home replays after it to all of its members. It follows one
// home at a time (posFrom): the home that numbered the first message
// fanned out here, then, after a home change, the new home once it has
// replayed to this supernode (its ReplayDone for the supernode). Moved by
// a new home's live frames before that, the position passed messages the
// new home held and this supernode never got (its members joined the new
// home's record by a member's join or resume first, so live frames came
// before this supernode's own resume; found by testnet/groupsim), and its
// resume then asked for nothing.
func (c *Core) movesPos(g, mover string) bool {
	if mover == "" {
		return false
	}
	if c.cfg.Mutations.NoPosHandoff {
		return true
	}
	if _, has := c.pos[g]; !has {
		c.posFrom[g] = mover
		return true
	}
	return c.posFrom[g] == mover
}

// deliverOnly delivers a per-member group message.
func (c *Core) deliverOnly(gm *pb.GroupMessage) {
	m := string(gm.GetOnly())
	gm = &pb.GroupMessage{Group: gm.Group, Epoch: gm.Epoch, Seq: gm.Seq, From: gm.From, Id: gm.Id, Publish: gm.Publish, Stamp: gm.Stamp}
	c.cfg.Local.Deliver(m, gm)
}

// Refresh is the periodic re-send of every membership held here to its
// group's home (with this supernode's position in the group, so that a
// home new to the group replays what came after it), the resumes to send
// again, the holds that ran out, and the expiry of home records.
func (c *Core) Refresh(now time.Time) {
	var mems []membershipUpdate
	for _, cl := range sortedKeys(c.joined) {
		gs := c.joined[cl]
		for _, g := range sortedKeys(gs) {
			// With this supernode's position when it does not follow
			// the home by its ring yet: that home replays what came
			// after it to all of this supernode's members.
			pos, ok := c.pos[g]
			mems = append(mems, membershipUpdate{group: g, member: cl, join: true, refresh: true, claim: gs[g], resume: ok, snResume: ok, pos: pos})
		}
	}
	// After the refreshes: a home new to this supernode's members learns
	// them, and replays to the supernode, before it hears a held
	// member's resume.
	mems = append(mems, c.resendHeld(now)...)
	c.releaseHeld(now)
	// Live frames held back: ask again, the ring's home now (the ask or
	// its answer may have been lost, or the home died).
	for _, g := range sortedKeys(c.holding) {
		if h, ok := c.groupHome(g); ok {
			c.holding[g] = h
			c.askReplay(now, g, h)
		}
	}
	for g, hs := range c.toldHomes {
		for h, until := range hs {
			if !now.Before(until) {
				delete(hs, h)
			}
		}
		if len(hs) == 0 {
			delete(c.toldHomes, g)
		}
	}
	for g, hg := range c.homes {
		hg.expire(now)
		if len(hg.at) == 0 && now.Sub(hg.lastUse) > 3*c.cfg.Refresh {
			c.forgetHome(g, notHome)
			c.log.Debug("group home record dropped: no members, idle", "group", g)
		}
	}
	c.sendMembership(now, mems)
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
