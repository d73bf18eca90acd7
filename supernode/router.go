package supernode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/dedup"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/capacity"
	"github.com/overlayd/overlayd/supernode/fanout"
	"github.com/overlayd/overlayd/supernode/group"
	"github.com/overlayd/overlayd/supernode/store"
)

// Resource-manager service names of the messaging protocols.
const (
	RelayService  = "overlayd.relay"
	LookupService = "overlayd.lookup"
)

// RouterConfig wires a Router to the rest of the node. Zero durations take
// the defaults.
type RouterConfig struct {
	// Ring returns the live cluster ring (nil while there is none).
	Ring func() *ring.Ring
	// IsSupernode reports whether p is a live supernode of the directory;
	// relay and lookup streams from anyone else are refused.
	IsSupernode func(p peer.ID) bool
	// AddrsOf returns the addresses of supernode p as the directory knows
	// them; locate answers carry them. Optional.
	AddrsOf func(p peer.ID) []ma.Multiaddr
	// Refresh is how often presence and group membership are re-sent to
	// their homes; records expire after 3 refreshes without one.
	Refresh time.Duration
	// Settled reports whether this supernode's directory holds the live
	// supernodes, so that its ring may name group homes. A supernode that
	// has just started hears the others over an announce interval, and
	// until then its ring holds a few of them (at first itself alone):
	// as a group's home it would find no one to gather replicas from or
	// replicate to, and acknowledge what no other supernode holds. Until
	// Settled it numbers nothing (publishes are answered BUSY, and the
	// publisher retries with the same ID) and a home record it makes
	// waits to gather the replicas with the ring it has then. nil:
	// settled from the start.
	Settled func() bool
	// CacheTTL bounds how long a looked-up location is trusted; CacheSize
	// how many are kept.
	CacheTTL  time.Duration
	CacheSize int
	// LookupTimeout bounds one lookup round trip.
	LookupTimeout time.Duration
	// MaxPresence and MaxMemberships bound the presence records and the
	// group memberships this supernode keeps for other supernodes' clients
	// (records.go); 0 derives them from the attached-peers capacity.
	MaxPresence, MaxMemberships int
	// PerMemberFanoutForTest makes a group home send one frame per member
	// instead of one per supernode: the naive design, kept only so that
	// benchmarks can compare against it in the same run.
	PerMemberFanoutForTest bool
	// Store keeps the replay logs of the groups this supernode is home
	// or replica to (replay.go, replica.go), and direct messages for
	// offline recipients this supernode is a home-cluster member of
	// (offline.go); nil: no group resume or replication, and a message to
	// an offline recipient is answered OFFLINE and StoreRequests refused.
	// The router does not close it.
	Store *store.Store
	// OfflineTTL is how long a stored message is kept: the expiry this
	// supernode asks for as the sender's, and the most it grants as a
	// replica. Zero is DefaultOfflineTTL.
	OfflineTTL time.Duration
	Sems       *capacity.Set
	Fanout     *fanout.Engine
	Now        func() time.Time
	Log        *slog.Logger
}

// Router is the supernode's messaging: it keeps presence records for the
// clients its ring position makes it home to, routes direct messages
// supernode to supernode with acks, is the home of the groups the ring gives
// it, and fans group messages out to its local members.
type Router struct {
	h     host.Host
	key   crypto.PrivKey // the host's identity: stamps group messages
	adm   *Admission
	cfg   RouterConfig
	log   *slog.Logger
	links *links

	mu       sync.Mutex
	presence map[peer.ID]presenceRecord
	// presenceBy counts presence records by the supernode that sent
	// them, within bounds.
	presenceBy *originCounts
	bounds     recordBounds
	cache      map[peer.ID]cachedLocation
	sessions   map[peer.ID]localSession    // client → its session here
	inbound    map[network.Stream]struct{} // relay streams being read
	// recent remembers message IDs routed lately: a sender's retry of
	// the same ID is routed with a fresh lookup, not the cached route
	// that may have lost the first copy.
	recent *dedup.Window
	// storeWaits are direct messages waiting for their home cluster to
	// store them, forwarding the passes forwarding stored messages
	// (offline.go); both bounded by the relays semaphore.
	storeWaits map[string]*storeWait
	forwarding map[peer.ID]*forwardPass

	// core decides the group path (groups.go), called under mu; local
	// holds the fanout groups of its local members, per group.
	core       *group.Core
	local      map[string]*fanout.Group
	replayWake chan struct{}

	wg     sync.WaitGroup
	stop   chan struct{} // closed by Close
	cancel context.CancelFunc
	closed atomic.Bool

	stats RouterStats
}

