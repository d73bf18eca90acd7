package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/overlayd/overlayd/overlay/cluster"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// Client-side attach settings.
const (
	// maxPerPass bounds the supernodes one failover pass asks, so a client
	// never sweeps the whole directory in one go.
	maxPerPass = 8
	// dialTimeout bounds connecting to and answering from one candidate.
	attemptTimeout = 5 * time.Second
	// protectTag protects the connection to the attached supernode from the
	// connection manager.
	protectTag = "overlayd-attached"
)

// plan is the pure failover order for one pass: the home cluster in ring
// order, then the alternatives supernodes offered, then other supernodes
// of the directory with spare capacity (in random order weighted by spare
// capacity, so clients do not herd onto the emptiest), then mega-supernodes
// (the fallback tier). Peers that asked us to wait (notBefore after now) and
// self are skipped; no peer appears twice; at most maxPerPass entries.
func plan(self peer.ID, home []peer.ID, alts []peer.AddrInfo, snap *directory.Snapshot,
	notBefore map[peer.ID]time.Time, now time.Time, rng *rand.Rand) []peer.AddrInfo {
	out := make([]peer.AddrInfo, 0, maxPerPass)
	seen := map[peer.ID]bool{self: true}
	add := func(ai peer.AddrInfo) {
		if len(out) == maxPerPass || seen[ai.ID] || now.Before(notBefore[ai.ID]) {
			return
		}
		seen[ai.ID] = true
		out = append(out, ai)
	}
	for _, id := range home {
		if e, ok := snap.Get(id); ok {
			add(peer.AddrInfo{ID: id, Addrs: e.Addrs})
		}
	}
	for _, ai := range alts {
		add(ai)
	}
	// Regular supernodes with room, weighted-random without replacement.
	type cand struct {
		e     directory.Entry
		spare int
	}
	var spare []cand
	var megas []directory.Entry
	for _, e := range snap.Entries {
		switch {
		case seen[e.ID]:
		case e.Role == protocol.RoleMega:
			megas = append(megas, e)
		case e.Capacity > e.Load:
			spare = append(spare, cand{e, int(e.Capacity - e.Load)})
		}
	}
	total := 0
	for _, c := range spare {
		total += c.spare
	}
	for total > 0 && len(out) < maxPerPass {
		x := rng.IntN(total)
		for i := range spare {
			if x < spare[i].spare {
				add(peer.AddrInfo{ID: spare[i].e.ID, Addrs: spare[i].e.Addrs})
				total -= spare[i].spare
				spare[i].spare = 0
				break
			}
			x -= spare[i].spare
		}
	}
	ais := make([]peer.AddrInfo, len(megas))
	caps := make([]uint32, len(megas))
	for i, e := range megas {
		ais[i], caps[i] = peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, e.Capacity
	}
	for _, ai := range megaOrder(self, ais, caps) {
		add(ai)
	}
	return out
}

// Attachment describes the client's current attachment.
type Attachment struct {
	Supernode peer.ID
	Since     time.Time
	Home      bool
	Failovers int
}

// clientSession is an accepted attach stream.
type clientSession struct {
	peer      peer.ID
	since     time.Time
	s         network.Stream
	fr        *protocol.FrameReader
	keepalive time.Duration
	home      bool
	wmu       sync.Mutex // serialises writes: pings, messages, acks
}

// write sends one frame on the session.
func (s *clientSession) write(now time.Time, f *pb.SessionFrame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.s.SetWriteDeadline(now.Add(s.keepalive))
	return protocol.WriteFrame(s.s, f)
}

// sessionEnd says how a session ended.
type sessionEnd struct {
	alts   []peer.AddrInfo
	spread time.Duration
	reason string
	// next is set when the client moved to a home supernode: the session
	// that replaces this one.
	next *clientSession
}

// attacher is the ordinary node's client side: it keeps the node attached
// to one supernode, failing over and moving back home under the backoff
// policy. One goroutine (run) owns it; status readers take mu.
type attacher struct {
	n         *Node
	rng       *rand.Rand
	retry     backoff.Strategy
	notBefore map[peer.ID]time.Time

	lastSeq uint64 // session seq of the newest attach attempt

	mu        sync.Mutex
	cur       *clientSession
	failovers int
}

