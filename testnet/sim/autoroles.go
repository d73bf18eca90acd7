package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// The auto-roles scenario: ordinary nodes running --role auto promote
// themselves to supernodes and demote themselves by the daemon's rules.
// Each auto node evaluates role.Decide (the daemon's code) on the
// daemon's schedule (role.EvalInterval from its start, no jitter) with the
// input the daemon builds (role.NewInput from the shared directory and
// ring), its own role.State and its own random source; a promotion makes
// it a supernode of the simulation (it announces, joins the ring at the
// next directory tick and takes clients), a demotion closes its admission
// and hands its clients to other supernodes on roledriver.Drain's schedule
// (role.DrainStep), then announces its departure.

// AutoRoles is the population of --role auto nodes (Config.Auto). What
// is guessed is marked so.
type AutoRoles struct {
	// Public is the fraction of the clients that run --role auto with
	// public reachability and a capacity of at least MinCapacity: the
	// nodes that can promote. The others are behind NAT (reachability
	// private), for which role.Decide never promotes, so they are not
	// evaluated. Guess: 0.05.
	Public float64 `json:"public"`
	// Capacity is each auto node's --capacity. Guess: 100 (the daemon's
	// default is 200; 100 keeps the network's supernode count near the
	// skype2010 scenario's).
	Capacity int `json:"capacity"`
	// UptimeMax: at the start, each auto node has been up for a uniform
	// time in [0, UptimeMax). Guess: 2 × Policy.MinUptime, so half of
	// them may promote at once and the rest over MinUptime.
	UptimeMax time.Duration `json:"uptime_max"`
	// Policy is role.Decide's thresholds: config.Default's, through
	// config.Config.RolePolicy (the daemon's).
	Policy role.Policy `json:"role_policy"`
}

// DefaultAutoRoles returns the defaults documented on AutoRoles.
func DefaultAutoRoles() AutoRoles {
	cfg := config.Default()
	p := cfg.RolePolicy()
	return AutoRoles{Public: 0.05, Capacity: 100, UptimeMax: 2 * p.MinUptime, Policy: p}
}

// autoRoles is the auto-roles scenario: 10,000 clients unless told, of
// which AutoRoles.Public run --role auto with public reachability; 5
// pinned supernodes (one per 2,000 clients, at least R, the home cluster's
// size) of the auto nodes' capacity; the network forms from them; at
// 20 minutes 30% of the supernodes (pinned and auto) crash, the auto ones
// restart at once as ordinary nodes (uptime 0); 10 more minutes. No megas:
// the auto tier is the answer to the crash.
func autoRoles(c *Config) {
	if c.Clients == 0 {
		c.Clients = 10000
	}
	a := DefaultAutoRoles()
	if c.Supernodes == 0 {
		c.Supernodes = max(a.Policy.ClusterSize, c.Clients/2000)
	}
	c.Capacity = a.Capacity
	c.CrashFraction, c.CrashAt, c.Duration = 0.3, 20*time.Minute, 30*time.Minute
	c.Megas, c.MegaBefore, c.MegaCapacity = 0, 1, 5*c.Capacity
	c.Auto = &a
}

// validateAuto names the first field of c.Auto out of range.
func validateAuto(c Config) error {
	a := c.Auto
	switch {
	case c.Supernodes+c.Megas+int(math.Round(a.Public*float64(c.Clients))) > 1<<16:
		return fmt.Errorf("sim: auto roles: at most %d supernodes, megas and auto nodes (the ring's bound)", 1<<16)
	case a.Public < 0 || a.Public > 1:
		return fmt.Errorf("sim: auto roles: Public must be in [0, 1], got %v", a.Public)
	case a.Capacity < 1:
		return fmt.Errorf("sim: auto roles: Capacity must be >= 1, got %d", a.Capacity)
	case a.UptimeMax < 0:
		return fmt.Errorf("sim: auto roles: UptimeMax must be >= 0, got %v", a.UptimeMax)
	case a.Policy.ClusterSize < 1 || a.Policy.SpareHigh <= a.Policy.SpareLow:
		return fmt.Errorf("sim: auto roles: the role policy needs ClusterSize >= 1 and SpareHigh > SpareLow")
	}
	return nil
}

// autoNode is one auto node that can promote (public, enough capacity).
type autoNode struct {
	client  int32
	id      peer.ID
	started int64 // virtual ns (negative: before the run)
	sn      int32 // its supernode slot, -1 until its first promotion
	gen     uint32
	serving bool
	// departs counts its completed demotions.
	departs int
	// draining: demoting; the daemon's roleLoop is inside demoteAuto and
	// evaluates nothing until the drain ends.
	draining bool
	st       role.State
	src      *rand.PCG
	rng      *rand.Rand
	// home memoises cluster.HomeWithout for homeRing.
	home     []peer.ID
	homeRing *ring.Ring
}

