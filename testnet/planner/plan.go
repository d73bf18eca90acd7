package planner

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/overlayd/overlayd/testnet/sim"
)

// Input is the operator's network and target.
type Input struct {
	// Clients, Supernodes and Capacity describe the network before the
	// outage.
	Clients, Supernodes, Capacity int
	// Loss is the fraction of the supernodes that crash at once.
	Loss float64
	// Fraction of the clients attached (on live supernodes) Within the
	// time after the crash: the target.
	Fraction float64
	Within   time.Duration
	// MegaCapacities are the mega sizes to size a count for (nil: 5, 10
	// and 20 times Capacity).
	MegaCapacities []int
	// Seeds: every candidate runs once per seed; the worst counts.
	Seeds []uint64
	// Params are the model's parameters (DefaultParams if zero).
	Params sim.Params
	// Progress, if set, is told about every simulation run, by one
	// goroutine at a time (with Parallel, in no set order).
	Progress func(cfg sim.Config, t *float64)
	// Parallel is how many simulations run at once (0 or 1: one after
	// another). The plan is the same whatever it is: the searches are
	// independent, each is as it would be alone, and a candidate two of
	// them ask for is simulated once. Each simulation takes about
	// Memory(); Workers says how many fit.
	Parallel int
}

// planCrashAt is when the planned outage happens.
const planCrashAt = 10 * time.Second

// Validate names the first field out of range.
func (in Input) Validate() error {
	switch {
	case in.Clients < 1:
		return fmt.Errorf("plan: clients must be >= 1, got %d", in.Clients)
	case in.Supernodes < 2:
		return fmt.Errorf("plan: supernodes must be >= 2 (the first never crashes), got %d", in.Supernodes)
	case in.Supernodes > 1<<16:
		return fmt.Errorf("plan: at most %d supernodes, got %d", 1<<16, in.Supernodes)
	case in.Capacity < 1:
		return fmt.Errorf("plan: capacity must be >= 1, got %d", in.Capacity)
	case in.Clients > 1<<30:
		return fmt.Errorf("plan: at most %d clients, got %d", 1<<30, in.Clients)
	case in.Loss < 0 || in.Loss >= 1:
		return fmt.Errorf("plan: loss must be in [0, 1), got %v", in.Loss)
	case in.Fraction <= 0 || in.Fraction > 1:
		return fmt.Errorf("plan: target fraction must be in (0, 1], got %v", in.Fraction)
	case in.Within <= 0 || in.Within > time.Hour:
		return fmt.Errorf("plan: target time must be in (0, 1h], got %v", in.Within)
	case len(in.Seeds) == 0:
		return errors.New("plan: at least one seed")
	}
	for _, m := range in.MegaCapacities {
		if m < 1 {
			return fmt.Errorf("plan: mega capacity must be >= 1, got %d", m)
		}
	}
	return nil
}

// need is how many clients the target asks for.
func (in Input) need() int {
	return int(math.Ceil(in.Fraction*float64(in.Clients) - 1e-9))
}

// survivors is how many of n supernodes survive the crash (the simulator
// crashes round(Loss · n) of them).
func (in Input) survivors(n int) int {
	return n - int(math.Round(in.Loss*float64(n)))
}

// Horizon is the simulated time after the crash: twice the target, so
// that a candidate that misses says by how much.
func (in Input) Horizon() time.Duration { return 2 * in.Within }

// Config is the simulation of a candidate: supernodes of capacity, and
// megas of megaCapacity promoted at the crash (from capacity 1), with seed.
func (in Input) Config(supernodes, capacity, megas, megaCapacity int, seed uint64) sim.Config {
	p := in.Params
	if p == (sim.Params{}) {
		p = sim.DefaultParams()
	}
	pol, _ := sim.FindPolicy("overlayd")
	c := sim.Config{Scenario: "skype2010", Policy: pol, Seed: seed, Clients: in.Clients, Supernodes: supernodes,
		Capacity: capacity, Megas: megas, MegaBefore: 1, MegaCapacity: max(megaCapacity, 1),
		CrashFraction: in.Loss, CrashAt: planCrashAt, Duration: planCrashAt + in.Horizon(), Params: p}
	return c
}

// Candidate is one network the planner simulated, and its worst seed.
type Candidate struct {
	Supernodes, Capacity, Megas, MegaCapacity int
	// Time is the worst seed's seconds from the crash until the target
	// fraction was attached; nil: not within the horizon.
	Time  *float64
	Meets bool
}

