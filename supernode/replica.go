package supernode

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/store"
)

// Home replication: a group's home sends each message it numbers to the
// other members of the group's home cluster (cluster.Home of the group's
// name: R = 3, the home first) and tells the publisher OK once a majority
// of the cluster holds it (the home and one replica). When the home dies,
// the ring makes the next cluster member the home; before it numbers
// anything it gathers the replicas the other members hold (ReplicaSync)
// and starts a new epoch after them. Members' supernodes resume from the
// last message they fanned out, so what the old home acknowledged reaches
// them from the new one. A publisher that saw no OK retries with the same
// message ID; the home (old or new: the replicas carry the IDs) numbers an
// ID once.
//
// The guarantee: a publish acknowledged OK is held in memory by two of the
// three home-cluster supernodes and written to their disks within the
// store's flush interval; it survives the crash of any one of them. Two
// crashes within one flush interval may lose it.

const (
	// replicationTimeout bounds the wait for a replica's ack; the
	// publisher is then told BUSY and retries with the same ID.
	replicationTimeout = 2 * time.Second
	// maxPendingPublishes bounds the publishes waiting for replicas; past
	// it a publish is refused BUSY before it is numbered.
	maxPendingPublishes = 8192
	// syncTimeout bounds how long a new home waits for the replicas the
	// other cluster members hold before it numbers without them.
	syncTimeout = 2 * time.Second
	// maxWaitingPublishes bounds the publishes a group's new home holds
	// while it syncs; past it they are answered BUSY.
	maxWaitingPublishes = 1024
	// maxPublishIDs bounds the publish IDs a home remembers per group (the
	// replay log's count bound).
	maxPublishIDs = 4096
)

// pubKey names a numbered message.
type pubKey struct {
	group      string
	epoch, seq uint64
}

// pendingPublish is a numbered message waiting for replica acks.
type pendingPublish struct {
	p        *pb.GroupPublish
	need     int
	acked    map[peer.ID]bool
	replicas []peer.ID
	frame    []byte // the replica frame, resent on a publisher's retry
	deadline time.Time
}

// publishIDs remembers the (epoch, seq) a home gave each publish ID, FIFO
// bounded, so that a retry is not numbered twice.
type publishIDs struct {
	at    map[string]store.Pos
	order []string
}

func (ids *publishIDs) get(k string) (store.Pos, bool) {
	p, ok := ids.at[k]
	return p, ok
}

func (ids *publishIDs) put(k string, p store.Pos) {
	if ids.at == nil {
		ids.at = map[string]store.Pos{}
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

func publishIDKey(from, id []byte) string { return string(from) + "/" + string(id) }

// replicasOf returns the members of group's home cluster other than this
// supernode.
func (r *Router) replicasOf(group string) []peer.ID {
	cl := cluster.Home(r.cfg.Ring(), []byte(group))
	self := r.self()
	return slices.DeleteFunc(cl, func(p peer.ID) bool { return p == self })
}

// inHomeCluster reports whether p is a member of group's home cluster.
func (r *Router) inHomeCluster(group string, p peer.ID) bool {
	return slices.Contains(cluster.Home(r.cfg.Ring(), []byte(group)), p)
}

// replicateLocked sends gm to the replicas and records the publish as
// waiting for a majority; it reports whether the publish is already
// acknowledged (no replica is needed: a cluster of one). r.mu is held.
func (r *Router) replicateLocked(p *pb.GroupPublish, gm *pb.GroupMessage) bool {
	if r.cfg.Store == nil {
		return true // no replay log: nothing to replicate into
	}
	reps := r.replicasOf(gm.GetGroup())
	need := (len(reps)+1)/2 + 1 - 1 // a majority of the cluster, the home counting
	if need <= 0 {
		return true
	}
	frame := encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Replica{Replica: gm}})
	for _, sn := range reps {
		r.links.send(sn, frame)
	}
	r.stats.ReplicasSent.Add(uint64(len(reps)))
	r.pendingPubs[pubKey{gm.GetGroup(), gm.GetEpoch(), gm.GetSeq()}] = &pendingPublish{
		p: p, need: need, acked: map[peer.ID]bool{}, replicas: reps, frame: frame,
		deadline: r.cfg.Now().Add(replicationTimeout),
	}
	r.wakeReplayer()
	return false
}