// autoState is the scenario's state beside Sim's.
type autoState struct {
	cfg   AutoRoles
	tick  time.Duration
	nodes []autoNode
	// of maps a client to its auto node.
	of map[int32]int32
	// entries are role.Entries of entriesOf as an ordinary node sees it
	// (no entry of its own), shared by the ordinary nodes' evaluations.
	entries   []role.Entry
	entriesOf *directory.Snapshot

	serving, peak, atCrash int
	promotions, demotions  int
	crashed                int
	formedAt               *float64

	// keep: record up to keep evaluations (tests).
	keep  int
	evals []autoEval
}

// autoEval is one evaluation as the simulator made it.
type autoEval struct {
	node   int32
	view   role.View
	in     role.Input
	before role.State
	rng    []byte // the node's source before the call
	dec    role.Decision
	after  role.State
}

// initAuto picks the auto nodes and schedules their first evaluations.
// Called by New when Config.Auto is set, after the network is built.
func (s *Sim) initAuto() {
	a := &autoState{cfg: *s.cfg.Auto, tick: role.EvalInterval(s.p.AnnounceInterval), of: map[int32]int32{}}
	s.auto = a
	n := int(math.Round(a.cfg.Public * float64(len(s.clients))))
	for _, k := range s.rng.Perm(len(s.clients))[:n] {
		i := int32(k)
		up := s.randDur(a.cfg.UptimeMax)
		src := rand.NewPCG(s.cfg.Seed^0x6175746f, uint64(i))
		a.of[i] = int32(len(a.nodes))
		a.nodes = append(a.nodes, autoNode{client: i, id: s.clientID(i), started: -int64(up), sn: -1, src: src, rng: rand.New(src)})
	}
	for k := range a.nodes {
		s.scheduleEval(int32(k))
	}
}

// ownSupernode is client i's own supernode slot (an auto node's client
// side), -1 for none.
func (s *Sim) ownSupernode(i int32) int32 {
	if s.auto == nil {
		return -1
	}
	if k, ok := s.auto.of[i]; ok {
		return s.auto.nodes[k].sn
	}
	return -1
}

// scheduleEval schedules auto node k's next evaluation on its ticker:
// every role.EvalInterval from its start.
func (s *Sim) scheduleEval(k int32) {
	n := &s.auto.nodes[k]
	t := int64(s.auto.tick)
	since := s.now - n.started
	next := (since/t + 1) * t
	s.at(time.Duration(next-since), event{k: evRoleEval, a: k, gen: n.gen})
}

// roleEval is auto node k's evaluation: role.Decide on role.NewInput's
// input, then the promotion or demotion it decides.
func (s *Sim) roleEval(k int32, gen uint32) {
	a := s.auto
	n := &a.nodes[k]
	if n.gen != gen {
		return
	}
	s.scheduleEval(k)
	if n.serving && !s.sns[n.sn].alive {
		// Failed by overload: the process restarts as an ordinary node.
		s.autoRestart(k)
		return
	}
	if n.draining {
		return
	}
	v := s.autoView(n)
	in := s.autoInput(n, v)
	var rec *autoEval
	if len(a.evals) < a.keep {
		b, err := n.src.MarshalBinary()
		if err != nil {
			panic(err)
		}
		a.evals = append(a.evals, autoEval{node: k, view: v, in: in, before: n.st, rng: b})
		rec = &a.evals[len(a.evals)-1]
	}
	dec, st := role.Decide(a.cfg.Policy, in, n.st, n.rng)
	n.st = st
	if rec != nil {
		rec.dec, rec.after = dec, st
	}
	switch dec.Action {
	case role.Promote:
		s.promoteAuto(k)
	case role.Demote:
		s.demoteAuto(k)
	}
}

// autoView is what auto node n knows now: the shared directory and ring,
// its uptime, and its load as the daemon reads it (the admission
// semaphore).
func (s *Sim) autoView(n *autoNode) role.View {
	v := role.View{Now: s.time(), Self: n.id, Serving: n.serving, Reachability: network.ReachabilityPublic,
		Uptime: time.Duration(s.now - n.started), Capacity: s.auto.cfg.Capacity, Snapshot: s.snap, Ring: s.ring}
	if n.serving {
		v.Load = s.sns[n.sn].sem.InUse()
	}
	return v
}

