package sim

import (
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/overlay/cluster"
)

// The clients' side: sessions, failover passes, waits and returns home.

// attach makes client i a session of supernode b (its slot is taken).
func (s *Sim) attach(i, b int32, home bool) {
	c, sn := &s.clients[i], &s.sns[b]
	c.gen++
	c.sn, c.pos, c.state, c.home = b, int32(len(sn.clients)), csAttached, home
	c.run = nil
	sn.clients = append(sn.clients, i)
	// Load as the testnet samples it: sessions or semaphore, the larger.
	if l := max(sn.sem.InUse(), len(sn.clients)); l > sn.peak {
		sn.peak = l
	}
	s.rec.attached(s, 1)
	if c.bo != nil {
		c.bo.Reset()
		s.boPool = append(s.boPool, c.bo)
		c.bo = nil
	}
	c.alts = nil
	if !home {
		s.at(client.NextReturnDelay(s.p.ReturnInterval, s.rng), event{k: evReturn, a: i, gen: c.gen})
	}
}

// detach removes client i from its supernode (freeing the slot if the
// supernode is alive).
func (s *Sim) detach(i int32) {
	c := &s.clients[i]
	b := c.sn
	sn := &s.sns[b]
	last := int32(len(sn.clients) - 1)
	moved := sn.clients[last]
	sn.clients[c.pos] = moved
	s.clients[moved].pos = c.pos
	sn.clients = sn.clients[:last]
	if sn.alive {
		s.advance(b)
		_ = sn.sem.Release()
		s.rec.attached(s, -1)
	}
	c.sn, c.pos = -1, 0
	c.gen++
}

// sessionEnded: client i noticed that its supernode is gone (keepalive
// silence): it fails over after node/client's stagger.
func (s *Sim) sessionEnded(i int32) {
	c := &s.clients[i]
	b := c.sn
	s.detach(i)
	c.last, c.state, c.alts, c.run = b, csWaiting, nil, nil
	s.at(s.stagger(client.FailoverSpread(0, s.p.Keepalive)), event{k: evPass, a: i, gen: c.gen})
}

// home is client i's home cluster on the ring (cluster.Home), memoised
// until the ring changes.
func (s *Sim) home(i int32, id peer.ID) []peer.ID {
	if h, ok := s.homes[i]; ok {
		return h
	}
	h := cluster.Home(s.ring, []byte(id))
	s.homes[i] = h
	return h
}

// startPass plans a failover pass with node/client's Pass, starts it,
// and returns it.
func (s *Sim) startPass(i int32) *client.Pass {
	c := &s.clients[i]
	id := s.clientID(i)
	home := s.home(i, id)
	var last peer.ID
	if c.last >= 0 {
		last = s.sns[c.last].id
	}
	p := client.NewPass(client.PassInput{Self: id, Home: home, Last: last, Alts: c.alts, Snapshot: s.snap,
		NotBefore: c.nb, Now: s.time(), RedirectWait: s.p.AnnounceInterval, Megas: s.megaRing}, s.rng)
	c.alts, c.last = nil, -1
	c.state = csPass
	c.run = &attemptRun{pass: p, home: home}
	s.nextAttempt(i)
	return p
}

// nextAttempt asks the pass's next supernode, or ends the pass.
func (s *Sim) nextAttempt(i int32) {
	c := &s.clients[i]
	r := c.run
	var ai peer.AddrInfo
	var ok bool
	if r.returning {
		if ok = r.next < len(r.targets); ok {
			ai = r.targets[r.next]
			r.next++
		}
	} else {
		ai, ok = r.pass.Next()
	}
	if !ok {
		s.endRun(i)
		return
	}
	b, known := s.byID[ai.ID]
	if !known {
		s.nextAttempt(i)
		return
	}
	r.t0, r.cur, r.alts = s.now, b, nil
	if s.lost() {
		s.at(s.p.AttemptTimeout, event{k: evAnswer, a: i, b: b, st: stError, gen: c.gen})
		return
	}
	s.at(s.latency(), event{k: evArrive, a: i, b: b, gen: c.gen})
}

// endRun ends a pass without a session (backoff, then the next pass) or
// a return attempt without a move.
func (s *Sim) endRun(i int32) {
	c := &s.clients[i]
	r := c.run
	c.run = nil
	if r.returning {
		s.at(client.NextReturnDelay(s.p.ReturnInterval, s.rng), event{k: evReturn, a: i, gen: c.gen})
		return
	}
	retryAfter, offered := r.pass.Finish()
	c.nb = r.pass.NotBefore()
	if len(c.nb) == 0 {
		c.nb = nil
	}
	c.alts = offered
	c.state = csWaiting
	s.at(s.retryDelay(i, retryAfter), event{k: evPass, a: i, gen: c.gen})
}

