package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode/capacity"
	"github.com/overlayd/overlayd/testnet/synthid"
	"github.com/overlayd/overlayd/testnet/vtime"
)

// epoch is virtual time 0. It is a fixed date, so the report never holds
// the wall clock.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Attempt answers, as the client sees them.
const (
	stAccept uint8 = iota + 1
	stBusy
	stRedirect
	stError
)

// clientState is where a client is in its life.
type clientState uint8

const (
	csWaiting  clientState = iota // before its next pass
	csPass                        // in a pass, one attempt outstanding
	csAttached                    // attached (possibly also trying to return home)
)

// simClient is one ordinary node. It is kept small: a million of them
// must fit. Its peer ID is made when needed (synthid.ID), not stored.
type simClient struct {
	sn    int32 // attached supernode, -1 for none
	pos   int32 // index in the supernode's clients
	last  int32 // supernode of the previous session, -1 for none
	gen   uint32
	state clientState
	home  bool
	// The rest is nil while the client is attached at home.
	away *clientAway
	run  *attemptRun
}

// attemptRun is a client's pass (or return attempt) in progress.
type attemptRun struct {
	pass      *client.Pass
	home      []peer.ID
	t0        int64 // when the outstanding attempt started
	cur       int32 // supernode asked
	alts      []peer.AddrInfo
	returning bool
	targets   []peer.AddrInfo
	next      int
}

// simSupernode is one supernode (regular or mega).
type simSupernode struct {
	id       peer.ID
	alive    bool
	mega     bool
	capacity int
	cores    float64
	sem      *capacity.Semaphore
	clients  []int32
	seq      uint64
	// The CPU queue: seconds of work waiting at upd.
	backlog float64
	upd     int64
	// overSince is when the queueing delay last rose above FailDelay (-1:
	// it is below); dropping is set while its sessions are timing out.
	overSince int64
	dropping  bool
	failed    bool // by overload (not by the scenario)
	peak      int
	// auto: an auto node's supernode (autoroles.go); draining: it is
	// demoting.
	auto, draining bool
}

// Sim is one simulation. It is single-threaded: Run processes events in
// time order (ties in scheduling order), and every random choice comes
// from one source seeded from Config.Seed, so a seed gives one history.
type Sim struct {
	cfg Config
	p   Params
	src *rand.PCG // rng's source, kept so tests can replay a draw
	rng *rand.Rand
	q   vtime.Queue[event]
	now int64

	clients []simClient
	sns     []simSupernode
	byID    map[peer.ID]int32

	dir        *directory.Directory
	snap       *directory.Snapshot
	ring       *ring.Ring
	ringPolicy cluster.Policy
	megaRing   *client.MegaRing // of snap's megas, rebuilt when they change
	megaKey    string
	planIndex  *client.PlanIndex // of snap, what every failover pass scans
	membership uint64
	// Alternatives' candidates: every entry of snap with spare capacity.
	candAI    []peer.AddrInfo
	candSpare []int
	candIdx   map[peer.ID]int

	// proc is the one process's CPU (Params.ProcessCores > 0): the
	// attempts' work in order (backlog) and the crash's work (crash),
	// seconds of CPU waiting at upd.
	proc struct {
		backlog, crash float64
		upd            int64
	}

	perClient  float64 // CPU seconds per second per attached client
	verifyRate float64 // CPU seconds per second of announcement checks
	silence    time.Duration

	boPool []*backoff.Backoff
	// homes memoises cluster.Home per client for the current ring (it
	// decodes three peer IDs from base58 each call): see home.
	homes []int32

	// crashedSNs are the supernodes the scenario crashed (for the
	// hand-back's restart).
	crashedSNs []int32
	drainLog   []drainRec

	// auto is the auto-roles scenario's state (nil without Config.Auto).
	auto *autoState

	rec      recorder
	events   uint64
	Progress func(Progress)
}

// Progress is the simulation's state for a live progress line.
type Progress struct {
	Sim      time.Duration
	Duration time.Duration
	Events   uint64
	Attached int
	Clients  int
	Alive    int
}

