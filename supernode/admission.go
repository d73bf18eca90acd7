package supernode

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/capacity"
	"github.com/overlayd/overlayd/supernode/fanout"
)

// protectTag marks attached clients in the connection manager.
const protectTag = "overlayd-session"

// AttachService is the resource-manager service name of attach streams.
const AttachService = "overlayd.attach"

// Defaults of the attach protocol on the supernode side.
const (
	DefaultKeepalive    = 5 * time.Second
	DefaultRetryAfter   = 2 * time.Second
	DefaultHandshake    = 5 * time.Second
	DefaultDetachSpread = 5 * time.Second
)

// Handshake bounds: what a peer can hold on a supernode before it has sent
// its AttachRequest. A slot of the attached-peers semaphore and every
// per-peer session structure are taken only after the request has been read
// (STYLE rule 18), so a stream that sends nothing or one byte costs a
// goroutine, a deadline and its memory reservation until the request
// timeout, and no more than these many of them exist at once.
const (
	// DefaultRequestTimeout bounds the wait for the AttachRequest from the
	// stream's arrival. A client writes its request as soon as the stream
	// opens (with lazy protocol negotiation, in the same packet), so one
	// round trip is enough; 2 s leaves room for a lossy mobile link.
	DefaultRequestTimeout = 2 * time.Second
	// DefaultMaxHandshakes bounds the attach streams whose request has not
	// been read yet, over all peers. Each holds 2 × MaxSessionFrame
	// (130 KiB) of reserved memory, so 64 cost at most ~8.3 MiB; an honest
	// client's handshake takes one round trip, so 64 in flight is far above
	// the rate of any reconnect wave a supernode can absorb anyway.
	DefaultMaxHandshakes = 64
	// DefaultMaxHandshakesPerPeer bounds the handshakes of one peer: an
	// honest client has one in flight (two while a reattach overlaps a
	// timed-out attempt), so a third is refused.
	DefaultMaxHandshakesPerPeer = 2
)

// Candidate is a supernode that may take a refused client, as the directory
// last saw it.
type Candidate struct {
	peer.AddrInfo
	Spare int
}

// CandidatesFunc returns supernodes other than this one that announced
// spare capacity. It is called on the refusal path, so it must be cheap and
// must not block (the node serves it from its directory snapshot).
type CandidatesFunc func() []Candidate

// AdmissionConfig tunes an Admission. Zero fields take the defaults.
type AdmissionConfig struct {
	// Keepalive is the interval the client pings at; a session silent for
	// protocol.MissedKeepalives intervals is dropped.
	Keepalive time.Duration
	// RetryAfter is the hint sent with BUSY.
	RetryAfter time.Duration
	// Handshake bounds the time from stream open to the answer.
	Handshake time.Duration
	// RequestTimeout bounds the time from stream open to the end of the
	// AttachRequest (capped at Handshake).
	RequestTimeout time.Duration
	// MaxHandshakes and MaxHandshakesPerPeer bound the attach streams
	// whose request has not been read yet; past them a stream is answered
	// BUSY at once (DefaultMaxHandshakes, DefaultMaxHandshakesPerPeer).
	MaxHandshakes, MaxHandshakesPerPeer int
	// DetachSpread is the window over which clients of a stopping or
	// draining supernode are told to spread their reattachment.
	DetachSpread time.Duration
	// Candidates offers alternatives in BUSY and REDIRECT answers.
	Candidates CandidatesFunc
	// Writers, if not nil, writes every session's outbox: one pool of
	// writer goroutines shared by all the sessions (fanout.WithWriters)
	// instead of a goroutine per session. The caller starts it and closes
	// it after Close. Nil: each outbox has its own writer goroutine.
	Writers *fanout.Writers

	// perFrameOutboxes (benchmarks only) gives each outbox its own writer
	// goroutine making one Write per frame, as before the writer pool and
	// coalescing, so that both designs can be measured in one run.
	perFrameOutboxes bool
	// Now and Rand are the clock and randomness (defaults: time.Now and a
	// randomly seeded source).
	Now  func() time.Time
	Rand *rand.Rand
	Log  *slog.Logger
}

