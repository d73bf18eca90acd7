package groupsim

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/overlayd/overlayd/supernode/group"
)

// runSeeds runs seeds from..from+n-1 on every core, one seed per
// goroutine, and returns the results in seed order.
func runSeeds(from uint64, n int, p Params) []Result {
	out := make([]Result, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = Run(from+uint64(i), p)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

func TestDeterminism(t *testing.T) {
	for _, seed := range []uint64{1, 7, 42} {
		a, b := Run(seed, Params{}), Run(seed, Params{})
		if a.TraceHash != b.TraceHash || a.Events != b.Events {
			t.Errorf("seed %d: two runs differ: %s (%d events) and %s (%d events)", seed, a.TraceHash, a.Events, b.TraceHash, b.Events)
		}
	}
	if Run(1, Params{}).TraceHash == Run(2, Params{}).TraceHash {
		t.Error("seeds 1 and 2 gave the same trace")
	}
}

// knownFailing are the seeds of 1..200 (default Params) that fail for
// bugs of the core not yet fixed, each labelled with the suspect patterns
// the run showed (Result.Suspects; see diagnose.go):
//
//   - masked-supernode-resume: a new home's first record from a supernode
//     is a member's fresh join or resume, so the supernode's own resume
//     (its refresh with its position) is not new (snNew) and is not
//     replayed: its other members miss what the home numbered before.
//   - log-hole: a new home's sync appends the answers in arrival order to
//     a log that ignores entries at or below its last; a peer missing a
//     message (it refused the live replica: its ring lagged) answers
//     first, and the peer holding it is ignored for that position.
//   - flap-home-numbered: a supernode whose ring dropped the live home for
//     a moment takes the home role, numbers and acknowledges with a
//     replica; the real home never learns of those messages.
//   - unclassified: lost or out of order without one of the patterns
//     above (see the report).
//
// TestSeeds skips them (logged); any other failing seed fails the test.
var knownFailing = map[uint64]string{
	1:   "flap-home-numbered, log-hole (6 failures)",
	4:   "masked-supernode-resume (6 failures)",
	7:   "masked-supernode-resume (24 failures)",
	8:   "masked-supernode-resume (6 failures)",
	16:  "log-hole (40 failures)",
	20:  "flap-home-numbered, log-hole (12 failures)",
	23:  "masked-supernode-resume (8 failures)",
	26:  "log-hole (6 failures)",
	38:  "masked-supernode-resume (9 failures)",
	42:  "log-hole (1 failures)",
	45:  "flap-home-numbered, log-hole (24 failures)",
	47:  "masked-supernode-resume (7 failures)",
	55:  "masked-supernode-resume (7 failures)",
	68:  "log-hole, masked-supernode-resume (6 failures)",
	75:  "log-hole, masked-supernode-resume (14 failures)",
	77:  "masked-supernode-resume (6 failures)",
	79:  "flap-home-numbered, log-hole (51 failures)",
	80:  "masked-supernode-resume (27 failures)",
	86:  "unclassified (3 failures)",
	89:  "log-hole, masked-supernode-resume (2 failures)",
	92:  "masked-supernode-resume (28 failures)",
	105: "masked-supernode-resume (5 failures)",
	122: "flap-home-numbered, log-hole (8 failures)",
	140: "masked-supernode-resume (4 failures)",
	142: "unclassified (5 failures)",
	146: "unclassified (10 failures)",
	159: "log-hole, masked-supernode-resume (5 failures)",
	163: "unclassified (21 failures)",
	178: "masked-supernode-resume (6 failures)",
	189: "masked-supernode-resume (3 failures)",
}

func TestSeeds(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 40
	}
	if raceEnabled {
		n /= 4
	}
	faults := map[string]int{}
	beyond, told := 0, 0
	for _, r := range runSeeds(1, n, Params{}) {
		for k, v := range r.Faults {
			faults[k] += v
		}
		if r.BeyondGuarantee {
			beyond++
		}
		told += r.Told
		if r.OK {
			continue
		}
		if bug, ok := knownFailing[r.Seed]; ok {
			t.Logf("seed %d fails, known bug %s (suspects %v)", r.Seed, bug, r.Suspects)
			continue
		}
		t.Errorf("%s", r.Report())
	}
	t.Logf("%d seeds; beyond the guarantee: %d; members told of a gap: %d; faults: %v", n, beyond, told, faults)
}

// TestCheckerFindsLoss: a delivery dropped at one member is a failure.
func TestCheckerFindsLoss(t *testing.T) {
	found := 0
	for seed := uint64(1); seed <= 5; seed++ {
		r := Run(seed, Params{DropOneDelivery: true})
		if !r.OK {
			found++
		}
	}
	if found == 0 {
		t.Fatal("the checker missed every dropped delivery")
	}
	if found < 4 {
		t.Errorf("the checker found %d of 5 dropped deliveries", found)
	}
}

var mutations = []struct {
	name string
	m    group.Mutations
}{
	{"NoSettledWait", group.Mutations{NoSettledWait: true}},
	{"NoToldHomes", group.Mutations{NoToldHomes: true}},
	{"NoRingChangedDrop", group.Mutations{NoRingChangedDrop: true}},
	{"NoAwayDrop", group.Mutations{NoAwayDrop: true}},
	{"NoReplayDoneFromAsked", group.Mutations{NoReplayDoneFromAsked: true}},
}

// mutationBound is how many seeds each mutation may take to be found.
const mutationBound = 400

// TestMutations switches off each past fix in turn and runs seeds until
// one passes with the fix and fails without it.
func TestMutations(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	batch := 4 * runtime.GOMAXPROCS(0)
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			for from := uint64(1); from <= mutationBound; from += uint64(batch) {
				base := runSeeds(from, batch, Params{})
				for i, r := range runSeeds(from, batch, Params{Mutations: mu.m}) {
					if !r.OK && base[i].OK {
						t.Logf("%s found at seed %d: %s", mu.name, r.Seed, first(r.Failures))
						return
					}
				}
			}
			t.Errorf("%s not found in %d seeds", mu.name, mutationBound)
		})
	}
}

func first(fs []string) string {
	if len(fs) == 0 {
		return ""
	}
	return fmt.Sprintf("%s (+%d)", fs[0], len(fs)-1)
}

func BenchmarkSeeds(b *testing.B) {
	seed := uint64(0)
	for b.Loop() {
		seed++
		Run(seed, Params{})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seeds/s")
}