// MegaPlan is the answer for one mega size: the fewest megas that meet
// the target, and one fewer (which does not).
type MegaPlan struct {
	MegaCapacity int
	Answer       Candidate
	Fewer        *Candidate // nil when the answer is no megas
	// Found is false when no count up to the ring's bound met the target.
	Found bool
}

// Plan is the planner's answer.
type Plan struct {
	Input Input
	// Baseline is the network as it is, without megas.
	Baseline Candidate
	Megas    []MegaPlan
	// Capacity is the smallest capacity per supernode (same count, no
	// megas) that meets the target, and Less the one below.
	Capacity, CapacityLess Candidate
	// Supernodes is the fewest supernodes (same capacity, no megas) that
	// meet the target, and Less one fewer.
	Supernodes, SupernodesLess Candidate
	// Runs is how many simulations the search took, as one after another
	// (with Parallel, a seed that ran beside an earlier one that missed
	// is not counted: the same number whatever Parallel is).
	Runs int
}

// searcher runs the searches. With in.Parallel > 1 they run in goroutines
// of their own, and a candidate's later seeds in slots that are free, at
// most in.Parallel simulations at a time (slots).
type searcher struct {
	in    Input
	slots chan struct{} // nil: one after another

	mu   sync.Mutex
	runs int
	memo map[[4]int]*memoCand
}

// memoCand is a candidate evaluated (or being evaluated: done is open).
type memoCand struct {
	done chan struct{}
	c    Candidate
	err  error
}

// eval simulates a candidate with every seed and keeps the worst. Each
// candidate is simulated once: a search asking for one another search
// is simulating waits for it. Without megas the mega size is not
// simulated, so those candidates are one.
func (p *searcher) eval(supernodes, capacity, megas, megaCapacity int) (Candidate, error) {
	key := [4]int{supernodes, capacity, megas, megaCapacity}
	if megas == 0 {
		key[3] = 1
	}
	p.mu.Lock()
	m, ok := p.memo[key]
	if !ok {
		m = &memoCand{done: make(chan struct{})}
		p.memo[key] = m
	}
	p.mu.Unlock()
	if ok {
		<-m.done
	} else {
		m.c, m.err = p.simulate(key[0], key[1], key[2], key[3])
		close(m.done)
	}
	if m.err != nil {
		return Candidate{}, m.err
	}
	c := m.c
	c.MegaCapacity = megaCapacity
	return c, nil
}

// simulate runs a candidate with every seed, in seed order until one
// misses the horizon (the worst there is). In parallel, the seeds after
// the one a slot was waited for also run at once if slots are free
// then: never instead of another search's simulation, and a seed after
// one that missed is not counted. The candidate, and the number of runs,
// are the sequential ones.
func (p *searcher) simulate(supernodes, capacity, megas, megaCapacity int) (Candidate, error) {
	seeds := p.in.Seeds
	times := make([]*float64, len(seeds))
	errs := make([]error, len(seeds))
	run := func(k int) {
		defer p.release()
		cfg := p.in.Config(supernodes, capacity, megas, megaCapacity, seeds[k])
		times[k], errs[k] = sim.TimeToFraction(cfg, p.in.Fraction)
		if errs[k] == nil && p.in.Progress != nil {
			p.mu.Lock()
			p.in.Progress(cfg, times[k])
			p.mu.Unlock()
		}
	}
	for k := 0; k < len(seeds); {
		p.acquire()
		n := 1
		for k+n < len(seeds) && p.tryAcquire() {
			n++
		}
		var wg sync.WaitGroup
		for j := k + 1; j < k+n; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(j)
			}()
		}
		run(k)
		wg.Wait()
		missed := false
		for j := k; j < k+n; j++ {
			missed = missed || errs[j] != nil || times[j] == nil
		}
		if missed {
			break
		}
		k += n
	}
	cand := Candidate{Supernodes: supernodes, Capacity: capacity, Megas: megas, MegaCapacity: megaCapacity, Meets: true}
	for k, t := range times {
		if errs[k] != nil {
			return Candidate{}, errs[k]
		}
		p.mu.Lock()
		p.runs++
		p.mu.Unlock()
		if t == nil {
			cand.Time, cand.Meets = nil, false
			break // the worst there is
		}
		if cand.Time == nil || *t > *cand.Time {
			v := *t
			cand.Time = &v
		}
	}
	if cand.Time == nil || *cand.Time > p.in.Within.Seconds() {
		cand.Meets = false
	}
	return cand, nil
}

func (p *searcher) acquire() {
	if p.slots != nil {
		p.slots <- struct{}{}
	}
}

// tryAcquire takes a slot if one is free (never without slots: one
// simulation after another).
func (p *searcher) tryAcquire() bool {
	if p.slots == nil {
		return false
	}
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *searcher) release() {
	if p.slots != nil {
		<-p.slots
	}
}