// onReplicaAck counts a replica's ack; at a majority the publisher is told.
func (r *Router) onReplicaAck(from peer.ID, a *pb.ReplicaAck) {
	r.mu.Lock()
	k := pubKey{a.GetGroup(), a.GetEpoch(), a.GetSeq()}
	pp := r.pendingPubs[k]
	if pp == nil || !slices.Contains(pp.replicas, from) {
		r.mu.Unlock()
		return
	}
	pp.acked[from] = true
	if len(pp.acked) < pp.need {
		r.mu.Unlock()
		return
	}
	delete(r.pendingPubs, k)
	if hg := r.homes[k.group]; hg != nil {
		hg.acked.put(publishIDKey(pp.p.GetFrom(), pp.p.GetId()), store.Pos{Epoch: k.epoch, Seq: k.seq})
	}
	r.mu.Unlock()
	r.publishResult(pp.p, &pb.Result{Id: pp.p.GetId(), Status: pb.Result_STATUS_OK, Epoch: k.epoch, Seq: k.seq})
}

// sweepReplication answers BUSY the publishes whose replicas did not ack
// in time (the publisher retries with the same ID), and ends the syncs
// that waited too long.
func (r *Router) sweepReplication() {
	now := r.cfg.Now()
	var late []*pendingPublish
	r.mu.Lock()
	for k, pp := range r.pendingPubs {
		if now.After(pp.deadline) {
			delete(r.pendingPubs, k)
			late = append(late, pp)
		}
	}
	var waiting []*pb.GroupPublish
	for g, s := range r.syncs {
		switch {
		case s.pending:
			if hg := r.homes[g]; hg == nil {
				delete(r.syncs, g)
			} else if r.settled() && !r.askSyncLocked(hg, g, s) {
				waiting = append(waiting, r.endSyncLocked(g)...)
			}
		case now.After(s.deadline):
			waiting = append(waiting, r.endSyncLocked(g)...)
		case now.Sub(s.asked) >= syncReask:
			s.asked = now
			for _, sn := range s.waiting {
				r.links.send(sn, s.request)
			}
		}
	}
	r.mu.Unlock()
	for _, p := range waiting {
		r.homePublish(p)
	}
	for _, pp := range late {
		r.stats.ReplicationTimeouts.Add(1)
		r.publishResult(pp.p, &pb.Result{Id: pp.p.GetId(), Status: pb.Result_STATUS_BUSY, Detail: "group home: not replicated in time; retry with the same message id"})
	}
}

// retryPublishLocked answers a publish whose ID the home numbered before:
// OK again when it was acknowledged, else its replicas are sent again and
// the answer comes with their acks. It reports whether p was such a retry.
func (r *Router) retryPublishLocked(hg *homeGroup, p *pb.GroupPublish) (handled bool, res *pb.Result) {
	key := publishIDKey(p.GetFrom(), p.GetId())
	if pos, ok := hg.acked.get(key); ok {
		r.stats.PublishRetries.Add(1)
		return true, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_OK, Epoch: pos.Epoch, Seq: pos.Seq}
	}
	pos, ok := hg.numbered.get(key)
	if !ok {
		return false, nil
	}
	r.stats.PublishRetries.Add(1)
	k := pubKey{p.GetGroup(), pos.Epoch, pos.Seq}
	if pp := r.pendingPubs[k]; pp != nil {
		pp.p = p // answer where the publisher is now
		for _, sn := range pp.replicas {
			if !pp.acked[sn] {
				r.links.send(sn, pp.frame)
			}
		}
		return true, nil
	}
	// Timed out before: replicate it again from the log.
	es, _, _ := r.cfg.Store.ReplayAfter(p.GetGroup(), pos.Epoch, pos.Seq-1, 1)
	if len(es) == 1 && es[0].Epoch == pos.Epoch && es[0].Seq == pos.Seq {
		if _, gm, ok := decodeEntry(es[0].Data); ok {
			if r.replicateLocked(p, gm) {
				return true, &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_OK, Epoch: pos.Epoch, Seq: pos.Seq}
			}
			return true, nil
		}
	}
	return false, nil // no longer logged: numbered again
}

