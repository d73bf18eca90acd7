package planner

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/overlayd/overlayd/testnet/sim"
)

func smallPlanInput() Input {
	return Input{Clients: 1000, Supernodes: 10, Capacity: 112, Loss: 0.3, Fraction: 0.99, Within: 20 * time.Second,
		MegaCapacities: []int{30, 112}, Seeds: []uint64{1, 2}}
}

// meets reruns a candidate with every seed of in, as a user of the plan
// would, and says whether every seed reached the target in time.
func meets(t *testing.T, in Input, supernodes, capacity, megas, megaCapacity int) bool {
	t.Helper()
	for _, seed := range in.Seeds {
		tt, err := sim.TimeToFraction(in.Config(supernodes, capacity, megas, megaCapacity, seed), in.Fraction)
		if err != nil {
			t.Fatal(err)
		}
		if tt == nil || *tt > in.Within.Seconds() {
			return false
		}
	}
	return true
}

// The planner's answers, fed back into the simulator, meet the target,
// and one mega fewer (one unit of capacity less, one supernode fewer)
// does not.
func TestPlanMeetsTarget(t *testing.T) {
	in := smallPlanInput()
	pl, err := Search(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", pl.Text())
	if pl.Baseline.Meets {
		t.Fatalf("the small network meets the target without megas: the test needs one that does not")
	}
	for _, m := range pl.Megas {
		if !m.Found {
			t.Fatalf("megas of %d: no answer", m.MegaCapacity)
		}
		a := m.Answer
		if a.Megas == 0 || !meets(t, in, a.Supernodes, a.Capacity, a.Megas, m.MegaCapacity) {
			t.Errorf("%d megas of %d: the answer does not meet the target when rerun", a.Megas, m.MegaCapacity)
		}
		if meets(t, in, a.Supernodes, a.Capacity, a.Megas-1, m.MegaCapacity) {
			t.Errorf("%d megas of %d also meet the target: the answer is not the fewest", a.Megas-1, m.MegaCapacity)
		}
	}
	if _, ok := pl.Best(); !ok {
		t.Error("no best mega plan")
	}
	c := pl.Capacity
	if c.Capacity <= in.Capacity || !meets(t, in, c.Supernodes, c.Capacity, 0, 1) || meets(t, in, c.Supernodes, c.Capacity-1, 0, 1) {
		t.Errorf("capacity headroom %d: want the smallest capacity above %d that meets the target", c.Capacity, in.Capacity)
	}
	n := pl.Supernodes
	if n.Supernodes <= in.Supernodes || !meets(t, in, n.Supernodes, n.Capacity, 0, 1) || meets(t, in, n.Supernodes-1, n.Capacity, 0, 1) {
		t.Errorf("supernode headroom %d: want the fewest supernodes above %d that meet the target", n.Supernodes, in.Supernodes)
	}
	txt := pl.Text()
	for _, want := range []string{"8 megas of capacity 30: 99% attached at", "(target 20.0 s); 7 megas: 99% attached at 2", "headroom without megas"} {
		if !strings.Contains(txt, want) {
			t.Errorf("the plan's text has no %q:\n%s", want, txt)
		}
	}
}

func TestPlanInputErrors(t *testing.T) {
	for name, f := range map[string]func(*Input){
		"clients":    func(in *Input) { in.Clients = 0 },
		"supernodes": func(in *Input) { in.Supernodes = 1 },
		"capacity":   func(in *Input) { in.Capacity = 0 },
		"loss":       func(in *Input) { in.Loss = 1 },
		"fraction":   func(in *Input) { in.Fraction = 1.5 },
		"within":     func(in *Input) { in.Within = 0 },
		"seeds":      func(in *Input) { in.Seeds = nil },
		"mega":       func(in *Input) { in.MegaCapacities = []int{0} },
	} {
		in := smallPlanInput()
		f(&in)
		if _, err := Search(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -5000: "-5,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// The planner in parallel gives the sequential plan: the same candidates
// simulated (the same count of runs), the same answers, in the same
// order. Run it with -race.
func TestPlanParallelIsSequential(t *testing.T) {
	in := smallPlanInput()
	in.Seeds = []uint64{1, 2, 3}
	seqRuns := 0
	in.Progress = func(sim.Config, *float64) { seqRuns++ }
	seq, err := Search(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 5, 16} { // 16: more slots than searches, so seeds run at once
		in.Parallel = n
		runs := 0 // Progress is called by one goroutine at a time
		in.Progress = func(sim.Config, *float64) { runs++ }
		par, err := Search(in)
		if err != nil {
			t.Fatal(err)
		}
		if runs < par.Runs {
			t.Errorf("parallel %d: Progress told of %d runs, the plan counts %d", n, runs, par.Runs)
		}
		par.Input.Parallel, par.Input.Progress, seq.Input.Progress = 0, nil, nil
		if !reflect.DeepEqual(seq, par) {
			t.Errorf("parallel %d: the plan differs from the sequential one:\n%s\nsequential:\n%s", n, par.Text(), seq.Text())
		}
	}
	if seqRuns != seq.Runs {
		t.Errorf("sequential: Progress told of %d runs, the plan counts %d", seqRuns, seq.Runs)
	}
}

// Workers fits the simulations at once into the memory allowed, and
// refuses when one does not fit.
func TestPlanWorkers(t *testing.T) {
	in := Input{Clients: 1000000, Supernodes: 10000, Capacity: 112, Loss: 0.3, Fraction: 0.99, Within: time.Minute, Seeds: []uint64{1}}
	per := in.Memory()
	if per < 600<<20 || per > 2<<30 {
		t.Fatalf("a simulation of 1M clients estimated at %s", Bytes(per))
	}
	for _, c := range []struct {
		want int
		mem  int64
		got  int
	}{{4, 100 * per, 4}, {4, 2*per + 1, 2}, {4, per, 1}, {1, 100 * per, 1}} {
		if got, err := in.Workers(c.want, c.mem); err != nil || got != c.got {
			t.Errorf("Workers(%d, %s) = %d, %v; want %d", c.want, Bytes(c.mem), got, err, c.got)
		}
	}
	if _, err := in.Workers(2, per-1); err == nil || !strings.Contains(err.Error(), "1,000,000 clients") {
		t.Errorf("Workers with less than one simulation's memory: %v", err)
	}
	if _, err := in.Workers(0, 100*per); err == nil {
		t.Error("Workers(0): no error")
	}
}