// search returns the smallest n in [lo, limit] for which ok(n) meets,
// assuming (as the planner does) that more never hurts: it doubles the
// step from lo until a candidate meets, then bisects. found is false when
// limit does not meet.
func search(lo, limit int, ok func(int) (Candidate, error)) (ans Candidate, found bool, err error) {
	c, err := ok(lo)
	if err != nil || c.Meets {
		return c, err == nil, err
	}
	bad, step := lo, 1
	var good int
	for {
		n := min(bad+step, limit)
		c, err := ok(n)
		if err != nil {
			return c, false, err
		}
		if c.Meets {
			good, ans = n, c
			break
		}
		if n == limit {
			return c, false, nil
		}
		bad, step = n, 2*step
	}
	for good-bad > 1 {
		mid := bad + (good-bad)/2
		c, err := ok(mid)
		if err != nil {
			return c, false, err
		}
		if c.Meets {
			good, ans = mid, c
		} else {
			bad = mid
		}
	}
	return ans, true, nil
}

// Search plans: for each mega size the fewest megas, then without megas
// the capacity per supernode and the number of supernodes, that meet the
// target; each with the candidate just below it, simulated too. The
// searches are independent: with in.Parallel > 1 they run at once.
func Search(in Input) (*Plan, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	if in.Params == (sim.Params{}) {
		in.Params = sim.DefaultParams()
	}
	if err := in.Params.Validate(); err != nil {
		return nil, err
	}
	if len(in.MegaCapacities) == 0 {
		in.MegaCapacities = in.megaCapacities()
	}
	p := &searcher{in: in, memo: map[[4]int]*memoCand{}}
	if in.Parallel > 1 {
		p.slots = make(chan struct{}, in.Parallel)
	}
	out := &Plan{Input: in, Megas: make([]MegaPlan, len(in.MegaCapacities))}
	// Each search writes its own part of out and its own error.
	searches := []func() error{func() (err error) {
		out.Baseline, err = p.eval(in.Supernodes, in.Capacity, 0, 1)
		return err
	}}
	for k, mc := range in.MegaCapacities {
		searches = append(searches, func() (err error) {
			out.Megas[k], err = p.searchMegas(mc)
			return err
		})
	}
	searches = append(searches, func() error { return p.searchCapacity(out) }, func() error { return p.searchSupernodes(out) })
	errs := make([]error, len(searches))
	if p.slots == nil {
		for k, f := range searches {
			if errs[k] = f(); errs[k] != nil {
				break
			}
		}
	} else {
		var wg sync.WaitGroup
		for k, f := range searches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = f()
			}()
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out.Runs = p.runs
	return out, nil
}

// The memory of one simulation, resident at its peak, with the Go
// collector's default GOGC=100 (the heap grows to twice what is live
// before it collects). Measured with /usr/bin/time -v, skype2010, policy
// overlayd, 10 simulated minutes, 100 clients per supernode: 200,000
// clients peak at 143 MiB, 1,000,000 at 558 MiB, 2,000,000 at 1,243 MiB.
// The bytes per client grow with the supernodes (a failover pass in
// flight holds a plan over the directory's entries), hence the term in
// clients × nodes. The estimate is 25 to 35% above those runs: a
// planner that runs out of memory loses the whole plan.
const (
	simMemoryBase      = 64 << 20
	simMemoryPerClient = 550
	simMemoryPerNode   = 8 << 10
	// simMemoryPerPair is 1/simMemoryPerPair bytes per client per node.
	simMemoryPerPair = 128
)

// SimMemory estimates the memory one simulation of clients on nodes
// supernodes (megas included) takes at its peak, in bytes.
func SimMemory(clients, nodes int) int64 {
	c, n := int64(clients), int64(nodes)
	return simMemoryBase + simMemoryPerClient*c + simMemoryPerNode*n + c*n/simMemoryPerPair
}

// Memory estimates the memory the largest of the plan's simulations
// takes at its peak: every simulation has the clients, and the searches
// add supernodes or megas up to their bounds.
func (in Input) Memory() int64 {
	nodes := in.Supernodes
	if _, limit := in.supernodeBounds(); limit > nodes {
		nodes = limit
	}
	mcs := in.MegaCapacities
	if len(mcs) == 0 {
		mcs = in.megaCapacities()
	}
	for _, mc := range mcs {
		if _, limit := in.megaBounds(max(mc, 1)); in.Supernodes+limit > nodes {
			nodes = in.Supernodes + limit
		}
	}
	return SimMemory(in.Clients, nodes)
}