// onReplica stores a message numbered by the group's home (or, answering
// this supernode's sync, one another cluster member holds) and acks it.
func (r *Router) onReplica(from peer.ID, gm *pb.GroupMessage) {
	g := gm.GetGroup()
	if r.cfg.Store == nil || protocol.CheckGroupName(g) != nil {
		r.stats.ReplicasRefused.Add(1)
		return
	}
	// An answer to this supernode's sync comes from a peer it asked; a
	// live replica from a member of the group's home cluster, to one.
	r.mu.Lock()
	sync := r.syncs[g]
	syncing := sync != nil && slices.Contains(sync.waiting, from)
	r.mu.Unlock()
	if !syncing && (!r.inHomeCluster(g, r.self()) || !r.inHomeCluster(g, from)) {
		r.stats.ReplicasRefused.Add(1)
		return
	}
	// A live replica is stamped by the home that sends it; a sync answer
	// carries the stamp of the home that numbered it, which may be gone.
	// Either way the publisher's signature must hold.
	isHome := func(p peer.ID) bool { return p == from }
	if syncing {
		isHome = func(peer.ID) bool { return true }
	}
	if _, err := protocol.OpenGroupMessage(gm, isHome); err != nil {
		r.stats.ReplicasRefused.Add(1)
		return
	}
	if err := r.cfg.Store.AppendReplay(g, store.Entry{Epoch: gm.GetEpoch(), Seq: gm.GetSeq(), Data: encodeEntry(entryReplica, gm)}); err != nil {
		r.stats.ReplicasRefused.Add(1)
		return
	}
	r.stats.ReplicasHeld.Add(1)
	if !syncing {
		r.links.send(from, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaAck{ReplicaAck: &pb.ReplicaAck{Group: g, Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}}}))
	}
}

// groupSync is a new home gathering the replicas of a group.
type groupSync struct {
	// pending: made before this supernode's directory settled; it asks
	// once it has (sweepReplication), with the ring it has then.
	pending  bool
	waiting  []peer.ID
	deadline time.Time
	// request is the ReplicaSync frame, asked again every syncReask of
	// the peers that have not answered: a previous home whose ring still
	// names it the home does not answer until its ring moves on.
	request []byte
	asked   time.Time
}

// syncReask is how often a new home asks again the peers that have not
// answered its sync.
const syncReask = 250 * time.Millisecond

// startSyncLocked asks the other cluster members for the replicas they
// hold of group after what this supernode's log holds; the group numbers
// nothing until they answer or syncTimeout passes. r.mu is held.
func (r *Router) startSyncLocked(hg *homeGroup, g string) {
	if r.cfg.Store == nil {
		return
	}
	s := &groupSync{pending: true}
	if !r.settled() {
		// Its ring may lack the peers to ask: asked once it has settled.
		hg.syncing = true
		r.syncs[g] = s
		r.wakeReplayer()
		return
	}
	r.askSyncLocked(hg, g, s)
}

// askSyncLocked sends sync s of group g to the supernodes at the group's
// place on the ring and reports whether there was anyone to ask; with no
// one, hg numbers at once. r.mu is held.
func (r *Router) askSyncLocked(hg *homeGroup, g string, s *groupSync) bool {
	s.pending = false
	reps := r.syncPeersOf(g)
	if len(reps) == 0 {
		return false
	}
	hg.syncing = true
	last, _ := r.cfg.Store.ReplayLast(g)
	now := r.cfg.Now()
	s.waiting, s.deadline, s.asked = reps, now.Add(syncTimeout), now
	s.request = encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: g, Epoch: last.Epoch, AfterSeq: last.Seq}}})
	r.syncs[g] = s
	for _, sn := range reps {
		r.links.send(sn, s.request)
	}
	r.stats.Syncs.Add(1)
	r.wakeReplayer()
	return true
}

// wakeReplayer wakes the replay loop, which also sweeps replication and
// syncs.
func (r *Router) wakeReplayer() {
	select {
	case r.replayWake <- struct{}{}:
	default:
	}
}

// syncWidth is how many supernodes at a group's place on the ring a new
// home asks for replicas (itself included): the home cluster and the next
// Size-1 after it. A home whose weight changed (a promotion to mega) can
// move a group past members of its old cluster; the old home and its
// replicas are then still among the first few, though no longer the first
// three.
const syncWidth = 2*cluster.Size - 1

