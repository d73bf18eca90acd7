package ring_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/overlayd/overlayd/overlay/ring"
)

// TestHashKeyGolden pins the wire hash: XXH64 seed 0, low 32 bits. The
// full digests of "" and "abc" are the xxHash reference vectors
// 0xef46db3751d8e999 and 0x44bc2cf5ad770999.
func TestHashKeyGolden(t *testing.T) {
	tests := []struct {
		key  string
		want uint32
	}{
		{"", 0x51d8e999},
		{"a", 0xa98c6e5b},
		{"abc", 0xad770999},
		{"12D3KooWExample", 0x2d4c822d},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.key), func(t *testing.T) {
			if got := ring.HashKey([]byte(tt.key)); got != tt.want {
				t.Errorf("HashKey(%q) = %#x, want %#x", tt.key, got, tt.want)
			}
		})
	}
}

// TestRingGolden pins point derivation, ring order and Version: if it
// changes, nodes built from different code disagree on owners, and
// HashVersion must change with it.
func TestRingGolden(t *testing.T) {
	r := mustNew(t, []ring.Member{{ID: "carol", Weight: 1}, {ID: "alice", Weight: 2}, {ID: "bob", Weight: 1}},
		ring.WithPointsPerWeight(4))
	want := map[string]string{
		"": "carol", "a": "bob", "abc": "bob",
		"key-1": "alice", "key-2": "alice", "key-3": "bob", "key-4": "bob", "key-5": "alice",
	}
	got := map[string]string{}
	for k := range want {
		got[k] = r.Lookup([]byte(k))
	}
	if !maps.Equal(got, want) {
		t.Errorf("owners = %v, want %v", got, want)
	}
	if v, want := r.Version(), "5fc32b16b5f9f44adc3ebb3dc6335047"; v != want {
		t.Errorf("Version() = %s, want %s", v, want)
	}
}