// New builds the network of cfg in its settled state: every supernode
// announced, the ring built, every client attached (to its home cluster
// when it has room, else to a supernode with room): the start is
// constructed, not simulated.
func New(cfg Config) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:        cfg,
		p:          cfg.Params,
		src:        rand.NewPCG(cfg.Seed, cfg.Seed^0x73696d),
		byID:       make(map[peer.ID]int32, cfg.Supernodes+cfg.Megas),
		ringPolicy: cluster.DefaultPolicy(cfg.Params.AnnounceInterval, true),
		silence:    time.Duration(protocol.MissedKeepalives) * cfg.Params.Keepalive,
	}
	s.rng = rand.New(s.src)
	s.dir = directory.New(directory.WithMegaVerifier(s.verify))
	s.dir.SetLimits(directory.DefaultLimits(s.p.AnnounceInterval))
	n := cfg.Supernodes + cfg.Megas
	s.sns = make([]simSupernode, n)
	s.verifyRate = float64(n) / s.p.AnnounceInterval.Seconds() * s.p.VerifyCPU.Seconds()
	s.perClient = (s.p.UtilAtCapacity*s.p.Cores - s.verifyRate) / float64(cfg.Capacity)
	if min := s.p.KeepaliveCPU.Seconds() / s.p.Keepalive.Seconds(); s.perClient < min {
		return nil, fmt.Errorf("sim: announcement checks alone (%.3f cores) leave no room for clients at UtilAtCapacity %.2f", s.verifyRate, s.p.UtilAtCapacity)
	}
	for i := range s.sns {
		sn := &s.sns[i]
		sn.id = synthid.ID(cfg.Seed, synthid.Supernode, uint64(i))
		sn.alive, sn.capacity, sn.cores, sn.overSince = true, cfg.Capacity, s.p.Cores, -1
		if i >= cfg.Supernodes {
			sn.capacity = cfg.MegaBefore
			sn.cores = s.p.Cores * float64(max(cfg.MegaCapacity, cfg.Capacity)) / float64(cfg.Capacity)
		}
		if _, dup := s.byID[sn.id]; dup {
			return nil, fmt.Errorf("sim: peer ID collision at supernode %d", i)
		}
		s.byID[sn.id] = int32(i)
		limit := sn.capacity
		if !cfg.Policy.Admission {
			limit = capacity.MaxSlots
		}
		sem, err := capacity.New("attached_peers", limit)
		if err != nil {
			return nil, err
		}
		sn.sem = sem
	}
	// Announce once, then every interval at a random phase.
	for i := range s.sns {
		s.announce(int32(i))
		s.at(s.randDur(s.p.AnnounceInterval), event{k: evAnnounce, a: int32(i)})
		s.at(s.randDur(s.p.Keepalive), event{k: evHealth, a: int32(i)})
	}
	s.refreshDirectory()
	if s.ring == nil {
		return nil, fmt.Errorf("sim: no ring")
	}
	s.clients = make([]simClient, cfg.Clients)
	cursor := 0
	for i := range s.clients {
		c := &s.clients[i]
		c.sn, c.last = -1, -1
		id := s.clientID(int32(i))
		home := cluster.Home(s.ring, []byte(id))
		placed := false
		for _, h := range home {
			if b, ok := s.byID[h]; ok && s.sns[b].sem.InUse() < s.sns[b].capacity && s.sns[b].sem.TryAcquire() {
				s.attach(int32(i), b, true)
				placed = true
				break
			}
		}
		for tries := 0; !placed && tries < cfg.Supernodes; tries++ {
			b := int32(cursor % cfg.Supernodes)
			cursor++
			if s.sns[b].sem.InUse() < s.sns[b].capacity && s.sns[b].sem.TryAcquire() {
				s.attach(int32(i), b, false)
				placed = true
			}
		}
		if !placed {
			// More clients than slots: it starts trying.
			c.state = csWaiting
			s.at(s.stagger(s.p.Backoff.Base), event{k: evPass, a: int32(i), gen: c.gen})
		}
	}
	// Announce the settled loads at once.
	for i := range s.sns {
		s.announce(int32(i))
	}
	s.refreshDirectory()
	s.at(s.p.DirectoryTick, event{k: evDirTick})
	s.at(0, event{k: evSample})
	s.at(cfg.CrashAt, event{k: evCrash})
	if cfg.HandBackAt > 0 && cfg.Policy.Megas {
		s.at(cfg.HandBackAt, event{k: evHandBack})
	}
	if cfg.Auto != nil {
		s.initAuto()
	}
	s.rec.init(s)
	return s, nil
}