// Workers is how many simulations the plan can run at once within
// maxMemory bytes: want, or fewer if maxMemory cannot hold that many
// (each takes about Memory()). It is an error if maxMemory cannot hold
// one.
func (in Input) Workers(want int, maxMemory int64) (int, error) {
	if want < 1 {
		return 0, fmt.Errorf("plan: parallel must be >= 1, got %d", want)
	}
	per := in.Memory()
	fit := maxMemory / per
	if fit < 1 {
		return 0, fmt.Errorf("plan: one simulation of %s clients takes about %s, more than the memory allowed (%s)",
			thousands(in.Clients), Bytes(per), Bytes(maxMemory))
	}
	return int(min(int64(want), fit)), nil
}

// Bytes writes n in MiB, or GiB from 1 GiB up.
func Bytes(n int64) string {
	if n >= 1<<30 {
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	}
	return strconv.FormatInt((n+1<<20-1)>>20, 10) + " MiB"
}

// megaCapacities are the mega sizes planned for by default.
func (in Input) megaCapacities() []int {
	return []int{5 * in.Capacity, 10 * in.Capacity, 20 * in.Capacity}
}

// megaBounds are the fewest megas of capacity mc to try (at least the
// slots the survivors lack) and the most (beyond megas that could hold
// every client twice, more do not help).
func (in Input) megaBounds(mc int) (lo, limit int) {
	if short := in.need() - in.survivors(in.Supernodes)*in.Capacity; short > 0 {
		lo = (short + mc - 1) / mc
	}
	return lo, min(1<<16-in.Supernodes, max(lo, (2*in.Clients+mc-1)/mc)+1)
}

// supernodeBounds are the fewest supernodes to try (enough survivors for
// the target) and the most.
func (in Input) supernodeBounds() (lo, limit int) {
	lo = in.Supernodes
	for lo < 1<<16 && in.survivors(lo)*in.Capacity < in.need() {
		lo++
	}
	return lo, min(1<<16, 4*lo+16)
}

// searchMegas is the fewest megas of capacity mc.
func (p *searcher) searchMegas(mc int) (MegaPlan, error) {
	in := p.in
	lo, limit := in.megaBounds(mc)
	if lo > limit {
		return MegaPlan{MegaCapacity: mc}, nil
	}
	ans, found, err := search(lo, limit, func(n int) (Candidate, error) { return p.eval(in.Supernodes, in.Capacity, n, mc) })
	if err != nil {
		return MegaPlan{}, err
	}
	mp := MegaPlan{MegaCapacity: mc, Answer: ans, Found: found} // not found: Answer is the largest tried
	if found && ans.Megas > 0 {
		f, err := p.eval(in.Supernodes, in.Capacity, ans.Megas-1, mc)
		if err != nil {
			return MegaPlan{}, err
		}
		mp.Fewer = &f
	}
	return mp, nil
}

// searchCapacity is the headroom without megas: the capacity per
// supernode.
func (p *searcher) searchCapacity(out *Plan) error {
	in := p.in
	surv := in.survivors(in.Supernodes)
	lo := max(in.Capacity, (in.need()+surv-1)/max(surv, 1))
	var err error
	out.Capacity, out.CapacityLess, err = searchHeadroom(lo, 4*lo+16, 1,
		func(c int) (Candidate, error) { return p.eval(in.Supernodes, c, 0, 1) },
		func(c Candidate) int { return c.Capacity })
	return err
}

// searchSupernodes is the headroom without megas: the number of
// supernodes.
func (p *searcher) searchSupernodes(out *Plan) error {
	in := p.in
	lo, limit := in.supernodeBounds()
	var err error
	out.Supernodes, out.SupernodesLess, err = searchHeadroom(lo, limit, 2,
		func(n int) (Candidate, error) { return p.eval(n, in.Capacity, 0, 1) },
		func(c Candidate) int { return c.Supernodes })
	return err
}

// searchHeadroom finds the least x in [lo, limit] (x of a candidate is
// at(candidate)) whose candidate meets the target, and the candidate of
// x-1 as its margin when x-1 >= floor. Without an answer it returns a
// zero answer and the largest candidate tried as the margin.
func searchHeadroom(lo, limit, floor int, eval func(int) (Candidate, error), at func(Candidate) int) (ans, less Candidate, err error) {
	ans, found, err := search(lo, limit, eval)
	if err != nil || !found {
		return Candidate{}, ans, err
	}
	if x := at(ans); x-1 >= floor {
		less, err = eval(x - 1)
	}
	return ans, less, err
}

