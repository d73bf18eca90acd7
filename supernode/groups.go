package supernode

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
	"github.com/overlayd/overlayd/supernode/store"
)

// Groups are decided by the pure core in package group (home records,
// numbering, replication, sync, replay, held resumes, ring changes); the
// Router is its shell: it checks the form of what clients and supernodes
// send, feeds the core events under r.mu with the time, and carries out
// what it decides through the ports below (the links to other
// supernodes, the local fanout and client sessions, the store's replay
// log). Its replay loop ticks the core while the core has timed work.

// newGroupCore builds the Router's group core.
func (r *Router) newGroupCore() (*group.Core, error) {
	cfg := group.Config{
		Self:     string(r.self()),
		Refresh:  r.cfg.Refresh,
		Ring:     groupRing{r},
		Net:      &groupNet{r: r},
		Local:    groupLocal{r},
		Verifier: GroupVerifier{},
		Signer:   GroupSigner{Key: r.key},
		Fanout:   r.cfg.Sems.Fanout,
		Settled:  r.cfg.Settled,
		CheckGroup: func(g string) error {
			return protocol.CheckGroupName(g)
		},
		MaxMemberships:          r.bounds.memberships,
		MaxMembershipsPerOrigin: r.bounds.membershipsPerOrigin,
		MaxHomeGroups:           r.bounds.homeGroups,
		MaxBatchBytes:           batchBytes,
		PerMemberFanout:         r.cfg.PerMemberFanoutForTest,
		Stats:                   &r.stats.Stats,
		Log:                     r.log,
	}
	if r.cfg.Store != nil {
		cfg.Replay = replayLog{r.cfg.Store}
	}
	return group.New(cfg)
}

// withCore runs f on the group core under r.mu, and wakes the replay loop
// when the core has timed work.
func (r *Router) withCore(f func(c *group.Core, now time.Time)) {
	r.mu.Lock()
	f(r.core, r.cfg.Now())
	busy := r.core.Busy()
	r.mu.Unlock()
	if busy {
		r.wakeReplayer()
	}
}

// wakeReplayer wakes the replay loop.
func (r *Router) wakeReplayer() {
	select {
	case r.replayWake <- struct{}{}:
	default:
	}
}

// replayLoop ticks the group core every group.ReplayTick while it has
// timed work (replays, publishes waiting for replicas, syncs).
func (r *Router) replayLoop(ctx context.Context) {
	t := time.NewTicker(group.ReplayTick)
	defer t.Stop()
	for {
		r.mu.Lock()
		idle := !r.core.Busy()
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
		r.withCore(func(c *group.Core, now time.Time) { c.Tick(now) })
	}
}

// groupRing is the core's view of this supernode's live ring.
type groupRing struct{ r *Router }

func (g groupRing) Home(name string) (string, bool) { return ringView{g.r.cfg.Ring()}.Home(name) }
func (g groupRing) Cluster(name string) []string    { return ringView{g.r.cfg.Ring()}.Cluster(name) }
func (g groupRing) SyncPeers(name string) []string  { return ringView{g.r.cfg.Ring()}.SyncPeers(name) }
func (g groupRing) Has(p string) bool               { return ringView{g.r.cfg.Ring()}.Has(p) }

// ringView is the core's view of one ring, which does not change: the
// ring RingChanged tells the core of.
type ringView struct{ rg *ring.Ring }

func (v ringView) Home(name string) (string, bool) {
	p, ok := cluster.GroupHome(v.rg, name)
	return string(p), ok
}

func (v ringView) Cluster(name string) []string {
	return idStrings(cluster.Home(v.rg, []byte(name)))
}

// SyncWidth is how many supernodes at a group's place on the ring a new
// home asks for replicas (itself included): the home cluster and the next
// Size-1 after it. A home whose weight changed (a promotion to mega) can
// move a group past members of its old cluster; the old home and its
// replicas are then still among the first few, though no longer the first
// three.
const syncWidth = 2*cluster.Size - 1

func (v ringView) SyncPeers(name string) []string {
	if v.rg == nil {
		return nil
	}
	var out []string
	for _, s := range v.rg.LookupN([]byte(name), syncWidth, nil) {
		if p, err := peer.Decode(s); err == nil {
			out = append(out, string(p))
		}
	}
	return out
}

func (v ringView) Has(p string) bool {
	if v.rg == nil {
		return false
	}
	id := peer.ID(p).String()
	for _, m := range v.rg.Members() {
		if m.ID == id {
			return true
		}
	}
	return false
}

func idStrings(ps []peer.ID) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// groupNet carries the core's frames on the links. The core passes the
// same GroupMessage frame for every supernode of one publish: it is
// encoded once (the last frame's bytes are kept; the core is called under
// r.mu, so one cache serves it).
type groupNet struct {
	r     *Router
	last  any
	bytes []byte
}

func (n *groupNet) encode(f *pb.RelayFrame) []byte {
	if n.last == any(f) {
		return n.bytes
	}
	n.last, n.bytes = f, encodeRelay(f)
	return n.bytes
}

