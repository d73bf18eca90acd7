package group

import (
	"slices"
	"time"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Home replication: a group's home sends each message it numbers to the
// other members of the group's home cluster (R = 3, the home first) and,
// once a majority of the cluster holds it (one replica; the home's own
// copy is the other), releases it in numbering order: logs it, fans it
// out and tells the publisher OK (home.go, release). When the home dies,
// the ring makes the next cluster member the home; before it numbers
// anything it gathers the replicas the other members hold (ReplicaSync,
// answered only by supernodes whose ring names it the home) and starts a
// new epoch after them. Members' supernodes resume from the last message
// they fanned out, so what the old home acknowledged reaches them from the
// new one. A publisher that saw no OK retries with the same message ID;
// the home numbers an ID once while it remembers it (a dropped message,
// and one a new home finds in its log, is numbered anew: members deliver
// a publish once, by its ID).
//
// The guarantee: a publish acknowledged OK is held in memory by two of the
// three home-cluster supernodes and written to their disks within the
// store's flush interval; it survives the crash of any one of them. Two
// crashes within one flush interval may lose it.

const (
	// ReplicationTimeout bounds the wait for a replica's ack; the
	// publisher is then told BUSY and retries with the same ID, and the
	// home drops its record of the group (sweepReplication): numbering
	// again is a takeover.
	ReplicationTimeout = 2 * time.Second
	// MaxPendingPublishes bounds the publishes waiting for replicas; past
	// it a publish is refused BUSY before it is numbered.
	MaxPendingPublishes = 8192
	// SyncTimeout bounds how long a new home waits for the replicas the
	// other cluster members hold before it numbers without them: once a
	// majority of the home cluster by each recent ring answered
	// (Core.endorsed, rings.go); until then it waits, asking again.
	SyncTimeout = 2 * time.Second
	// MaxWaitingPublishes bounds the publishes a group's new home holds
	// while it syncs; past it they are answered BUSY.
	MaxWaitingPublishes = 1024
	// maxPublishIDs bounds the publish IDs a home remembers per group (the
	// replay log's count bound).
	maxPublishIDs = 4096
	// SyncReask is how often a new home asks again the peers that have
	// not answered its sync: a previous home whose ring still names it the
	// home does not answer until its ring moves on.
	SyncReask = 250 * time.Millisecond
)

// pubKey names a numbered message.
type pubKey struct {
	group      string
	epoch, seq uint64
}

// pendingPublish is a numbered message until its home releases it
// (Core.release): waiting for replica acks, then, held by a majority,
// for the messages numbered before it.
type pendingPublish struct {
	p        *pb.GroupPublish // answered at release: where the publisher is now
	gm       *pb.GroupMessage
	need     int
	acked    map[string]bool
	replicas []string
	frame    *pb.RelayFrame // the replica frame, resent on a publisher's retry
	deadline time.Time
}

// held reports whether a majority of the home cluster holds the message
// (the home's own copy is logged at release).
func (pp *pendingPublish) held() bool { return len(pp.acked) >= pp.need }

// publishIDs remembers the (epoch, seq) a home gave each publish ID, FIFO
// bounded, so that a retry is not numbered twice.
type publishIDs struct {
	at    map[string]Pos
	order []string
}

func (ids *publishIDs) get(k string) (Pos, bool) {
	p, ok := ids.at[k]
	return p, ok
}

func (ids *publishIDs) put(k string, p Pos) {
	if ids.at == nil {
		ids.at = map[string]Pos{}
	}
	if _, ok := ids.at[k]; ok {
		return
	}
	if len(ids.order) >= maxPublishIDs {
		delete(ids.at, ids.order[0])
		ids.order = ids.order[1:]
	}
	ids.at[k] = p
	ids.order = append(ids.order, k)
}

// del forgets k: its next publish is numbered anew. (Its place in order
// stays; evicted, it deletes nothing or a later position a little early.)
func (ids *publishIDs) del(k string) { delete(ids.at, k) }

func publishIDKey(from, id []byte) string { return string(from) + "/" + string(id) }

// replicasOf returns the members of group's home cluster other than this
// supernode.
func (c *Core) replicasOf(group string) []string {
	return slices.DeleteFunc(slices.Clone(c.cfg.Ring.Cluster(group)), func(p string) bool { return p == c.self })
}

func (c *Core) inHomeCluster(group, p string) bool {
	return slices.Contains(c.cfg.Ring.Cluster(group), p)
}

// replicate sends gm to the replicas and records the publish as pending
// in hg until it is released; no replica is needed in a cluster of one,
// or with no replay log.
func (c *Core) replicate(now time.Time, hg *homeGroup, p *pb.GroupPublish, gm *pb.GroupMessage) {
	var reps []string
	need := 0
	if c.cfg.Replay != nil {
		reps = c.replicasOf(gm.GetGroup())
		need = (len(reps)+1)/2 + 1 - 1 // a majority of the cluster, the home counting
	}
	if need <= 0 {
		reps = nil
	}
	frame := &pb.RelayFrame{Kind: &pb.RelayFrame_Replica{Replica: gm}}
	for _, sn := range reps {
		c.cfg.Net.Send(sn, frame)
	}
	c.stats.ReplicasSent.Add(uint64(len(reps)))
	k := pubKey{gm.GetGroup(), gm.GetEpoch(), gm.GetSeq()}
	c.pendingPubs[k] = &pendingPublish{
		p: p, gm: gm, need: need, acked: map[string]bool{}, replicas: reps, frame: frame,
		deadline: now.Add(ReplicationTimeout),
	}
	hg.unreleased = append(hg.unreleased, k)
}

// ReplicaAck counts a replica's ack; held by a majority, the message is
// released in its turn.
func (c *Core) ReplicaAck(from string, a *pb.ReplicaAck) {
	k := pubKey{a.GetGroup(), a.GetEpoch(), a.GetSeq()}
	pp := c.pendingPubs[k]
	if pp == nil || !slices.Contains(pp.replicas, from) {
		return
	}
	pp.acked[from] = true
	if pp.held() {
		c.release(k.group)
	}
}

// dropPending forgets a numbered message that will not be released and
// tells its publisher BUSY (it retries with the same ID, numbered anew).
func (c *Core) dropPending(k pubKey, detail string) {
	pp := c.pendingPubs[k]
	if pp == nil {
		return
	}
	delete(c.pendingPubs, k)
	if hg := c.homes[k.group]; hg != nil {
		hg.numbered.del(publishIDKey(pp.p.GetFrom(), pp.p.GetId()))
	}
	c.publishResult(pp.p, &pb.Result{Id: pp.p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: detail})
}

// forgetHome drops this supernode's home record of g: what it numbered
// and has not released is dropped (answered BUSY), the publishes waiting
// for its sync too.
func (c *Core) forgetHome(g, detail string) {
	hg := c.homes[g]
	if hg == nil {
		return
	}
	for _, k := range hg.unreleased {
		c.dropPending(k, detail)
	}
	delete(c.homes, g)
	if s := c.syncs[g]; s != nil && !c.cfg.Mutations.NoKeepGathered {
		// What the sync gathered stays in the log: the live replicas
		// of the home that kept the role came in as answers while this
		// supernode's ring named it home, and dropped with the sync
		// they left a hole the next live replica was appended after; as
		// home again later, it synced after that replica and replayed
		// past the hole (found by testnet/groupsim, seed 662).
		c.appendGathered(g, s)
	}
	delete(c.syncs, g)
	for _, p := range hg.waiting {
		c.publishResult(p, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: detail})
	}
}