// current returns the live session, or nil.
func (c *attacher) current() *clientSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

func newAttacher(n *Node) (*attacher, error) {
	rng := rand.New(rand.NewPCG(n.seed(), n.seed()))
	var retry backoff.Strategy
	if n.retryFactory != nil {
		retry = n.retryFactory(rng)
	} else {
		b, err := backoff.New(backoff.Policy{Base: n.cfg.RetryBase, Max: n.cfg.RetryMax, MaxRetryAfter: time.Minute}, rng)
		if err != nil {
			return nil, err
		}
		retry = b
	}
	return &attacher{n: n, rng: rng, retry: retry, notBefore: map[peer.ID]time.Time{}}, nil
}

// Attachment returns the current attachment, if any.
func (c *attacher) Attachment() (Attachment, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return Attachment{Failovers: c.failovers}, false
	}
	return Attachment{Supernode: c.cur.peer, Since: c.cur.since, Home: c.cur.home, Failovers: c.failovers}, true
}

func (c *attacher) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// run keeps the node attached until ctx ends.
func (c *attacher) run(ctx context.Context) {
	c.waitForRing(ctx)
	if c.n.attachGate != nil {
		select {
		case <-ctx.Done():
			return
		case <-c.n.attachGate:
		}
	}
	// Clients that heard the same announcement finish waiting together:
	// spread the first pass over one RetryBase, so a crowd starting at
	// once does not arrive as one wave either.
	if !c.sleep(ctx, c.stagger(c.n.cfg.RetryBase)) {
		return
	}
	reason := pb.AttachRequest_REASON_INITIAL
	var alts []peer.AddrInfo
	var sess *clientSession
	for ctx.Err() == nil {
		if sess == nil {
			var retryAfter time.Duration
			sess, retryAfter, alts = c.pass(ctx, reason, alts)
			if sess == nil {
				d := c.retry.Next(retryAfter)
				c.n.m.attachWaits.Observe(d.Seconds())
				if !c.sleep(ctx, d) {
					return
				}
				continue
			}
			c.retry.Reset()
		}
		end := c.keep(ctx, sess)
		if ctx.Err() != nil {
			return
		}
		c.n.emit(Event{Kind: EventSessionEnd, Time: c.n.now(), Supernode: sess.peer, Result: end.reason})
		if end.next != nil {
			// Moved back home: the new session is already accepted.
			sess = end.next
			continue
		}
		c.mu.Lock()
		c.failovers++
		c.mu.Unlock()
		c.n.m.failovers.Inc()
		c.n.log.Info("session ended", "supernode", sess.peer.ShortString(), "reason", end.reason)
		reason = pb.AttachRequest_REASON_FAILOVER
		alts = end.alts
		// Clients of a dead or draining supernode all notice at about the
		// same moment: spread the reattachment.
		spread := end.spread
		if spread == 0 {
			spread = sess.keepalive
		}
		sess = nil
		if !c.sleep(ctx, c.stagger(spread)) {
			return
		}
	}
}

// stagger is a random delay within window, or none when jitter is off.
func (c *attacher) stagger(window time.Duration) time.Duration {
	if c.n.noJitter {
		return 0
	}
	return backoff.Stagger(window, c.rng)
}

// waitForRing waits, before the first pass, for the directory to arrive
// through the bootstrap peers: until one full announce interval has passed
// since the first ring appeared (every supernode has announced once since
// this node connected), plus two ring debounce windows, so that the ring
// rebuilt from the last of those announcements is the one planned with;
// or two such spans in all. Supernodes' announcements are spread over the
// interval (announceSchedule), so the last can come just before it ends.
func (c *attacher) waitForRing(ctx context.Context) {
	iv := c.n.cfg.AnnounceInterval + 2*c.n.debounc
	giveUp := time.NewTimer(2 * iv)
	defer giveUp.Stop()
	poll := time.NewTicker(max(iv/20, 5*time.Millisecond))
	defer poll.Stop()
	for c.n.rings.Load() == nil {
		select {
		case <-ctx.Done():
			return
		case <-giveUp.C:
			return
		case <-poll.C:
		}
	}
	settled := time.NewTimer(iv)
	defer settled.Stop()
	select {
	case <-ctx.Done():
	case <-giveUp.C:
	case <-settled.C:
	}
}