// Admission is the supernode side of the attach protocol: it admits ordinary
// nodes up to the attached-peers semaphore and keeps their sessions alive.
//
// Refusal is the cheap path: the semaphore is checked before anything is
// allocated for the peer, and a refused client gets one small BUSY frame.
type Admission struct {
	h    host.Host
	sem  *capacity.Semaphore
	cfg  AdmissionConfig
	log  *slog.Logger
	open atomic.Bool

	rngMu sync.Mutex
	rng   *rand.Rand

	mu       sync.Mutex
	sessions map[peer.ID]*session
	handler  SessionHandler
	closed   bool
	// wg counts every attach handler between its handshake's admission
	// and its return, sessions included.
	wg sync.WaitGroup
	// Handshakes in progress (request not read yet): the streams, reset
	// by Close, and how many each peer has. Bounded by MaxHandshakes.
	handshakes     map[network.Stream]struct{}
	handshakesPeer map[peer.ID]int

	stats admissionStats
}

type admissionStats struct {
	accepted, busy, redirected, badRequests, expired atomic.Uint64
	handshakesFull, peerHandshakes, requestTimeouts  atomic.Uint64
	// outboxFrames and outboxBytes count frames the clients' outboxes
	// dropped, past their frame or byte bound (shared by every outbox).
	outboxFrames, outboxBytes atomic.Uint64
}

// AdmissionStats are cumulative counts, and the handshakes in progress.
type AdmissionStats struct {
	// Accepted sessions; Busy, Redirected: refusals for lack of a slot or
	// while not admitting; BadRequests: an AttachRequest that did not
	// arrive whole or did not decode; Expired: sessions silent too long.
	Accepted, Busy, Redirected, BadRequests, Expired uint64
	// HandshakesFull and PeerHandshakes are streams answered BUSY before
	// their request was read, because MaxHandshakes (all peers) or
	// MaxHandshakesPerPeer were in progress; RequestTimeouts are streams
	// reset because their request had not arrived within RequestTimeout.
	HandshakesFull, PeerHandshakes, RequestTimeouts uint64
	// Handshaking is the number of attach streams whose request has not
	// been read yet (a gauge, at most MaxHandshakes).
	Handshaking int
	// OutboxDroppedFrames and OutboxDroppedBytes count frames dropped for
	// slow clients because their outbox held OutboxLimit frames or
	// OutboxBytes bytes.
	OutboxDroppedFrames, OutboxDroppedBytes uint64
}

type session struct {
	peer  peer.ID
	seq   uint64
	claim []byte // the client's signed presence claim
	since time.Time
	s     network.Stream
	out   *fanout.Outbox // every frame after the AttachResponse
	once  sync.Once      // releases the slot once
	ended chan struct{}
	// leaveBy (Unix nanoseconds on the admission's clock, 0 until a
	// Detach; set under Admission.mu, so a drain picks each session once
	// however long its client takes to leave) caps every read deadline of
	// the session after its Detach: a client that keeps pinging, or a
	// Detach that came before the session loop set its first deadline,
	// does not hold the slot past it.
	leaveBy atomic.Int64
}

// SessionHandler is told about sessions and gets the frames clients send
// beyond keepalives (the Router). Calls come from session goroutines and
// must not block for long.
type SessionHandler interface {
	// Attached is told the session's seq and the client's signed
	// presence claim (verified by Admission: signed by client, for this
	// supernode and seq).
	Attached(client peer.ID, seq uint64, claim []byte)
	Detached(client peer.ID, seq uint64)
	Frame(client peer.ID, f *pb.SessionFrame)
}

// A slow client's outbox bounds: past either, newer frames are dropped and
// the client gets a Gap notice.
const (
	// OutboxLimit is how many frames may wait for one client.
	OutboxLimit = 1024
	// OutboxBytes is how many bytes of frames may wait for one client:
	// 2 MiB holds the whole OutboxLimit of typical small messages
	// (≤ 2 KiB) but only ~31 frames of the largest size, where the frame
	// bound alone let one stalled client hold 1,024 × 65 KiB = 65 MiB.
	OutboxBytes = 2 << 20
)

// SessionInfo describes one attached client.
type SessionInfo struct {
	Peer  peer.ID
	Since time.Time
}