// sweepReplication answers BUSY the publishes whose replicas did not ack
// in time (the publisher retries with the same ID), and moves the syncs
// on: asks once settled, asks again, ends the ones that waited too long.
func (c *Core) sweepReplication(now time.Time) {
	var late []pubKey
	for _, k := range sortedPubKeys(c.pendingPubs) {
		if pp := c.pendingPubs[k]; !pp.held() && now.After(pp.deadline) {
			late = append(late, k)
		}
	}
	for _, k := range late {
		c.stats.ReplicationTimeouts.Add(1)
		c.dropPending(k, "group home: not replicated in time; retry with the same message id")
	}
	for _, g := range groupsOf(late) {
		if c.cfg.Mutations.NoRetakeOnTimeout {
			c.release(g)
			continue
		}
		// A home whose replicas did not hold a message in time may
		// have lost the role in their rings for a while (their rings
		// dropped it: a flap), and another home numbered, with those
		// replicas' acks, what this one never learnt of; its own ring
		// never moved, so it never synced, and numbered on in its old
		// epoch past them (found by testnet/groupsim, seed 10660:
		// Mutations.NoRetakeOnTimeout). It drops the record: numbering
		// again is a takeover, whose sync gathers what the other home
		// numbered once the replicas' rings name this one again.
		c.forgetHome(g, "group home: not replicated in time; retry with the same message id")
		c.log.Debug("group home record dropped: replicas did not ack in time", "group", g)
	}
	for _, g := range sortedKeys(c.fills) {
		switch f := c.fills[g]; {
		case f.asked.IsZero():
			f.asked = now
		case now.Sub(f.asked) >= SyncReask:
			f.asked = now
			c.sendFill(g, f)
		}
	}
	var waiting []*pb.GroupPublish
	for _, g := range sortedKeys(c.syncs) {
		s := c.syncs[g]
		switch {
		case s.pending:
			if hg := c.homes[g]; hg == nil {
				delete(c.syncs, g)
			} else if c.settled() && !c.askSync(now, hg, g, s) {
				waiting = append(waiting, c.endSync(g)...)
			}
		case now.After(s.deadline) && c.endorsed(now, g, s, true), c.liveAnswered(g, s) && c.endorsed(now, g, s, false):
			waiting = append(waiting, c.endSync(g)...)
		case now.Sub(s.asked) >= SyncReask:
			s.asked = now
			for _, sn := range s.waiting {
				c.cfg.Net.Send(sn, s.request)
			}
		}
	}
	for _, p := range waiting {
		c.HomePublish(now, p)
	}
}