// verify is the directory's certificate check: every mega is trusted (the
// simulator has no operator key; the certificate's cost is VerifyCPU).
func (s *Sim) verify(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
	if a.Role != protocol.RoleMega {
		return protocol.MegaCert{}, nil
	}
	return protocol.MegaCert{Subject: a.ID, Capacity: a.Capacity, NotAfter: now.Add(24 * time.Hour), Serial: uint64(s.byID[a.ID]) + 1}, nil
}

func (s *Sim) clientID(i int32) peer.ID { return synthid.ID(s.cfg.Seed, synthid.Client, uint64(i)) }

func (s *Sim) time() time.Time { return epoch.Add(time.Duration(s.now)) }

// at schedules e after d.
func (s *Sim) at(d time.Duration, e event) {
	e.at = s.now + int64(max(d, 0))
	s.q.Push(e.at, e)
}

func (s *Sim) randDur(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(s.rng.Int64N(int64(d)))
}

// latency draws one hop.
func (s *Sim) latency() time.Duration {
	d := s.p.LatencyMin
	if m := s.p.LatencyMean - s.p.LatencyMin; m > 0 {
		d += time.Duration(s.rng.ExpFloat64() * float64(m))
	}
	return d
}

func (s *Sim) lost() bool { return s.p.Loss > 0 && s.rng.Float64() < s.p.Loss }

// stagger is node/client's stagger: backoff.Stagger, or none without it.
func (s *Sim) stagger(window time.Duration) time.Duration {
	if !s.cfg.Policy.Stagger {
		return 0
	}
	return backoff.Stagger(window, s.rng)
}

// Run processes events until the configured duration and returns the
// report.
func (s *Sim) Run() *Report {
	s.RunUntil(s.cfg.Duration)
	s.now = int64(s.cfg.Duration)
	return s.rec.report(s)
}

// TimeToFraction runs cfg and returns the seconds from the crash until
// fraction of the clients were attached (nil: never within the run). It
// is the one figure the capacity planner (testnet/planner) asks of a
// run: the recorder notes the moment as it happens.
func TimeToFraction(cfg Config, fraction float64) (*float64, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	s.rec.watch = max(1, int(math.Ceil(fraction*float64(cfg.Clients)-1e-9)))
	s.Run()
	return s.rec.tWatch, nil
}

// RunUntil processes the events up to t (at most the configured
// duration) and returns.
func (s *Sim) RunUntil(t time.Duration) {
	end := int64(min(t, s.cfg.Duration))
	const progressEvery = 1 << 18
	for s.q.Len() > 0 {
		if s.q.NextAt() > end {
			break
		}
		_, e := s.q.Pop()
		s.now = e.at
		s.events++
		s.handle(e)
		if s.Progress != nil && s.events%progressEvery == 0 {
			s.Progress(Progress{Sim: time.Duration(s.now), Duration: s.cfg.Duration, Events: s.events,
				Attached: s.rec.attachedLive, Clients: len(s.clients), Alive: s.rec.aliveRegular})
		}
	}
}

func (s *Sim) handle(e event) {
	switch e.k {
	case evPass:
		if c := &s.clients[e.a]; c.gen == e.gen && c.state == csWaiting {
			s.startPass(e.a)
		}
	case evArrive:
		s.arrive(e)
	case evAnswer:
		s.answer(e)
	case evSessionDead:
		if c := &s.clients[e.a]; c.gen == e.gen && c.state == csAttached && c.sn == e.b {
			s.sessionEnded(e.a)
		}
	case evReturn:
		if c := &s.clients[e.a]; c.gen == e.gen && c.state == csAttached && c.run == nil {
			s.tryReturn(e.a)
		}
	case evAnnounce:
		if s.sns[e.a].alive && e.gen == s.incarnation(e.a) {
			s.announce(e.a)
			s.at(s.p.AnnounceInterval, event{k: evAnnounce, a: e.a, gen: e.gen})
		}
	case evHealth:
		if e.gen == s.incarnation(e.a) {
			s.health(e.a)
		}
	case evRelease:
		if sn := &s.sns[e.b]; sn.alive && uint32(sn.seq>>40) == e.gen {
			s.advance(e.b)
			_ = sn.sem.Release()
		}
	case evDirTick:
		s.refreshDirectory()
		s.at(s.p.DirectoryTick, event{k: evDirTick})
	case evSample:
		s.rec.sample(s)
		s.autoSample()
		s.at(100*time.Millisecond, event{k: evSample})
	case evCrash:
		s.crash()
		if s.cfg.RestartWindow > 0 {
			for i := range s.clients {
				s.at(s.randDur(s.cfg.RestartWindow), event{k: evRestart, a: int32(i)})
			}
		}
		if s.cfg.ChurnMean > 0 {
			for i := range s.clients {
				s.at(s.churnWait(), event{k: evRestart, a: int32(i)})
			}
		}
	case evRestart:
		s.restart(e.a)
	case evHandBack:
		s.handBack()
	case evDemote:
		s.demote()
	case evDrainStep:
		s.drainStep(e.a, int(e.gen))
	case evRoleEval:
		s.roleEval(e.a, e.gen)
	case evAutoDrain:
		s.autoDrain(e.a, int(e.gen))
	}
}

