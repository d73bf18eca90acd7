package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

const (
	// attemptTimeout bounds connecting to and answering from one
	// candidate.
	attemptTimeout = 5 * time.Second
	// protectTag protects the connection to the attached supernode from
	// the connection manager.
	protectTag = "overlayd-attached"
	// returnLinger is how long a client moving home keeps reading its old
	// session after joining its groups on the new one: long enough for the
	// membership record to reach the group homes and for what they sent to
	// the old supernode meanwhile to arrive, with room for a loaded
	// machine. The old slot is held that much longer.
	returnLinger = time.Second
)

// session is an accepted attach stream.
type session struct {
	peer      peer.ID
	since     time.Time
	s         network.Stream
	fr        *protocol.FrameReader
	keepalive time.Duration
	home      bool       // guarded by Client.mu once the session is current
	wmu       sync.Mutex // serialises writes: pings, messages, acks
}

// write sends one frame on the session.
func (s *session) write(now time.Time, f *pb.SessionFrame) error {
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
	next *session
}

// sessionFrame is one frame read from a session, or the read's error.
type sessionFrame struct {
	f   *pb.SessionFrame
	err error
}

// Run keeps the client attached until ctx ends, and returns once every
// goroutine it started has stopped. Call it once.
func (c *Client) Run(ctx context.Context) {
	c.waitForRing(ctx)
	c.emit(Event{Kind: EventReady, Time: c.now()})
	if c.gate != nil {
		select {
		case <-ctx.Done():
			return
		case <-c.gate:
		}
	}
	// Clients that heard the same announcement finish waiting together:
	// spread the first pass over one RetryBase, so a crowd starting at
	// once does not arrive as one wave either.
	if !sleep(ctx, c.stagger(c.cfg.RetryBase)) {
		return
	}
	reason := pb.AttachRequest_REASON_INITIAL
	var alts []peer.AddrInfo
	var sess *session
	// last is the supernode of the previous session: plan keeps it a slot
	// in the first pass after the session ended (a dead one costs that
	// pass one attempt, not every pass).
	var last peer.ID
	for ctx.Err() == nil {
		if sess == nil {
			var retryAfter time.Duration
			sess, retryAfter, alts = c.pass(ctx, reason, last, alts)
			last = ""
			if sess == nil {
				d := c.retry.Next(retryAfter)
				c.m.retryWaits.Observe(d.Seconds())
				if !sleep(ctx, d) {
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
		c.emit(Event{Kind: EventSessionEnd, Time: c.now(), Supernode: sess.peer, Result: end.reason})
		if end.next != nil {
			// Moved back home: the new session is already accepted.
			sess = end.next
			continue
		}
		c.mu.Lock()
		c.failovers++
		c.mu.Unlock()
		c.m.failovers.Inc()
		c.log.Info("session ended", "supernode", sess.peer.ShortString(), "reason", end.reason)
		reason = pb.AttachRequest_REASON_FAILOVER
		alts = end.alts
		last = sess.peer
		// Clients of a dead or draining supernode all notice at about the
		// same moment: spread the reattachment.
		spread := FailoverSpread(end.spread, sess.keepalive)
		sess = nil
		if !sleep(ctx, c.stagger(spread)) {
			return
		}
	}
}

// stagger is a random delay within window, or none when jitter is off.
func (c *Client) stagger(window time.Duration) time.Duration {
	if c.noJitter {
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
// interval, so the last can come just before it ends.
func (c *Client) waitForRing(ctx context.Context) {
	iv := c.cfg.AnnounceInterval + 2*c.cfg.RingDebounce
	giveUp := time.NewTimer(2 * iv)
	defer giveUp.Stop()
	poll := time.NewTicker(max(iv/20, 5*time.Millisecond))
	defer poll.Stop()
	for c.rings.Load() == nil {
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

// home returns the client's home cluster on the live ring.
func (c *Client) home() []peer.ID { return cluster.Home(c.rings.Load(), []byte(c.h.ID())) }

// pass asks the planned supernodes in order until one accepts. last is the
// supernode of the client's previous session ("" for none): plan keeps a
// slot for it. It returns the session, or the largest retry-after hint
// heard and the alternatives offered. The order and what each refusal
// changes are decided by Pass; pass only talks to the network.
func (c *Client) pass(ctx context.Context, reason pb.AttachRequest_Reason, last peer.ID, alts []peer.AddrInfo) (*session, time.Duration, []peer.AddrInfo) {
	c.takeDistrusted()
	home := c.home()
	p := NewPass(PassInput{Self: c.h.ID(), Home: home, Last: last, Alts: alts, Snapshot: c.dir.Snapshot(),
		NotBefore: c.notBefore, Now: c.now(), Bootstrap: c.cfg.Bootstrap, RedirectWait: c.cfg.AnnounceInterval}, c.rng)
	for ctx.Err() == nil {
		ai, ok := p.Next()
		if !ok {
			break
		}
		sess, resp, err := c.attempt(ctx, ai, reason)
		switch {
		case err != nil:
			c.log.Debug("attach failed", "supernode", ai.ID.ShortString(), "err", err)
			continue
		case sess != nil:
			sess.home = slices.Contains(home, ai.ID)
			return sess, 0, nil
		}
		p.Refused(ai.ID, resp.GetStatus() == pb.AttachResponse_STATUS_BUSY,
			time.Duration(resp.GetRetryAfterMs())*time.Millisecond, protocol.PeerAddrsFromPB(resp.GetAlternatives()))
	}
	retryAfter, offered := p.Finish()
	return nil, retryAfter, offered
}

// attempt asks one supernode. It returns a session on ACCEPT, the response
// on BUSY or REDIRECT, or an error; either way it counts and reports the
// outcome.
func (c *Client) attempt(ctx context.Context, ai peer.AddrInfo, reason pb.AttachRequest_Reason) (*session, *pb.AttachResponse, error) {
	t0 := c.now()
	sess, resp, err := c.ask(ctx, ai, reason)
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
	c.m.attempts.WithLabelValues(result).Inc()
	now := c.now()
	c.emit(Event{Kind: EventAttempt, Time: now, Supernode: ai.ID, Result: result, Latency: now.Sub(t0)})
	return sess, resp, err
}

// ask runs the attach handshake with one supernode.
func (c *Client) ask(ctx context.Context, ai peer.AddrInfo, reason pb.AttachRequest_Reason) (*session, *pb.AttachResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	if len(ai.Addrs) > 0 {
		c.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
	}
	s, err := c.h.NewStream(ctx, ai.ID, protocol.AttachID)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: open stream: %w", errAttach, err)
	}
	deadline, _ := ctx.Deadline()
	_ = s.SetDeadline(deadline)
	c.lastSeq = max(c.lastSeq+1, uint64(max(c.now().UnixNano(), 1)))
	// The claim lets the client's home cluster believe that it is
	// attached here, and nowhere a supernode says without it.
	claim, err := protocol.SignPresence(c.key, ai.ID, c.lastSeq)
	if err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("%w: sign presence: %w", errAttach, err)
	}
	if err := protocol.WriteFrame(s, &pb.AttachRequest{ProtocolVersion: protocol.Version, Reason: reason, SessionSeq: c.lastSeq, Presence: claim}); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("%w: write request: %w", errAttach, err)
	}
	fr := protocol.NewFrameReader(s, protocol.MaxSessionFrame)
	var resp pb.AttachResponse
	if err := fr.Read(&resp); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("%w: read answer: %w", errAttach, err)
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
	return &session{peer: ai.ID, since: c.now(), s: s, fr: fr, keepalive: ka}, nil, nil
}

// keep runs an accepted session until it ends: it pings every keepalive
// and declares the supernode dead after MissedKeepalives intervals without
// a pong; it honours a Detach; and while away from the home cluster it
// moves back when a home member has room, at a jittered, rate-limited pace.
func (c *Client) keep(ctx context.Context, sess *session) sessionEnd {
	c.h.ConnManager().Protect(sess.peer, protectTag)
	if c.onSession != nil {
		defer c.onSession(sess.peer)()
	}
	c.mu.Lock()
	c.cur = sess
	c.mu.Unlock()
	c.m.attached.Set(1)
	c.msg.sessionStarted(sess)
	defer func() {
		c.mu.Lock()
		if c.cur == sess {
			c.cur = nil
		}
		c.mu.Unlock()
		c.m.attached.Set(0)
		c.h.ConnManager().Unprotect(sess.peer, protectTag)
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
	nextReturn := c.nextReturn()
	for {
		select {
		case <-ctx.Done():
			c.sendDetach(sess, "client stopping")
			return sessionEnd{reason: "stopping"}
		case <-dead.C:
			c.m.deadSupernodes.Inc()
			return sessionEnd{reason: fmt.Sprintf("no answer for %v", silence)}
		case <-c.distrustNow:
			if why, ok := c.isDistrusted(sess.peer); ok {
				c.sendDetach(sess, "client leaves: "+why)
				return sessionEnd{reason: "left: " + why}
			}
		case fr := <-frames:
			if fr.err != nil {
				return sessionEnd{reason: fmt.Sprintf("stream: %v", fr.err)}
			}
			switch k := fr.f.GetKind().(type) {
			case *pb.SessionFrame_Pong:
				if t, ok := sent[k.Pong.GetSeq()]; ok {
					rtt := c.now().Sub(t)
					c.m.keepaliveRTT.Observe(rtt.Seconds())
					c.emit(Event{Kind: EventKeepalive, Time: c.now(), Supernode: sess.peer, Latency: rtt})
					delete(sent, k.Pong.GetSeq())
				}
				dead.Reset(silence)
			default:
				c.msg.handle(sess, fr.f)
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
			now := c.now()
			sent[seq] = now
			for s, t := range sent {
				if now.Sub(t) > silence {
					delete(sent, s)
				}
			}
			if err := sess.write(now, &pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: seq}}}); err != nil {
				return sessionEnd{reason: fmt.Sprintf("ping: %v", err)}
			}
			if c.now().Before(nextReturn) {
				continue
			}
			nextReturn = c.nextReturn()
			// The home cluster follows the ring: a supernode that was
			// home may no longer be (ring changes, a mega-supernode that
			// was briefly seen as regular).
			home := c.home()
			c.mu.Lock()
			sess.home = slices.Contains(home, sess.peer)
			c.mu.Unlock()
			if next := c.tryReturn(ctx, home, sess.peer); next != nil {
				// Make before break: join the groups on the new session
				// first and keep taking frames from the old one while the
				// membership record reaches the group homes, so that a
				// group message a home still sends to the old supernode
				// arrives (the messenger drops the copy that may also come
				// through the new one).
				c.msg.sessionStarted(next)
				c.linger(ctx, sess, next, frames, returnLinger)
				c.sendDetach(sess, "returning home")
				c.m.returns.Inc()
				c.log.Info("moved back to home cluster", "from", sess.peer.ShortString(), "to", next.peer.ShortString())
				return sessionEnd{reason: "returned home", next: next}
			}
		}
	}
}

// Distrust makes the client leave supernode p if it is attached to it,
// and not ask p again for d: the node found that p's view of the directory
// disagrees with other supernodes' (overlay/view). why is logged and
// reported as the session's end. Safe for concurrent use.
func (c *Client) Distrust(p peer.ID, d time.Duration, why string) {
	c.mu.Lock()
	c.distrusted[p] = c.now().Add(d)
	c.distrustWhy = why
	c.mu.Unlock()
	select {
	case c.distrustNow <- struct{}{}:
	default:
	}
}

// isDistrusted reports whether p is distrusted now, and why.
func (c *Client) isDistrusted(p peer.ID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.distrustWhy, c.now().Before(c.distrusted[p])
}

// takeDistrusted copies the distrusted supernodes into Run's notBefore,
// and forgets those whose time is over.
func (c *Client) takeDistrusted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for p, until := range c.distrusted {
		if !now.Before(until) {
			delete(c.distrusted, p)
			continue
		}
		if until.After(c.notBefore[p]) {
			c.notBefore[p] = until
		}
	}
}

// nextReturn is when to look for room at home next: after half a
// ReturnInterval plus a random part of one.
func (c *Client) nextReturn() time.Time {
	return c.now().Add(NextReturnDelay(c.cfg.ReturnInterval, c.rng))
}

// linger hands the old session's messages to the messenger for d, or
// until the old session ends, keeping the new session alive meanwhile
// (its frames wait in the supernode's outbox and are read once keep
// starts on it, so every message still arrives in order).
func (c *Client) linger(ctx context.Context, old, next *session, frames <-chan sessionFrame, d time.Duration) {
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
			_ = next.write(c.now(), &pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{}}})
		case fr := <-frames:
			if fr.err != nil {
				return
			}
			switch fr.f.GetKind().(type) {
			case *pb.SessionFrame_Pong, *pb.SessionFrame_Detach:
			default:
				c.msg.handle(old, fr.f)
			}
		}
	}
}

// tryReturn attaches to a member of the home cluster that announced spare
// capacity (returnTargets), without leaving the current session first.
func (c *Client) tryReturn(ctx context.Context, home []peer.ID, current peer.ID) *session {
	c.takeDistrusted()
	for _, ai := range ReturnTargets(c.h.ID(), home, current, c.dir.Snapshot(), c.notBefore, c.now()) {
		sess, resp, err := c.attempt(ctx, ai, pb.AttachRequest_REASON_RETURN)
		if err != nil {
			continue
		}
		if sess == nil {
			c.notBefore[ai.ID] = c.now().Add(time.Duration(resp.GetRetryAfterMs()) * time.Millisecond)
			continue
		}
		sess.home = true
		return sess
	}
	return nil
}

// sendDetach tells the supernode this client leaves, best effort.
func (c *Client) sendDetach(sess *session, reason string) {
	_ = sess.write(c.now(), &pb.SessionFrame{Kind: &pb.SessionFrame_Detach{Detach: &pb.Detach{Reason: reason}}})
	sess.wmu.Lock()
	_ = sess.s.CloseWrite()
	sess.wmu.Unlock()
}