// pass asks the planned supernodes in order until one accepts. It returns
// the session, or the largest retry-after hint heard and the alternatives
// offered.
func (c *attacher) pass(ctx context.Context, reason pb.AttachRequest_Reason, alts []peer.AddrInfo) (*clientSession, time.Duration, []peer.AddrInfo) {
	self := c.n.ID()
	home := cluster.Home(c.n.rings.Load(), []byte(self))
	snap := c.n.dir.Snapshot()
	now := c.n.now()
	candidates := plan(self, home, alts, snap, c.notBefore, now, c.rng)
	if len(candidates) == 0 {
		// No directory yet: the bootstrap peers may be supernodes.
		for _, b := range c.n.bootstrap {
			if b.ID != self && !now.Before(c.notBefore[b.ID]) {
				candidates = append(candidates, b)
			}
		}
	}
	var retryAfter time.Duration
	var offered []peer.AddrInfo
	for i := 0; i < len(candidates) && ctx.Err() == nil; i++ {
		ai := candidates[i]
		t0 := c.n.now()
		sess, resp, err := c.attempt(ctx, ai, reason)
		c.observeAttempt(ai.ID, t0, sess, resp, err)
		switch {
		case err != nil:
			c.n.m.attempts.WithLabelValues("error").Inc()
			c.n.log.Debug("attach failed", "supernode", ai.ID.ShortString(), "err", err)
			continue
		case sess != nil:
			c.n.m.attempts.WithLabelValues("accept").Inc()
			sess.home = slices.Contains(home, ai.ID)
			return sess, 0, nil
		}
		more := protocol.PeerAddrsFromPB(resp.GetAlternatives())
		if resp.GetStatus() == pb.AttachResponse_STATUS_BUSY {
			c.n.m.attempts.WithLabelValues("busy").Inc()
			ra := time.Duration(resp.GetRetryAfterMs()) * time.Millisecond
			retryAfter = max(retryAfter, ra)
			c.notBefore[ai.ID] = now.Add(ra)
		} else {
			c.n.m.attempts.WithLabelValues("redirect").Inc()
			c.notBefore[ai.ID] = now.Add(c.n.cfg.AnnounceInterval)
		}
		// Follow offered alternatives within this pass, up to the bound.
		for _, alt := range more {
			if len(candidates) >= maxPerPass {
				break
			}
			if alt.ID != self && !slices.ContainsFunc(candidates, func(x peer.AddrInfo) bool { return x.ID == alt.ID }) &&
				!now.Before(c.notBefore[alt.ID]) {
				candidates = append(candidates, alt)
			}
		}
		offered = append(offered, more...)
	}
	for id, t := range c.notBefore {
		if !now.Before(t) {
			delete(c.notBefore, id)
		}
	}
	return nil, retryAfter, offered
}

func (c *attacher) observeAttempt(id peer.ID, t0 time.Time, sess *clientSession, resp *pb.AttachResponse, err error) {
	result := "error"
	switch {
	case err != nil:
	case sess != nil:
		result = "accept"
	case resp.GetStatus() == pb.AttachResponse_STATUS_BUSY:
		result = "busy"
	default:
		result = "redirect"
	}
	now := c.n.now()
	c.n.emit(Event{Kind: EventAttempt, Time: now, Supernode: id, Result: result, Latency: now.Sub(t0)})
}

// errAttach wraps protocol failures of one attempt.
var errAttach = errors.New("attach")

// attempt asks one supernode. It returns a session on ACCEPT, the response
// on BUSY or REDIRECT, or an error.
func (c *attacher) attempt(ctx context.Context, ai peer.AddrInfo, reason pb.AttachRequest_Reason) (*clientSession, *pb.AttachResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	h := c.n.host
	if len(ai.Addrs) > 0 {
		h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
	}
	s, err := h.NewStream(ctx, ai.ID, protocol.AttachID)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: open stream: %v", errAttach, err)
	}
	deadline, _ := ctx.Deadline()
	_ = s.SetDeadline(deadline)
	c.lastSeq = max(c.lastSeq+1, uint64(max(c.n.now().UnixNano(), 1)))
	if err := protocol.WriteFrame(s, &pb.AttachRequest{ProtocolVersion: protocol.Version, Reason: reason, SessionSeq: c.lastSeq}); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("%w: write request: %v", errAttach, err)
	}
	fr := protocol.NewFrameReader(s, protocol.MaxSessionFrame)
	var resp pb.AttachResponse
	if err := fr.Read(&resp); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("%w: read answer: %v", errAttach, err)
	}
	if resp.GetStatus() != pb.AttachResponse_STATUS_ACCEPT {
		s.Close()
		return nil, &resp, nil
	}
	ka := time.Duration(resp.GetKeepaliveMs()) * time.Millisecond
	if ka < time.Millisecond || ka > time.Hour {
		s.Reset()
		return nil, nil, fmt.Errorf("%w: keepalive %v out of range", errAttach, ka)
	}
	_ = s.SetDeadline(time.Time{})
	return &clientSession{peer: ai.ID, since: c.n.now(), s: s, fr: fr, keepalive: ka}, nil, nil
}

