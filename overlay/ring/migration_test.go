package ring_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/overlayd/overlayd/overlay/ring"
)

func TestNewMigrationErrors(t *testing.T) {
	r := mustNew(t, members(t, 1, 3))
	tests := []struct {
		name     string
		old, new *ring.Ring
		percent  int
		want     error
	}{
		{"nil old", nil, r, 50, ring.ErrNilRing},
		{"nil new", r, nil, 50, ring.ErrNilRing},
		{"negative", r, r, -1, ring.ErrBadPercent},
		{"over 100", r, r, 101, ring.ErrBadPercent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ring.NewMigration(tt.old, tt.new, tt.percent); !errors.Is(err, tt.want) {
				t.Errorf("NewMigration() error = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestMigrationRollout moves from a 160-point ring to a 16-point one (the
// Cloudflare v1 → v2 shrink) one percent at a time.
func TestMigrationRollout(t *testing.T) {
	ms := members(t, 31, 50)
	old := mustNew(t, ms)
	next := mustNew(t, ms, ring.WithPointsPerWeight(16))
	ks := keys(t, 32, 5000, 16)
	onNew := make([]bool, len(ks))
	type route struct {
		owner   string
		cluster []string
	}
	oldRoute, newRoute := make([]route, len(ks)), make([]route, len(ks))
	for i, k := range ks {
		oldRoute[i] = route{old.Lookup(k), old.LookupN(k, 3, nil)}
		newRoute[i] = route{next.Lookup(k), next.LookupN(k, 3, nil)}
	}
	dst := make([]string, 0, 3)
	for p := 0; p <= 100; p++ {
		m, err := ring.NewMigration(old, next, p)
		if err != nil {
			t.Fatal(err)
		}
		count, lowHalf, lowHalfOnNew := 0, 0, 0
		for i, k := range ks {
			uses := m.UsesNew(k)
			if onNew[i] && !uses {
				t.Fatalf("percent %d: key %d went back to the old ring", p, i)
			}
			onNew[i] = uses
			want := oldRoute[i]
			if uses {
				want = newRoute[i]
				count++
			}
			if got := m.Lookup(k); got != want.owner {
				t.Fatalf("percent %d: key %d: Lookup = %s, want %s", p, i, got, want.owner)
			}
			if dst = m.LookupN(k, 3, dst); !slices.Equal(dst, want.cluster) {
				t.Fatalf("percent %d: key %d: LookupN = %v, want %v", p, i, dst, want.cluster)
			}
			if ring.HashKey(k) < 1<<31 {
				lowHalf++
				if uses {
					lowHalfOnNew++
				}
			}
		}
		switch p {
		case 0, 100:
			if want := len(ks) * p / 100; count != want {
				t.Fatalf("percent %d: %d keys on the new ring, want exactly %d", p, count, want)
			}
		default:
			// Binomial standard deviation is at most 0.5/sqrt(5000) ≈ 0.7%
			// overall and 1% within the half; 4% is 4σ or more.
			if got := float64(count) / float64(len(ks)); math.Abs(got-float64(p)/100) > 0.04 {
				t.Errorf("percent %d: %.3f of keys on the new ring", p, got)
			}
			// The choice must not depend on the ring position, or whole arcs
			// (whole owners' caches) would move at once.
			if got := float64(lowHalfOnNew) / float64(lowHalf); math.Abs(got-float64(p)/100) > 0.04 {
				t.Errorf("percent %d: %.3f of keys in the lower half of the ring moved", p, got)
			}
		}
	}
	t.Run("lowering moves keys back", func(t *testing.T) {
		for _, pair := range [][2]int{{70, 30}, {100, 0}, {51, 50}} {
			hi, _ := ring.NewMigration(old, next, pair[0])
			lo, _ := ring.NewMigration(old, next, pair[1])
			for i, k := range ks {
				if lo.UsesNew(k) && !hi.UsesNew(k) {
					t.Fatalf("%d→%d: key %d moved to the new ring when lowering", pair[0], pair[1], i)
				}
			}
		}
	})
	t.Run("accessors", func(t *testing.T) {
		m, _ := ring.NewMigration(old, next, 42)
		if m.Old() != old || m.New() != next || m.Percent() != 42 {
			t.Error(fmt.Sprint("accessors = ", m.Old() == old, m.New() == next, m.Percent()))
		}
	})
}