// groupsOf returns the groups of ks, once each, in order.
func groupsOf(ks []pubKey) []string {
	var gs []string
	for _, k := range ks {
		if !slices.Contains(gs, k.group) {
			gs = append(gs, k.group)
		}
	}
	return gs
}

func sortedPubKeys(m map[pubKey]*pendingPublish) []pubKey {
	ks := make([]pubKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b pubKey) int {
		switch {
		case a.group != b.group:
			return compareStrings(a.group, b.group)
		case a.epoch != b.epoch:
			return compareU64(a.epoch, b.epoch)
		}
		return compareU64(a.seq, b.seq)
	})
	return ks
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// retryPublish answers a publish whose ID the home numbered before: OK
// again when it was released, else its unacked replicas are sent again
// and the answer comes at its release. It reports whether p was such a
// retry; a dropped one is numbered anew.
func (c *Core) retryPublish(hg *homeGroup, p *pb.GroupPublish) (handled bool, res *pb.Result) {
	key := publishIDKey(p.GetFrom(), p.GetId())
	if pos, ok := hg.acked.get(key); ok {
		c.stats.PublishRetries.Add(1)
		return true, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_OK, Epoch: pos.Epoch, Seq: pos.Seq}
	}
	pos, ok := hg.numbered.get(key)
	if !ok {
		return false, nil
	}
	pp := c.pendingPubs[pubKey{p.GetGroup(), pos.Epoch, pos.Seq}]
	if pp == nil {
		return false, nil
	}
	c.stats.PublishRetries.Add(1)
	pp.p = p // answer where the publisher is now
	for _, sn := range pp.replicas {
		if !pp.acked[sn] {
			c.cfg.Net.Send(sn, pp.frame)
		}
	}
	return true, nil
}