// RouterStats are cumulative counts, read with Stats.
type RouterStats struct {
	// Stats are the group core's counts (group publishes, frames,
	// fanouts, refusals, replays, replicas, syncs).
	group.Stats
	Routed, DeliveredLocal, Relayed, Offline, Unreachable, Busy atomic.Uint64
	// PresenceRefused counts presence records refused for a missing or
	// invalid client claim (forged by a supernode).
	PresenceRefused atomic.Uint64

	// Frames for clients dropped because, encoded, they exceed
	// protocol.MaxSessionFrame (clientframes.go): direct messages (the
	// sender's supernode is told INVALID), group messages (and publishes
	// refused INVALID at the home), and other frames (acks, results,
	// members lists).
	OversizeDirect, OversizeGroup, OversizeOther atomic.Uint64
	// Frames not queued on a link to another supernode (link.go): its
	// queue held linkQueueFrames frames or linkQueueBytes bytes, all
	// links held linksTotalBytes, the resource manager refused the
	// memory, or links were closed; and queued frames lost to a failed
	// dial or write.
	LinkQueueFrames, LinkQueueBytes, LinksTotalBytes, LinkMemory, LinkClosed, LinkFailed atomic.Uint64
	// LinkRewritten: frames whose write failed on a stream opened before
	// and that went again on a new one (link.go, write).
	LinkRewritten atomic.Uint64
	// Presence records refused (presence.go): past maxPresence or a
	// supernode's share of it.
	PresenceFull, PresenceOriginFull atomic.Uint64

	// Offline store-and-forward (offline.go). OfflineSent: messages of
	// this supernode's clients a majority of the home cluster stored.
	// As a replica: OfflineStored (new messages stored), OfflineDelivered
	// (forwarded to the recipient's supernode on attach, copies again
	// after a missing ack included), OfflineDeleted (acked),
	// OfflineExpired; refused: OfflineOverQuota, OfflineFull,
	// OfflineInvalid (unsigned by the sender, not home, malformed),
	// OfflineBusy (no slot, or a store error); OfflineForgedAcks: acks
	// not signed by the recipient, which delete nothing.
	OfflineSent, OfflineStored, OfflineDelivered, OfflineDeleted, OfflineExpired  atomic.Uint64
	OfflineOverQuota, OfflineFull, OfflineInvalid, OfflineBusy, OfflineForgedAcks atomic.Uint64
}

