package groupsim

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

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
// Each is labelled with what its trace showed. None of 1..200 is left;
// of 1..3,000, three fail (1346, 1926, 2020; docs/BENCHMARKS.md has the
// command and what their traces showed).
//
// TestSeeds skips them (logged) and fails on any other failing seed, and
// on a seed of this list that passes (remove it: the list stays true).
var knownFailing = map[uint64]string{}

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
	{"NoResumeCatchUp", group.Mutations{NoResumeCatchUp: true}},
	{"NoKeepGathered", group.Mutations{NoKeepGathered: true}},
	{"NoReplayFromSync", group.Mutations{NoReplayFromSync: true}},
	{"NoJoinStart", group.Mutations{NoJoinStart: true}},
	{"NoReplicaFill", group.Mutations{NoReplicaFill: true}},
	{"NoSentResume", group.Mutations{NoSentResume: true}},
	{"NoSyncAnswersOnly", group.Mutations{NoSyncAnswersOnly: true}},
	{"NoFollowedPastReplay", group.Mutations{NoFollowedPastReplay: true}},
	{"NoToldHoldBack", group.Mutations{NoToldHoldBack: true}},
	{"NoFillResolved", group.Mutations{NoFillResolved: true}},
	{"NoHeldResend", group.Mutations{NoHeldResend: true}},
	{"NoPastRings", group.Mutations{NoPastRings: true}},
	{"NoRetakeOnTimeout", group.Mutations{NoRetakeOnTimeout: true}},
	{"NoFillAfterSync", group.Mutations{NoFillAfterSync: true}},
}

// catches are, for each mutation, seeds that fail with it and pass with
// every fix (found by GROUPSIM_MUTATION_SEEDS=1000 go test -run
// TestMutations -v, or for the ones marked, searched seed by seed to
// 3,000, after the core of 2026-12-05 evening or of 2026-12-06 changed
// every run's course); CI runs only these, and asserts at least one still
// fails. A change to the core changes the runs: measure again and update
// them. A mutation with no entry is one no seed measured catches; its unit
// test guards it.
var catches = map[string][]uint64{
	"NoSettledWait":     {38, 74, 75, 156, 160}, // searched, 2026-12-06 evening
	"NoToldHomes":       {142, 150, 419},        // searched to 3,000
	"NoRingChangedDrop": {523, 524, 907},        // searched, 2026-12-06
	"NoPosHandoff":      {3, 13, 37, 42, 63},
	"NoSyncMerge":       {521, 574, 972}, // searched, 2026-12-06 evening
	"NoMemberResumePos": {559},
	"NoSyncEndorse":     {169, 495, 509, 561, 787},
	"NoRecordReplay":    {161, 311, 478, 547, 639},
	"NoSyncAppendRetry": {337, 737},         // searched, 2026-12-06 evening
	"NoReplicaFill":     {1238, 1532, 1926}, // searched to 3,000
	// The seeds that failed before the fix (2026-12-06).
	"NoRetakeOnTimeout": {10660},
	"NoFillAfterSync":   {413},
	// Since the links' refusal (2026-12-06 evening) no seed of 1..3,000,
	// nor of 1..900 with partitions, catches NoFollowedHome, NoSentResume
	// or NoToldHoldBack, nor NoHeldResend (1..2,000 with reconnect-loss):
	// TestFollowedHomesFramesAreTaken, overlay/member's
	// TestSentJoinResumesFromTheLogsStart, TestToldHomesFrameThatSkipsIsHeldBack
	// and TestHeldResumeAskedAgain guard them.
}

