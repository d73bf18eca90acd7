package groupsim

import (
	"container/heap"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/supernode/group"
)

// Params shape a run. The zero value of a field takes its default
// (DefaultParams).
type Params struct {
	Supernodes int
	Groups     int
	// Members are clients that join groups; Publishers clients that
	// publish.
	Members, Publishers int
	// Span is the time with traffic and faults; Quiet the time after it,
	// with neither, before the check.
	Span, Quiet time.Duration
	// Refresh is the membership refresh interval (and the directory's
	// announce interval).
	Refresh time.Duration
	// PublishEvery is the mean time between two publishes of one
	// publisher.
	PublishEvery time.Duration
	// MaxAttempts bounds a publisher's attempts of one message.
	MaxAttempts int
	// Faults: the chance that a run has each kind (FaultKinds).
	Faults map[string]float64
	// Mutations are passed to every core.
	Mutations group.Mutations
	// TraceTail is how many trace lines a failure report carries.
	TraceTail int
	// DropOneDelivery is a test hook: one delivery at one member is
	// dropped as if lost, which the checker must report.
	DropOneDelivery bool
	// FullTrace returns the whole trace in Result.Trace (debugging).
	FullTrace bool
}

// Fault kinds.
const (
	FaultCrash       = "crash"        // a supernode crashes and restarts
	FaultDoubleCrash = "double-crash" // two of a group's home cluster within a flush
	FaultFlap        = "ring-flap"    // a node's view drops a live supernode a moment
	FaultHomeFlap    = "home-flap"    // the next of a home cluster drops the home twice
	FaultSlowRing    = "slow-ring"    // views converge slowly
	FaultDup         = "dup-frame"    // a frame delivered twice (reconnect)
	FaultAppendFail  = "append-fail"  // the replay log refuses an append
	FaultForgePub    = "forged-publish"
	FaultForgeMember = "forged-membership"
	FaultMove        = "client-move" // a client moves to another supernode
	FaultFailover    = "failover"    // a client fails over (consequence of a crash)
	// FaultPartition cuts one or two supernodes off from the others for
	// a while, then heals. Drawn from its own random stream (sim.prng):
	// a run without one takes the course it took before partitions were
	// modelled, so the seeds that catch past bugs still do.
	FaultPartition = "partition"
	// FaultReconnectLoss: after a partition heals, the first frame on
	// each link across is lost, written into the connection the
	// partition killed without an error (a dead connection not yet
	// noticed, with no write error for the shell to write it again on a
	// new stream: supernode's links do on an error). Drawn from a stream
	// of its own (sim.lrng), so that runs without it keep their course.
	FaultReconnectLoss = "reconnect-loss"
)

// FaultKinds are the faults Params.Faults enables.
var FaultKinds = []string{FaultCrash, FaultDoubleCrash, FaultFlap, FaultHomeFlap, FaultSlowRing, FaultDup, FaultAppendFail, FaultForgePub, FaultForgeMember, FaultMove, FaultPartition, FaultReconnectLoss}

// DefaultParams are the parameters a zero field takes.
func DefaultParams() Params {
	return Params{
		Supernodes: 6, Groups: 3, Members: 14, Publishers: 3,
		Span: 10 * time.Second, Quiet: 8 * time.Second, Refresh: time.Second,
		PublishEvery: 120 * time.Millisecond, MaxAttempts: 40,
		Faults: map[string]float64{
			FaultCrash: 0.7, FaultDoubleCrash: 0.08, FaultFlap: 0.6, FaultHomeFlap: 0.3, FaultSlowRing: 0.35,
			FaultDup: 0.3, FaultAppendFail: 0.25, FaultForgePub: 0.3, FaultForgeMember: 0.3, FaultMove: 0.5,
			FaultPartition:     0, // not yet: see the package doc
			FaultReconnectLoss: 0,
		},
		TraceTail: 200,
	}
}

