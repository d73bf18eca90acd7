package client

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
)

// testIDs returns n distinct peer IDs from a fixed seed.
func testIDs(t testing.TB, n int) []peer.ID {
	t.Helper()
	var seed [32]byte
	src := rand.NewChaCha8(seed)
	out := make([]peer.ID, n)
	for i := range out {
		_, pub, err := crypto.GenerateEd25519Key(src)
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = peer.IDFromPublicKey(pub); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// entry is a directory entry for plan's input.
func entry(id peer.ID, role protocol.Role, capacity, load uint32) directory.Entry {
	return directory.Entry{Announcement: protocol.Announcement{ID: id, Role: role, Capacity: capacity, Load: load}}
}

// snapshot sorts es by ID, as the directory does.
func snapshot(es ...directory.Entry) *directory.Snapshot {
	slices.SortFunc(es, func(a, b directory.Entry) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return &directory.Snapshot{Entries: es}
}

func ids(ais []peer.AddrInfo) []peer.ID {
	out := make([]peer.ID, len(ais))
	for i, ai := range ais {
		out[i] = ai.ID
	}
	return out
}

func TestPlan(t *testing.T) {
	p := testIDs(t, 16)
	self := p[0]
	home := []peer.ID{p[1], p[2], p[3]}
	now := time.Unix(1000, 0)
	sn := protocol.RoleSupernode
	base := []directory.Entry{
		entry(p[1], sn, 100, 100), entry(p[2], sn, 100, 10), entry(p[3], sn, 100, 0),
		entry(p[4], sn, 100, 50), entry(p[5], sn, 100, 100), entry(p[6], protocol.RoleMega, 5000, 0),
	}
	for _, tc := range []struct {
		name      string
		home      []peer.ID
		last      peer.ID
		alts      []peer.AddrInfo
		entries   []directory.Entry
		notBefore map[peer.ID]time.Time
		want      []peer.ID // exact order, or nil to check only with check
		check     func(t *testing.T, got []peer.ID)
	}{
		{
			name: "home in ring order first, full members included, then spare, then megas",
			home: home, entries: base,
			// p[1] is full but still asked first: its answer may carry
			// alternatives, and load figures are up to an interval old.
			want: []peer.ID{p[1], p[2], p[3], p[4], p[6]},
		},
		{
			name: "supernodes that said BUSY are skipped until retry-after",
			home: home, entries: base,
			notBefore: map[peer.ID]time.Time{p[2]: now.Add(time.Second), p[4]: now.Add(time.Millisecond), p[1]: now},
			want:      []peer.ID{p[1], p[3], p[6]},
		},
		{
			name: "offered alternatives come right after home, before the directory's spare",
			home: home, entries: base,
			alts: []peer.AddrInfo{{ID: p[7]}, {ID: p[2]}, {ID: self}},
			want: []peer.ID{p[1], p[2], p[3], p[7], p[4], p[6]},
		},
		{
			name: "no duplicates and never self",
			home: []peer.ID{self, p[1], p[1]}, entries: append(slices.Clone(base), entry(self, sn, 100, 0)),
			alts: []peer.AddrInfo{{ID: p[1]}, {ID: self}},
			want: []peer.ID{p[1], p[2], p[3], p[4], p[6]},
		},
		{
			name: "home members missing from the directory are not asked",
			home: []peer.ID{p[9], p[3]}, entries: base,
			check: func(t *testing.T, got []peer.ID) {
				if slices.Contains(got, p[9]) || got[0] != p[3] {
					t.Fatalf("plan %v: want the live home member %s first and no %s", got, p[3], p[9])
				}
			},
		},
		{
			name: "at most maxPerPass, megas last even when spare fills the pass",
			home: home, entries: func() []directory.Entry {
				es := slices.Clone(base)
				for _, id := range p[7:15] {
					es = append(es, entry(id, sn, 100, 0))
				}
				return es
			}(),
			check: func(t *testing.T, got []peer.ID) {
				if len(got) != maxPerPass {
					t.Fatalf("plan has %d entries, want %d", len(got), maxPerPass)
				}
				if !slices.Equal(got[:3], home) {
					t.Fatalf("plan %v does not start with the home cluster", got)
				}
				// The mega keeps its reserved slot, the last one.
				if got[maxPerPass-1] != p[6] {
					t.Fatalf("plan %v: the mega lost its reserved last slot", got)
				}
			},
		},
		{
			name: "the last supernode comes right after home",
			home: home, last: p[5], entries: base,
			alts: []peer.AddrInfo{{ID: p[7]}},
			want: []peer.ID{p[1], p[2], p[3], p[5], p[7], p[4], p[6]},
		},
		{
			name: "a last supernode gone from the directory is not asked",
			home: home, last: p[9], entries: base,
			want: []peer.ID{p[1], p[2], p[3], p[4], p[6]},
		},
		{
			name: "Sybil: fakes with huge capacity cannot push out home, last or the mega",
			home: home, last: p[4], entries: func() []directory.Entry {
				es := slices.Clone(base)
				for _, id := range p[7:16] {
					es = append(es, entry(id, sn, 4_000_000_000, 0))
				}
				return es
			}(),
			alts: []peer.AddrInfo{{ID: p[7]}, {ID: p[8]}, {ID: p[9]}, {ID: p[10]}},
			check: func(t *testing.T, got []peer.ID) {
				if len(got) != maxPerPass {
					t.Fatalf("plan has %d entries, want %d", len(got), maxPerPass)
				}
				if !slices.Equal(got[:4], []peer.ID{p[1], p[2], p[3], p[4]}) || got[maxPerPass-1] != p[6] {
					t.Fatalf("plan %v: want home, the last supernode, then fakes, then the mega", got)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb := tc.notBefore
			if nb == nil {
				nb = map[peer.ID]time.Time{}
			}
			got := ids(plan(self, tc.home, tc.last, tc.alts, snapshot(tc.entries...), nb, now, rand.New(rand.NewPCG(1, 2))))
			if tc.want != nil && !slices.Equal(got, tc.want) {
				t.Fatalf("plan = %v\nwant   %v", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

// TestPlanWeightsSpareSupernodes: outside the home cluster, supernodes are
// tried in random order weighted by spare capacity, so refused clients
// spread instead of all trying the emptiest first.
func TestPlanWeightsSpareSupernodes(t *testing.T) {
	p := testIDs(t, 4)
	sn := protocol.RoleSupernode
	snap := snapshot(entry(p[1], sn, 1000, 900), entry(p[2], sn, 1000, 700), entry(p[3], sn, 1000, 400))
	rng := rand.New(rand.NewPCG(3, 4))
	first := map[peer.ID]int{}
	const runs = 20_000
	for range runs {
		got := plan(p[0], nil, "", nil, snap, map[peer.ID]time.Time{}, time.Unix(0, 0), rng)
		if len(got) != 3 {
			t.Fatalf("plan has %d entries, want all 3 with room", len(got))
		}
		first[got[0].ID]++
	}
	// Spare 100 : 300 : 600.
	for id, want := range map[peer.ID]float64{p[1]: 0.1, p[2]: 0.3, p[3]: 0.6} {
		if got := float64(first[id]) / runs; got < want-0.02 || got > want+0.02 {
			t.Errorf("%s tried first %.3f of the time, want %.2f (its share of spare capacity)", id.ShortString(), got, want)
		}
	}
}

// TestPlanClampsAnnouncedSpare: spare capacity counts up to
// cluster.MaxCapacity, so a supernode claiming 4,000,000,000 is tried
// first in proportion to 6,400, not to its claim.
func TestPlanClampsAnnouncedSpare(t *testing.T) {
	p := testIDs(t, 3)
	sn := protocol.RoleSupernode
	snap := snapshot(entry(p[1], sn, 4_000_000_000, 0), entry(p[2], sn, 6400, 0))
	rng := rand.New(rand.NewPCG(5, 6))
	first := 0
	const runs = 10_000
	for range runs {
		if plan(p[0], nil, "", nil, snap, map[peer.ID]time.Time{}, time.Unix(0, 0), rng)[0].ID == p[2] {
			first++
		}
	}
	if got := float64(first) / runs; got < 0.47 || got > 0.53 {
		t.Fatalf("honest supernode tried first %.3f of the time, want 0.5 (the claim clamped to cluster.MaxCapacity)", got)
	}
}

func TestMegaOrder(t *testing.T) {
	p := testIDs(t, 40)
	megas := []peer.AddrInfo{{ID: p[0]}, {ID: p[1]}, {ID: p[2]}}
	caps := []uint32{1000, 1000, 4000}
	clients := p[3:]
	firsts := map[peer.ID]int{}
	for _, c := range clients {
		got := megaOrder(c, megas, caps)
		if len(got) != 3 {
			t.Fatalf("megaOrder returned %d of 3 megas", len(got))
		}
		seen := map[peer.ID]bool{}
		for _, ai := range got {
			seen[ai.ID] = true
		}
		if len(seen) != 3 {
			t.Fatalf("megaOrder %v repeats a mega", ids(got))
		}
		if again := megaOrder(c, megas, caps); !slices.Equal(ids(again), ids(got)) {
			t.Fatalf("megaOrder is not stable for one client: %v then %v", ids(got), ids(again))
		}
		firsts[got[0].ID]++
	}
	if len(firsts) < 2 {
		t.Fatalf("all %d clients fall back to the same mega first: %v", len(clients), firsts)
	}
	if one := megaOrder(p[3], megas[:1], caps[:1]); len(one) != 1 || one[0].ID != p[0] {
		t.Fatalf("a single mega: %v", ids(one))
	}
}

func TestReturnTargets(t *testing.T) {
	p := testIDs(t, 6)
	sn := protocol.RoleSupernode
	now := time.Unix(1000, 0)
	home := []peer.ID{p[1], p[2], p[3]}
	snap := snapshot(entry(p[1], sn, 100, 100), entry(p[2], sn, 100, 20), entry(p[3], sn, 100, 0), entry(p[4], sn, 100, 0))
	for _, tc := range []struct {
		name      string
		current   peer.ID
		notBefore map[peer.ID]time.Time
		want      []peer.ID
	}{
		{"away: home members with room, in ring order", p[4], nil, []peer.ID{p[2], p[3]}},
		{"already home: nothing to do", p[2], nil, nil},
		{"a member that asked to wait is skipped", p[4], map[peer.ID]time.Time{p[2]: now.Add(time.Second)}, []peer.ID{p[3]}},
		{"a member whose wait is over is asked", p[4], map[peer.ID]time.Time{p[2]: now}, []peer.ID{p[2], p[3]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ids(ReturnTargets(p[0], home, tc.current, snap, tc.notBefore, now))
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("returnTargets = %v, want %v", got, tc.want)
			}
		})
	}
	if got := ReturnTargets(p[0], []peer.ID{p[5]}, p[4], snap, nil, now); len(got) != 0 {
		t.Fatalf("a home member missing from the directory was a target: %v", ids(got))
	}
	// A node promoted by --role auto is on the ring: its own supernode,
	// with room, is in its home and must not be asked (dial to self).
	if got := ids(ReturnTargets(p[2], home, p[4], snap, nil, now)); !slices.Equal(got, []peer.ID{p[3]}) {
		t.Fatalf("returnTargets for a client that is home member p[2] = %v, want only p[3]", got)
	}
}

// Pass asks the plan in order, parks refusing peers (BUSY for its hint,
// REDIRECT for RedirectWait), follows new alternatives up to MaxPerPass
// (not self, not parked, not twice), returns the largest hint and every
// alternative offered, and drops the waits that have passed.
func TestPass(t *testing.T) {
	p := testIDs(t, 14)
	self := p[13]
	now := time.Unix(100, 0)
	snap := snapshot(entry(p[0], protocol.RoleSupernode, 10, 10), entry(p[1], protocol.RoleSupernode, 10, 10))
	nb := map[peer.ID]time.Time{p[5]: now.Add(time.Minute), p[6]: now.Add(-time.Second)}
	ps := NewPass(PassInput{Self: self, Home: []peer.ID{p[0], p[1]}, Snapshot: snap, NotBefore: nb, Now: now,
		RedirectWait: 10 * time.Second}, rand.New(rand.NewPCG(1, 2)))
	var asked []peer.ID
	ai, ok := ps.Next()
	if !ok || ai.ID != p[0] {
		t.Fatalf("first = %v %v, want the first home member", ai.ID, ok)
	}
	asked = append(asked, ai.ID)
	alts := []peer.AddrInfo{{ID: self}, {ID: p[1]}, {ID: p[5]}, {ID: p[2]}, {ID: p[3]}}
	ps.Refused(p[0], true, 2*time.Second, alts)
	more := []peer.AddrInfo{{ID: p[4]}, {ID: p[7]}, {ID: p[8]}, {ID: p[9]}, {ID: p[10]}, {ID: p[11]}}
	for {
		ai, ok := ps.Next()
		if !ok {
			break
		}
		asked = append(asked, ai.ID)
		if ai.ID == p[1] {
			ps.Refused(p[1], false, 0, more)
		}
	}
	want := []peer.ID{p[0], p[1], p[2], p[3], p[4], p[7], p[8], p[9]}
	if !slices.Equal(asked, want) {
		t.Fatalf("asked %v, want %v", asked, want)
	}
	ra, offered := ps.Finish()
	if ra != 2*time.Second || len(offered) != len(alts)+len(more) {
		t.Fatalf("Finish = %v, %d offered; want 2s and %d", ra, len(offered), len(alts)+len(more))
	}
	if !nb[p[0]].Equal(now.Add(2*time.Second)) || !nb[p[1]].Equal(now.Add(10*time.Second)) {
		t.Fatalf("waits %v", nb)
	}
	if _, ok := nb[p[6]]; ok {
		t.Fatal("a wait that had passed was kept")
	}
	if _, ok := nb[p[5]]; !ok {
		t.Fatal("a pending wait was dropped")
	}
	// An empty plan falls back to the bootstrap peers that did not ask to wait.
	boot := NewPass(PassInput{Self: self, Snapshot: snapshot(), NotBefore: nb, Now: now,
		Bootstrap: []peer.AddrInfo{{ID: self}, {ID: p[5]}, {ID: p[12]}}}, rand.New(rand.NewPCG(1, 2)))
	if got := ids(boot.Candidates()); !slices.Equal(got, []peer.ID{p[12]}) {
		t.Fatalf("bootstrap fallback %v, want [%v]", got, p[12])
	}
	// Without a wait map, Refused makes one.
	fresh := NewPass(PassInput{Self: self, Home: []peer.ID{p[0]}, Snapshot: snap, Now: now}, rand.New(rand.NewPCG(1, 2)))
	fresh.Refused(p[0], true, time.Second, nil)
	if _, ok := fresh.NotBefore()[p[0]]; !ok {
		t.Fatal("Refused without a wait map recorded nothing")
	}
}

func TestFailoverSpreadAndReturnDelay(t *testing.T) {
	if FailoverSpread(0, 5*time.Second) != 5*time.Second || FailoverSpread(time.Second, 5*time.Second) != time.Second {
		t.Fatal("FailoverSpread: want the Detach's spread, else one keepalive")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		if d := NextReturnDelay(10*time.Second, rng); d < 5*time.Second || d >= 15*time.Second {
			t.Fatalf("NextReturnDelay(10s) = %v, want [5s, 15s)", d)
		}
	}
}

// A mega ring built beforehand gives the plan built without one, and a
// stale one (other megas, other capacities, a mega parked) is not used.
func TestPlanWithMegaRing(t *testing.T) {
	p := testIDs(t, 40)
	es := []directory.Entry{entry(p[0], protocol.RoleSupernode, 10, 10), entry(p[1], protocol.RoleSupernode, 10, 4),
		entry(p[2], protocol.RoleMega, 500, 0), entry(p[3], protocol.RoleMega, 2000, 0), entry(p[4], protocol.RoleMega, 900, 0)}
	snap := snapshot(es...)
	stale := SnapshotMegaRing(snapshot(es[0], es[1], es[2], es[3], entry(p[4], protocol.RoleMega, 100, 0)))
	fresh := SnapshotMegaRing(snap)
	for _, self := range p[5:] {
		for i, nb := range []map[peer.ID]time.Time{{}, {p[3]: time.Unix(10, 0)}} {
			want := ids(plan(self, []peer.ID{p[0]}, "", nil, snap, nb, time.Unix(0, 0), rand.New(rand.NewPCG(1, 2))))
			for _, mr := range []*MegaRing{fresh, stale} {
				got := ids(planWith(mr, nil, self, []peer.ID{p[0]}, "", nil, snap, nb, time.Unix(0, 0), rand.New(rand.NewPCG(1, 2))))
				if !slices.Equal(got, want) {
					t.Fatalf("case %d: with a mega ring %v, without %v", i, got, want)
				}
			}
		}
	}
	if !fresh.matches(fresh.megas, fresh.caps) || stale.matches(fresh.megas, fresh.caps) {
		t.Fatal("matches: want true for its own megas, false for other capacities")
	}
}

// A plan index built beforehand gives the plan built without one, and
// both give the plan before the index existed, for random directories
// and waits; an index built from another snapshot is not used.
func TestPlanWithIndex(t *testing.T) {
	p := testIDs(t, 60)
	rng := rand.New(rand.NewPCG(7, 8))
	random := func() *directory.Snapshot {
		var es []directory.Entry
		for _, id := range p[:50] {
			switch rng.IntN(4) {
			case 0:
				continue
			case 1:
				es = append(es, entry(id, protocol.RoleMega, uint32(100+rng.IntN(900)), uint32(rng.IntN(100))))
			default:
				c := uint32(1 + rng.IntN(20))
				es = append(es, entry(id, protocol.RoleSupernode, c, uint32(rng.IntN(int(c)+1))))
			}
		}
		return snapshot(es...)
	}
	now := time.Unix(100, 0)
	for round := range 200 {
		snap, other := random(), random()
		nb := map[peer.ID]time.Time{}
		for _, id := range p[:50] {
			if rng.IntN(5) == 0 {
				nb[id] = now.Add(time.Duration(rng.IntN(3)-1) * time.Second)
			}
		}
		self, home := p[50+rng.IntN(10)], []peer.ID{p[rng.IntN(50)], p[rng.IntN(50)]}
		seed := rng.Uint64()
		want := ids(planBeforeIndex(nil, self, home, "", nil, snap, nb, now, rand.New(rand.NewPCG(seed, 1))))
		for _, idx := range []*PlanIndex{nil, NewPlanIndex(snap), NewPlanIndex(other)} {
			got := ids(planWith(nil, idx, self, home, "", nil, snap, nb, now, rand.New(rand.NewPCG(seed, 1))))
			if !slices.Equal(got, want) {
				t.Fatalf("round %d: with index %v (nil: built by the pass) %v, before the index %v", round, idx, got, want)
			}
		}
	}
}

// planBeforeIndex is plan as it was before PlanIndex (it tested every
// directory entry on every pass), kept as the reference the index must
// reproduce exactly: the same candidates in the same order from the same
// random source.
func planBeforeIndex(mr *MegaRing, self peer.ID, home []peer.ID, last peer.ID, alts []peer.AddrInfo, snap *directory.Snapshot,
	notBefore map[peer.ID]time.Time, now time.Time, rng *rand.Rand) []peer.AddrInfo {
	out := make([]peer.AddrInfo, 0, maxPerPass)
	seen := map[peer.ID]bool{self: true}
	skip := func(id peer.ID) bool { return seen[id] || now.Before(notBefore[id]) }
	add := func(ai peer.AddrInfo, limit int) {
		if len(out) >= limit || skip(ai.ID) {
			return
		}
		seen[ai.ID] = true
		out = append(out, ai)
	}
	for _, id := range home {
		if e, ok := snap.Get(id); ok {
			add(peer.AddrInfo{ID: id, Addrs: e.Addrs}, maxPerPass)
		}
	}
	if e, ok := snap.Get(last); ok && last != "" {
		add(peer.AddrInfo{ID: last, Addrs: e.Addrs}, maxPerPass)
	}
	// spare and megas index snap.Entries (an entry is a few hundred bytes:
	// a pass over a directory of thousands copies none of them).
	var spare, megas []int
	var weights []int
	for i := range snap.Entries {
		// The cheap tests first: skip looks up two maps, and most
		// entries of a loaded network are full regular supernodes.
		e := &snap.Entries[i]
		switch {
		case e.Role == protocol.RoleMega:
			if !skip(e.ID) {
				megas = append(megas, i)
			}
		case cluster.Spare(*e) > 0:
			if !skip(e.ID) {
				spare = append(spare, i)
				weights = append(weights, cluster.Spare(*e))
			}
		}
	}
	ais := make([]peer.AddrInfo, len(megas))
	caps := make([]uint32, len(megas))
	for k, i := range megas {
		e := &snap.Entries[i]
		ais[k], caps[k] = peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, e.Capacity
	}
	megaSlot := 0
	if len(megas) > 0 {
		megaSlot = 1
	}
	for _, ai := range alts {
		add(ai, maxPerPass-megaSlot)
	}
	for _, i := range cluster.Sample(weights, maxPerPass-megaSlot-len(out), rng) {
		e := &snap.Entries[spare[i]]
		add(peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, maxPerPass-megaSlot)
	}
	if mr == nil || !mr.matches(ais, caps) {
		mr = NewMegaRing(ais, caps)
	}
	for _, ai := range mr.order(self) {
		add(ai, maxPerPass)
	}
	return out
}
