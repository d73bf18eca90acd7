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

// clientAway is what a client keeps between its failover passes (its
// backoff, waits and alternatives), apart from simClient so that the
// clients attached at home (most of them, most of the time) do not carry
// it: 40 bytes fewer per client. simClient's accessors read nil when it
// is not there; its setters make it when needed and drop it when empty.
type clientAway struct {
	bo   *backoff.Backoff
	nb   map[peer.ID]time.Time
	alts []peer.AddrInfo
}

func (c *simClient) bo() *backoff.Backoff {
	if c.away == nil {
		return nil
	}
	return c.away.bo
}

func (c *simClient) nb() map[peer.ID]time.Time {
	if c.away == nil {
		return nil
	}
	return c.away.nb
}

func (c *simClient) alts() []peer.AddrInfo {
	if c.away == nil {
		return nil
	}
	return c.away.alts
}

func (c *simClient) setBO(bo *backoff.Backoff) {
	if c.mayAway(bo != nil) {
		c.away.bo = bo
		c.dropAway()
	}
}

func (c *simClient) setNB(nb map[peer.ID]time.Time) {
	if c.mayAway(nb != nil) {
		c.away.nb = nb
		c.dropAway()
	}
}

func (c *simClient) setAlts(alts []peer.AddrInfo) {
	if c.mayAway(alts != nil) {
		c.away.alts = alts
		c.dropAway()
	}
}

// mayAway makes c.away if a value is to be set (some), and says whether
// there is one to set it in (setting nil in none is a no-op).
func (c *simClient) mayAway(some bool) bool {
	if c.away == nil && some {
		c.away = &clientAway{}
	}
	return c.away != nil
}

func (c *simClient) dropAway() {
	if a := c.away; a.bo == nil && a.nb == nil && a.alts == nil {
		c.away = nil
	}
}

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
	if bo := c.bo(); bo != nil {
		bo.Reset()
		s.boPool = append(s.boPool, bo)
		c.setBO(nil)
	}
	c.setAlts(nil)
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
	c.last, c.state, c.run = b, csWaiting, nil
	c.setAlts(nil)
	s.at(s.stagger(client.FailoverSpread(0, s.p.Keepalive)), event{k: evPass, a: i, gen: c.gen})
}

// home is client i's home cluster on the ring (cluster.Home), memoised
// until the ring changes. The memo holds supernode indices, not the
// decoded IDs (a million clients' homes as strings were a third of the
// heap): cluster.Size slots per client in s.homes, each the index plus 1,
// 0 for an unused slot; a first slot of 0 is "not memoised" and
// homeEmpty an empty home. clear(s.homes) forgets them all.
func (s *Sim) home(i int32, id peer.ID) []peer.ID {
	if s.homes == nil {
		s.homes = make([]int32, cluster.Size*len(s.clients))
	}
	m := s.homes[cluster.Size*int(i):][:cluster.Size]
	if m[0] == 0 {
		h := cluster.Home(s.ring, []byte(id))
		if len(h) == 0 {
			m[0] = homeEmpty
			return h
		}
		var idx [cluster.Size]int32
		for k, p := range h {
			b, ok := s.byID[p]
			if !ok || k >= cluster.Size {
				return h // not one of ours: not memoised
			}
			idx[k] = b + 1
		}
		copy(m, idx[:])
	}
	// The supernodes' own IDs: the decoded copies are garbage at once.
	h := make([]peer.ID, 0, cluster.Size)
	for _, b := range m {
		if b > 0 {
			h = append(h, s.sns[b-1].id)
		}
	}
	return h
}

// homeEmpty marks a memoised empty home in s.homes.
const homeEmpty = -1

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
	p := client.NewPass(client.PassInput{Self: id, Home: home, Last: last, Alts: c.alts(), Snapshot: s.snap,
		NotBefore: c.nb(), Now: s.time(), RedirectWait: s.p.AnnounceInterval, Megas: s.megaRing, Index: s.planIndex}, s.rng)
	c.setAlts(nil)
	c.last = -1
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
	if !known || b == s.ownSupernode(i) {
		// Unknown, or its own (an auto node's client side: libp2p
		// refuses to dial self, at once).
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
	nb := r.pass.NotBefore()
	if len(nb) == 0 {
		nb = nil
	}
	c.setNB(nb)
	c.setAlts(offered)
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
	if c.bo() == nil {
		c.setBO(s.newBackoff())
	}
	return c.bo().Next(retryAfter)
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
			if c.nb() == nil {
				c.setNB(map[peer.ID]time.Time{})
			}
			c.nb()[sn.id] = s.time().Add(ra)
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
	targets := client.ReturnTargets(id, home, cur, s.snap, c.nb(), s.time())
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
	if bo := c.bo(); bo != nil {
		s.boPool = append(s.boPool, bo)
		bo.Reset()
		c.setBO(nil)
	}
	c.state, c.last, c.run, c.home = csWaiting, -1, nil, false
	c.setAlts(nil)
	c.setNB(nil)
	s.at(s.p.AnnounceInterval+s.stagger(s.p.Backoff.Base), event{k: evPass, a: i, gen: c.gen})
	if s.cfg.ChurnMean > 0 {
		s.at(s.churnWait(), event{k: evRestart, a: i})
	}
}

// churnWait is the time to a client's next restart under churn.
func (s *Sim) churnWait() time.Duration {
	return time.Duration(s.rng.ExpFloat64() * float64(s.cfg.ChurnMean))
}