func (p Params) withDefaults() Params {
	d := DefaultParams()
	if p.Supernodes <= 0 {
		p.Supernodes = d.Supernodes
	}
	if p.Groups <= 0 {
		p.Groups = d.Groups
	}
	if p.Members <= 0 {
		p.Members = d.Members
	}
	if p.Publishers <= 0 {
		p.Publishers = d.Publishers
	}
	if p.Span <= 0 {
		p.Span = d.Span
	}
	if p.Quiet <= 0 {
		p.Quiet = d.Quiet
	}
	if p.Refresh <= 0 {
		p.Refresh = d.Refresh
	}
	if p.PublishEvery <= 0 {
		p.PublishEvery = d.PublishEvery
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.Faults == nil {
		p.Faults = d.Faults
	}
	if p.TraceTail <= 0 {
		p.TraceTail = d.TraceTail
	}
	return p
}

// Result is what a run found.
type Result struct {
	Seed uint64
	OK   bool
	// Failures break the guarantee; each names the group, the message
	// and the member.
	Failures []string
	// BeyondGuarantee: the run crashed two of a group's home cluster
	// within a flush; that group's losses are in Beyond, not Failures.
	BeyondGuarantee bool
	Beyond          []string
	// Acked publishes, deliveries checked, losses (failures), losses
	// beyond the guarantee, losses the member was told of.
	Acked, Checked, Lost, LostBeyond, Told int
	Faults                                 map[string]int
	// Suspects are the known bug patterns the run showed ("pattern
	// group"); Explained: every failed group has one.
	Suspects  []string
	Explained bool
	Events    int
	TraceHash string
	// Trace is the excerpt printed for a failure: the last TraceTail
	// lines, or those touching the lost messages' groups.
	Trace []string
}

// Report is a failure report: the seed, the failures, the trace excerpt.
func (r Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d failures, faults %v, suspects %v\n", r.Seed, len(r.Failures), r.Faults, r.Suspects)
	for i, f := range r.Failures {
		if i == 20 {
			fmt.Fprintf(&b, "  … %d more\n", len(r.Failures)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", f)
	}
	for _, l := range r.Trace {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}

// base is the simulated clock's zero.
var base = time.Unix(1_700_000_000, 0)

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// sim is one run.
type sim struct {
	p    Params
	seed uint64
	rng  *rand.Rand
	// prng draws the partitions (FaultPartition); cut is the side cut
	// off from the others while one lasts (a mask of node indexes).
	prng *rand.Rand
	// lrng draws FaultReconnectLoss at each heal.
	lrng  *rand.Rand
	cut   uint64
	now   time.Duration
	q     eventQueue
	seq   uint64
	stop  bool // past the span: no new faults or traffic
	nodes []*snode
	cls   []*client
	// groups are the group names; byID maps a binary peer ID to its node,
	// str the ring's string form to the binary one.
	groups []string
	byID   map[string]*snode
	str    map[string]string
	rings  map[uint64]*ring.Ring
	tr     *tracer
	chk    *checker
	faults map[string]int
	// enabled faults of this run, and their rates.
	on        map[string]bool
	dupP      float64
	failP     float64
	verifier  *memoVerifier
	forgeKey  crypto.PrivKey
	diag      *diag
	cByID     map[string]*client
	events    int
	keyReader *rand.ChaCha8
}

func (s *sim) nowT() time.Time { return base.Add(s.now) }

// after schedules fn d from now.
func (s *sim) after(d time.Duration, fn func()) { s.at(s.now+d, fn) }

func (s *sim) at(t time.Duration, fn func()) {
	if t < s.now {
		t = s.now
	}
	s.seq++
	heap.Push(&s.q, &event{at: t, seq: s.seq, fn: fn})
}

// dur draws a duration in [lo, hi).
func (s *sim) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

func (s *sim) chance(p float64) bool { return p > 0 && s.rng.Float64() < p }

func (s *sim) newKey() crypto.PrivKey {
	k, _, err := crypto.GenerateEd25519Key(s.keyReader)
	if err != nil {
		panic(err)
	}
	return k
}

func (s *sim) fault(kind string) { s.faults[kind]++ }

// Run runs one seed.
func Run(seed uint64, p Params) Result {
	p = p.withDefaults()
	s := &sim{
		p: p, seed: seed,
		rng:    rand.New(rand.NewPCG(seed, 0x67726f757073696d)),
		prng:   rand.New(rand.NewPCG(seed, 0x706172746974696f)),
		lrng:   rand.New(rand.NewPCG(seed, 0x7265636f6e6e6563)),
		byID:   map[string]*snode{},
		str:    map[string]string{},
		cByID:  map[string]*client{},
		diag:   newDiag(),
		rings:  map[uint64]*ring.Ring{},
		tr:     newTracer(),
		faults: map[string]int{}, on: map[string]bool{},
		verifier: newMemoVerifier(),
	}
	var kseed [32]byte
	for i := range 8 {
		kseed[i] = byte(seed >> (8 * i))
	}
	s.keyReader = rand.NewChaCha8(kseed)
	s.chk = newChecker(s)
	for i := range p.Groups {
		s.groups = append(s.groups, fmt.Sprintf("g%d", i))
	}
	for i := range p.Supernodes {
		s.nodes = append(s.nodes, s.newNode(i))
		s.verifier.homes = append(s.verifier.homes, s.nodes[i].id)
	}
	all := uint64(1)<<len(s.nodes) - 1
	for _, n := range s.nodes {
		n.view = all
		n.start()
	}
	s.plan()
	s.run(p.Span + p.Quiet)
	s.chk.check()
	return s.result()
}

func (s *sim) run(end time.Duration) {
	for len(s.q) > 0 {
		e := heap.Pop(&s.q).(*event)
		if e.at > end {
			break
		}
		s.now = e.at
		s.events++
		e.fn()
	}
	s.now = end
}

func (s *sim) result() Result {
	c := s.chk
	r := Result{
		Seed: s.seed, OK: len(c.failures) == 0, Failures: c.failures,
		BeyondGuarantee: len(c.beyondGroups) > 0, Beyond: c.beyond,
		Acked: c.ackedN, Checked: c.checked, Lost: c.lost, LostBeyond: c.lostBeyond, Told: c.told,
		Faults: s.faults, Events: s.events, Suspects: s.diag.suspects(), Explained: s.diag.explained(c.failGroups), TraceHash: hex.EncodeToString(s.tr.sum()),
	}
	if s.p.FullTrace {
		r.Trace = s.tr.lines
	} else if !r.OK {
		r.Trace = s.tr.excerpt(c.failGroups, s.p.TraceTail)
	}
	return r
}

// ringOf returns the ring of the supernodes in mask (cached).
func (s *sim) ringOf(mask uint64) *ring.Ring {
	if r, ok := s.rings[mask]; ok {
		return r
	}
	var ms []ring.Member
	for _, n := range s.nodes {
		if mask&(1<<n.i) != 0 {
			ms = append(ms, ring.Member{ID: n.pid.String(), Weight: 1})
		}
	}
	var r *ring.Ring
	if len(ms) > 0 {
		var err error
		if r, err = ring.New(ms); err != nil {
			panic(err)
		}
	}
	s.rings[mask] = r
	return r
}

// upMask is the set of supernodes up: the truth views converge to.
func (s *sim) upMask() uint64 {
	var m uint64
	for _, n := range s.nodes {
		if n.up {
			m |= 1 << n.i
		}
	}
	return m
}

// trueCluster is g's home cluster on the ring of every supernode up.
func (s *sim) trueCluster(g string) []*snode {
	r := s.ringOf(s.upMask())
	if r == nil {
		return nil
	}
	var out []*snode
	for _, id := range r.LookupN([]byte(g), 3, nil) {
		out = append(out, s.byID[s.str[id]])
	}
	return out
}

func (s *sim) upNodes() []*snode {
	var out []*snode
	for _, n := range s.nodes {
		if n.up {
			out = append(out, n)
		}
	}
	return out
}

// tracer keeps the trace: a running hash of every line and the lines.
type tracer struct {
	lines []string
	hash  interface {
		Write([]byte) (int, error)
		Sum([]byte) []byte
	}
}

func newTracer() *tracer { return &tracer{hash: sha256.New()} }

func (t *tracer) add(line string) {
	t.hash.Write([]byte(line))
	t.hash.Write([]byte{'\n'})
	t.lines = append(t.lines, line)
}

func (t *tracer) sum() []byte { return t.hash.Sum(nil) }

// excerpt is the last n lines touching groups (every line naming one of
// them, or no group at all), or the last n lines when groups is empty.
func (t *tracer) excerpt(groups map[string]bool, n int) []string {
	var out []string
	for i := len(t.lines) - 1; i >= 0 && len(out) < n; i-- {
		l := t.lines[i]
		if len(groups) > 0 && !touches(l, groups) {
			continue
		}
		out = append(out, l)
	}
	slices.Reverse(out)
	return out
}

func touches(l string, groups map[string]bool) bool {
	for g := range groups {
		if strings.Contains(l, " "+g+" ") || strings.HasSuffix(l, " "+g) || strings.Contains(l, "="+g+" ") || strings.HasSuffix(l, "="+g) {
			return true
		}
	}
	return !strings.Contains(l, "g=") && !strings.Contains(l, " g")
}

// tracef appends a trace line at the current time.
func (s *sim) tracef(who, format string, args ...any) {
	s.tr.add(fmt.Sprintf("%9.4f %-4s %s", s.now.Seconds(), who, fmt.Sprintf(format, args...)))
}

// short names a peer ID for the trace.
func (s *sim) short(id string) string {
	if n := s.byID[id]; n != nil {
		return n.name
	}
	if c := s.cByID[id]; c != nil {
		return c.name
	}
	if id == "" {
		return "-"
	}
	p, err := peer.IDFromBytes([]byte(id))
	if err != nil {
		return "?"
	}
	return "x" + p.String()[len(p.String())-4:]
}