// NewRouter returns a Router serving the sessions of adm.
func NewRouter(h host.Host, adm *Admission, cfg RouterConfig) (*Router, error) {
	if h == nil || adm == nil || cfg.Ring == nil || cfg.IsSupernode == nil || cfg.Sems == nil || cfg.Fanout == nil {
		return nil, errors.New("router: missing host, admission, ring, directory, semaphores or fanout engine")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 10 * time.Second
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 5 * time.Second
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 10000
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OfflineTTL <= 0 {
		cfg.OfflineTTL = DefaultOfflineTTL
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	key := h.Peerstore().PrivKey(h.ID())
	if key == nil {
		return nil, errors.New("router: the host's peerstore has no private key for its own ID")
	}
	r := &Router{
		h: h, key: key, adm: adm, cfg: cfg,
		log:        cfg.Log.With("component", "router"),
		presence:   make(map[peer.ID]presenceRecord),
		presenceBy: newOriginCounts(),
		bounds:     newRecordBounds(cfg.Sems.Attached.Max(), cfg.MaxPresence, cfg.MaxMemberships),
		cache:      make(map[peer.ID]cachedLocation),
		local:      make(map[string]*fanout.Group),
		sessions:   make(map[peer.ID]localSession),
		inbound:    make(map[network.Stream]struct{}),
		recent:     dedup.New(recentRoutes),
		replayWake: make(chan struct{}, 1),
		storeWaits: make(map[string]*storeWait),
		forwarding: make(map[peer.ID]*forwardPass),
		stop:       make(chan struct{}),
	}
	r.links = newLinks(h, r.log, cfg.Now, &r.stats)
	r.links.failed = r.dropRoutesVia
	core, err := r.newGroupCore()
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	r.core = core
	return r, nil
}

// Start registers the relay and lookup handlers, hooks into the admission's
// sessions and starts the refresh loop.
func (r *Router) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.adm.SetHandler(r)
	r.h.SetStreamHandler(protocol.RelayID, r.handleRelay)
	r.h.SetStreamHandler(protocol.LookupID, r.handleLookup)
	r.wg.Go(func() { r.refreshLoop(ctx) })
	r.wg.Go(func() { r.replayLoop(ctx) })
}

// Close stops the router and waits for its goroutines.
func (r *Router) Close() {
	r.mu.Lock()
	already := r.closed.Swap(true)
	r.mu.Unlock()
	if already {
		return
	}
	close(r.stop)
	r.h.RemoveStreamHandler(protocol.RelayID)
	r.h.RemoveStreamHandler(protocol.LookupID)
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Lock()
	for s := range r.inbound {
		s.Reset()
	}
	r.mu.Unlock()
	r.wg.Wait()
	r.links.close()
}

// Stats returns the router's counters.
func (r *Router) Stats() *RouterStats { return &r.stats }

// LinkQueuedBytes returns the bytes queued on all links to other
// supernodes, at most linksTotalBytes.
func (r *Router) LinkQueuedBytes() int {
	_, _, total := r.links.queued("")
	return total
}

// FramesSentForTest returns how many relay frames this router wrote to p.
func (r *Router) FramesSentForTest(p peer.ID) uint64 { return r.links.framesSent(p) }

// GroupFramesWritten returns how many GroupMessage frames this router
// wrote on its link to p (written to the stream, not just queued).
func (r *Router) GroupFramesWritten(p peer.ID) uint64 { return r.links.groupFramesSent(p) }

func (r *Router) self() peer.ID { return r.h.ID() }

// encodeRelay encodes a RelayFrame once, length-prefixed.
func encodeRelay(f *pb.RelayFrame) []byte {
	b, err := protocol.AppendFrame(nil, f)
	if err != nil {
		// Only an invalid message (a programming error) fails to encode.
		panic(fmt.Sprintf("encode relay frame: %v", err))
	}
	return b
}

func encodeSession(f *pb.SessionFrame) []byte {
	b, err := protocol.AppendFrame(nil, f)
	if err != nil {
		panic(fmt.Sprintf("encode session frame: %v", err))
	}
	return b
}

// result tells a local client the outcome of its request.
func (r *Router) result(client peer.ID, id []byte, st pb.Result_Status, detail string) {
	r.toClient(client, &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: &pb.Result{Id: id, Status: st, Detail: detail}}}, &r.stats.OversizeOther)
}

// Attached is called by the Admission when a client's session starts.
func (r *Router) Attached(client peer.ID, seq uint64, claim []byte) {
	r.mu.Lock()
	r.sessions[client] = localSession{seq: seq, claim: claim}
	r.mu.Unlock()
	r.sendPresence([]presenceUpdate{{client: client, seq: seq, attached: true, claim: claim}})
}

