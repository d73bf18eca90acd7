package groupsim

import (
	"os"
	"strconv"
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
// the core loses acknowledged messages there, for bugs not yet fixed.
// Each is labelled with what its trace showed.
//
// Left (seeds 1..1000: 105, 493, 662, 800). Seed 105: a member's
// join went to a home its supernode's slow ring still named after it had
// died; the interim home never learnt the member, and the home after it
// replays a supernode with no position only its own record's messages.
// The written guarantee counts from when a home learns the member; the
// checker counts from the join plus two refresh intervals.
//
// TestSeeds skips them (logged) and fails on any other failing seed, and
// on a seed of this list that passes (remove it: the list stays true).
var knownFailing = map[uint64]string{
	105: "a join sent to a dead home while the supernode's ring lagged; the interim home never learnt the member (1 failure)",
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
	{"NoReleaseAfterMajority", group.Mutations{NoReleaseAfterMajority: true}},
	{"NoMemberResumePos", group.Mutations{NoMemberResumePos: true}},
	{"NoSyncEndorse", group.Mutations{NoSyncEndorse: true}},
	{"NoResumeWithJoin", group.Mutations{NoResumeWithJoin: true}},
	{"NoRenumberLogged", group.Mutations{NoRenumberLogged: true}},
	{"NoResumedReset", group.Mutations{NoResumedReset: true}},
	{"NoRecordReplay", group.Mutations{NoRecordReplay: true}},
	{"NoSyncAppendRetry", group.Mutations{NoSyncAppendRetry: true}},
	{"NoFollowedHome", group.Mutations{NoFollowedHome: true}},
	{"NoHoldBack", group.Mutations{NoHoldBack: true}},
}

// mutationSeeds is how many seeds TestMutations runs with each mutation
// and without; $GROUPSIM_MUTATION_SEEDS raises it (the figures in
// docs/BENCHMARKS.md come from 1,000).
const mutationSeeds = 100

// mutationMargin: a mutation is found when this many seeds fail with it
// that pass with every fix. Compared seed by seed, not by counts: a
// mutation changes a run's course, and a seed that fails with every fix
// (knownFailing) may pass with it.
const mutationMargin = 3

// detected are the mutations CI asserts are found in mutationSeeds
// seeds; the others are logged, and measured over more seeds (each past
// loss is also covered by the fixes after it: sync endorsement, for
// one, keeps a supernode whose ring flapped from numbering at all, so
// releasing before a majority holds a message no longer loses it in
// 100 seeds).
var detected = map[string]bool{"NoSettledWait": true, "NoToldHomes": true}

// TestMutations switches off each past fix in turn and compares, seed by
// seed, the failures with every fix in.
func TestMutations(t *testing.T) {
	if testing.Short() || raceEnabled {
		// A minute, and nine under -race, which the core (one
		// goroutine) does not need. .ci/run runs it without.
		t.Skip("long: run without -short and -race (.ci/run does)")
	}
	n := mutationSeeds
	if v, err := strconv.Atoi(os.Getenv("GROUPSIM_MUTATION_SEEDS")); err == nil && v > 0 {
		n = v
	}
	baseRes := runSeeds(1, n, Params{})
	base := 0
	for _, r := range baseRes {
		if !r.OK {
			base++
		}
	}
	t.Logf("baseline: %d of %d seeds fail", base, n)
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			bad, only, first := 0, 0, uint64(0)
			for i, r := range runSeeds(1, n, Params{Mutations: mu.m}) {
				if r.OK {
					continue
				}
				bad++
				if baseRes[i].OK {
					only++
					if first == 0 {
						first = r.Seed
					}
				}
			}
			t.Logf("%s: %d of %d seeds fail (baseline %d), %d only with it; the first: seed %d", mu.name, bad, n, base, only, first)
			if only < mutationMargin {
				if detected[mu.name] {
					t.Errorf("%s not found: %d seeds fail only with it", mu.name, only)
				} else {
					t.Logf("%s is not told apart from the baseline in %d seeds", mu.name, n)
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