// NewAdmission returns an Admission for h guarded by sem (the attached-peers
// semaphore). It does nothing until Start.
func NewAdmission(h host.Host, sem *capacity.Semaphore, cfg AdmissionConfig) (*Admission, error) {
	if h == nil || sem == nil {
		return nil, errors.New("admission: nil host or semaphore")
	}
	if cfg.Keepalive == 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Handshake == 0 {
		cfg.Handshake = DefaultHandshake
	}
	if cfg.DetachSpread == 0 {
		cfg.DetachSpread = DefaultDetachSpread
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	cfg.RequestTimeout = min(cfg.RequestTimeout, cfg.Handshake)
	if cfg.MaxHandshakes == 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.MaxHandshakesPerPeer == 0 {
		cfg.MaxHandshakesPerPeer = DefaultMaxHandshakesPerPeer
	}
	if cfg.Keepalive < time.Millisecond || cfg.RetryAfter < 0 || cfg.Handshake < time.Millisecond || cfg.DetachSpread < 0 || cfg.RequestTimeout < time.Millisecond {
		return nil, fmt.Errorf("admission: bad timing %+v", cfg)
	}
	if cfg.MaxHandshakes < 1 || cfg.MaxHandshakesPerPeer < 1 {
		return nil, fmt.Errorf("admission: handshake bounds %d, %d per peer; want ≥ 1", cfg.MaxHandshakes, cfg.MaxHandshakesPerPeer)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Admission{
		h: h, sem: sem, cfg: cfg, rng: cfg.Rand,
		log:            cfg.Log.With("component", "admission"),
		sessions:       make(map[peer.ID]*session),
		handshakes:     make(map[network.Stream]struct{}),
		handshakesPeer: make(map[peer.ID]int),
	}, nil
}

// Start registers the attach protocol handler and opens admission.
func (a *Admission) Start() {
	a.open.Store(true)
	a.h.SetStreamHandler(protocol.AttachID, a.handle)
}

// SetOpen opens or closes admission: a closed Admission keeps its sessions
// but answers new clients with REDIRECT (used while draining).
func (a *Admission) SetOpen(open bool) { a.open.Store(open) }

// SetHandler sets the handler of session events and frames. Call it
// before Start.
func (a *Admission) SetHandler(h SessionHandler) {
	a.mu.Lock()
	a.handler = h
	a.mu.Unlock()
}

// Has reports whether client is attached here.
func (a *Admission) Has(client peer.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[client] != nil
}

// Send queues an encoded SessionFrame for client; false when the client is
// not attached here or its outbox is full (the drop is counted and the
// client gets a gap notice). frame must not be modified afterwards.
func (a *Admission) Send(client peer.ID, frame []byte) bool {
	a.mu.Lock()
	sess := a.sessions[client]
	a.mu.Unlock()
	return sess != nil && sess.out.Offer(frame)
}

// Sink returns client's outbox, for the fanout engine.
func (a *Admission) Sink(client peer.ID) (fanout.Sink, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sess := a.sessions[client]
	if sess == nil {
		return nil, false
	}
	return sess.out, true
}

// OutboxStats returns the state of client's outbound queue.
func (a *Admission) OutboxStats(client peer.ID) (fanout.OutboxStats, bool) {
	a.mu.Lock()
	sess := a.sessions[client]
	a.mu.Unlock()
	if sess == nil {
		return fanout.OutboxStats{}, false
	}
	return sess.out.Stats(), true
}

// gapFrame is the notice a client gets after frames were dropped for it.
func gapFrame(dropped uint64) []byte {
	b, _ := protocol.AppendFrame(nil, &pb.SessionFrame{Kind: &pb.SessionFrame_Gap{Gap: &pb.Gap{Dropped: dropped}}})
	return b
}

// Keepalive returns the keepalive interval clients are told.
func (a *Admission) Keepalive() time.Duration { return a.cfg.Keepalive }

// Load returns the number of attached clients.
func (a *Admission) Load() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sessions)
}

// Sessions lists the attached clients, sorted by peer ID.
func (a *Admission) Sessions() []SessionInfo {
	a.mu.Lock()
	out := make([]SessionInfo, 0, len(a.sessions))
	for _, s := range a.sessions {
		out = append(out, SessionInfo{Peer: s.peer, Since: s.since})
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y SessionInfo) int {
		switch {
		case x.Peer < y.Peer:
			return -1
		case x.Peer > y.Peer:
			return 1
		}
		return 0
	})
	return out
}

