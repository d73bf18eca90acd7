package sim

import (
	"time"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// The hand-back after an outage: the crashed supernodes restart, the
// operator demotes the megas, and each mega hands the clients above its
// regular capacity back on the daemon's schedule (node/role.DrainStep,
// which roledriver.Drain calls).

// incarnation is supernode b's restart count: events of an earlier life
// carry another.
func (s *Sim) incarnation(b int32) uint32 { return uint32(s.sns[b].seq >> 40) }

// handBack restarts the supernodes the scenario crashed: new processes
// with their old identities, empty, announcing at once. The megas are
// demoted once the directory lists them (the next snapshot).
func (s *Sim) handBack() {
	for _, b := range s.crashedSNs {
		sn := &s.sns[b]
		if sn.alive {
			continue
		}
		sem, err := capacity.New("attached_peers", sn.sem.Max())
		if err != nil {
			panic(err) // the same maximum as before
		}
		sn.sem, sn.alive, sn.failed, sn.dropping, sn.overSince = sem, true, false, false, -1
		sn.backlog, sn.upd = 0, s.now
		s.rec.supernodeUp(s, b)
		s.announce(b)
		s.at(s.p.AnnounceInterval, event{k: evAnnounce, a: b, gen: s.incarnation(b)})
		s.at(s.randDur(s.p.Keepalive), event{k: evHealth, a: b, gen: s.incarnation(b)})
	}
	s.at(2*s.p.DirectoryTick, event{k: evDemote})
}

// demote gives every mega its regular capacity back (the semaphore's
// maximum, its announcement) and starts its drain.
func (s *Sim) demote() {
	on, excess := 0, 0
	var demoted []int32
	for b := s.cfg.Supernodes; b < len(s.sns); b++ {
		sn := &s.sns[b]
		if !sn.alive || !sn.mega {
			continue
		}
		s.advance(int32(b))
		sn.mega, sn.capacity = false, s.cfg.MegaBefore
		_ = sn.sem.SetMax(sn.capacity)
		s.announce(int32(b))
		on += len(sn.clients)
		excess += max(0, len(sn.clients)-sn.capacity)
		demoted = append(demoted, int32(b))
	}
	s.rec.demoted(s, on, excess)
	for _, b := range demoted {
		s.drainStep(b, 0)
	}
}

// drainStep is step i of mega b's hand-back, as roledriver.Drain runs it:
// the sessions above the regular capacity, role.DrainStep of them now
// (chosen at random, as supernode.Admission.Drain shuffles), each told
// to go with alternatives and a spread of one step; the next step one
// role.DrainStepInterval later.
func (s *Sim) drainStep(b int32, i int) {
	sn := &s.sns[b]
	if !sn.alive || sn.mega {
		return
	}
	excess := len(sn.clients) - sn.capacity
	k := role.DrainStep(excess, i)
	if k <= 0 {
		return
	}
	s.rec.drained(i, excess, k)
	s.drainLog = append(s.drainLog, drainRec{b: b, i: i, at: s.now, load: len(sn.clients), keep: sn.capacity, k: k})
	step := role.DrainStepInterval(s.p.DrainPeriod)
	for range k {
		j := s.rng.IntN(len(sn.clients))
		s.detached(sn.clients[j], b, step)
	}
	if i+1 < role.DrainSteps {
		s.at(step, event{k: evDrainStep, a: b, gen: uint32(i + 1)})
	}
}

// detached: supernode b tells client i to go (a Detach with
// alternatives and spread). The slot is free at once; the client reads
// the Detach one hop later and fails over after node/client's stagger
// over the spread, avoiding b for this pass (its last supernode).
func (s *Sim) detached(i, b int32, spread time.Duration) {
	c := &s.clients[i]
	alts := s.alternatives(b)
	s.detach(i)
	c.last, c.state, c.run = b, csWaiting, nil
	c.setAlts(alts)
	s.at(s.latency()+s.stagger(client.FailoverSpread(spread, s.p.Keepalive)), event{k: evPass, a: i, gen: c.gen})
}

// drainRec is one drain step as it ran, for the tests.
type drainRec struct {
	b             int32
	i             int
	at            int64
	load, keep, k int
}