// Replica stores a message numbered by the group's home (or, answering
// this supernode's sync, one another cluster member holds) and acks it.
func (c *Core) Replica(from string, gm *pb.GroupMessage) {
	g := gm.GetGroup()
	if c.cfg.Replay == nil || !c.validGroup(g) {
		c.stats.ReplicasRefused.Add(1)
		return
	}
	// An answer to this supernode's sync comes from a peer it asked; a
	// live replica from a member of the group's home cluster, to one.
	sync := c.syncs[g]
	syncing := sync != nil && slices.Contains(sync.waiting, from)
	if !c.cfg.Mutations.NoSyncAnswersOnly {
		// Only a sync answer (marked replay) is gathered: a live
		// replica from a peer this sync waits for (its ring names it
		// the home; it answers once its ring moves on) was gathered
		// too, and appended when the sync ended without that peer past
		// a hole this supernode's log had (it refused the live
		// replicas before while it lacked earlier ones); members that
		// resumed here missed what the hole held (found by
		// testnet/groupsim, seed 1346). Taken as live, it is checked
		// for a hole like any other.
		syncing = syncing && gm.GetReplay()
	}
	if !syncing && (!c.inHomeCluster(g, c.self) || !c.inHomeCluster(g, from)) {
		c.stats.ReplicasRefused.Add(1)
		return
	}
	// A live replica only from the home by this supernode's ring: a
	// supernode whose ring dropped the live home for a moment takes the
	// home role and numbers; held by a replica whose ring still names
	// the live home, its publish was acknowledged, and the live home,
	// which never lost the role, never learnt of it (found by
	// testnet/groupsim). Refused, the publish is not acknowledged and
	// the publisher retries at the live home. A takeover waits for the
	// replicas' rings to name the new home (the directory's expiry).
	if h, _ := c.groupHome(g); !syncing && h != from && !c.cfg.Mutations.NoReplicaHomeCheck {
		c.stats.ReplicasRefused.Add(1)
		return
	}
	// A live replica is stamped by the home that sends it; a sync answer
	// carries the stamp of the home that numbered it, which may be gone.
	// Either way the publisher's signature must hold.
	// A fill answer (a replay of the home's log, asked for by askFill)
	// holds what earlier homes stamped, like a sync answer.
	f := c.fills[g]
	filling := !syncing && gm.GetReplay() && f != nil && f.from == from
	isHome := func(p string) bool { return p == from }
	if syncing || filling {
		isHome = func(string) bool { return true }
	}
	if err := c.cfg.Verifier.OpenGroupMessage(gm, isHome); err != nil {
		c.stats.ReplicasRefused.Add(1)
		return
	}
	if !syncing && !filling && !c.cfg.Mutations.NoReplicaFill {
		// A live replica past a hole in the log is not appended: the
		// log is append-only, and the hole (live replicas this
		// supernode refused while its ring lagged) would stay; as the
		// next home it replayed past it, and members that resumed
		// there missed what it lacked (found by testnet/groupsim,
		// seeds 126, 253, 1409). Not acknowledged, it is held by the
		// home's other replicas; the home fills the hole from its log.
		last, ok := c.cfg.Replay.ReplayLast(g)
		if r, filled := c.resolved[g]; filled && r.After(last) {
			last = r // the positions between were dropped (answerFill)
		}
		if ok && holeBefore(last, Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}) {
			// Not while this supernode's own sync of the group is
			// under way: the fill's answers are replays, as the
			// sync's are, and were gathered for the sync's end while
			// the fill's end marked the hole resolved; the next live
			// replica was appended past it (found by
			// testnet/groupsim, seed 413: Mutations.NoFillAfterSync).
			// The sync fills the log when it ends.
			if sync == nil || c.cfg.Mutations.NoFillAfterSync {
				c.askFill(g, from, last)
			}
			c.stats.ReplicasRefused.Add(1)
			return
		}
	}
	if syncing && !c.cfg.Mutations.NoSyncMerge {
		// Gathered, and appended in order when the sync ends: appended
		// as they came, one peer's answer (missing a message: it refused
		// the live replica while its ring lagged) moved the log past a
		// position another peer held, which the log then ignored (found
		// by testnet/groupsim).
		if len(sync.got) < maxSyncGathered {
			sync.got[Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}] = gm
		}
		c.stats.ReplicasHeld.Add(1)
		return
	}
	if err := c.cfg.Replay.AppendReplay(g, Entry{Epoch: gm.GetEpoch(), Seq: gm.GetSeq(), Data: EncodeEntry(EntryReplica, gm)}); err != nil {
		c.stats.ReplicasRefused.Add(1)
		return
	}
	// The log ignores an entry at or below its last position (it holds
	// a newer epoch, numbered meanwhile by another home): acknowledged
	// all the same, the home counted a replica that holds nothing
	// (found by testnet/groupsim). Acked is only what the log holds.
	if !c.cfg.Mutations.NoHeldCheck && !c.logHolds(g, Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}) {
		c.stats.ReplicasRefused.Add(1)
		return
	}
	c.stats.ReplicasHeld.Add(1)
	if r, ok := c.resolved[g]; ok && !r.After(Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}) {
		delete(c.resolved, g)
	}
	if !syncing && !filling {
		c.cfg.Net.Send(from, &pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaAck{ReplicaAck: &pb.ReplicaAck{Group: g, Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}}})
	}
}