// keep runs an accepted session until it ends: it pings every keepalive
// and declares the supernode dead after MissedKeepalives intervals without
// a pong; it honours a Detach; and while away from the home cluster it
// moves back when a home member has room, at a jittered, rate-limited pace.
func (c *attacher) keep(ctx context.Context, sess *clientSession) sessionEnd {
	h := c.n.host
	h.ConnManager().Protect(sess.peer, protectTag)
	defer c.n.relayAttached(sess.peer)() // relay reservation follows the session (relay_client.go)
	c.mu.Lock()
	c.cur = sess
	c.mu.Unlock()
	c.n.m.attached.Set(1)
	c.n.msg.sessionStarted(sess)
	defer func() {
		c.mu.Lock()
		if c.cur == sess {
			c.cur = nil
		}
		c.mu.Unlock()
		c.n.m.attached.Set(0)
		h.ConnManager().Unprotect(sess.peer, protectTag)
		sess.s.Reset()
	}()

	frames := make(chan sessionFrame, 1)
	readCtx, stopRead := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		// Unblock the reader (in Read, or handing over a frame) before
		// waiting for it.
		sess.s.Reset()
		stopRead()
		wg.Wait()
	}()
	wg.Go(func() {
		for {
			f := &pb.SessionFrame{}
			err := sess.fr.Read(f)
			select {
			case frames <- sessionFrame{f, err}:
			case <-readCtx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})

	ping := time.NewTicker(sess.keepalive)
	defer ping.Stop()
	silence := time.Duration(protocol.MissedKeepalives) * sess.keepalive
	dead := time.NewTimer(silence)
	defer dead.Stop()
	sent := map[uint64]time.Time{}
	var seq uint64
	nextReturn := c.n.now().Add(c.n.cfg.ReturnInterval/2 + backoff.Stagger(c.n.cfg.ReturnInterval, c.rng))
	for {
		select {
		case <-ctx.Done():
			c.sendDetach(sess, "client stopping")
			return sessionEnd{reason: "stopping"}
		case <-dead.C:
			c.n.m.deadSupernodes.Inc()
			return sessionEnd{reason: fmt.Sprintf("no answer for %v", silence)}
		case fr := <-frames:
			if fr.err != nil {
				return sessionEnd{reason: fmt.Sprintf("stream: %v", fr.err)}
			}
			switch k := fr.f.GetKind().(type) {
			case *pb.SessionFrame_Pong:
				if t, ok := sent[k.Pong.GetSeq()]; ok {
					rtt := c.n.now().Sub(t)
					c.n.m.keepaliveRTT.Observe(rtt.Seconds())
					c.n.emit(Event{Kind: EventKeepalive, Time: c.n.now(), Supernode: sess.peer, Latency: rtt})
					delete(sent, k.Pong.GetSeq())
				}
				dead.Reset(silence)
			default:
				c.n.msg.handle(sess, fr.f)
			case *pb.SessionFrame_Detach:
				d := k.Detach
				return sessionEnd{
					alts:   protocol.PeerAddrsFromPB(d.GetAlternatives()),
					spread: min(time.Duration(d.GetSpreadMs())*time.Millisecond, time.Minute),
					reason: "detached by supernode: " + d.GetReason(),
				}
			}
		case <-ping.C:
			seq++
			now := c.n.now()
			sent[seq] = now
			for s, t := range sent {
				if now.Sub(t) > silence {
					delete(sent, s)
				}
			}
			if err := sess.write(now, &pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: seq}}}); err != nil {
				return sessionEnd{reason: fmt.Sprintf("ping: %v", err)}
			}
			if !c.n.now().Before(nextReturn) {
				nextReturn = c.n.now().Add(c.n.cfg.ReturnInterval/2 + backoff.Stagger(c.n.cfg.ReturnInterval, c.rng))
				// The home cluster follows the ring: a supernode that was
				// home may no longer be (ring changes, a mega-supernode
				// that was briefly seen as regular).
				home := slices.Contains(cluster.Home(c.n.rings.Load(), []byte(c.n.ID())), sess.peer)
				c.mu.Lock()
				sess.home = home
				c.mu.Unlock()
				if home {
					continue
				}
				if next := c.tryReturn(ctx); next != nil {
					// Make before break: join the groups on the new
					// session first and keep taking frames from the old
					// one while the membership record reaches the group
					// homes, so that a group message a home still sends to
					// the old supernode arrives (the messenger drops the
					// copy that may also come through the new one).
					c.n.msg.sessionStarted(next)
					c.linger(ctx, sess, next, frames, returnLinger)
					c.sendDetach(sess, "returning home")
					c.n.m.returns.Inc()
					c.n.log.Info("moved back to home cluster", "from", sess.peer.ShortString(), "to", next.peer.ShortString())
					return sessionEnd{reason: "returned home", next: next}
				}
			}
		}
	}
}