// refreshDirectory expires entries, takes the snapshot every client plans
// with, and rebuilds the ring when membership changed (cluster.Members,
// ring.New: the daemon's code).
func (s *Sim) refreshDirectory() {
	s.dir.Expire(s.time())
	snap := s.dir.Snapshot()
	if snap == s.snap {
		return
	}
	s.snap = snap
	s.planIndex = client.NewPlanIndex(snap)
	var key []byte
	for _, e := range snap.Entries {
		if e.Role == protocol.RoleMega {
			key = fmt.Appendf(key, "%s/%d/%v;", e.ID, e.Capacity, e.Addrs)
		}
	}
	if s.megaRing == nil || string(key) != s.megaKey {
		s.megaRing, s.megaKey = client.SnapshotMegaRing(snap), string(key)
	}
	if snap.Membership != s.membership || s.ring == nil {
		s.membership = snap.Membership
		if ms := cluster.Members(snap, s.time(), s.ringPolicy); len(ms) > 0 {
			if r, err := ring.New(ms); err == nil {
				s.ring = r
				clear(s.homes)
			}
		}
	}
	s.candAI, s.candSpare = s.candAI[:0], s.candSpare[:0]
	if s.candIdx == nil {
		s.candIdx = map[peer.ID]int{}
	}
	clear(s.candIdx)
	for _, e := range snap.Entries {
		if sp := cluster.Spare(e); sp > 0 {
			s.candIdx[e.ID] = len(s.candAI)
			s.candAI = append(s.candAI, peer.AddrInfo{ID: e.ID})
			s.candSpare = append(s.candSpare, sp)
		}
	}
}

// alternatives is what supernode b offers with a BUSY: node.candidates
// (every directory entry but b with spare capacity) sampled by
// cluster.Sample, as supernode.Admission does.
func (s *Sim) alternatives(b int32) []peer.AddrInfo {
	if !s.cfg.Policy.Alternatives || len(s.candAI) == 0 {
		return nil
	}
	self, has := s.candIdx[s.sns[b].id]
	var w int
	if has {
		w, s.candSpare[self] = s.candSpare[self], 0
	}
	picked := cluster.Sample(s.candSpare, protocol.MaxAlternatives, s.rng)
	if has {
		s.candSpare[self] = w
	}
	out := make([]peer.AddrInfo, len(picked))
	for i, k := range picked {
		out[i] = s.candAI[k]
	}
	return out
}

// announce applies supernode b's announcement to the directory
// (directory.Apply, the daemon's code, at the virtual now). Every node
// sees it at once: one directory stands for everyone's.
func (s *Sim) announce(b int32) {
	sn := &s.sns[b]
	sn.seq++
	role := protocol.RoleSupernode
	if sn.mega {
		role = protocol.RoleMega
	}
	a := protocol.Announcement{ID: sn.id, Role: role, Capacity: uint32(sn.capacity), Load: uint32(len(sn.clients)),
		Version: protocol.Version, Seq: sn.seq, Interval: s.p.AnnounceInterval, Issued: s.time().Truncate(time.Millisecond)}
	_, _ = s.dir.Apply(sn.id, a, s.time())
}