// Detached is called when a client's session ends: its presence goes, and
// it leaves every group it joined here.
func (r *Router) Detached(client peer.ID, seq uint64) {
	r.mu.Lock()
	if cur, ok := r.sessions[client]; ok && cur.seq != seq {
		// A newer session of this client is attached here already (a
		// reattach's Attached can come before the old session's
		// Detached): its presence and groups stand.
		r.mu.Unlock()
		return
	}
	delete(r.sessions, client)
	// Its groups are left under the same lock: a newer session's
	// Attached and joins must not come in between.
	r.core.Detached(r.cfg.Now(), string(client))
	busy := r.core.Busy()
	r.mu.Unlock()
	if busy {
		r.wakeReplayer()
	}
	r.sendPresence([]presenceUpdate{{client: client, seq: seq, attached: false}})
}

// Frame handles a frame from an attached client.
func (r *Router) Frame(client peer.ID, f *pb.SessionFrame) {
	switch k := f.GetKind().(type) {
	case *pb.SessionFrame_Send:
		r.onSend(client, k.Send)
	case *pb.SessionFrame_Ack:
		r.onClientAck(client, k.Ack)
	case *pb.SessionFrame_GroupOp:
		r.onGroupOp(client, k.GroupOp)
	case *pb.SessionFrame_Publish:
		r.onPublish(client, k.Publish)
	case *pb.SessionFrame_MembersRequest:
		r.onMembersRequest(client, k.MembersRequest)
	}
}

// onSend routes a client's direct message, off the session's goroutine and
// under the relays semaphore: a supernode at its limit answers BUSY.
func (r *Router) onSend(client peer.ID, m *pb.DirectMessage) {
	to, err := peer.IDFromBytes(m.GetTo())
	switch {
	case len(m.GetId()) != protocol.MessageIDLen:
		r.result(client, m.GetId(), pb.Result_STATUS_INVALID, "message id must be 16 bytes")
		return
	case err != nil:
		r.result(client, m.GetId(), pb.Result_STATUS_INVALID, "bad recipient peer ID")
		return
	case len(m.GetPayload()) > 0:
		r.result(client, m.GetId(), pb.Result_STATUS_INVALID, "plaintext payload: direct messages are sealed end to end (DirectMessage.sealed)")
		return
	case len(m.GetSealed()) == 0 || len(m.GetSealed()) > protocol.MaxSealedDirect:
		r.result(client, m.GetId(), pb.Result_STATUS_INVALID, fmt.Sprintf("sealed message of %d bytes, want 1 to %d", len(m.GetSealed()), protocol.MaxSealedDirect))
		return
	}
	if !r.cfg.Sems.Relays.TryAcquire() {
		r.stats.Busy.Add(1)
		r.result(client, m.GetId(), pb.Result_STATUS_BUSY, "supernode relays at capacity")
		return
	}
	// The supernode vouches for nothing in the message: the recipient
	// checks the sender's signature over the sealed payload.
	msg := &pb.DirectMessage{Id: m.GetId(), From: []byte(client), To: m.GetTo(), Sealed: m.GetSealed(), Origin: []byte(r.self())}
	retry := r.seenRecently(string(client) + string(m.GetId()))
	r.wg.Go(func() {
		defer r.cfg.Sems.Relays.Release()
		r.route(msg, to, retry)
	})
}

// recentRoutes is how many routed message IDs a router remembers to
// recognise a sender's retry.
const recentRoutes = 4096

// seenRecently records key and reports whether it was already there.
func (r *Router) seenRecently(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recent.Seen(key)
}

// dropRoutesVia forgets cached locations that point at a supernode frames
// could not reach.
func (r *Router) dropRoutesVia(sn peer.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c, l := range r.cache {
		if l.location == sn {
			delete(r.cache, c)
		}
	}
}