// retryDelay is client i's wait after a failed pass: its backoff.Backoff
// (full jitter; one per client while it fails over, Reset on success), or
// backoff.Fixed without jitter.
func (s *Sim) retryDelay(i int32, retryAfter time.Duration) time.Duration {
	c := &s.clients[i]
	if !s.cfg.Policy.Jitter {
		return backoff.Fixed(s.p.FixedRetry).Next(retryAfter)
	}
	if c.bo == nil {
		c.bo = s.newBackoff()
	}
	return c.bo.Next(retryAfter)
}

func (s *Sim) newBackoff() *backoff.Backoff {
	if n := len(s.boPool); n > 0 {
		b := s.boPool[n-1]
		s.boPool = s.boPool[:n-1]
		return b
	}
	b, err := backoff.New(s.p.Backoff, s.rng)
	if err != nil {
		panic(err) // Params.Validate checked the policy
	}
	return b
}

// answer: the answer of supernode b (or the attempt's failure) reaches
// client a.
func (s *Sim) answer(e event) {
	c := &s.clients[e.a]
	if c.gen != e.gen || c.run == nil || c.run.cur != e.b {
		if e.st == stAccept && s.sns[e.b].alive {
			s.at(s.silence, event{k: evRelease, b: e.b, gen: uint32(s.sns[e.b].seq >> 40)})
		}
		return
	}
	s.rec.attempt(s, e.st)
	r := c.run
	sn := &s.sns[e.b]
	if e.st == stAccept && !sn.alive {
		e.st = stError // it crashed while the answer was on its way
	}
	switch e.st {
	case stAccept:
		home := slices.Contains(r.home, sn.id)
		if c.state == csAttached {
			s.detach(e.a) // moved home: leave the old session
		}
		s.attach(e.a, e.b, home)
		return
	case stBusy, stRedirect:
		var ra time.Duration
		if e.st == stBusy {
			ra = s.p.RetryAfter
		}
		if r.returning {
			if c.nb == nil {
				c.nb = map[peer.ID]time.Time{}
			}
			c.nb[sn.id] = s.time().Add(ra)
		} else {
			r.pass.Refused(sn.id, e.st == stBusy, ra, r.alts)
		}
	}
	s.nextAttempt(e.a)
}

// tryReturn: an attached client away from home asks the members of its
// home cluster with room to take it back (node/client ReturnTargets).
func (s *Sim) tryReturn(i int32) {
	c := &s.clients[i]
	id := s.clientID(i)
	home := s.home(i, id)
	cur := s.sns[c.sn].id
	if slices.Contains(home, cur) {
		c.home = true
		return
	}
	targets := client.ReturnTargets(home, cur, s.snap, c.nb, s.time())
	if len(targets) == 0 {
		s.at(client.NextReturnDelay(s.p.ReturnInterval, s.rng), event{k: evReturn, a: i, gen: c.gen})
		return
	}
	c.run = &attemptRun{returning: true, targets: targets, home: home}
	s.nextAttempt(i)
}

// restart is a client process restarting: it leaves its session with a
// Detach (the supernode frees the slot at once), forgets its waits and
// alternatives, and the new process waits for its ring (one announce
// interval: node/client's waitForRing, less its two debounce windows),
// then staggers its first pass over one retry base, as Client.Run does.
func (s *Sim) restart(i int32) {
	c := &s.clients[i]
	if c.state == csAttached {
		s.detach(i)
	} else {
		c.gen++
	}
	if c.bo != nil {
		s.boPool = append(s.boPool, c.bo)
		c.bo.Reset()
		c.bo = nil
	}
	c.state, c.last, c.alts, c.nb, c.run, c.home = csWaiting, -1, nil, nil, nil, false
	s.at(s.p.AnnounceInterval+s.stagger(s.p.Backoff.Base), event{k: evPass, a: i, gen: c.gen})
	if s.cfg.ChurnMean > 0 {
		s.at(s.churnWait(), event{k: evRestart, a: i})
	}
}

// churnWait is the time to a client's next restart under churn.
func (s *Sim) churnWait() time.Duration {
	return time.Duration(s.rng.ExpFloat64() * float64(s.cfg.ChurnMean))
}
