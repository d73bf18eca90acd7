package ring

import (
	"cmp"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func internalMembers(tb testing.TB, seed uint64, n int) []Member {
	tb.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("12D3KooW%016x%016x", rng.Uint64(), rng.Uint64()), Weight: 1 + rng.IntN(3)}
	}
	return ms
}

func TestRadixSortStable(t *testing.T) {
	tests := []struct {
		name string
		n    int
		mask uint32 // few distinct hashes force many ties
	}{
		{"empty", 0, ^uint32(0)},
		{"one", 1, ^uint32(0)},
		{"distinct", 5000, ^uint32(0)},
		{"ties", 5000, 0xf000000f},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			type pt struct {
				h uint32
				o uint16
			}
			want := make([]pt, tt.n)
			hs, os := make([]uint32, tt.n), make([]uint16, tt.n)
			for i := range want {
				want[i] = pt{rng.Uint32() & tt.mask, uint16(i)}
				hs[i], os[i] = want[i].h, want[i].o
			}
			slices.SortStableFunc(want, func(a, b pt) int { return cmp.Compare(a.h, b.h) })
			radixSort(hs, os)
			for i := range want {
				if hs[i] != want[i].h || os[i] != want[i].o {
					t.Fatalf("position %d: (%#x, %d), want (%#x, %d)", i, hs[i], os[i], want[i].h, want[i].o)
				}
			}
		})
	}
}

// TestRingInvariants checks a ring big enough to have real 32-bit
// collisions: points sorted, ties in member ID order, index correct.
func TestRingInvariants(t *testing.T) {
	r, err := New(internalMembers(t, 1, 2048))
	if err != nil {
		t.Fatal(err)
	}
	collisions := 0
	for i := 1; i < len(r.hashes); i++ {
		switch {
		case r.hashes[i] < r.hashes[i-1]:
			t.Fatalf("hashes[%d] = %#x < hashes[%d] = %#x", i, r.hashes[i], i-1, r.hashes[i-1])
		case r.hashes[i] == r.hashes[i-1]:
			collisions++
			if a, b := r.members[r.owners[i-1]].ID, r.members[r.owners[i]].ID; a > b {
				t.Errorf("collision at %#x: %s ordered before %s", r.hashes[i], a, b)
			}
		}
	}
	if collisions == 0 || r.Collisions() != collisions {
		n := float64(r.Points())
		t.Errorf("Collisions() = %d, counted %d; want equal and > 0 (n²/2³³ = %.0f expected)", r.Collisions(), collisions, n*n/(1<<33))
	}
	for b := range len(r.index) - 1 {
		p := int(r.index[b])
		if p < len(r.hashes) && uint64(r.hashes[p])>>r.shift < uint64(b) || p > 0 && uint64(r.hashes[p-1])>>r.shift >= uint64(b) {
			t.Fatalf("index[%d] = %d is not the first point of bucket %d", b, p, b)
		}
	}
	if last := r.index[len(r.index)-1]; int(last) != len(r.hashes) {
		t.Errorf("last index entry = %d, want %d", last, len(r.hashes))
	}
}

// TestBytesPerPoint checks the storage layout: 6 bytes per point plus a
// lookup table of at most 1.5 bytes per point and the search padding, 8 in
// all. Tiny rings pay more for the padding and the table's extra entry, so
// the bound starts at 1000 points.
func TestBytesPerPoint(t *testing.T) {
	tests := []struct {
		members, ppw int
	}{
		{1, 1000}, {7, 160}, {100, 160}, {257, 100}, {2048, 160}, {4096, 40},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%dx%d", tt.members, tt.ppw), func(t *testing.T) {
			ms := internalMembers(t, 2, tt.members)
			for i := range ms {
				ms[i].Weight = 1
			}
			r, err := New(ms, WithPointsPerWeight(tt.ppw))
			if err != nil {
				t.Fatal(err)
			}
			per := float64(r.sizeBytes()) / float64(r.Points())
			t.Logf("%d points, %.2f bytes/point, %d buckets, search steps %d", r.Points(), per, len(r.index)-1, bits.Len32(r.half))
			if per > 8 {
				t.Errorf("%.2f bytes per point, want <= 8", per)
			}
		})
	}
}