// Stats returns cumulative counts.
func (a *Admission) Stats() AdmissionStats {
	a.mu.Lock()
	handshaking := len(a.handshakes)
	a.mu.Unlock()
	return AdmissionStats{
		Accepted: a.stats.accepted.Load(), Busy: a.stats.busy.Load(), Redirected: a.stats.redirected.Load(),
		BadRequests: a.stats.badRequests.Load(), Expired: a.stats.expired.Load(),
		HandshakesFull: a.stats.handshakesFull.Load(), PeerHandshakes: a.stats.peerHandshakes.Load(),
		RequestTimeouts: a.stats.requestTimeouts.Load(), Handshaking: handshaking,
		OutboxDroppedFrames: a.stats.outboxFrames.Load(), OutboxDroppedBytes: a.stats.outboxBytes.Load(),
	}
}

// Drain detaches up to n sessions (all when n < 0) with a Detach telling
// each client to reattach elsewhere within spread, and returns how many it
// detached. Clients are picked in random order, among the sessions not
// detached before: a client still leaving (it has up to a second, the
// read deadline) is not picked again in its place of another.
func (a *Admission) Drain(n int, reason string, spread time.Duration) int {
	a.mu.Lock()
	victims := make([]*session, 0, len(a.sessions))
	for _, s := range a.sessions {
		if s.leaveBy.Load() == 0 {
			victims = append(victims, s)
		}
	}
	a.rngMu.Lock()
	a.rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	a.rngMu.Unlock()
	if n >= 0 && n < len(victims) {
		victims = victims[:n]
	}
	// The client closes the stream when it reads the Detach, which ends
	// our read loop and frees the slot; if it does not within a second,
	// the read deadline does (serve keeps it there).
	by := a.cfg.Now().Add(time.Second).UnixNano()
	for _, s := range victims {
		s.leaveBy.Store(by)
	}
	a.mu.Unlock()
	for _, s := range victims {
		a.detach(s, reason, spread)
	}
	return len(victims)
}

// Close stops admitting, tells every client to go elsewhere (spread over
// DetachSpread), and waits for the session goroutines.
func (a *Admission) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	// Handshakes in progress end now rather than at their request
	// timeout; their handlers see closed and free what they hold.
	for s := range a.handshakes {
		_ = s.Reset()
	}
	a.mu.Unlock()
	a.open.Store(false)
	a.h.RemoveStreamHandler(protocol.AttachID)
	a.Drain(-1, "supernode stopping", a.cfg.DetachSpread)
	a.wg.Wait()
}

func (a *Admission) detach(s *session, reason string, spread time.Duration) {
	f, err := protocol.AppendFrame(nil, &pb.SessionFrame{Kind: &pb.SessionFrame_Detach{Detach: &pb.Detach{
		Reason: reason, SpreadMs: uint32(spread / time.Millisecond), Alternatives: a.alternatives(),
	}}})
	if err != nil || !s.out.Offer(f) {
		s.s.Reset()
		return
	}
	_ = s.s.SetReadDeadline(time.Unix(0, s.leaveBy.Load())) // Drain set it
}

// alternatives picks up to MaxAlternatives candidates at random, weighted by
// spare capacity, so refused clients spread over the supernodes that have
// room instead of all going to the emptiest one.
func (a *Admission) alternatives() []*pb.PeerAddrs {
	if a.cfg.Candidates == nil {
		return nil
	}
	cs := a.cfg.Candidates()
	spare := make([]int, len(cs))
	for i, c := range cs {
		spare[i] = c.Spare
	}
	a.rngMu.Lock()
	picked := cluster.Sample(spare, protocol.MaxAlternatives, a.rng)
	a.rngMu.Unlock()
	out := make([]*pb.PeerAddrs, 0, len(picked))
	for _, i := range picked {
		out = append(out, protocol.PeerAddrsPB(cs[i].AddrInfo))
	}
	return out
}