func (n *groupNet) Send(to string, f *pb.RelayFrame) bool {
	return n.r.links.send(peer.ID(to), n.encode(f))
}

func (n *groupNet) SendGroup(to string, f *pb.RelayFrame) bool {
	return n.r.links.sendGroup(peer.ID(to), n.encode(f))
}

// groupLocal is the core's side towards the clients attached here.
type groupLocal struct{ r *Router }

func (l groupLocal) Attached(client string) bool {
	_, ok := l.r.adm.Sink(peer.ID(client))
	return ok
}

func (l groupLocal) Join(g, client string) {
	sink, ok := l.r.adm.Sink(peer.ID(client))
	if !ok {
		return
	}
	lg := l.r.local[g]
	if lg == nil {
		lg = l.r.cfg.Fanout.NewGroup()
		l.r.local[g] = lg
	}
	lg.Add(client, sink)
}

func (l groupLocal) Leave(g, client string) {
	lg := l.r.local[g]
	if lg == nil {
		return
	}
	lg.Remove(client)
	if lg.Len() == 0 {
		delete(l.r.local, g)
	}
}

// Fanout wraps gm once and hands it to the fanout engine, whose job
// queue is bounded: a full queue drops the message here (counted) and the
// members' sequence numbers show the gap.
func (l groupLocal) Fanout(gm *pb.GroupMessage) {
	r := l.r
	lg := r.local[gm.GetGroup()]
	if lg == nil {
		return
	}
	sf := &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: gm}}
	if !fitsSession(sf) {
		// A group home (another supernode) sent a message no member
		// could read: dropped for all of them, not forwarded.
		r.stats.OversizeGroup.Add(1)
		return
	}
	if err := r.cfg.Fanout.Fanout(lg, encodeSession(sf), nil); err != nil {
		r.stats.FanoutRefused.Add(1)
		return
	}
	r.stats.GroupFanouts.Add(1)
}

func (l groupLocal) Deliver(member string, gm *pb.GroupMessage) {
	l.r.toClient(peer.ID(member), &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: gm}}, &l.r.stats.OversizeGroup)
}

func (l groupLocal) ToClient(client string, f *pb.SessionFrame) {
	l.r.toClient(peer.ID(client), f, &l.r.stats.OversizeOther)
}

// replayLog adapts the store to the core's Log.
type replayLog struct{ s *store.Store }

func (l replayLog) AppendReplay(g string, e group.Entry) error {
	return l.s.AppendReplay(g, store.Entry{Epoch: e.Epoch, Seq: e.Seq, Data: e.Data})
}

func (l replayLog) ReplayAfter(g string, after group.Pos, limit int) ([]group.Entry, group.Pos, bool) {
	es, first, ok := l.s.ReplayAfter(g, after.Epoch, after.Seq, limit)
	out := make([]group.Entry, len(es))
	for i, e := range es {
		out[i] = group.Entry{Epoch: e.Epoch, Seq: e.Seq, Data: e.Data}
	}
	return out, group.Pos{Epoch: first.Epoch, Seq: first.Seq}, ok
}

func (l replayLog) ReplayLast(g string) (group.Pos, bool) {
	p, ok := l.s.ReplayLast(g)
	return group.Pos{Epoch: p.Epoch, Seq: p.Seq}, ok
}

// groupHome returns the ring owner of a group.
func (r *Router) groupHome(g string) (peer.ID, bool) {
	return cluster.GroupHome(r.cfg.Ring(), g)
}

// onGroupOp joins or leaves a group for a local client.
func (r *Router) onGroupOp(client peer.ID, op *pb.GroupOp) {
	if protocol.CheckGroupName(op.GetGroup()) != nil {
		return
	}
	r.withCore(func(c *group.Core, now time.Time) { c.GroupOp(now, string(client), op) })
}

// checkPublish checks the form of a publish before the core numbers it:
// one whose message no member could read is refused before it is
// numbered (its sender's supernode is told INVALID). A missing signature
// is the core's to refuse (counted as a forged publish).
func checkPublish(p *pb.GroupPublish) bool {
	return len(p.GetId()) == protocol.MessageIDLen && protocol.CheckGroupName(p.GetGroup()) == nil && len(p.GetSigned()) <= protocol.MaxSignedPublish &&
		fitsSession(&pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: &pb.GroupMessage{
			Group: p.GetGroup(), Epoch: ^uint64(0), Seq: ^uint64(0), From: p.GetFrom(), Id: p.GetId(), Publish: p.GetSigned(), Stamp: make([]byte, protocol.MaxStamp)}}})
}

