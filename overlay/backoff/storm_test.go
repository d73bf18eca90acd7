package backoff

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// window is the resolution at which a supernode feels load.
const window = 100 * time.Millisecond

// histogram counts arrivals per 100 ms window.
type histogram map[int64]int

func bucket(ts []time.Duration) histogram {
	h := histogram{}
	for _, t := range ts {
		h[int64(t/window)]++
	}
	return h
}

func (h histogram) span() (first, last int64) {
	first, last = 1<<62, -1
	for w := range h {
		first, last = min(first, w), max(last, w)
	}
	return first, last
}

func (h histogram) total() int {
	n := 0
	for _, c := range h {
		n += c
	}
	return n
}

// mean is the mean count per window over the occupied span, first to last
// occupied window inclusive (empty windows inside the span count as 0).
func (h histogram) mean() float64 {
	first, last := h.span()
	if last < first {
		return 0
	}
	return float64(h.total()) / float64(last-first+1)
}

func (h histogram) peak() int {
	p := 0
	for _, c := range h {
		p = max(p, c)
	}
	return p
}

func (h histogram) String() string {
	first, last := h.span()
	s := ""
	for w := first; w <= last && w < first+60; w++ {
		s += fmt.Sprintf("%d ", h[w])
	}
	if last >= first+60 {
		s += "..."
	}
	return s
}

// strategies returns one independently seeded strategy per client.
type newStrategy func(tb testing.TB, client int) Strategy

func backoffClients(p Policy) newStrategy {
	return func(tb testing.TB, client int) Strategy {
		return mustNew(tb, p, newRand(tb, uint64(client)+1000))
	}
}

func fixedClients(d time.Duration) newStrategy {
	return func(testing.TB, int) Strategy { return Fixed(d) }
}

// TestSpreadOneRefusal refuses N clients at t=0 and checks where their single
// retry lands: Backoff spreads them evenly, Fixed sends them all in one
// window.
func TestSpreadOneRefusal(t *testing.T) {
	const n = 1000
	p := Policy{Base: 500 * time.Millisecond, Max: 30 * time.Second, MaxRetryAfter: time.Minute}
	tests := []struct {
		name       string
		strategy   newStrategy
		retryAfter time.Duration
		priorFails int  // refusals each client already had (attempt number)
		spread     bool // want peak <= 3x mean; else want one window
	}{
		{name: "backoff/no hint", strategy: backoffClients(p), spread: true},
		{name: "backoff/hint 1s", strategy: backoffClients(p), retryAfter: time.Second, spread: true},
		{name: "backoff/hint 5s", strategy: backoffClients(p), retryAfter: 5 * time.Second, spread: true},
		{name: "backoff/no hint/attempt 4", strategy: backoffClients(p), priorFails: 4, spread: true},
		{name: "backoff/hint 1s/attempt 4", strategy: backoffClients(p), retryAfter: time.Second, priorFails: 4, spread: true},
		{name: "fixed/no hint", strategy: fixedClients(time.Second)},
		{name: "fixed/hint 5s", strategy: fixedClients(time.Second), retryAfter: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retries := make([]time.Duration, n)
			for i := range retries {
				s := tt.strategy(t, i)
				for range tt.priorFails {
					s.Next(0)
				}
				retries[i] = s.Next(tt.retryAfter) // refused at t=0
				if retries[i] < tt.retryAfter {
					t.Fatalf("client %d retries at %v, before retry-after %v", i, retries[i], tt.retryAfter)
				}
			}
			h := bucket(retries)
			peak, mean := h.peak(), h.mean()
			t.Logf("peak %d, mean %.1f per %v window over %d windows", peak, mean, window, len(h))
			if tt.spread {
				if float64(peak) > 3*mean {
					t.Fatalf("peak %d > 3 × mean %.1f: retries bunched: %v", peak, mean, h)
				}
				return
			}
			if peak != n {
				t.Fatalf("naive strategy spread retries (peak %d of %d): %v", peak, n, h)
			}
		})
	}
}

// event is one client's attempt at time at.
type event struct {
	at     time.Duration
	client int
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].client < e[j].client
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// stormResult summarises a simulated reconnect storm.
type stormResult struct {
	all      histogram       // every attempt after t=0, per window
	rounds   []histogram     // rounds[k]: the k-th retry of each client still refused
	admitted []time.Duration // admission times, in order
	attempts int             // attempts in total, including t=0
}

// admittedBy returns the time by which the fraction q of clients was in.
func (r stormResult) admittedBy(q float64) time.Duration {
	return r.admitted[int(q*float64(len(r.admitted)-1))]
}

// simulateStorm runs n clients that all attempt at t=0 against a supernode
// that admits at most admitPerWindow attempts per window and refuses the
// rest with retryAfter. Refused clients retry after their strategy's delay;
// a client stops once admitted. There is no clock: time is the event time.
func simulateStorm(tb testing.TB, n, admitPerWindow int, retryAfter time.Duration, newS newStrategy) stormResult {
	tb.Helper()
	strategies := make([]Strategy, n)
	tries := make([]int, n)
	q := make(events, 0, n)
	for i := range n {
		strategies[i] = newS(tb, i)
		q = append(q, event{at: 0, client: i})
	}
	heap.Init(&q)
	admitted := map[int64]int{}
	res := stormResult{all: histogram{}}
	for q.Len() > 0 {
		e := heap.Pop(&q).(event)
		w := int64(e.at / window)
		res.attempts++
		if k := tries[e.client]; k > 0 {
			res.all[w]++
			for len(res.rounds) < k {
				res.rounds = append(res.rounds, histogram{})
			}
			res.rounds[k-1][w]++
		}
		tries[e.client]++
		if admitted[w] < admitPerWindow {
			admitted[w]++
			res.admitted = append(res.admitted, e.at)
			continue
		}
		if res.attempts > 100*n {
			tb.Fatalf("storm did not settle after %d attempts", res.attempts)
		}
		heap.Push(&q, event{at: e.at + strategies[e.client].Next(retryAfter), client: e.client})
	}
	return res
}

