package vtime

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQueueOrder pushes events at random times, many of them equal, and
// checks they come out by time and, at one time, in the order pushed.
func TestQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type ev struct {
		at int64
		n  int
	}
	var q Queue[int]
	var want []ev
	for n := range 5000 {
		at := rng.Int64N(50)
		q.Push(at, n)
		want = append(want, ev{at, n})
		if n%7 == 0 { // interleave pops with pushes
			at, got := q.Pop()
			i := slices.IndexFunc(want, func(e ev) bool { return e.n == got })
			if i < 0 {
				t.Fatalf("popped %d twice", got)
			}
			for _, e := range want {
				if e.at < at || (e.at == at && e.n < got) {
					t.Fatalf("popped (%d, %d) before (%d, %d)", at, got, e.at, e.n)
				}
			}
			want = slices.Delete(want, i, i+1)
		}
	}
	slices.SortStableFunc(want, func(a, b ev) int { return int(a.at - b.at) })
	if q.Len() != len(want) {
		t.Fatalf("Len %d, want %d", q.Len(), len(want))
	}
	for _, w := range want {
		at, n := q.Pop()
		if at != w.at || n != w.n {
			t.Fatalf("popped (%d, %d), want (%d, %d)", at, n, w.at, w.n)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("Len %d after draining", q.Len())
	}
}