// holeBefore reports whether a live replica at p leaves a hole after the
// log's last position: a later seq of the same epoch than the next, or a
// new epoch not at its first message. A position the home dropped (no
// majority in time) is a hole too; the fill finds the home's log without
// it, and nothing is lost but one exchange.
func holeBefore(last, p Pos) bool {
	if p.Epoch == last.Epoch {
		return p.Seq > last.Seq+1
	}
	return p.Epoch > last.Epoch && p.Seq > 1
}

// groupFill is a hole in this supernode's log that it asked the group's
// home to fill.
type groupFill struct {
	from  string
	after Pos
	asked time.Time // zero until the next tick stamps it
}

// askFill asks home to fill group g's log after last: the home answers
// with the entries of its log after last (as replayed Replica frames),
// then a ReplicaSync with done and fill. One fill a group at a time,
// asked again every SyncReask until answered (sweepReplication).
func (c *Core) askFill(g, home string, last Pos) {
	if f := c.fills[g]; f != nil && f.from == home && f.after == last {
		return
	}
	if c.fills[g] == nil && len(c.fills) >= c.cfg.MaxHomeGroups {
		return
	}
	c.fills[g] = &groupFill{from: home, after: last}
	c.sendFill(g, c.fills[g])
}

func (c *Core) sendFill(g string, f *groupFill) {
	c.stats.ReplicaFills.Add(1)
	c.cfg.Net.Send(f.from, &pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: g, Epoch: f.after.Epoch, AfterSeq: f.after.Seq, Fill: true}}})
}