// autoInput is role.NewInput(v), with the directory's entries shared by
// the ordinary nodes that were never in it and the home memoised per ring
// (the divergence test compares the two).
func (s *Sim) autoInput(n *autoNode, v role.View) role.Input {
	if n.serving || n.sn >= 0 {
		// A supernode, or one that was: the directory may list it.
		return role.NewInput(v)
	}
	a := s.auto
	if a.entriesOf != v.Snapshot {
		a.entries, a.entriesOf = role.Entries(v.Snapshot, "", false, 0, 0), v.Snapshot
	}
	if n.homeRing != v.Ring {
		n.home, n.homeRing = role.NewInput(role.View{Self: n.id, Ring: v.Ring}).Home, v.Ring
	}
	return role.Input{Now: v.Now, Serving: false, Reachability: v.Reachability, Uptime: v.Uptime,
		Capacity: v.Capacity, Self: v.Self, Supernodes: a.entries, Home: n.home}
}

// promoteAuto makes auto node k a supernode: its slot (new, or the one it
// had) is alive and empty with admission open; it announces at once and
// every interval, as the daemon's announce loop does.
func (s *Sim) promoteAuto(k int32) {
	a := s.auto
	n := &a.nodes[k]
	limit := a.cfg.Capacity
	if !s.cfg.Policy.Admission {
		limit = capacity.MaxSlots
	}
	sem, err := capacity.New("attached_peers", limit)
	if err != nil {
		panic(err) // Capacity was validated
	}
	if n.sn < 0 {
		n.sn = int32(len(s.sns))
		// Appending may move s.sns: no pointer into it is held here or
		// by any caller (handle dispatches by index).
		s.sns = append(s.sns, simSupernode{id: n.id, auto: true})
		s.byID[n.id] = n.sn
	}
	b := n.sn
	sn := &s.sns[b]
	sn.alive, sn.draining, sn.failed, sn.dropping, sn.mega = true, false, false, false, false
	sn.capacity, sn.cores, sn.sem, sn.overSince = a.cfg.Capacity, s.p.Cores, sem, -1
	sn.backlog, sn.upd = 0, s.now
	n.serving = true
	a.serving++
	a.peak = max(a.peak, a.serving)
	a.promotions++
	s.announce(b)
	s.at(s.p.AnnounceInterval, event{k: evAnnounce, a: b, gen: s.incarnation(b)})
	s.at(s.randDur(s.p.Keepalive), event{k: evHealth, a: b, gen: s.incarnation(b)})
}

// demoteAuto starts auto node k's demotion as roledriver's demotion does:
// admission closes (a simplification: the simulator answers BUSY where
// the daemon answers REDIRECT), it announces a capacity equal to its load
// (so the network counts no spare room here), and hands its clients over
// the drain period.
func (s *Sim) demoteAuto(k int32) {
	a := s.auto
	n := &a.nodes[k]
	n.draining = true
	a.demotions++
	sn := &s.sns[n.sn]
	sn.draining = true
	s.advance(n.sn)
	_ = sn.sem.SetMax(0)
	sn.capacity = max(sn.sem.InUse(), 1)
	s.announce(n.sn)
	s.autoDrain(k, 0)
}

// autoDrain is step i of auto node k's hand-back (roledriver.Drain with keep
// 0): the load is announced as the capacity, role.DrainStep of the
// clients go (at random, as supernode.Admission.Drain shuffles), each
// with alternatives and one step's spread; after the last step, or as
// soon as nobody is left, the node departs.
func (s *Sim) autoDrain(k int32, i int) {
	a := s.auto
	n := &a.nodes[k]
	b := n.sn
	sn := &s.sns[b]
	if !n.draining || !sn.alive {
		return
	}
	load := sn.sem.InUse()
	sn.capacity = max(load, 1) // announced at the next interval
	if i >= role.DrainSteps || load <= 0 {
		s.departAuto(k)
		return
	}
	step := role.DrainStepInterval(s.p.DrainPeriod)
	for range role.DrainStep(load, i) {
		if len(sn.clients) == 0 {
			break
		}
		j := s.rng.IntN(len(sn.clients))
		s.detached(sn.clients[j], b, step)
	}
	s.at(step, event{k: evAutoDrain, a: k, gen: uint32(i + 1)})
}