// route delivers msg to its recipient: locally if attached here, else to
// the supernode its home cluster says it is at. fresh skips the cache
// (after a nack).
func (r *Router) route(msg *pb.DirectMessage, to peer.ID, fresh bool) {
	r.stats.Routed.Add(1)
	from, _ := peer.IDFromBytes(msg.GetFrom())
	if attached, fits := r.deliverLocal(to, msg); !fits {
		r.result(from, msg.GetId(), pb.Result_STATUS_INVALID, errTooLarge)
		return
	} else if attached {
		return
	}
	loc, ok := r.locate(to, fresh)
	if !ok || loc == r.self() {
		// Attached nowhere (or a stale record: the client left this
		// supernode): its home cluster stores the message.
		r.storeOffline(msg, to, from)
		return
	}
	if !r.links.send(loc, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Deliver{Deliver: msg}})) {
		r.dropCached(to)
		r.stats.Unreachable.Add(1)
		r.result(from, msg.GetId(), pb.Result_STATUS_UNREACHABLE, "recipient's supernode cannot be reached")
		return
	}
	r.stats.Relayed.Add(1)
}

// errTooLarge is the detail of an INVALID result for a message that
// would not fit its recipient's session.
const errTooLarge = "message too large for the recipient's session"

// deliverLocal hands msg to a client attached here. attached reports
// whether the client is attached here; fits is false when the message,
// as a SessionFrame, is larger than the client accepts: it was dropped
// (counted) and the sender must be told.
func (r *Router) deliverLocal(to peer.ID, msg *pb.DirectMessage) (attached, fits bool) {
	if !r.adm.Has(to) {
		return false, true
	}
	sent, fits := r.toClient(to, &pb.SessionFrame{Kind: &pb.SessionFrame_Deliver{Deliver: msg}}, &r.stats.OversizeDirect)
	if sent {
		r.stats.DeliveredLocal.Add(1)
	}
	return true, fits
}

// onClientAck routes a recipient's ack back to the sender's supernode.
func (r *Router) onClientAck(client peer.ID, a *pb.Ack) {
	if len(a.GetSigned()) > protocol.MaxSignedAck {
		return // the sender would refuse it anyway
	}
	a = &pb.Ack{Id: a.GetId(), From: []byte(client), To: a.GetTo(), Origin: a.GetOrigin(), Signed: a.GetSigned()}
	origin, err := peer.IDFromBytes(a.GetOrigin())
	if err != nil {
		return
	}
	if origin == r.self() {
		r.ackLocal(a)
		return
	}
	r.links.send(origin, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Ack{Ack: a}}))
}

// ackLocal deletes the stored message a (signed) ack acknowledges, and
// tells the sender if it is attached here.
func (r *Router) ackLocal(a *pb.Ack) {
	r.deleteAcked(a)
	to, err := peer.IDFromBytes(a.GetTo())
	if err != nil {
		return
	}
	r.toClient(to, &pb.SessionFrame{Kind: &pb.SessionFrame_Ack{Ack: a}}, &r.stats.OversizeOther)
}

// handleRelay reads one inbound link from another supernode.
func (r *Router) handleRelay(s network.Stream) {
	remote := s.Conn().RemotePeer()
	if err := s.Scope().SetService(RelayService); err != nil {
		s.Reset()
		return
	}
	if !r.cfg.IsSupernode(remote) {
		s.Reset()
		return
	}
	if err := s.Scope().ReserveMemory(protocol.MaxRelayFrame, network.ReservationPriorityHigh); err != nil {
		s.Reset()
		return
	}
	defer s.Scope().ReleaseMemory(protocol.MaxRelayFrame)
	r.mu.Lock()
	if r.closed.Load() {
		r.mu.Unlock()
		s.Reset()
		return
	}
	r.inbound[s] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.inbound, s)
		r.mu.Unlock()
		r.wg.Done()
	}()
	fr := protocol.NewFrameReader(s, protocol.MaxRelayFrame)
	for !r.closed.Load() {
		_ = s.SetReadDeadline(r.cfg.Now().Add(2 * time.Minute))
		var f pb.RelayFrame
		if err := fr.Read(&f); err != nil {
			s.Reset()
			return
		}
		r.onRelay(remote, &f)
	}
	s.Reset()
}