// advance brings supernode b's CPU queue to now: its clients' steady work
// and the announcement checks arrive, Cores serve. In one process, see
// advanceProcess.
func (s *Sim) advance(b int32) {
	if s.p.ProcessCores > 0 {
		s.advanceProcess()
		return
	}
	sn := &s.sns[b]
	dt := float64(s.now-sn.upd) / 1e9
	sn.upd = s.now
	if dt <= 0 {
		return
	}
	rate := float64(sn.sem.InUse())*s.perClient + s.verifyRate
	sn.backlog = max(0, sn.backlog+(rate-sn.cores)*dt)
}

// advanceProcess brings the one process's CPU to now. What its steady
// state leaves free (ProcessCores - ProcessBackground) serves the
// attempts in order and, beside them, the crash's work: the two share it
// equally while both wait (Go's scheduler runs the goroutines of both in
// turn; the crash's reaction does not all come before the attempts), and
// one takes all of it when the other has none.
func (s *Sim) advanceProcess() {
	dt := float64(s.now-s.proc.upd) / 1e9
	s.proc.upd = s.now
	free := s.p.ProcessCores - s.p.ProcessBackground
	for dt > 0 && (s.proc.backlog > 0 || s.proc.crash > 0) {
		if s.proc.backlog > 0 && s.proc.crash > 0 {
			// Both at free/2 until the smaller is done.
			t := min(s.proc.backlog, s.proc.crash) / (free / 2)
			if dt < t {
				s.proc.backlog -= dt * free / 2
				s.proc.crash -= dt * free / 2
				return
			}
			m := min(s.proc.backlog, s.proc.crash)
			s.proc.backlog -= m
			s.proc.crash -= m
			dt -= t
			continue
		}
		s.proc.backlog = max(0, s.proc.backlog-dt*free)
		s.proc.crash = max(0, s.proc.crash-dt*free)
		return
	}
}

// processFinish is when work w arriving now would be done, in seconds:
// the attempts ahead of it and w at free/2 while crash work remains,
// then at free.
func (s *Sim) processFinish(w float64) float64 {
	a := s.proc.backlog + w
	return (a + min(a, s.proc.crash)) / (s.p.ProcessCores - s.p.ProcessBackground)
}

// delay is the queueing delay of work arriving at b now.
func (s *Sim) delay(b int32) time.Duration {
	if s.p.ProcessCores > 0 {
		return time.Duration(s.processFinish(0) * 1e9)
	}
	return time.Duration(s.sns[b].backlog / s.sns[b].cores * 1e9)
}

// work queues cost at b's CPU (b's own, or the one process's) and returns
// how long serving it takes once its turn comes.
func (s *Sim) work(b int32, cost time.Duration) time.Duration {
	if s.p.ProcessCores > 0 {
		d := s.processFinish(cost.Seconds()) - s.processFinish(0)
		s.proc.backlog += cost.Seconds()
		return time.Duration(d * 1e9)
	}
	s.sns[b].backlog += cost.Seconds()
	return time.Duration(float64(cost) / s.sns[b].cores)
}

// arrive: an attach request reaches supernode b. Its work is queued
// whether or not the client still waits; the admission decision is the
// capacity semaphore's (TryAcquire), as supernode.Admission's.
func (s *Sim) arrive(e event) {
	sn := &s.sns[e.b]
	c := &s.clients[e.a]
	waiting := c.gen == e.gen && c.run != nil && c.run.cur == e.b
	if !sn.alive {
		if waiting {
			d := max(s.p.DeadDial-time.Duration(s.now-c.run.t0), 0)
			if s.p.ProcessCores > 0 {
				// The refused dial is the client's work, in the
				// process's queue.
				s.advance(e.b)
				q := s.delay(e.b)
				d = max(d, q+s.work(e.b, s.p.DeadDialCPU))
			}
			s.at(d, event{k: evAnswer, a: e.a, b: e.b, st: stError, gen: e.gen})
		}
		return
	}
	s.advance(e.b)
	q := s.delay(e.b)
	cost := s.p.AttemptCPU
	if s.p.ProcessCores > 0 {
		cost += s.p.DialCPU // the client's half, in the same process
	}
	st := stBusy
	if sn.sem.TryAcquire() {
		st = stAccept
		cost += s.p.AcceptCPU
		if l := sn.sem.InUse(); l > sn.peak {
			sn.peak = l
		}
	}
	serve := s.work(e.b, cost)
	s.rec.served(st)
	answerAt := s.now + int64(q) + int64(serve) + int64(s.latency())
	if waiting && st == stBusy {
		c.run.alts = s.alternatives(e.b)
	}
	switch {
	case !waiting || s.lost() || answerAt-c.run.t0 > int64(s.p.AttemptTimeout):
		if st == stAccept {
			// A session nobody uses: the supernode frees it after the
			// keepalive silence.
			s.at(time.Duration(answerAt-s.now)+s.silence, event{k: evRelease, b: e.b, gen: uint32(sn.seq >> 40)})
		}
		if waiting {
			s.at(time.Duration(c.run.t0+int64(s.p.AttemptTimeout)-s.now), event{k: evAnswer, a: e.a, b: e.b, st: stError, gen: e.gen})
		}
	default:
		s.at(time.Duration(answerAt-s.now), event{k: evAnswer, a: e.a, b: e.b, st: st, gen: e.gen})
	}
}

