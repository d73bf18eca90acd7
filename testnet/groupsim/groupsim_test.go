package groupsim

import (
	"testing"

	"github.com/overlayd/overlayd/supernode/group"
)

// runSeeds runs seeds from..from+n-1 on every core and returns the
// results in seed order.
func runSeeds(from uint64, n int, p Params) []Result { return Seeds(from, n, 0, p, nil) }

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

// knownFailing are the seeds of 1..200 (default Params) that still fail:
// the core loses or reorders acknowledged messages there, for bugs not yet
// fixed. Each is labelled with the patterns its run showed
// (Result.Suspects, heuristics of diagnose.go; "unclassified": none):
//
//   - flap-home-numbered: a supernode whose ring dropped the live home
//     for a moment numbered messages in a new epoch. Its replicas no
//     longer acknowledge them unless their own rings name it the home
//     (Mutations.NoReplicaHomeCheck), but what it fans out to its own
//     members, and what two supernodes whose rings flap together number,
//     remain (the design has no consensus on who is home).
//   - log-hole: a replay log ignores entries at or below its last
//     position. A new home's sync is now merged in order
//     (Mutations.NoSyncMerge) and a replica acknowledges only what its
//     log holds (Mutations.NoHeldCheck), but a log with a hole below its
//     last position (a live replica refused while the ring lagged) still
//     replays without it: the sync asks only after the last position.
//   - masked-supernode-resume, refresh-without-position: a supernode's
//     position now follows one home at a time and its resume goes with
//     its first membership at a home it does not follow
//     (Mutations.NoPosHandoff); the seeds left show a supernode whose
//     members all came back by a member's resume, which leaves it no
//     position.
//
// TestSeeds skips them (logged) and fails on any other failing seed, and
// on a seed of this list that passes (remove it: the list stays true).
var knownFailing = map[uint64]string{
	16:  "flap-home-numbered, log-hole, refresh-without-position (25 failures)",
	18:  "flap-home-numbered, log-hole (33 failures)",
	20:  "log-hole, refresh-without-position (12 failures)",
	27:  "refresh-without-position (28 failures)",
	36:  "flap-home-numbered, log-hole (146 failures)",
	48:  "flap-home-numbered, log-hole (1 failures)",
	49:  "log-hole, masked-supernode-resume (3 failures)",
	55:  "flap-home-numbered, log-hole (18 failures)",
	57:  "flap-home-numbered, log-hole (25 failures)",
	69:  "flap-home-numbered, log-hole, refresh-without-position (9 failures)",
	81:  "unclassified (9 failures)",
	88:  "flap-home-numbered, log-hole (28 failures)",
	89:  "unclassified (2 failures)",
	101: "flap-home-numbered, log-hole (8 failures)",
	104: "flap-home-numbered, log-hole, refresh-without-position (14 failures)",
	152: "flap-home-numbered, log-hole (160 failures)",
	165: "log-hole (3 failures)",
	170: "flap-home-numbered, log-hole (102 failures)",
	174: "unclassified (17 failures)",
	182: "flap-home-numbered, log-hole (136 failures)",
	187: "unclassified (3 failures)",
	189: "flap-home-numbered, log-hole (41 failures)",
	198: "flap-home-numbered, log-hole (180 failures)",
}

func TestSeeds(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 40
	}
	if raceEnabled {
		n /= 10 // ~5x slower under -race
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
			if bug, ok := knownFailing[r.Seed]; ok {
				t.Errorf("seed %d passes now (listed as failing: %s): remove it from knownFailing", r.Seed, bug)
			}
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
	// The fixes of what this simulator found.
	{"NoPosHandoff", group.Mutations{NoPosHandoff: true}},
	{"NoHeldCheck", group.Mutations{NoHeldCheck: true}},
	{"NoReplicaHomeCheck", group.Mutations{NoReplicaHomeCheck: true}},
	{"NoSyncMerge", group.Mutations{NoSyncMerge: true}},
}

// mutationSeeds is how many seeds TestMutations runs with each mutation
// and without.
const mutationSeeds = 100

// mutationMargin: a mutation is found when its seeds fail this many more
// times than the same seeds with every fix. While the core has the bugs
// of knownFailing (a fifth of seeds fail with every fix), a single seed
// that passes with the fix and fails without it proves nothing: the
// mutation changes the run's course, which meets those bugs elsewhere.
const mutationMargin = 6

// detected are the mutations this simulator tells apart from the
// baseline (measured: see the report in the commit); the others are
// logged, not asserted.
var detected = map[string]bool{"NoSettledWait": true, "NoToldHomes": true, "NoPosHandoff": true, "NoReplicaHomeCheck": true}

// TestMutations switches off each past fix in turn and compares the
// failures over the same seeds with every fix in.
func TestMutations(t *testing.T) {
	if testing.Short() || raceEnabled {
		// 1,000 seeds: about a minute, and nine under -race, which the
		// core (one goroutine) does not need. .ci/run runs it without.
		t.Skip("long: run without -short and -race (.ci/run does)")
	}
	count := func(p Params) (bad int, only []uint64, results []Result) {
		results = runSeeds(1, mutationSeeds, p)
		for _, r := range results {
			if !r.OK {
				bad++
			}
		}
		return bad, nil, results
	}
	base, _, baseRes := count(Params{})
	t.Logf("baseline: %d of %d seeds fail", base, mutationSeeds)
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			bad, _, res := count(Params{Mutations: mu.m})
			firstOnly := uint64(0)
			for i, r := range res {
				if !r.OK && baseRes[i].OK {
					firstOnly = r.Seed
					break
				}
			}
			t.Logf("%s: %d of %d seeds fail (baseline %d); first failing only with it: seed %d", mu.name, bad, mutationSeeds, base, firstOnly)
			if bad < base+mutationMargin {
				if detected[mu.name] {
					t.Errorf("%s not found: %d failures against %d", mu.name, bad, base)
				} else {
					t.Logf("%s is not told apart from the baseline by this fault mix", mu.name)
				}
			}
		})
	}
}

func BenchmarkSeeds(b *testing.B) {
	seed := uint64(0)
	for b.Loop() {
		seed++
		Run(seed, Params{})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seeds/s")
}