// syncPeersOf returns the supernodes a new home of group asks for replicas.
func (r *Router) syncPeersOf(group string) []peer.ID {
	rg := r.cfg.Ring()
	if rg == nil {
		return nil
	}
	self := r.self()
	var out []peer.ID
	for _, s := range rg.LookupN([]byte(group), syncWidth, nil) {
		if p, err := peer.Decode(s); err == nil && p != self {
			out = append(out, p)
		}
	}
	return out
}

// onReplicaSync answers a sync request, or takes a member's end of answer.
func (r *Router) onReplicaSync(from peer.ID, s *pb.ReplicaSync) {
	g := s.GetGroup()
	if protocol.CheckGroupName(g) != nil {
		return
	}
	// Requests come from the group's new home, which is in its home
	// cluster; an end of answer from a peer this supernode asked.
	if !s.GetDone() && !r.inHomeCluster(g, from) {
		return
	}
	if s.GetDone() {
		var waiting []*pb.GroupPublish
		r.mu.Lock()
		if sync := r.syncs[g]; sync != nil && !sync.pending {
			sync.waiting = slices.DeleteFunc(sync.waiting, func(p peer.ID) bool { return p == from })
			if len(sync.waiting) == 0 {
				waiting = r.endSyncLocked(g)
			}
		}
		r.mu.Unlock()
		for _, p := range waiting {
			r.homePublish(p)
		}
		return
	}
	// A home whose ring still names it the group's home may number
	// more: it answers once its ring moves on (the asker asks again), and
	// from then on numbers nothing for the group (homePublish), so its
	// answer holds all it numbered.
	if h, ok := r.groupHome(g); ok && h == r.self() {
		return
	}
	if r.cfg.Store == nil || !r.cfg.Sems.Fanout.TryAcquire() {
		return // the asker numbers without us when its wait ends
	}
	r.wg.Go(func() {
		defer r.cfg.Sems.Fanout.Release()
		pos := store.Pos{Epoch: s.GetEpoch(), Seq: s.GetAfterSeq()}
		es, _, _ := r.cfg.Store.ReplayAfter(g, pos.Epoch, pos.Seq, replayTailMax)
		for _, e := range es {
			_, gm, ok := decodeEntry(e.Data)
			if !ok || !r.links.send(from, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Replica{Replica: gm}})) {
				break
			}
			pos = store.Pos{Epoch: e.Epoch, Seq: e.Seq}
		}
		r.links.send(from, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_ReplicaSync{ReplicaSync: &pb.ReplicaSync{Group: g, Epoch: pos.Epoch, AfterSeq: pos.Seq, Done: true}}}))
	})
}

// endSyncLocked lets a new home number: its epoch starts after every one
// in its log, and the publish IDs the log holds are remembered so that a
// publisher's retry of an acknowledged message is not numbered again. It
// returns the publishes that waited, for the caller to number off the
// lock, in the order they came.
func (r *Router) endSyncLocked(g string) []*pb.GroupPublish {
	delete(r.syncs, g)
	hg := r.homes[g]
	if hg == nil {
		return nil
	}
	hg.syncing = false
	r.adoptLogLocked(hg, g)
	r.log.Debug("group home numbers", "group", g, "epoch", hg.epoch, "seq", hg.seq)
	waiting := hg.waiting
	hg.waiting = nil
	return waiting
}

// adoptLogLocked makes a home group's numbering follow what the log holds
// (a home restarted with its data dir, or taking over from another).
func (r *Router) adoptLogLocked(hg *homeGroup, g string) {
	if r.cfg.Store == nil {
		return
	}
	last, ok := r.cfg.Store.ReplayLast(g)
	if !ok {
		return
	}
	if hg.seq == 0 && hg.epoch <= last.Epoch {
		r.epoch = max(r.epoch, last.Epoch) + 1
		hg.epoch = r.epoch
	}
	es, _, _ := r.cfg.Store.ReplayAfter(g, 0, 0, maxPublishIDs)
	for _, e := range es {
		if _, gm, ok := decodeEntry(e.Data); ok {
			hg.acked.put(publishIDKey(gm.GetFrom(), gm.GetId()), store.Pos{Epoch: e.Epoch, Seq: e.Seq})
		}
	}
}