// sessionFrame is one frame read from a session, or the read's error.
type sessionFrame struct {
	f   *pb.SessionFrame
	err error
}

// returnLinger is how long a client moving home keeps reading its old
// session after joining its groups on the new one: long enough for the
// membership record to reach the group homes and for what they sent to the
// old supernode meanwhile to arrive, with room for a loaded machine. The
// old slot is held that much longer.
const returnLinger = time.Second

// linger hands the old session's messages to the messenger for d, or
// until the old session ends, keeping the new session alive meanwhile
// (its frames wait in the supernode's outbox and are read once keep
// starts on it, so every message still arrives in order).
func (c *attacher) linger(ctx context.Context, old, next *clientSession, frames <-chan sessionFrame, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	ping := time.NewTicker(max(next.keepalive/2, time.Millisecond))
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-ping.C:
			_ = next.write(c.n.now(), &pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{}}})
		case fr := <-frames:
			if fr.err != nil {
				return
			}
			switch fr.f.GetKind().(type) {
			case *pb.SessionFrame_Pong, *pb.SessionFrame_Detach:
			default:
				c.n.msg.handle(old, fr.f)
			}
		}
	}
}

// tryReturn attaches to a member of the home cluster that announced spare
// capacity, without leaving the current session first.
func (c *attacher) tryReturn(ctx context.Context) *clientSession {
	self := c.n.ID()
	home := cluster.Home(c.n.rings.Load(), []byte(self))
	snap := c.n.dir.Snapshot()
	for _, id := range home {
		e, ok := snap.Get(id)
		if !ok || e.Load >= e.Capacity || c.n.now().Before(c.notBefore[id]) {
			continue
		}
		t0 := c.n.now()
		sess, resp, err := c.attempt(ctx, peer.AddrInfo{ID: id, Addrs: e.Addrs}, pb.AttachRequest_REASON_RETURN)
		c.observeAttempt(id, t0, sess, resp, err)
		if err != nil {
			c.n.m.attempts.WithLabelValues("error").Inc()
			continue
		}
		if sess == nil {
			c.n.m.attempts.WithLabelValues("busy").Inc()
			c.notBefore[id] = c.n.now().Add(time.Duration(resp.GetRetryAfterMs()) * time.Millisecond)
			continue
		}
		c.n.m.attempts.WithLabelValues("accept").Inc()
		sess.home = true
		return sess
	}
	return nil
}

// sendDetach tells the supernode this client leaves, best effort.
func (c *attacher) sendDetach(sess *clientSession, reason string) {
	_ = sess.write(c.n.now(), &pb.SessionFrame{Kind: &pb.SessionFrame_Detach{Detach: &pb.Detach{Reason: reason}}})
	sess.wmu.Lock()
	_ = sess.s.CloseWrite()
	sess.wmu.Unlock()
}
