package sim

import (
	"strings"
	"testing"
	"time"
)

func smallPlanInput() PlanInput {
	return PlanInput{Clients: 1000, Supernodes: 10, Capacity: 112, Loss: 0.3, Fraction: 0.99, Within: 20 * time.Second,
		MegaCapacities: []int{30, 112}, Seeds: []uint64{1, 2}}
}

// meets reruns a candidate with every seed of in, as a user of the plan
// would, and says whether every seed reached the target in time.
func meets(t *testing.T, in PlanInput, supernodes, capacity, megas, megaCapacity int) bool {
	t.Helper()
	for _, seed := range in.Seeds {
		tt, err := TimeToFraction(in.Config(supernodes, capacity, megas, megaCapacity, seed), in.Fraction)
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
	for name, f := range map[string]func(*PlanInput){
		"clients":    func(in *PlanInput) { in.Clients = 0 },
		"supernodes": func(in *PlanInput) { in.Supernodes = 1 },
		"capacity":   func(in *PlanInput) { in.Capacity = 0 },
		"loss":       func(in *PlanInput) { in.Loss = 1 },
		"fraction":   func(in *PlanInput) { in.Fraction = 1.5 },
		"within":     func(in *PlanInput) { in.Within = 0 },
		"seeds":      func(in *PlanInput) { in.Seeds = nil },
		"mega":       func(in *PlanInput) { in.MegaCapacities = []int{0} },
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
