package cluster

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

func newID(t testing.TB, seed uint64) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(chacha(seed))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// chacha is a deterministic byte stream for key generation.
func chacha(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

func TestWeight(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity uint32
		want     int
	}{
		{"tiny capacity still gets a point", 1, 1},
		{"rounds to nearest unit", 149, 1},
		{"rounds half up", 150, 2},
		{"one unit per 100 peers", 1000, 10},
		{"capped", 4_000_000_000, MaxWeight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Weight(tc.capacity); got != tc.want {
				t.Fatalf("Weight(%d) = %d, want %d", tc.capacity, got, tc.want)
			}
		})
	}
}

func TestMembersLeavesMegasOffTheRing(t *testing.T) {
	reg, mega := newID(t, 1), newID(t, 2)
	snap := &directory.Snapshot{Entries: []directory.Entry{
		{Announcement: protocol.Announcement{ID: reg, Role: protocol.RoleSupernode, Capacity: 300}, LastSeen: time.Unix(1, 0)},
		{Announcement: protocol.Announcement{ID: mega, Role: protocol.RoleMega, Capacity: 5000}},
	}}
	ms := Members(snap, time.Unix(1, 0), Policy{})
	if len(ms) != 1 || ms[0].ID != reg.String() || ms[0].Weight != 3 {
		t.Fatalf("Members = %+v, want only the regular supernode with weight 3", ms)
	}
}

func TestHomeIsTheFirstSizeDistinctMembers(t *testing.T) {
	var ms []ring.Member
	for i := range 10 {
		ms = append(ms, ring.Member{ID: newID(t, uint64(i+10)).String(), Weight: 1 + i%3})
	}
	r, err := ring.New(ms)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(newID(t, 99))
	home := Home(r, key)
	want := r.LookupN(key, Size, nil)
	if len(home) != Size {
		t.Fatalf("home has %d members, want %d", len(home), Size)
	}
	for i := range home {
		if home[i].String() != want[i] {
			t.Fatalf("home[%d] = %s, want ring order %v", i, home[i], want)
		}
	}
	// Without its first member, the home is the next Size members in
	// the same order.
	without := HomeWithout(r, key, home[0])
	next := r.LookupN(key, Size+1, nil)[1:]
	for i := range without {
		if without[i].String() != next[i] {
			t.Fatalf("HomeWithout[%d] = %s, want %v", i, without[i], next)
		}
	}
	if slices.Contains(without, home[0]) {
		t.Fatal("HomeWithout kept the excluded member")
	}
	if Home(nil, key) != nil {
		t.Fatal("a nil ring has a home cluster")
	}
}

func TestHomeOfASmallRing(t *testing.T) {
	r, err := ring.New([]ring.Member{{ID: newID(t, 5).String(), Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := Home(r, []byte("k")); len(got) != 1 {
		t.Fatalf("home on a one-member ring has %d members", len(got))
	}
}

func TestSampleIsWeightedWithoutReplacement(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	spare := []int{0, 100, 300, -5, 600}
	counts := make([]int, len(spare))
	for range 20_000 {
		got := Sample(spare, 2, rng)
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("Sample = %v, want 2 distinct indices", got)
		}
		for _, i := range got {
			if spare[i] <= 0 {
				t.Fatalf("chose index %d with spare %d", i, spare[i])
			}
		}
		counts[got[0]]++
	}
	// First draws follow the weights 100:300:600 within a few percent.
	for i, want := range map[int]float64{1: 0.1, 2: 0.3, 4: 0.6} {
		if got := float64(counts[i]) / 20_000; got < want-0.02 || got > want+0.02 {
			t.Errorf("index %d drawn first %.3f of the time, want %.2f", i, got, want)
		}
	}
	if spare[1] != 100 || spare[3] != -5 {
		t.Fatal("Sample modified its input")
	}
	if got := Sample(spare, 10, rng); len(got) != 3 {
		t.Fatalf("asked for 10 of 3 candidates with room, got %v", got)
	}
	if Sample([]int{0, 0}, 2, rng) != nil || Sample(spare, 0, rng) != nil {
		t.Fatal("Sample chose from nothing")
	}
}

func TestGroupHomeIsTheRingOwner(t *testing.T) {
	ms := []ring.Member{{ID: newID(t, 1).String(), Weight: 1}, {ID: newID(t, 2).String(), Weight: 1}}
	r, err := ring.New(ms)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := GroupHome(r, "team")
	if !ok || h.String() != r.Lookup([]byte("team")) {
		t.Fatalf("GroupHome = %s, %v; want the ring owner %s", h, ok, r.Lookup([]byte("team")))
	}
	if _, ok := GroupHome(nil, "team"); ok {
		t.Fatal("a group has a home on no ring")
	}
}
