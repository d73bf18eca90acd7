package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The capacity planner: how many mega-supernodes of what capacity (or how
// much supernode headroom) a network needs so that, after losing a share
// of its supernodes at once, a target fraction of its clients is attached
// again within a target time. It searches over the simulator's result:
// every candidate is simulated (the skype2010 scenario on the operator's
// network, policy overlayd) with each seed, and the worst seed counts.

// PlanInput is the operator's network and target.
type PlanInput struct {
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
	Params Params
	// Progress, if set, is told about every simulation run.
	Progress func(cfg Config, t *float64)
}

// crashAt is when the planner's outage happens.
const planCrashAt = 10 * time.Second

// Validate names the first field out of range.
func (in PlanInput) Validate() error {
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
func (in PlanInput) need() int {
	return int(math.Ceil(in.Fraction*float64(in.Clients) - 1e-9))
}

// survivors is how many of n supernodes survive the crash (the simulator
// crashes round(Loss · n) of them).
func (in PlanInput) survivors(n int) int {
	return n - int(math.Round(in.Loss*float64(n)))
}

// Horizon is the simulated time after the crash: twice the target, so
// that a candidate that misses says by how much.
func (in PlanInput) Horizon() time.Duration { return 2 * in.Within }

// Config is the simulation of a candidate: supernodes of capacity, and
// megas of megaCapacity promoted at the crash (from capacity 1), with seed.
func (in PlanInput) Config(supernodes, capacity, megas, megaCapacity int, seed uint64) Config {
	p := in.Params
	if p == (Params{}) {
		p = DefaultParams()
	}
	pol, _ := FindPolicy("overlayd")
	c := Config{Scenario: "skype2010", Policy: pol, Seed: seed, Clients: in.Clients, Supernodes: supernodes,
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
	Input PlanInput
	// Baseline is the network as it is, without megas.
	Baseline Candidate
	Megas    []MegaPlan
	// Capacity is the smallest capacity per supernode (same count, no
	// megas) that meets the target, and Less the one below.
	Capacity, CapacityLess Candidate
	// Supernodes is the fewest supernodes (same capacity, no megas) that
	// meet the target, and Less one fewer.
	Supernodes, SupernodesLess Candidate
	// Runs is how many simulations the search took.
	Runs int
}

type planner struct {
	in   PlanInput
	runs int
	memo map[[4]int]Candidate
}

// eval simulates a candidate with every seed and keeps the worst.
func (p *planner) eval(supernodes, capacity, megas, megaCapacity int) (Candidate, error) {
	key := [4]int{supernodes, capacity, megas, megaCapacity}
	if c, ok := p.memo[key]; ok {
		return c, nil
	}
	cand := Candidate{Supernodes: supernodes, Capacity: capacity, Megas: megas, MegaCapacity: megaCapacity, Meets: true}
	for _, seed := range p.in.Seeds {
		cfg := p.in.Config(supernodes, capacity, megas, megaCapacity, seed)
		t, err := TimeToFraction(cfg, p.in.Fraction)
		if err != nil {
			return Candidate{}, err
		}
		p.runs++
		if p.in.Progress != nil {
			p.in.Progress(cfg, t)
		}
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
	p.memo[key] = cand
	return cand, nil
}

// TimeToFraction runs cfg and returns the seconds from the crash until
// fraction of the clients were attached (nil: never within the run).
func TimeToFraction(cfg Config, fraction float64) (*float64, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	s.rec.watch = max(1, int(math.Ceil(fraction*float64(cfg.Clients)-1e-9)))
	s.Run()
	return s.rec.tWatch, nil
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
// target; each with the candidate just below it, simulated too.
func Search(in PlanInput) (*Plan, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	if in.Params == (Params{}) {
		in.Params = DefaultParams()
	}
	if err := in.Params.Validate(); err != nil {
		return nil, err
	}
	if len(in.MegaCapacities) == 0 {
		in.MegaCapacities = []int{5 * in.Capacity, 10 * in.Capacity, 20 * in.Capacity}
	}
	p := &planner{in: in, memo: map[[4]int]Candidate{}}
	out := &Plan{Input: in}
	need := in.need()
	base, err := p.eval(in.Supernodes, in.Capacity, 0, 1)
	if err != nil {
		return nil, err
	}
	out.Baseline = base

	// Megas of each size: at least the slots the survivors lack.
	short := need - in.survivors(in.Supernodes)*in.Capacity
	for _, mc := range in.MegaCapacities {
		lo := 0
		if short > 0 {
			lo = (short + mc - 1) / mc
		}
		// Beyond megas that could hold every client twice, more do not
		// help.
		limit := min(1<<16-in.Supernodes, max(lo, (2*in.Clients+mc-1)/mc)+1)
		if lo > limit {
			out.Megas = append(out.Megas, MegaPlan{MegaCapacity: mc})
			continue
		}
		ans, found, err := search(lo, limit, func(n int) (Candidate, error) { return p.eval(in.Supernodes, in.Capacity, n, mc) })
		if err != nil {
			return nil, err
		}
		mp := MegaPlan{MegaCapacity: mc, Answer: ans, Found: found} // not found: Answer is the largest tried
		if found && ans.Megas > 0 {
			f, err := p.eval(in.Supernodes, in.Capacity, ans.Megas-1, mc)
			if err != nil {
				return nil, err
			}
			mp.Fewer = &f
		}
		out.Megas = append(out.Megas, mp)
	}

	// Headroom, no megas: capacity per supernode.
	surv := in.survivors(in.Supernodes)
	lo := max(in.Capacity, (need+surv-1)/max(surv, 1))
	ans, found, err := search(lo, 4*lo+16, func(c int) (Candidate, error) { return p.eval(in.Supernodes, c, 0, 1) })
	if err != nil {
		return nil, err
	}
	if !found {
		out.CapacityLess = ans // the largest tried
	} else {
		out.Capacity = ans
	}
	if found && ans.Capacity > 1 {
		if out.CapacityLess, err = p.eval(in.Supernodes, ans.Capacity-1, 0, 1); err != nil {
			return nil, err
		}
	}
	// Headroom, no megas: the number of supernodes.
	lo = in.Supernodes
	for lo < 1<<16 && in.survivors(lo)*in.Capacity < need {
		lo++
	}
	ans, found, err = search(lo, min(1<<16, 4*lo+16), func(n int) (Candidate, error) { return p.eval(n, in.Capacity, 0, 1) })
	if err != nil {
		return nil, err
	}
	if !found {
		out.SupernodesLess = ans // the largest tried
	} else {
		out.Supernodes = ans
	}
	if found && ans.Supernodes > 2 {
		if out.SupernodesLess, err = p.eval(ans.Supernodes-1, in.Capacity, 0, 1); err != nil {
			return nil, err
		}
	}
	out.Runs = p.runs
	return out, nil
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
