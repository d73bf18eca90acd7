package ring_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/overlayd/overlayd/overlay/ring"
)

// TestBalance checks the spread that motivates 160 points per weight: with
// one point each, 100 members' shares vary by about 100% (the gaps between
// uniform points are exponential); with 160 by about 8% (Cloudflare's
// measurement for pingora-ketama, and 1/sqrt(160) from the same argument).
func TestBalance(t *testing.T) {
	cv := map[int]float64{}
	for _, ppw := range []int{1, 160} {
		t.Run(fmt.Sprintf("points=%d", ppw), func(t *testing.T) {
			for seed := range uint64(5) {
				s := mustNew(t, members(t, 100+seed, 100), ring.WithPointsPerWeight(ppw)).Stats()
				cv[ppw] += s.CV / 5
			}
			t.Logf("mean CV over 5 member sets: %.3f", cv[ppw])
		})
	}
	if cv[160] < 0.04 || cv[160] > 0.12 {
		t.Errorf("CV with 160 points per weight = %.3f, want within [0.04, 0.12]", cv[160])
	}
	if cv[1] < 5*cv[160] {
		t.Errorf("CV with 1 point = %.3f, want far above (5×) CV with 160 = %.3f", cv[1], cv[160])
	}

	t.Run("weight 2 gets twice the share", func(t *testing.T) {
		// One trial's ratio has a ~6% standard deviation (CV of a member
		// with 320 points); over 50 trials the mean's is under 2%, so a
		// 5% tolerance is not flaky and weight being ignored (ratio 1)
		// or counted twice (ratio 4) fails.
		const trials = 50
		var sum float64
		for seed := range uint64(trials) {
			ms := members(t, 1000+seed, 100)
			ms[0].Weight = 2
			heavy := ms[0].ID
			s := mustNew(t, ms).Stats()
			var heavyShare, others float64
			for _, m := range s.Shares {
				if m.ID == heavy {
					heavyShare = m.Share
				} else {
					others += m.Share / 99
				}
			}
			sum += heavyShare / others
		}
		if mean := sum / trials; math.Abs(mean-2) > 0.1 {
			t.Errorf("weight-2 member's share over a weight-1 member's, mean of %d trials = %.3f, want 2 ± 0.1", trials, mean)
		}
	})
}

// TestMinimalDisruption checks the point of consistent hashing: a member
// joining takes keys only for itself, one leaving gives up only its own.
func TestMinimalDisruption(t *testing.T) {
	const n, numKeys = 100, 1_000_000
	ms := members(t, 21, n+1)
	base := mustNew(t, ms[:n])
	grown := mustNew(t, ms)
	newcomer := ms[n].ID

	// forKeys calls fn with numKeys random 16-byte keys, reusing a buffer.
	forKeys := func(tb testing.TB, seed uint64, fn func(k []byte)) {
		tb.Helper()
		rng := newRand(seed)
		k := make([]byte, 16)
		for range numKeys {
			a, b := rng.Uint64(), rng.Uint64()
			for j := range 8 {
				k[j], k[8+j] = byte(a>>(8*j)), byte(b>>(8*j))
			}
			fn(k)
		}
	}
	shareOf := func(r *ring.Ring, id string) float64 {
		for _, s := range r.Stats().Shares {
			if s.ID == id {
				return s.Share
			}
		}
		t.Fatalf("%s not in ring", id)
		return 0
	}
	// checkMoved compares the fraction of keys moved with the share of the
	// member that came or went (exact, from Stats) and with the ideal 1/(n+1).
	// Sampling 10⁶ keys gives a standard deviation of sqrt(p(1-p)/10⁶) ≈ 10⁻⁴
	// around the share, so 6×10⁻⁴ is 6σ. The share itself deviates from
	// 1/(n+1) by about 8% (CV at 160 points); 30% is almost 4σ.
	checkMoved := func(t *testing.T, moved int, share float64) {
		t.Helper()
		frac := float64(moved) / numKeys
		t.Logf("moved %.5f of keys; member's share %.5f; 1/(n+1) = %.5f", frac, share, 1.0/(n+1))
		if math.Abs(frac-share) > 6e-4 {
			t.Errorf("moved fraction %.5f, want the member's share %.5f ± 0.0006", frac, share)
		}
		if ideal := 1.0 / (n + 1); math.Abs(frac-ideal) > 0.3*ideal {
			t.Errorf("moved fraction %.5f, want 1/(n+1) = %.5f ± 30%%", frac, ideal)
		}
	}

	t.Run("add", func(t *testing.T) {
		moved := 0
		forKeys(t, 22, func(k []byte) {
			if before, after := base.Lookup(k), grown.Lookup(k); before != after {
				moved++
				if after != newcomer {
					t.Fatalf("key %x moved %s → %s, not to the new member %s", k, before, after, newcomer)
				}
			}
		})
		checkMoved(t, moved, shareOf(grown, newcomer))
	})
	t.Run("remove", func(t *testing.T) {
		gone := ms[37].ID
		shrunk := mustNew(t, append(append([]ring.Member{}, ms[:37]...), ms[38:n]...))
		moved := 0
		forKeys(t, 23, func(k []byte) {
			before, after := base.Lookup(k), shrunk.Lookup(k)
			switch {
			case before == gone:
				moved++
			case before != after:
				t.Fatalf("key %x moved %s → %s though only %s left", k, before, after, gone)
			}
		})
		checkMoved(t, moved, shareOf(base, gone))
	})
}