// handle serves one attach stream. Order matters (STYLE rule 18): service
// scope, the handshake bounds (cheap, before anything is reserved), memory,
// deadlines, then the AttachRequest under the short request timeout; only
// once the request is in does the stream ask for an attached-peers slot, and
// only with a slot held is any per-peer session state allocated. A refusal
// writes one frame and returns.
func (a *Admission) handle(s network.Stream) {
	if err := s.Scope().SetService(AttachService); err != nil {
		s.Reset()
		return
	}
	remote := s.Conn().RemotePeer()
	now := a.cfg.Now()
	switch a.beginHandshake(s, remote) {
	case handshakeClosed:
		s.Reset()
		return
	case handshakesFull:
		a.stats.handshakesFull.Add(1)
		a.refuseBusy(s, now, "too many attach handshakes")
		return
	case peerHandshakesFull:
		a.stats.peerHandshakes.Add(1)
		a.refuseBusy(s, now, "too many attach handshakes from this peer")
		return
	}
	defer a.wg.Done()
	inHandshake := true
	endHandshake := func() {
		if inHandshake {
			inHandshake = false
			a.endHandshake(s, remote)
		}
	}
	defer endHandshake()
	if err := s.Scope().ReserveMemory(2*protocol.MaxSessionFrame, network.ReservationPriorityAlways); err != nil {
		s.Reset()
		return
	}
	defer s.Scope().ReleaseMemory(2 * protocol.MaxSessionFrame)
	_ = s.SetWriteDeadline(now.Add(a.cfg.Handshake))
	_ = s.SetReadDeadline(now.Add(a.cfg.RequestTimeout))

	fr := protocol.NewFrameReader(s, protocol.MaxSessionFrame)
	var req pb.AttachRequest
	if err := fr.Read(&req); err != nil {
		var te interface{ Timeout() bool }
		if errors.As(err, &te) && te.Timeout() {
			a.stats.requestTimeouts.Add(1)
		} else {
			a.stats.badRequests.Add(1)
		}
		s.Reset()
		return
	}
	// The presence claim is what this supernode will show the client's
	// home cluster: refuse a session without a valid one (before any slot
	// or state), so it never forwards what the homes would refuse.
	if err := protocol.VerifyPresence(req.GetPresence(), remote, a.h.ID(), req.GetSessionSeq()); err != nil {
		a.stats.badRequests.Add(1)
		a.log.Debug("attach refused: presence claim", "peer", remote.ShortString(), "err", err)
		s.Reset()
		return
	}
	endHandshake()

	if !a.open.Load() {
		a.stats.redirected.Add(1)
		a.refuse(s, &pb.AttachResponse{Status: pb.AttachResponse_STATUS_REDIRECT, Reason: "not admitting", Alternatives: a.alternatives()})
		return
	}
	// A client that reattaches while its old session lingers takes that
	// session's slot over instead of asking for a second one. The slot is
	// claimed under the lock: an old session that has ended meanwhile has
	// released its slot already, and the claim then fails (tookOver stays
	// false), so the new session asks the semaphore like anyone else.
	a.mu.Lock()
	old := a.sessions[remote]
	tookOver := false
	if old != nil {
		old.once.Do(func() { tookOver = true })
	}
	a.mu.Unlock()
	if !tookOver && !a.sem.TryAcquire() {
		a.stats.busy.Add(1)
		a.refuse(s, &pb.AttachResponse{
			Status:       pb.AttachResponse_STATUS_BUSY,
			RetryAfterMs: uint32(a.cfg.RetryAfter / time.Millisecond),
			Alternatives: a.alternatives(),
			Reason:       "at capacity",
		})
		return
	}
	sess := &session{peer: remote, since: a.cfg.Now(), s: s, ended: make(chan struct{})}
	var err error
	outOpts := []fanout.OutboxOption{fanout.WithGapFrame(gapFrame), fanout.WithAbort(func() { s.Reset() }),
		fanout.WithByteLimit(OutboxBytes), fanout.WithDropCounters(&a.stats.outboxFrames, &a.stats.outboxBytes)}
	switch {
	case a.cfg.perFrameOutboxes:
		outOpts = append(outOpts, fanout.WithCoalesce(0))
	case a.cfg.Writers != nil:
		outOpts = append(outOpts, fanout.WithWriters(a.cfg.Writers))
	}
	sess.out, err = fanout.NewOutbox(OutboxLimit, s, outOpts...)
	if err != nil {
		_ = a.sem.Release() // the slot held, taken over or acquired
		if old != nil {
			old.s.Reset()
		}
		s.Reset()
		return
	}
	release := func() { sess.once.Do(func() { _ = a.sem.Release() }) }
	if old != nil {
		old.s.Reset()
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		release()
		s.Reset()
		return
	}
	sess.seq, sess.claim = req.GetSessionSeq(), req.GetPresence()
	a.sessions[remote] = sess
	handler := a.handler
	a.mu.Unlock()
	// The connection manager must never trim an attached client.
	a.h.ConnManager().Protect(remote, protectTag)
	defer func() {
		a.mu.Lock()
		current := a.sessions[remote] == sess
		if current {
			delete(a.sessions, remote)
			a.h.ConnManager().Unprotect(remote, protectTag)
		}
		a.mu.Unlock()
		sess.out.Close()
		release()
		if current && handler != nil {
			handler.Detached(remote, sess.seq)
		}
		close(sess.ended)
	}()

	err = protocol.WriteFrame(s, &pb.AttachResponse{
		Status: pb.AttachResponse_STATUS_ACCEPT, KeepaliveMs: uint32(a.cfg.Keepalive / time.Millisecond),
	})
	if err != nil {
		s.Reset()
		return
	}
	a.stats.accepted.Add(1)
	a.log.Debug("attached", "peer", remote.ShortString(), "reason", req.GetReason().String())
	sess.out.Start()
	if handler != nil {
		handler.Attached(remote, sess.seq, sess.claim)
	}
	a.serve(sess, fr, handler)
}