// Best is the mega plan with the fewest mega slots in all (then the
// fewest machines); ok is false when none met the target.
func (pl *Plan) Best() (MegaPlan, bool) {
	var found []MegaPlan
	for _, m := range pl.Megas {
		if m.Found {
			found = append(found, m)
		}
	}
	if len(found) == 0 {
		return MegaPlan{}, false
	}
	return slices.MinFunc(found, func(a, b MegaPlan) int {
		if d := a.Answer.Megas*a.MegaCapacity - b.Answer.Megas*b.MegaCapacity; d != 0 {
			return d
		}
		return a.Answer.Megas - b.Answer.Megas
	}), true
}

// Text is the plan for an operator: the answer for each mega size with
// its margin (the target's time against the answer's, and what one mega
// fewer gives), then the headroom without megas.
func (pl *Plan) Text() string {
	in := pl.Input
	pct := strconv.FormatFloat(100*in.Fraction, 'f', -1, 64) + "%"
	at := func(c Candidate) string {
		if c.Time == nil {
			return fmt.Sprintf("%s not reached in %s", pct, secs(in.Horizon().Seconds()))
		}
		return fmt.Sprintf("%s attached at %s", pct, secs(*c.Time))
	}
	target := fmt.Sprintf("(target %s)", secs(in.Within.Seconds()))
	var b strings.Builder
	fmt.Fprintf(&b, "network: %s clients on %s supernodes of capacity %s; %s%% of the supernodes crash at once; target %s attached within %s of the crash; worst of %d seed(s)\n",
		thousands(in.Clients), thousands(in.Supernodes), thousands(in.Capacity), strconv.FormatFloat(100*in.Loss, 'f', -1, 64), pct, secs(in.Within.Seconds()), len(in.Seeds))
	fmt.Fprintf(&b, "as it is (no megas): %s %s\n", at(pl.Baseline), target)
	if pl.Baseline.Meets {
		fmt.Fprintf(&b, "the network meets the target without megas\n")
	}
	for _, m := range pl.Megas {
		if !m.Found {
			fmt.Fprintf(&b, "megas of capacity %s: none meets the target (the most tried: %s: %s)\n", thousands(m.MegaCapacity), thousands(m.Answer.Megas), at(m.Answer))
			continue
		}
		fmt.Fprintf(&b, "%s of capacity %s: %s %s", plural(m.Answer.Megas, "mega"), thousands(m.MegaCapacity), at(m.Answer), target)
		if m.Fewer != nil {
			fmt.Fprintf(&b, "; %s: %s", plural(m.Fewer.Megas, "mega"), at(*m.Fewer))
		}
		b.WriteString("\n")
	}
	if best, ok := pl.Best(); ok {
		fmt.Fprintf(&b, "fewest mega slots: %s of capacity %s (%s slots)\n", plural(best.Answer.Megas, "mega"), thousands(best.MegaCapacity), thousands(best.Answer.Megas*best.MegaCapacity))
	}
	if c := pl.Capacity; c.Capacity > 0 {
		fmt.Fprintf(&b, "headroom without megas: %s supernodes of capacity %s: %s %s", thousands(c.Supernodes), thousands(c.Capacity), at(c), target)
		if l := pl.CapacityLess; l.Capacity > 0 {
			fmt.Fprintf(&b, "; capacity %s: %s", thousands(l.Capacity), at(l))
		}
		b.WriteString("\n")
	} else {
		fmt.Fprintf(&b, "headroom without megas: no capacity per supernode meets the target (the most tried: %s: %s)\n", thousands(pl.CapacityLess.Capacity), at(pl.CapacityLess))
	}
	if c := pl.Supernodes; c.Supernodes > 0 {
		fmt.Fprintf(&b, "headroom without megas: %s supernodes of capacity %s: %s %s", thousands(c.Supernodes), thousands(c.Capacity), at(c), target)
		if l := pl.SupernodesLess; l.Supernodes > 0 {
			fmt.Fprintf(&b, "; %s supernodes: %s", thousands(l.Supernodes), at(l))
		}
		b.WriteString("\n")
	} else {
		fmt.Fprintf(&b, "headroom without megas: no number of supernodes meets the target (the most tried: %s: %s)\n", thousands(pl.SupernodesLess.Supernodes), at(pl.SupernodesLess))
	}
	fmt.Fprintf(&b, "%d simulations\n", pl.Runs)
	return b.String()
}

func secs(s float64) string {
	if s >= 100 {
		return fmt.Sprintf("%.0f s", s)
	}
	return strconv.FormatFloat(s, 'f', 1, 64) + " s"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return thousands(n) + " " + what + "s"
}

// thousands writes n with commas between thousands.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