func (r *Router) onRelay(from peer.ID, f *pb.RelayFrame) {
	switch k := f.GetKind().(type) {
	case *pb.RelayFrame_Deliver:
		to, err := peer.IDFromBytes(k.Deliver.GetTo())
		if err != nil {
			return
		}
		switch attached, fits := r.deliverLocal(to, k.Deliver); {
		case !fits:
			// Tell the sender through its supernode (a PublishResult
			// carries any Result to a client there), never with a nack:
			// that would make the sender's supernode look again and
			// send the same frame elsewhere.
			r.links.send(from, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_PublishResult{PublishResult: &pb.PublishResult{
				To: k.Deliver.GetFrom(), Result: &pb.Result{Id: k.Deliver.GetId(), Status: pb.Result_STATUS_INVALID, Detail: errTooLarge},
			}}}))
		case !attached:
			r.links.send(from, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Nack{Nack: k.Deliver}}))
		}
	case *pb.RelayFrame_Nack:
		to, err := peer.IDFromBytes(k.Nack.GetTo())
		if err != nil {
			return
		}
		r.dropCached(to)
		sender, _ := peer.IDFromBytes(k.Nack.GetFrom())
		if !r.adm.Has(sender) && r.cfg.Store != nil && r.cfg.Store.OfflineCount(string(to)) > 0 {
			// A stored message this replica forwarded to a supernode
			// the recipient left: it stays stored, and follows the
			// recipient's next presence.
			return
		}
		if !r.cfg.Sems.Relays.TryAcquire() {
			return
		}
		msg := k.Nack
		r.wg.Go(func() {
			defer r.cfg.Sems.Relays.Release()
			if loc, ok := r.locate(to, true); ok && loc != from {
				r.route(msg, to, true)
				return
			}
			r.storeOffline(msg, to, sender)
		})
	case *pb.RelayFrame_Ack:
		r.ackLocal(k.Ack)
	case *pb.RelayFrame_Presence:
		r.applyPresence(from, k.Presence)
	case *pb.RelayFrame_Membership:
		r.withCore(func(c *group.Core, now time.Time) { c.Membership(now, string(from), k.Membership) })
	case *pb.RelayFrame_Publish:
		r.homePublish(k.Publish)
	case *pb.RelayFrame_GroupMessage:
		r.withCore(func(c *group.Core, now time.Time) { c.GroupMessage(now, string(from), k.GroupMessage) })
	case *pb.RelayFrame_ReplayDone:
		r.withCore(func(c *group.Core, now time.Time) { c.ReplayDone(now, string(from), k.ReplayDone) })
	case *pb.RelayFrame_Replica:
		r.withCore(func(c *group.Core, _ time.Time) { c.Replica(string(from), k.Replica) })
	case *pb.RelayFrame_ReplicaAck:
		r.withCore(func(c *group.Core, _ time.Time) { c.ReplicaAck(string(from), k.ReplicaAck) })
	case *pb.RelayFrame_ReplicaSync:
		r.withCore(func(c *group.Core, now time.Time) { c.ReplicaSync(now, string(from), k.ReplicaSync) })
	case *pb.RelayFrame_Store:
		r.onStoreRequest(from, k.Store)
	case *pb.RelayFrame_StoreResult:
		r.storeAnswer(from, k.StoreResult)
	case *pb.RelayFrame_PublishResult:
		to, err := peer.IDFromBytes(k.PublishResult.GetTo())
		if err == nil {
			r.toClient(to, &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: k.PublishResult.GetResult()}}, &r.stats.OversizeOther)
		}
	}
}