// handshakeVerdict is beginHandshake's answer.
type handshakeVerdict int

const (
	handshakeAdmitted handshakeVerdict = iota
	handshakeClosed
	handshakesFull
	peerHandshakesFull
)

// beginHandshake admits s as a handshake in progress, within MaxHandshakes
// and MaxHandshakesPerPeer, and adds it to a.wg; endHandshake undoes the
// first part. The per-peer counts are the only state kept before the
// request is read, and they are bounded by MaxHandshakes.
func (a *Admission) beginHandshake(s network.Stream, remote peer.ID) handshakeVerdict {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return handshakeClosed
	case len(a.handshakes) >= a.cfg.MaxHandshakes:
		return handshakesFull
	case a.handshakesPeer[remote] >= a.cfg.MaxHandshakesPerPeer:
		return peerHandshakesFull
	}
	a.handshakes[s] = struct{}{}
	a.handshakesPeer[remote]++
	a.wg.Add(1)
	return handshakeAdmitted
}

func (a *Admission) endHandshake(s network.Stream, remote peer.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.handshakes, s)
	if a.handshakesPeer[remote]--; a.handshakesPeer[remote] <= 0 {
		delete(a.handshakesPeer, remote)
	}
}

// refuseBusy answers BUSY to a stream refused before its request was read.
func (a *Admission) refuseBusy(s network.Stream, now time.Time, reason string) {
	_ = s.SetDeadline(now.Add(a.cfg.Handshake))
	a.refuse(s, &pb.AttachResponse{
		Status:       pb.AttachResponse_STATUS_BUSY,
		RetryAfterMs: uint32(a.cfg.RetryAfter / time.Millisecond),
		Alternatives: a.alternatives(),
		Reason:       reason,
	})
}

// serve answers the client's pings until the session ends: the client
// detaches, the stream fails, or the client is silent for
// MissedKeepalives intervals.
func (a *Admission) serve(sess *session, fr *protocol.FrameReader, handler SessionHandler) {
	s := sess.s
	_ = s.SetWriteDeadline(time.Time{})
	silence := protocol.MissedKeepalives * a.cfg.Keepalive
	for {
		deadline := a.cfg.Now().Add(silence)
		_ = s.SetReadDeadline(deadline)
		// After the deadline is set: a Detach that set leaveBy before it
		// is seen here, one after it sets its own deadline last.
		if by := sess.leaveBy.Load(); by != 0 && by < deadline.UnixNano() {
			_ = s.SetReadDeadline(time.Unix(0, by))
		}
		f := &pb.SessionFrame{}
		if err := fr.Read(f); err != nil {
			var te interface{ Timeout() bool }
			if errors.As(err, &te) && te.Timeout() {
				a.stats.expired.Add(1)
				a.log.Debug("session expired", "peer", sess.peer.ShortString())
			}
			s.Reset()
			return
		}
		switch k := f.GetKind().(type) {
		case *pb.SessionFrame_Ping:
			pong, _ := protocol.AppendFrame(nil, &pb.SessionFrame{Kind: &pb.SessionFrame_Pong{Pong: &pb.Pong{Seq: k.Ping.GetSeq()}}})
			sess.out.Offer(pong)
		case *pb.SessionFrame_Detach:
			_ = s.Close()
			return
		default:
			if handler != nil {
				handler.Frame(sess.peer, f)
			}
		}
	}
}

// refuse writes one answer and closes the stream.
func (a *Admission) refuse(s network.Stream, resp *pb.AttachResponse) {
	if err := protocol.WriteFrame(s, resp); err != nil {
		s.Reset()
		return
	}
	_ = s.Close()
}