// onPublish takes a local client's publish: the core relays it to the
// group's home or numbers it here.
func (r *Router) onPublish(client peer.ID, p *pb.GroupPublish) {
	bad := ""
	switch {
	case len(p.GetId()) != protocol.MessageIDLen:
		bad = "message id must be 16 bytes"
	case protocol.CheckGroupName(p.GetGroup()) != nil:
		bad = protocol.CheckGroupName(p.GetGroup()).Error()
	case len(p.GetPayload()) > 0:
		bad = "plaintext payload: a publish carries its payload in signed"
	case len(p.GetSigned()) == 0 || len(p.GetSigned()) > protocol.MaxSignedPublish:
		bad = fmt.Sprintf("signed publish of %d bytes, want 1 to %d", len(p.GetSigned()), protocol.MaxSignedPublish)
	case !checkPublish(&pb.GroupPublish{Group: p.GetGroup(), Id: p.GetId(), Signed: p.GetSigned(), From: []byte(client)}):
		r.stats.OversizeGroup.Add(1)
		bad = "invalid or too large group message"
	}
	if bad != "" {
		r.result(client, p.GetId(), pb.Result_STATUS_INVALID, bad)
		return
	}
	r.withCore(func(c *group.Core, now time.Time) { c.Publish(now, string(client), p) })
}

// homePublish takes a publish relayed by another supernode.
func (r *Router) homePublish(p *pb.GroupPublish) {
	if !checkPublish(p) {
		r.stats.OversizeGroup.Add(1)
		res := &pb.Result{Id: p.GetId(), Status: pb.Result_STATUS_INVALID, Detail: "invalid or too large group message"}
		if origin := peer.ID(p.GetOrigin()); origin != r.self() {
			r.links.send(origin, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_PublishResult{PublishResult: &pb.PublishResult{To: p.GetFrom(), Result: res}}}))
		} else if to, err := peer.IDFromBytes(p.GetFrom()); err == nil {
			r.toClient(to, &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: res}}, &r.stats.OversizeOther)
		}
		return
	}
	r.withCore(func(c *group.Core, now time.Time) { c.HomePublish(now, p) })
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
		members, _ := r.core.Members(req.GetGroup())
		r.mu.Unlock()
		ms := make([][]byte, len(members))
		for i, m := range members {
			ms[i] = []byte(m)
		}
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

// RingChanged is told each time the ring is published: the group core
// drops the home records the new ring ends, and its syncs count the new
// ring with the rings of the last few refreshes (group.Core.RingChanged).
func (r *Router) RingChanged() {
	r.withCore(func(c *group.Core, now time.Time) { c.RingChanged(now, ringView{r.cfg.Ring()}) })
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

// noLossSeries adds the series of group resume and home replication to
// the router's collector.
func (r *Router) noLossSeries(c *seriesCollector) {
	s := &r.stats
	c.labelled("overlayd_supernode_group_replays_total",
		"Group resumes this supernode served as a group's home, by outcome: started, done, gap (done, but the replay log no longer held all that was asked: the member got a gap notice), refused (too many replays waiting: answered at once as not replayed).",
		"outcome", map[string]*atomic.Uint64{"started": &s.ReplaysStarted, "done": &s.ReplaysDone, "gap": &s.ReplaysGap, "refused": &s.ReplaysRefused})
	c.labelled("overlayd_supernode_group_replicas_total",
		"Home replication of group messages, by event: sent (replica frames this home sent), held (replicas stored for another home), refused (replicas refused: not from the group's home cluster, not signed, or the store refused), timeout (publishes not replicated in time: the publisher was told BUSY and retries), retry_answered (a publisher's retry answered without numbering it again), sync (takeovers: a new home gathered the replicas), unsettled (publishes answered BUSY because this supernode had just started and its directory was still filling), fill (a live replica came past a hole in this supernode's log: it asked the home to fill it from its log).",
		"event", map[string]*atomic.Uint64{"sent": &s.ReplicasSent, "held": &s.ReplicasHeld, "refused": &s.ReplicasRefused,
			"timeout": &s.ReplicationTimeouts, "retry_answered": &s.PublishRetries, "sync": &s.Syncs, "unsettled": &s.HomeUnsettled, "fill": &s.ReplicaFills})
	for _, u := range []struct {
		name, help string
		value      *atomic.Uint64
	}{
		{"overlayd_supernode_group_messages_replayed_total", "Group message frames sent by replays.", &s.Replayed},
		{"overlayd_supernode_group_resumes_timed_out_total", "Members held for a resume that the group's home never answered: let in with the gap unknown.", &s.ResumesTimedOut},
		{"overlayd_supernode_group_resumes_resent_total", "Held members' resumes sent again because the group's home changed (the one asked crashed).", &s.ResumesResent},
		{"overlayd_supernode_group_frames_held_back_total", "Live group frames held back until the home replayed to this supernode: from a home its position did not follow, or past a message it did not get.", &s.GroupHeldBack},
		{"overlayd_supernode_replay_log_failed_total", "Group messages the replay log did not take (store full or closed), and log entries that did not decode.", &s.ReplayLogFailed},
	} {
		c.plain(u.name, u.help, prometheus.CounterValue, counter(u.value))
	}
}