// answerFill answers a replica's fill of group g after pos from this
// home's log, while its ring names it the home.
func (c *Core) answerFill(from string, s *pb.ReplicaSync) {
	g := s.GetGroup()
	if !c.isGroupHome(g) || !c.inHomeCluster(g, from) || c.cfg.Replay == nil || !c.cfg.Fanout.TryAcquire() {
		return // asked again
	}
	defer func() { _ = c.cfg.Fanout.Release() }()
	pos := Pos{Epoch: s.GetEpoch(), Seq: s.GetAfterSeq()}
	es, _, _ := c.cfg.Replay.ReplayAfter(g, pos, ReplayTailMax)
	all := len(es) < ReplayTailMax
	for _, e := range es {
		_, gm, ok := DecodeEntry(e.Data)
		if !ok {
			continue
		}
		gm.Replay = true
		if !c.cfg.Net.Send(from, &pb.RelayFrame{Kind: &pb.RelayFrame_Replica{Replica: gm}}) {
			all = false
			break
		}
		pos = Pos{Epoch: e.Epoch, Seq: e.Seq}
	}
	if hg := c.homes[g]; all && hg != nil && !hg.syncing && !c.cfg.Mutations.NoFillResolved {
		// The fill ends where this home's numbering is resolved: every
		// position of its epoch before its oldest unreleased message
		// is in the log (released) or was dropped for good (never
		// acknowledged). Ended at the log's last, a replica whose hole
		// was a dropped position asked again and again and refused
		// every later replica; with the cluster's other replica cut
		// off, the group released nothing more, and a member's
		// supernode that lost frames in the partition was never shown
		// the gap by a later frame (found by testnet/groupsim,
		// partitions).
		//
		// The messages still waiting for a majority follow the answer
		// as live replicas, which the replica appends and acknowledges:
		// refused while the hole lasted, they waited for their
		// timeout, and every message numbered behind them was refused
		// in turn.
		r := Pos{Epoch: hg.epoch, Seq: hg.seq}
		if len(hg.unreleased) > 0 {
			k := hg.unreleased[0]
			r = Pos{Epoch: k.epoch, Seq: k.seq - 1}
		}
		if r.After(pos) {
			pos = r
		}
		c.cfg.Net.Send(from, &pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: g, Epoch: pos.Epoch, AfterSeq: pos.Seq, Done: true, Fill: true}}})
		for _, k := range hg.unreleased {
			if pp := c.pendingPubs[k]; pp != nil && !pp.acked[from] && slices.Contains(pp.replicas, from) {
				c.cfg.Net.Send(from, pp.frame)
			}
		}
		return
	}
	c.cfg.Net.Send(from, &pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: g, Epoch: pos.Epoch, AfterSeq: pos.Seq, Done: true, Fill: true}}})
}

// groupSync is a new home gathering the replicas of a group.
type groupSync struct {
	// pending: made before this supernode's directory settled; it asks
	// once it has (sweepReplication), with the ring it has then.
	pending  bool
	waiting  []string
	deadline time.Time
	// request is the ReplicaSync frame, asked again every SyncReask of
	// the peers that have not answered.
	request *pb.RelayFrame
	asked   time.Time
	// got are the peers' answers, appended to the log in order when the
	// sync ends (at most maxSyncGathered).
	got map[Pos]*pb.GroupMessage
	// answered are the peers that ended their answer: each endorsed this
	// supernode as the group's home by its ring.
	answered []string
}

// maxSyncGathered bounds the answers a sync gathers: every peer's log
// bound.
const maxSyncGathered = maxSyncAsked * ReplayTailMax

// maxSyncAsked is the most peers a sync asks: the sync peers of the live
// ring (overlay/cluster's Size of 3, and the next 2) and those of the
// past rings (rings.go).
const maxSyncAsked = 10

// startSync asks the other cluster members for the replicas they hold of
// group after what this supernode's log holds; the group numbers nothing
// until they answer, or SyncTimeout passes with a majority of the
// cluster answered.
func (c *Core) startSync(now time.Time, hg *homeGroup, g string) {
	if c.cfg.Replay == nil {
		return
	}
	s := &groupSync{pending: true, got: map[Pos]*pb.GroupMessage{}}
	if !c.settled() {
		// Its ring may lack the peers to ask: asked once it has settled.
		hg.syncing = true
		c.syncs[g] = s
		return
	}
	c.askSync(now, hg, g, s)
}

