package dirdriver

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Supernodes started together spread their announcements over the
// interval from the second one on, and no gap exceeds the interval.
func TestAnnounceScheduleSpreadsSupernodesStartedTogether(t *testing.T) {
	const (
		supernodes = 100
		rounds     = 20
		iv         = 5 * time.Second
	)
	for seed := range uint64(5) {
		// times[r] are the supernodes' announcement times in round r,
		// all starting at 0 (the immediate first announcement).
		times := make([][]time.Duration, rounds)
		for i := range supernodes {
			s := newAnnounceSchedule(iv, rand.New(rand.NewPCG(seed, uint64(i))))
			at := time.Duration(0)
			times[0] = append(times[0], at)
			for r := 1; r < rounds; r++ {
				gap := s.next()
				if gap <= 0 || gap > iv {
					t.Fatalf("seed %d, supernode %d, round %d: gap %v, want within (0, %v]", seed, i, r, gap, iv)
				}
				at += gap
				times[r] = append(times[r], at)
			}
		}
		// From the second round on, the busiest tenth of an interval
		// holds a few announcements, not all of them: a uniform spread
		// puts 10 in each tenth.
		for r := 1; r < rounds; r++ {
			if peak := busiestWindow(times[r], iv/10); peak > supernodes/4 {
				t.Errorf("seed %d, round %d: %d of %d announcements within %v of each other", seed, r, peak, supernodes, iv/10)
			}
		}
	}
}

// busiestWindow returns the largest number of times within any window of
// width w.
func busiestWindow(ts []time.Duration, w time.Duration) int {
	ts = slices.Clone(ts)
	slices.Sort(ts)
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi]-ts[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