// departAuto ends a demotion: the announce loop stops, the node announces
// its departure and is an ordinary node again.
func (s *Sim) departAuto(k int32) {
	a := s.auto
	n := &a.nodes[k]
	b := n.sn
	sn := &s.sns[b]
	for len(sn.clients) > 0 {
		s.detached(sn.clients[0], b, role.DrainStepInterval(s.p.DrainPeriod))
	}
	s.advance(b)
	sn.alive, sn.draining = false, false
	sn.seq += 1 << 40 // its announce and health events end
	sn.seq++
	dep := protocol.Announcement{ID: sn.id, Role: protocol.RoleSupernode, Capacity: uint32(s.auto.cfg.Capacity),
		Version: protocol.Version, Seq: sn.seq, Interval: s.p.AnnounceInterval, Issued: s.time().Truncate(time.Millisecond), Departing: true}
	_, _ = s.dir.Apply(sn.id, dep, s.time())
	n.serving, n.draining = false, false
	n.departs++
	a.serving--
}

// autoRestart: auto node k's process died (the scenario's crash, or
// overload) and restarts at once as an ordinary node: uptime 0, no
// pending decision, its client side starting over (Sim.restart).
func (s *Sim) autoRestart(k int32) {
	a := s.auto
	n := &a.nodes[k]
	if n.serving {
		n.serving, n.draining = false, false
		a.serving--
	}
	n.gen++
	n.started, n.st = s.now, role.State{}
	s.scheduleEval(k)
	s.restart(n.client)
}

// crashAuto is the scenario's crash for the auto tier: CrashFraction of
// the serving auto supernodes crash with the regular ones (Sim.crash calls
// it before recording the crash).
func (s *Sim) crashAuto() {
	a := s.auto
	if a == nil {
		return
	}
	a.atCrash = a.serving
	var on []int32
	for k := range a.nodes {
		if a.nodes[k].serving && !a.nodes[k].draining {
			on = append(on, int32(k))
		}
	}
	m := int(math.Round(s.cfg.CrashFraction * float64(len(on))))
	for _, j := range s.rng.Perm(len(on))[:m] {
		k := on[j]
		s.kill(a.nodes[k].sn)
		a.crashed++
		s.autoRestart(k)
	}
}

// autoSample records the auto tier beside the report's series (every
// Params.Sample) and the formation (the first time 99% of the clients
// were attached, before the crash; every 100 ms).
func (s *Sim) autoSample() {
	a := s.auto
	if a == nil {
		return
	}
	if a.formedAt == nil && !s.rec.crashDone && 100*s.rec.attachedLive >= 99*len(s.clients) {
		t := float64(s.now) / 1e9
		a.formedAt = &t
	}
	if s.now%int64(s.p.Sample) != 0 {
		return
	}
	se := &s.rec.series
	se.AutoServing = append(se.AutoServing, a.serving)
	se.AutoPromotions = append(se.AutoPromotions, a.promotions)
	se.AutoDemotions = append(se.AutoDemotions, a.demotions)
}

// autoSummary is the auto tier's part of the report.
func (s *Sim) autoSummary() *AutoSummary {
	a := s.auto
	if a == nil {
		return nil
	}
	out := &AutoSummary{Nodes: len(a.nodes), Promotions: a.promotions, Demotions: a.demotions, Crashed: a.crashed,
		ServingAtCrash: a.atCrash, ServingPeak: a.peak, ServingEnd: a.serving, FormedAt: a.formedAt}
	for k := range a.nodes {
		if b := a.nodes[k].sn; b >= 0 {
			p := round4(float64(s.sns[b].peak) / float64(a.cfg.Capacity))
			out.PeakLoad = max(out.PeakLoad, p)
			if s.sns[b].peak > a.cfg.Capacity {
				out.AboveCapacity++
			}
		}
	}
	return out
}

// AutoSummary is what the auto tier came to (the auto-roles scenario).
type AutoSummary struct {
	// Nodes are the auto nodes that can promote (AutoRoles.Public).
	Nodes int `json:"nodes"`
	// Promotions and Demotions over the run; Crashed: serving auto
	// supernodes the scenario crashed.
	Promotions int `json:"promotions"`
	Demotions  int `json:"demotions"`
	Crashed    int `json:"crashed"`
	// Serving auto supernodes just before the crash, at most, and at the
	// end.
	ServingAtCrash int `json:"serving_at_crash"`
	ServingPeak    int `json:"serving_peak"`
	ServingEnd     int `json:"serving_end"`
	// FormedAt is the first time (seconds) 99% of the clients were
	// attached before the crash (null: never).
	FormedAt *float64 `json:"formed_at_s"`
	// PeakLoad is the highest load / capacity of any auto supernode;
	// AboveCapacity how many were ever above their capacity.
	PeakLoad      float64 `json:"peak_load"`
	AboveCapacity int     `json:"above_capacity"`
}