// mutationSeeds, when $GROUPSIM_MUTATION_SEEDS is set, is how many seeds
// TestMutations runs with each mutation and without, comparing seed by
// seed (a mutation changes a run's course, and a seed that fails with
// every fix may pass with it); it logs the seeds that fail only with the
// mutation.
func mutationSeeds() int {
	n, err := strconv.Atoi(os.Getenv("GROUPSIM_MUTATION_SEEDS"))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// TestMutations switches off each past fix in turn: on the seeds of
// catches (each must still fail at one of them at least), or over
// $GROUPSIM_MUTATION_SEEDS seeds, measured against every fix.
func TestMutations(t *testing.T) {
	if testing.Short() || raceEnabled {
		// Under -race nine times slower, which the core (one goroutine)
		// does not need. .ci/run runs it without.
		t.Skip("long: run without -short and -race (.ci/run does)")
	}
	n := mutationSeeds()
	var baseRes []Result
	if n > 0 {
		baseRes = runSeeds(1, n, Params{})
		base := 0
		for _, r := range baseRes {
			if !r.OK {
				base++
			}
		}
		t.Logf("baseline: %d of %d seeds fail", base, n)
	}
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			if n == 0 {
				seeds := catches[mu.name]
				if _, ok := partitionCatches[mu.name]; ok && len(seeds) == 0 {
					t.Skipf("%s is caught with partitions on (TestPartitionFixes)", mu.name)
				}
				if len(seeds) == 0 {
					t.Skipf("no seed measured catches %s (BENCHMARKS.md, Mutations); its tests guard it", mu.name)
				}
				for _, seed := range seeds {
					if r := Run(seed, Params{Mutations: mu.m}); !r.OK {
						t.Logf("%s: seed %d fails with it", mu.name, seed)
						return
					}
				}
				t.Errorf("%s: none of seeds %v fails with it any more (measure again: GROUPSIM_MUTATION_SEEDS=1000)", mu.name, seeds)
				return
			}
			bad := 0
			var only []uint64
			for i, r := range runSeeds(1, n, Params{Mutations: mu.m}) {
				if r.OK {
					continue
				}
				bad++
				if baseRes[i].OK {
					only = append(only, r.Seed)
				}
			}
			t.Logf("%s: %d of %d seeds fail, %d only with it; the first: %v", mu.name, bad, n, len(only), only[:min(5, len(only))])
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

// BenchmarkSeedsLarge runs seeds at the size of a real cluster's corner:
// 30 supernodes, 1,000 members in 30 groups, 30 publishers, 10 simulated
// minutes of faults and traffic (and the default 8 s quiet). Skipped under
// -short (CI's one pass over every benchmark).
func BenchmarkSeedsLarge(b *testing.B) {
	if testing.Short() {
		b.Skip("minutes per seed: run without -short")
	}
	p := Params{Supernodes: 30, Groups: 30, Members: 1000, Publishers: 30, Span: 10 * time.Minute}
	seed := uint64(0)
	failed := 0
	for b.Loop() {
		seed++
		if r := Run(seed, p); !r.OK {
			failed++
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Minutes(), "seeds/min")
	b.ReportMetric(float64(failed), "failed")
}

// partitionCatches are seeds that, with partitions on (rate 0.3), pass
// with every fix and fail with one switched off: the fixes the partitions
// found, which runs without partitions do not need, and fixes no seed
// without partitions catches any more.
var partitionCatches = map[string]struct {
	seed uint64
	m    group.Mutations
}{
	"NoFillResolved": {127, group.Mutations{NoFillResolved: true}}, // 2026-12-06
	// Found by partitions only after the core of 2026-12-05 evening
	// (none of seeds 1..3,000 without them catches these two).
	"NoSyncAnswersOnly": {613, group.Mutations{NoSyncAnswersOnly: true}}, // 2026-12-06 evening
	"NoHoldBack":        {3, group.Mutations{NoHoldBack: true}},
	// Caught by no seed of 1..1,000 without partitions since the
	// replica's fill (2026-12-05); the first seed with them, searched
	// again after the core of 2026-12-06 (none of 1..900 catches
	// NoReplicaHomeCheck, NoReplayDoneFromAsked or NoReplayFromSync any
	// more (NoReplayDoneFromAsked: none of 1..10,000 without partitions
	// either), nor any seed searched NoResumeCatchUp, NoKeepGathered or
	// NoFollowedPastReplay: their tests guard them, in package group or,
	// for the first two, supernode's TestRecordMadeAwayIsTakenOver and
	// TestReplayDoneFromTheHomeAsked, which fail with them).
	"NoAwayDrop":             {194, group.Mutations{NoAwayDrop: true}}, // 2026-12-06 evening
	"NoJoinStart":            {82, group.Mutations{NoJoinStart: true}},
	"NoReleaseAfterMajority": {59, group.Mutations{NoReleaseAfterMajority: true}},
	"NoHeldCheck":            {277, group.Mutations{NoHeldCheck: true}},
	"NoResumeWithJoin":       {82, group.Mutations{NoResumeWithJoin: true}},
	"NoRenumberLogged":       {59, group.Mutations{NoRenumberLogged: true}},
	"NoResumedReset":         {135, group.Mutations{NoResumedReset: true}},
	// The sync's past rings (2026-12-06): no seed of 1..3,000 without
	// partitions catches it since the retake on a replication timeout.
	"NoPastRings": {26, group.Mutations{NoPastRings: true}},
}

func TestPartitionFixes(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("long: run without -short and -race (.ci/run does)")
	}
	p := Params{Faults: maps.Clone(DefaultParams().Faults)}
	p.Faults[FaultPartition] = 0.3
	for _, name := range slices.Sorted(maps.Keys(partitionCatches)) {
		c := partitionCatches[name]
		t.Run(name, func(t *testing.T) {
			if r := Run(c.seed, p); !r.OK || r.Faults[FaultPartition] == 0 {
				t.Fatalf("seed %d with partitions: ok %v, %d partitions; want a pass with one at least:\n%s", c.seed, r.OK, r.Faults[FaultPartition], r.Report())
			}
			pm := p
			pm.Mutations = c.m
			if r := Run(c.seed, pm); r.OK {
				t.Fatalf("seed %d with partitions passes with %s", c.seed, name)
			}
		})
	}
}