// TestStormWavesDoNotReform simulates repeated rounds: 1000 clients refused
// at t=0 by a supernode that admits 50 per 100 ms keep being refused until
// they get in. Round k is the k-th retry of every client still refused.
//
// With Backoff every round stays spread: over at least Base (5 windows),
// with no window above 4x the round's mean over its span, and no later round
// peaking above the first. (4x, not the 3x of TestSpreadOneRefusal: a round
// is a sum of uniform windows opened at different refusal times, so its
// shape is a trapezoid rather than flat.) 95% of clients get in within half
// the 18 s that Fixed needs, because the supernode's admissions are not
// wasted on idle windows between waves.
//
// With Fixed every round is a single window holding everyone still refused,
// 19 waves in all, and the supernode idles between them.
func TestStormWavesDoNotReform(t *testing.T) {
	const (
		n     = 1000
		admit = 50
		// Smaller rounds are too small for their shape to mean anything:
		// the span is checked from minRound clients, peak/mean from a mean
		// of minMean per window.
		minRound = 100
		minMean  = 10
	)
	p := Policy{Base: 500 * time.Millisecond, Max: 30 * time.Second, MaxRetryAfter: time.Minute}
	minSpan := int64(p.Base / window)
	tests := []struct {
		name       string
		strategy   newStrategy
		retryAfter time.Duration
		naive      bool
	}{
		{name: "backoff/no hint", strategy: backoffClients(p)},
		{name: "backoff/hint 500ms", strategy: backoffClients(p), retryAfter: 500 * time.Millisecond},
		{name: "backoff/hint 1s", strategy: backoffClients(p), retryAfter: time.Second},
		{name: "backoff/hint 3s", strategy: backoffClients(p), retryAfter: 3 * time.Second},
		{name: "fixed/hint 1s", strategy: fixedClients(500 * time.Millisecond), retryAfter: time.Second, naive: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := simulateStorm(t, n, admit, tt.retryAfter, tt.strategy)
			t.Logf("95%% admitted by %v, all by %v, after %d attempts in %d rounds; retry peak %d per window (supernode admits %d)",
				r.admittedBy(0.95), r.admittedBy(1), r.attempts, len(r.rounds), r.all.peak(), admit)
			t.Logf("retries per window: %v", r.all)

			if tt.naive {
				for k, h := range r.rounds {
					if first, last := h.span(); first != last || h.total() != n-(k+1)*admit {
						t.Fatalf("round %d: naive strategy did not send one wave of %d: %v", k+1, n-(k+1)*admit, h)
					}
				}
				if want := n/admit - 1; len(r.rounds) != want {
					t.Fatalf("naive strategy took %d rounds, want %d", len(r.rounds), want)
				}
				return
			}

			firstPeak := r.rounds[0].peak()
			for k, h := range r.rounds {
				size, peak, mean := h.total(), h.peak(), h.mean()
				first, last := h.span()
				t.Logf("round %d: %d clients over %d windows, peak %d, mean %.1f", k+1, size, last-first+1, peak, mean)
				if size >= minRound && last-first+1 < minSpan {
					t.Fatalf("round %d: %d clients squeezed into %d windows: %v", k+1, size, last-first+1, h)
				}
				if peak > firstPeak {
					t.Fatalf("round %d peaks at %d, above the first round's %d: a wave re-formed", k+1, peak, firstPeak)
				}
				if mean >= minMean && float64(peak) > 4*mean {
					t.Fatalf("round %d bunched: peak %d > 4 × mean %.1f: %v", k+1, peak, mean, h)
				}
			}
			if p95 := r.admittedBy(0.95); p95 >= 9*time.Second {
				t.Fatalf("95%% of backoff clients took %v to get in; Fixed takes 18s", p95)
			}
		})
	}
}

// TestSharedSeedResynchronises documents why each client needs its own
// seed: two clients with the same source draw identical delays.
func TestSharedSeedResynchronises(t *testing.T) {
	p := DefaultPolicy()
	a := mustNew(t, p, rand.New(rand.NewPCG(1, 2)))
	b := mustNew(t, p, rand.New(rand.NewPCG(1, 2)))
	for range 10 {
		if da, db := a.Next(time.Second), b.Next(time.Second); da != db {
			t.Fatalf("same seed, different delays %v and %v", da, db)
		}
	}
}

func BenchmarkNext(b *testing.B) {
	bo := mustNew(b, DefaultPolicy(), newRand(b, 0))
	b.ReportAllocs()
	for b.Loop() {
		if bo.Attempt() > 20 {
			bo.Reset()
		}
		bo.Next(time.Second)
	}
}