// noLossSeries adds the series of group resume and home replication to
// the router's collector.
func (r *Router) noLossSeries(c *seriesCollector) {
	s := &r.stats
	c.labelled("overlayd_supernode_group_replays_total",
		"Group resumes this supernode served as a group's home, by outcome: started, done, gap (done, but the replay log no longer held all that was asked: the member got a gap notice), refused (too many replays waiting: answered at once as not replayed).",
		"outcome", map[string]*atomic.Uint64{"started": &s.ReplaysStarted, "done": &s.ReplaysDone, "gap": &s.ReplaysGap, "refused": &s.ReplaysRefused})
	c.labelled("overlayd_supernode_group_replicas_total",
		"Home replication of group messages, by event: sent (replica frames this home sent), held (replicas stored for another home), refused (replicas refused: not from the group's home cluster, not signed, or the store refused), timeout (publishes not replicated in time: the publisher was told BUSY and retries), retry_answered (a publisher's retry answered without numbering it again), sync (takeovers: a new home gathered the replicas), unsettled (publishes answered BUSY because this supernode had just started and its directory was still filling).",
		"event", map[string]*atomic.Uint64{"sent": &s.ReplicasSent, "held": &s.ReplicasHeld, "refused": &s.ReplicasRefused,
			"timeout": &s.ReplicationTimeouts, "retry_answered": &s.PublishRetries, "sync": &s.Syncs, "unsettled": &s.HomeUnsettled})
	for _, u := range []struct {
		name, help string
		value      *atomic.Uint64
	}{
		{"overlayd_supernode_group_messages_replayed_total", "Group message frames sent by replays.", &s.Replayed},
		{"overlayd_supernode_group_resumes_timed_out_total", "Members held for a resume that the group's home never answered: let in with the gap unknown.", &s.ResumesTimedOut},
		{"overlayd_supernode_group_resumes_resent_total", "Held members' resumes sent again because the group's home changed (the one asked crashed).", &s.ResumesResent},
		{"overlayd_supernode_replay_log_failed_total", "Group messages the replay log did not take (store full or closed), and log entries that did not decode.", &s.ReplayLogFailed},
	} {
		c.plain(u.name, u.help, prometheus.CounterValue, counter(u.value))
	}
}

// NoLossStats are the store's replay logs and the cumulative counts of
// group resume, home replication and offline messages, for the node's
// status.
type NoLossStats struct {
	ReplayGroups, ReplayEntries int
	ReplayBytes                 int64
	// Group resume and replication.
	ReplaysDone, ReplaysGap, Replayed, ReplicasHeld, ReplicationTimeouts uint64
	// Offline direct messages, as a replica: stored, forwarded on attach,
	// deleted on the recipient's ack, expired, refused (any reason).
	OfflineStored, OfflineDelivered, OfflineDeleted, OfflineExpired, OfflineRefused uint64
}

// NoLoss returns the router's no-loss figures; false without a store.
func (r *Router) NoLoss() (NoLossStats, bool) {
	if r.cfg.Store == nil {
		return NoLossStats{}, false
	}
	st := r.cfg.Store.Stats()
	s := &r.stats
	return NoLossStats{
		ReplayGroups: st.ReplayGroups, ReplayEntries: st.ReplayEntries, ReplayBytes: st.ReplayBytes,
		ReplaysDone: s.ReplaysDone.Load(), ReplaysGap: s.ReplaysGap.Load(), Replayed: s.Replayed.Load(),
		ReplicasHeld: s.ReplicasHeld.Load(), ReplicationTimeouts: s.ReplicationTimeouts.Load(),
		OfflineStored: s.OfflineStored.Load(), OfflineDelivered: s.OfflineDelivered.Load(), OfflineDeleted: s.OfflineDeleted.Load(),
		OfflineExpired: s.OfflineExpired.Load(),
		OfflineRefused: s.OfflineOverQuota.Load() + s.OfflineFull.Load() + s.OfflineInvalid.Load() + s.OfflineBusy.Load(),
	}, true
}

// settled reports whether this supernode's directory has settled
// (RouterConfig.Settled): until then it takes no group home role.
func (r *Router) settled() bool { return r.cfg.Settled == nil || r.cfg.Settled() }