// askSync sends sync s of group g to the supernodes at the group's place
// on the ring and reports whether there was anyone to ask; with no one,
// hg numbers at once.
func (c *Core) askSync(now time.Time, hg *homeGroup, g string, s *groupSync) bool {
	s.pending = false
	reps := c.syncTargets(now, g)
	if len(reps) == 0 {
		return false
	}
	hg.syncing = true
	last, _ := c.cfg.Replay.ReplayLast(g)
	hg.syncedAfter, hg.synced = last, true
	s.waiting, s.deadline, s.asked = reps, now.Add(SyncTimeout), now
	s.request = &pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: g, Epoch: last.Epoch, AfterSeq: last.Seq}}}
	c.syncs[g] = s
	for _, sn := range reps {
		c.cfg.Net.Send(sn, s.request)
	}
	c.stats.Syncs.Add(1)
	return true
}

// ReplicaSync answers a sync request, or takes an asked peer's end of
// answer.
func (c *Core) ReplicaSync(now time.Time, from string, s *pb.ReplicaSync) {
	g := s.GetGroup()
	if !c.validGroup(g) {
		return
	}
	if s.GetFill() {
		if !s.GetDone() {
			c.answerFill(from, s)
		} else if f := c.fills[g]; f != nil && f.from == from {
			delete(c.fills, g)
			if _, ok := c.resolved[g]; ok || len(c.resolved) < c.cfg.MaxHomeGroups {
				c.resolved[g] = Pos{Epoch: s.GetEpoch(), Seq: s.GetAfterSeq()}
			}
		}
		return
	}
	if s.GetDone() {
		sync := c.syncs[g]
		if sync == nil || sync.pending {
			return
		}
		if !slices.Contains(sync.waiting, from) {
			return
		}
		sync.waiting = slices.DeleteFunc(sync.waiting, func(p string) bool { return p == from })
		sync.answered = append(sync.answered, from)
		if c.liveAnswered(g, sync) && c.endorsed(now, g, sync, false) {
			for _, p := range c.endSync(g) {
				c.HomePublish(now, p)
			}
		}
		return
	}
	// Requests come from the group's new home, which is in its home
	// cluster.
	if !c.inHomeCluster(g, from) {
		return
	}
	// Answered only when this supernode's ring names the asker the
	// group's home: the answer endorses it. A home whose ring still names
	// it the group's home may number more: it answers once its ring moves
	// on (the asker asks again), and from then on numbers nothing for the
	// group (HomePublish), so its answer holds all it numbered. A
	// supernode whose ring dropped the live home for a moment (a flap)
	// gets no majority of endorsements and numbers nothing, nor replays
	// what its log holds that the live home had not released yet (found
	// by testnet/groupsim, Mutations.NoSyncEndorse).
	if c.cfg.Mutations.NoSyncEndorse {
		if c.isGroupHome(g) {
			return
		}
	} else if h, ok := c.groupHome(g); !ok || h != from {
		return
	}
	if c.cfg.Replay == nil || !c.cfg.Fanout.TryAcquire() {
		return // the asker numbers without us when its wait ends
	}
	defer func() { _ = c.cfg.Fanout.Release() }()
	pos := Pos{Epoch: s.GetEpoch(), Seq: s.GetAfterSeq()}
	es, _, _ := c.cfg.Replay.ReplayAfter(g, pos, ReplayTailMax)
	for _, e := range es {
		_, gm, ok := DecodeEntry(e.Data)
		if !ok {
			break
		}
		gm.Replay = true // an answer, not a live replica
		if !c.cfg.Net.Send(from, &pb.RelayFrame{Kind: &pb.RelayFrame_Replica{Replica: gm}}) {
			break
		}
		pos = Pos{Epoch: e.Epoch, Seq: e.Seq}
	}
	c.cfg.Net.Send(from, &pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: g, Epoch: pos.Epoch, AfterSeq: pos.Seq, Done: true}}})
}