func TestNewErrors(t *testing.T) {
	tooMany := make([]ring.Member, ring.MaxMembers+1)
	for i := range tooMany {
		tooMany[i] = ring.Member{ID: fmt.Sprint(i), Weight: 1}
	}
	tests := []struct {
		name    string
		members []ring.Member
		opts    []ring.Option
		want    error
		msg     string // a substring naming the bad value
	}{
		{name: "nil", members: nil, want: ring.ErrNoMembers, msg: "no members"},
		{name: "empty", members: []ring.Member{}, want: ring.ErrNoMembers, msg: "no members"},
		{name: "empty id", members: []ring.Member{{ID: "a", Weight: 1}, {ID: "", Weight: 1}},
			want: ring.ErrEmptyID, msg: "members[1]"},
		{name: "duplicate id", members: []ring.Member{{ID: "b", Weight: 1}, {ID: "a", Weight: 1}, {ID: "b", Weight: 3}},
			want: ring.ErrDuplicateID, msg: `members[0] and members[2] are both "b"`},
		{name: "zero weight", members: []ring.Member{{ID: "a", Weight: 0}},
			want: ring.ErrBadWeight, msg: `members[0] "a" has weight 0`},
		{name: "negative weight", members: []ring.Member{{ID: "a", Weight: 1}, {ID: "b", Weight: -5}},
			want: ring.ErrBadWeight, msg: `members[1] "b" has weight -5`},
		{name: "too many members", members: tooMany, want: ring.ErrTooManyMembers, msg: "65537 members"},
		{name: "member weight overflows", members: []ring.Member{{ID: "a", Weight: 1 << 62}},
			want: ring.ErrTooManyPoints, msg: `members[0] "a"`},
		{name: "total points", members: []ring.Member{{ID: "a", Weight: 1 << 25}, {ID: "b", Weight: 1 << 25}},
			opts: []ring.Option{ring.WithPointsPerWeight(2)}, want: ring.ErrTooManyPoints, msg: "members[:2]"},
		{name: "points per weight zero", members: []ring.Member{{ID: "a", Weight: 1}},
			opts: []ring.Option{ring.WithPointsPerWeight(0)}, want: ring.ErrBadPointsPerWeight, msg: "WithPointsPerWeight(0)"},
		{name: "points per weight negative", members: []ring.Member{{ID: "a", Weight: 1}},
			opts: []ring.Option{ring.WithPointsPerWeight(-1)}, want: ring.ErrBadPointsPerWeight, msg: "WithPointsPerWeight(-1)"},
		{name: "points per weight huge", members: []ring.Member{{ID: "a", Weight: 1}},
			opts: []ring.Option{ring.WithPointsPerWeight(ring.MaxPoints + 1)}, want: ring.ErrBadPointsPerWeight, msg: "WithPointsPerWeight(67108865)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ring.New(tt.members, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("New() = %v, %v; want error %v", r, err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "ring: new: ") || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("New() error %q: want prefix %q and %q in it", err, "ring: new: ", tt.msg)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	in := []ring.Member{{ID: "c", Weight: 3}, {ID: "a", Weight: 1}, {ID: "b", Weight: 2}}
	r := mustNew(t, in, ring.WithPointsPerWeight(10))
	want := []ring.Member{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 3}}
	got := r.Members()
	if !slices.Equal(got, want) {
		t.Errorf("Members() = %v, want %v", got, want)
	}
	got[0].ID = "mutated"
	if r.Members()[0].ID != "a" {
		t.Error("Members() returned the ring's own slice")
	}
	in[0].ID = "mutated"
	if r.Members()[2].ID != "c" {
		t.Error("New kept the caller's slice")
	}
	if r.Len() != 3 || r.Points() != 60 || r.PointsPerWeight() != 10 {
		t.Errorf("Len, Points, PointsPerWeight = %d, %d, %d; want 3, 60, 10", r.Len(), r.Points(), r.PointsPerWeight())
	}
	if d := mustNew(t, want); d.PointsPerWeight() != ring.DefaultPointsPerWeight || d.Points() != 6*160 {
		t.Errorf("default ring has %d points per weight, %d points; want 160, 960", d.PointsPerWeight(), d.Points())
	}
}

func TestLookupN(t *testing.T) {
	big := mustNew(t, members(t, 1, 40))
	tests := []struct {
		name    string
		r       *ring.Ring
		n, want int
	}{
		{name: "n=0", r: big, n: 0, want: 0},
		{name: "n<0", r: big, n: -3, want: 0},
		{name: "n=1", r: big, n: 1, want: 1},
		{name: "n=3", r: big, n: 3, want: 3},
		{name: "n=16", r: big, n: 16, want: 16},
		{name: "n=17 bitmap", r: big, n: 17, want: 17},
		{name: "n=Len", r: big, n: 40, want: 40},
		{name: "n>Len", r: big, n: 41, want: 40},
		{name: "single member", r: mustNew(t, members(t, 2, 1)), n: 3, want: 1},
		{name: "two members one point", r: mustNew(t, members(t, 3, 2), ring.WithPointsPerWeight(1)), n: 3, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			valid := ids(tt.r.Members())
			for i, k := range keys(t, 7, 200, 16) {
				got := tt.r.LookupN(k, tt.n, nil)
				if len(got) != tt.want {
					t.Fatalf("key %d: LookupN(n=%d) returned %d members, want %d", i, tt.n, len(got), tt.want)
				}
				seen := map[string]bool{}
				for _, id := range got {
					if !valid[id] || seen[id] {
						t.Fatalf("key %d: LookupN = %v: %q unknown or repeated", i, got, id)
					}
					seen[id] = true
				}
				if len(got) > 0 && got[0] != tt.r.Lookup(k) {
					t.Fatalf("key %d: LookupN[0] = %q, Lookup = %q", i, got[0], tt.r.Lookup(k))
				}
				// A shorter cluster is a prefix of a longer one.
				if tt.n > 1 {
					if short := tt.r.LookupN(k, tt.n-1, nil); !slices.Equal(short, got[:len(short)]) {
						t.Fatalf("key %d: LookupN(n-1) = %v is no prefix of %v", i, short, got)
					}
				}
			}
		})
	}
}