// health is supernode b's overload check, every keepalive interval: a
// queueing delay above the keepalive silence times its sessions out; one
// above FailDelay for FailAfter makes one without an admission limit fail.
func (s *Sim) health(b int32) {
	sn := &s.sns[b]
	if !sn.alive {
		return
	}
	s.at(s.p.Keepalive, event{k: evHealth, a: b, gen: s.incarnation(b)})
	s.advance(b)
	d := s.delay(b)
	switch {
	case d <= s.p.FailDelay:
		sn.overSince = -1
	case sn.overSince < 0:
		sn.overSince = s.now
	case time.Duration(s.now-sn.overSince) >= s.p.FailAfter && !s.cfg.Policy.Admission:
		// Only the 2010 software fails: overlayd's supernode, overloaded,
		// answers late and loses sessions but stays up (Params.FailDelay).
		sn.failed = true
		s.kill(b)
		return
	}
	if d > s.silence && !sn.dropping {
		// Pongs come later than the silence: every client declares it
		// dead within a keepalive.
		sn.dropping = true
		for _, i := range sn.clients {
			s.at(s.randDur(s.p.Keepalive), event{k: evSessionDead, a: i, b: b, gen: s.clients[i].gen})
		}
	} else if d <= s.silence {
		sn.dropping = false
	}
}

// kill crashes supernode b: no departure, its clients notice after the
// keepalive silence (less the time since their last pong).
func (s *Sim) kill(b int32) {
	sn := &s.sns[b]
	s.advance(b)
	sn.alive = false
	sn.seq += 1 << 40 // a new incarnation: pending releases are void
	s.rec.supernodeDown(s, b)
	for _, i := range sn.clients {
		d := s.silence - s.randDur(s.p.Keepalive)
		if s.p.CrashResets && !sn.failed {
			d = s.latency()
		}
		s.at(d, event{k: evSessionDead, a: i, b: b, gen: s.clients[i].gen})
	}
}

// crash is the scenario's failure: CrashFraction of the regular
// supernodes (never the first, the bootstrap) crash at once, and with
// megas the operator promotes them at the same instant.
func (s *Sim) crash() {
	n := int(math.Round(s.cfg.CrashFraction * float64(s.cfg.Supernodes)))
	order := s.rng.Perm(max(s.cfg.Supernodes-1, 0))
	for _, k := range order[:min(n, len(order))] {
		if !s.sns[k+1].alive {
			continue // failed by overload before the crash (auto-roles under 2010)
		}
		s.kill(int32(k + 1))
		s.crashedSNs = append(s.crashedSNs, int32(k+1))
		if s.p.ProcessCores > 0 {
			s.proc.crash += s.p.CrashCPU.Seconds()
		}
	}
	if s.cfg.Policy.Megas {
		s.promote()
	}
	s.crashAuto()
	s.rec.crashDoneAt(s)
}

// promote: the operator's promotion of the megas reaches the directory.
func (s *Sim) promote() {
	for b := s.cfg.Supernodes; b < len(s.sns); b++ {
		sn := &s.sns[b]
		if !sn.alive || sn.auto { // auto supernodes are not the operator's megas
			continue
		}
		s.advance(int32(b))
		sn.mega, sn.capacity = true, s.cfg.MegaCapacity
		_ = sn.sem.SetMax(sn.capacity)
		s.announce(int32(b))
	}
}