// appendGathered appends what sync s gathered to group g's log, in
// order, and reports whether the log took all of it (what it took is
// forgotten; what it did not stays for another try).
func (c *Core) appendGathered(g string, s *groupSync) bool {
	if c.cfg.Replay == nil {
		return len(s.got) == 0
	}
	ps := make([]Pos, 0, len(s.got))
	for p := range s.got {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b Pos) int {
		if a.After(b) {
			return 1
		} else if b.After(a) {
			return -1
		}
		return 0
	})
	all := true
	for _, p := range ps {
		if err := c.cfg.Replay.AppendReplay(g, Entry{Epoch: p.Epoch, Seq: p.Seq, Data: EncodeEntry(EntryReplica, s.got[p])}); err != nil {
			c.stats.ReplayLogFailed.Add(1)
			all = false
			if !c.cfg.Mutations.NoSyncAppendRetry {
				break
			}
			continue
		}
		delete(s.got, p)
	}
	return all
}

// endSync lets a new home number once its log took every answer its sync
// gathered: its epoch starts after every one in its log. It returns the
// publishes that waited, for the caller to number, in the order they
// came (none while the sync goes on).
func (c *Core) endSync(g string) []*pb.GroupPublish {
	if s := c.syncs[g]; s != nil && !c.appendGathered(g, s) && !c.cfg.Mutations.NoSyncAppendRetry {
		// The sync does not end on a hole: numbered past it, the log
		// replayed without the message (the replicas that held it are
		// not asked again), and the members a replay serves missed it
		// (found by testnet/groupsim, Mutations.NoSyncAppendRetry).
		// Tried again next tick.
		s.deadline = time.Time{}
		return nil
	}
	delete(c.syncs, g)
	hg := c.homes[g]
	if hg == nil {
		return nil
	}
	hg.syncing = false
	c.adoptLog(hg, g)
	c.log.Debug("group home numbers", "group", g, "epoch", hg.epoch, "seq", hg.seq)
	waiting := hg.waiting
	hg.waiting = nil
	return waiting
}

// adoptLog makes a home group's numbering follow what the log holds (a
// home restarted with its data dir, or taking over from another).
func (c *Core) adoptLog(hg *homeGroup, g string) {
	if c.cfg.Replay == nil {
		return
	}
	last, ok := c.cfg.Replay.ReplayLast(g)
	if !ok {
		return
	}
	if hg.seq == 0 && hg.epoch <= last.Epoch {
		c.epoch = max(c.epoch, last.Epoch) + 1
		hg.epoch = c.epoch
	}
	if !c.cfg.Mutations.NoRenumberLogged {
		// A publisher's retry of a message the log holds is numbered
		// anew: the log cannot tell what its home released from what it
		// dropped (a replica holds a message its home then failed to
		// log). Answered OK at the logged position, a dropped message
		// that the members had passed reached none of them (found by
		// testnet/groupsim, Mutations.NoRenumberLogged). Members that
		// get both copies deliver one (overlay/member drops the retry
		// by its publish ID).
		return
	}
	es, _, _ := c.cfg.Replay.ReplayAfter(g, Pos{}, maxPublishIDs)
	for _, e := range es {
		if _, gm, ok := DecodeEntry(e.Data); ok {
			hg.acked.put(publishIDKey(gm.GetFrom(), gm.GetId()), Pos{Epoch: e.Epoch, Seq: e.Seq})
		}
	}
}

// logHolds reports whether group g's replay log holds position p.
func (c *Core) logHolds(g string, p Pos) bool {
	if p.Seq == 0 {
		return false
	}
	es, _, _ := c.cfg.Replay.ReplayAfter(g, Pos{Epoch: p.Epoch, Seq: p.Seq - 1}, 1)
	return len(es) == 1 && es[0].Epoch == p.Epoch && es[0].Seq == p.Seq
}