func TestLookupNoAlloc(t *testing.T) {
	r := mustNew(t, members(t, 1, 100))
	ks := keys(t, 2, 64, 16)
	dst := make([]string, 0, 16)
	tests := []struct {
		name string
		fn   func(k []byte)
	}{
		{"Lookup", func(k []byte) { _ = r.Lookup(k) }},
		{"LookupN/n=3 reused dst", func(k []byte) { dst = r.LookupN(k, 3, dst) }},
		{"LookupN/n=16 reused dst", func(k []byte) { dst = r.LookupN(k, 16, dst) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := 0
			if a := testing.AllocsPerRun(500, func() { tt.fn(ks[i%len(ks)]); i++ }); a != 0 {
				t.Errorf("%s allocates %.1f times per call, want 0", tt.name, a)
			}
		})
	}
}

// TestDeterminism builds the same set in several orders: every node must
// get the same ring whatever order its directory lists members in.
func TestDeterminism(t *testing.T) {
	ms := members(t, 11, 300)
	for i := range ms {
		ms[i].Weight = 1 + i%3
	}
	ref := mustNew(t, ms)
	ks := keys(t, 12, 5000, 16)
	rng := newRand(13)
	for trial := range 5 {
		t.Run(fmt.Sprintf("shuffle=%d", trial), func(t *testing.T) {
			shuffled := slices.Clone(ms)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			r := mustNew(t, shuffled)
			if r.Version() != ref.Version() {
				t.Errorf("Version = %s, want %s", r.Version(), ref.Version())
			}
			for i, k := range ks {
				if got, want := r.LookupN(k, 3, nil), ref.LookupN(k, 3, nil); !slices.Equal(got, want) {
					t.Fatalf("key %d: LookupN = %v, want %v", i, got, want)
				}
			}
		})
	}
	t.Run("version tracks the set", func(t *testing.T) {
		changed := slices.Clone(ms)
		changed[0].Weight++
		versions := map[string]string{
			ref.Version(): "reference",
		}
		for name, r := range map[string]*ring.Ring{
			"weight changed": mustNew(t, changed),
			"member removed": mustNew(t, ms[1:]),
			"points changed": mustNew(t, ms, ring.WithPointsPerWeight(161)),
		} {
			if prev, dup := versions[r.Version()]; dup {
				t.Errorf("%s has the same Version as %s", name, prev)
			}
			versions[r.Version()] = name
		}
	})
}

// Collision pair: point 0 of "peer-44061" and of "peer-62243" both hash to
// 0xac6387b1 (found by a birthday search over "peer-N"); the tie goes to
// the lower ID.
func TestCollisionTieBreak(t *testing.T) {
	const lo, hi = "peer-44061", "peer-62243"
	tests := []struct {
		name    string
		members []ring.Member
	}{
		{"low first", []ring.Member{{ID: lo, Weight: 1}, {ID: hi, Weight: 1}}},
		{"high first", []ring.Member{{ID: hi, Weight: 1}, {ID: lo, Weight: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.members, ring.WithPointsPerWeight(1))
			if r.Collisions() != 1 {
				t.Fatalf("Collisions() = %d, want 1", r.Collisions())
			}
			for i, k := range keys(t, 3, 100, 16) {
				if got := r.LookupN(k, 2, nil); !slices.Equal(got, []string{lo, hi}) {
					t.Fatalf("key %d: LookupN = %v, want [%s %s]", i, got, lo, hi)
				}
			}
			s := r.Stats()
			if s.Shares[0].Share != 1 || s.Shares[1].Share != 0 || s.Collisions != 1 {
				t.Errorf("Stats shares = %v, %v, collisions %d; want 1, 0, 1", s.Shares[0].Share, s.Shares[1].Share, s.Collisions)
			}
		})
	}
}

func TestStatsJSON(t *testing.T) {
	r := mustNew(t, []ring.Member{{ID: "a", Weight: 1}, {ID: "b", Weight: 3}}, ring.WithPointsPerWeight(50))
	b, err := json.Marshal(r.Stats())
	if err != nil {
		t.Fatal(err)
	}
	var got ring.Stats
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"hash_version":1`, `"version":"` + r.Version() + `"`, `"points":200`, `"cv":`, `"shares":[{"id":"a","weight":1,"points":50,`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("Stats JSON %s lacks %s", b, field)
		}
	}
	sum := 0.0
	for _, s := range got.Shares {
		sum += s.Share
	}
	if sum < 1-1e-12 || sum > 1+1e-12 {
		t.Errorf("shares sum to %v, want 1", sum)
	}
}
