package node

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func testPolicy() RolePolicy {
	return RolePolicy{
		MinUptime: time.Minute, MinCapacity: 10,
		SpareLow: 0.25, SpareHigh: 1.0, HomeHighLoad: 0.9, ClusterSize: 3,
		PromoteDelayMin: 10 * time.Second, PromoteDelayMax: 60 * time.Second,
		DemoteAfter: 2 * time.Minute,
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fakeID(i int) peer.ID { return peer.ID(fmt.Sprintf("sn-%03d", i)) }

// directoryOf builds k regular supernodes of capacity c, with the total
// load spread over them (never above capacity).
func directoryOf(k, c, load int) []RoleEntry {
	es := make([]RoleEntry, k)
	for i := range es {
		es[i] = RoleEntry{ID: fakeID(i), Capacity: c}
	}
	for i := 0; load > 0; i = (i + 1) % k {
		if es[i].Load < c {
			es[i].Load++
			load--
		} else if slices.IndexFunc(es, func(e RoleEntry) bool { return e.Load < e.Capacity }) < 0 {
			break
		}
	}
	return es
}

// eligibleInput is an ordinary node that meets every promotion criterion
// through the spare capacity alone: 6 supernodes of capacity 10 carrying
// 52 clients (spare 8: 0.15 per client); its home cluster of 3 has room
// (loads 9, 8, 8).
func eligibleInput() RoleInput {
	return RoleInput{
		Now: t0, Reachability: network.ReachabilityPublic, Uptime: time.Hour, Capacity: 50,
		Self: "self", Supernodes: directoryOf(6, 10, 52), Home: []peer.ID{fakeID(3), fakeID(4), fakeID(5)},
	}
}

// runUntil evaluates every second from in.Now for d and returns the first
// non-stay action and when it came.
func runUntil(p RolePolicy, in RoleInput, st RoleState, rng *rand.Rand, d time.Duration) (RoleAction, time.Duration, RoleDecision) {
	var dec RoleDecision
	start := in.Now
	for at := time.Duration(0); at <= d; at += time.Second {
		in.Now = start.Add(at)
		dec, st = DecideRole(p, in, st, rng)
		if dec.Action != RoleStay {
			return dec.Action, at, dec
		}
	}
	return RoleStay, d, dec
}

func criterion(d RoleDecision, name string) RoleCriterion {
	for _, c := range d.Criteria {
		if c.Name == name {
			return c
		}
	}
	return RoleCriterion{Name: "missing " + name}
}

func TestDecideRolePromotionCriteria(t *testing.T) {
	p := testPolicy()
	tests := []struct {
		name    string
		tweak   func(*RoleInput)
		failing string // the criterion that must not hold ("" = promote)
	}{
		{"all hold", func(*RoleInput) {}, ""},
		{"private", func(in *RoleInput) { in.Reachability = network.ReachabilityPrivate }, CritReachable},
		{"reachability unknown", func(in *RoleInput) { in.Reachability = network.ReachabilityUnknown }, CritReachable},
		{"young", func(in *RoleInput) { in.Uptime = 59 * time.Second }, CritUptime},
		{"small", func(in *RoleInput) { in.Capacity = 9 }, CritCapacity},
		{"zero capacity", func(in *RoleInput) { in.Capacity = 0 }, CritCapacity},
		{"enough spare, home has room", func(in *RoleInput) { in.Supernodes = directoryOf(6, 10, 40) }, CritNeeded},
		{"no clients, spare", func(in *RoleInput) { in.Supernodes = directoryOf(6, 10, 0) }, CritNeeded},
		{"mega room does not count", func(in *RoleInput) {
			in.Supernodes = append(directoryOf(6, 10, 52), RoleEntry{ID: "mega", Mega: true, Capacity: 1000})
		}, ""},
		{"mega clients count", func(in *RoleInput) {
			in.Supernodes = append(directoryOf(6, 10, 40), RoleEntry{ID: "mega", Mega: true, Capacity: 1000, Load: 60})
		}, ""},
		{"home cluster short", func(in *RoleInput) {
			in.Supernodes = directoryOf(2, 100, 10) // spare 190 per 10 clients, but only 2 members
			in.Home = []peer.ID{fakeID(0), fakeID(1)}
		}, ""},
		{"home cluster all full", func(in *RoleInput) {
			in.Supernodes = directoryOf(6, 10, 42) // 7 each: spare 12 per 48 clients = 0.25
			for i := 3; i < 6; i++ {
				in.Supernodes[i].Load = 9
			}
		}, ""},
		{"home cluster all full, spare above the middle mark", func(in *RoleInput) {
			in.Supernodes = directoryOf(6, 10, 0) // spare 33 per 27 clients
			for i := 3; i < 6; i++ {
				in.Supernodes[i].Load = 9
			}
		}, CritNeeded},
		{"no supernodes at all", func(in *RoleInput) { in.Supernodes, in.Home = nil, nil }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := eligibleInput()
			tt.tweak(&in)
			act, at, dec := runUntil(p, in, RoleState{}, rand.New(rand.NewPCG(1, 2)), 10*time.Minute)
			if tt.failing == "" {
				if act != RolePromote {
					t.Fatalf("did not promote: %s", dec.Reason)
				}
				if at < p.PromoteDelayMin || at > p.PromoteDelayMax+time.Second {
					t.Fatalf("promoted after %v, outside the delay window", at)
				}
				for _, c := range dec.Criteria {
					if !c.Held {
						t.Fatalf("promoted with %q not held: %s", c.Name, c.Detail)
					}
				}
				return
			}
			if act != RoleStay {
				t.Fatalf("%v after %v with %q failing: %s", act, at, tt.failing, dec.Reason)
			}
			c := criterion(dec, tt.failing)
			if c.Held {
				t.Fatalf("criterion %q reported held: %s", c.Name, c.Detail)
			}
			for _, o := range dec.Criteria {
				if o.Name != tt.failing && !o.Held {
					t.Fatalf("other criterion %q also fails (%s): the case does not test one criterion alone", o.Name, o.Detail)
				}
			}
		})
	}
}

func TestDecideRoleDemotion(t *testing.T) {
	p := testPolicy()
	// Self (capacity 20, no clients) plus 4 others of capacity 10 each.
	serving := func(load int, reach network.Reachability) RoleInput {
		in := eligibleInput()
		in.Serving, in.Reachability, in.Capacity = true, reach, 20
		in.Supernodes = append(directoryOf(4, 10, load), RoleEntry{ID: "self", Capacity: 20})
		in.Home = []peer.ID{fakeID(0), fakeID(1), fakeID(2)}
		return in
	}
	// Spare 33 per 27 clients, 13 without this node: a surplus by the
	// numbers, but the node's home cluster without it is full.
	homeFull := serving(0, network.ReachabilityPublic)
	for i := range 3 {
		homeFull.Supernodes[i].Load = 9
	}
	big := serving(38, network.ReachabilityPublic)
	big.Capacity, big.Supernodes[4].Capacity = 200, 200
	tests := []struct {
		name     string
		in       RoleInput
		want     RoleAction
		min, max time.Duration
	}{
		{"needed", serving(38, network.ReachabilityPublic), RoleStay, 0, 0},
		{"surplus", serving(10, network.ReachabilityPublic), RoleDemote, p.DemoteAfter, 2*p.DemoteAfter + time.Second},
		{"between the marks", serving(30, network.ReachabilityPublic), RoleStay, 0, 0}, // spare 30/30 = 1.0, not above
		// Spare 202 per 38 clients is far above SpareHigh, but without
		// this node's 200 it would be 2/38, below SpareLow: a promotion
		// never creates the surplus that would undo it.
		{"surplus only with me", big, RoleStay, 0, 0},
		{"home full without me", homeFull, RoleStay, 0, 0},
		{"lost reachability", serving(38, network.ReachabilityPrivate), RoleDemote, p.PromoteDelayMin, p.PromoteDelayMax + time.Second},
		{"reachability unknown keeps serving", serving(38, network.ReachabilityUnknown), RoleStay, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act, at, dec := runUntil(p, tt.in, RoleState{}, rand.New(rand.NewPCG(3, 4)), 10*time.Minute)
			if act != tt.want {
				t.Fatalf("got %v after %v, want %v: %s", act, at, tt.want, dec.Reason)
			}
			if act != RoleStay && (at < tt.min || at > tt.max) {
				t.Fatalf("%v after %v, want within [%v, %v]", act, at, tt.min, tt.max)
			}
		})
	}
	t.Run("too few would remain", func(t *testing.T) {
		in := serving(0, network.ReachabilityPublic)
		in.Supernodes = append(directoryOf(2, 100, 5), RoleEntry{ID: "self", Capacity: 20})
		act, _, dec := runUntil(p, in, RoleState{}, rand.New(rand.NewPCG(5, 6)), 10*time.Minute)
		if act != RoleStay || criterion(dec, CritSurplus).Held {
			t.Fatalf("demoted below cluster.Size regular supernodes: %v %s", act, dec.Reason)
		}
	})
	t.Run("surplus must be sustained", func(t *testing.T) {
		// Surplus except for one evaluation in every DemoteAfter/2: never
		// demotes.
		rng := rand.New(rand.NewPCG(7, 8))
		var st RoleState
		var dec RoleDecision
		for at := time.Duration(0); at < time.Hour; at += time.Second {
			in := serving(10, network.ReachabilityPublic)
			if at%(p.DemoteAfter/2) == 0 {
				in = serving(38, network.ReachabilityPublic)
			}
			in.Now = t0.Add(at)
			if dec, st = DecideRole(p, in, st, rng); dec.Action != RoleStay {
				t.Fatalf("demoted at %v on an interrupted surplus", at)
			}
		}
	})
}

// TestDecideRoleNoFlapping feeds a load that oscillates around the low
// mark (and, later, the high mark) to one auto node whose own promotion
// and demotion change the directory it sees, and counts role changes.
func TestDecideRoleNoFlapping(t *testing.T) {
	p := testPolicy()
	p.PromoteDelayMin, p.PromoteDelayMax = 5*time.Second, 10*time.Second
	p.DemoteAfter = 20 * time.Second
	const others, capEach, myCap = 8, 10, 20 // 80 without the node
	for _, tc := range []struct {
		name       string
		base, amp  int
		period     time.Duration
		maxChanges int
	}{
		// spare/clients = (80-L)/L crosses 0.25 at L = 64.
		{"around the low mark, fast", 64, 2, 4 * time.Second, 0},
		{"around the low mark, slow", 64, 2, 60 * time.Second, 1},
		// With the node serving (100 capacity), spare/clients crosses 1.0
		// at L = 50: a surplus shorter than DemoteAfter never demotes; a
		// longer one demotes once, and the node does not come back while
		// L stays near 50 (spare without it 0.5-0.7 per client).
		{"around the high mark, fast", 50, 3, 30 * time.Second, 0},
		{"around the high mark, slow", 50, 3, 90 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(9, 10))
			var st RoleState
			serving := strings.HasPrefix(tc.name, "around the high mark")
			changes := 0
			for at := time.Duration(0); at < 2*time.Hour; at += time.Second {
				load := tc.base - tc.amp
				if (at/(tc.period/2))%2 == 1 {
					load = tc.base + tc.amp
				}
				es := directoryOf(others, capEach, load)
				if serving {
					// The node takes the load the others cannot.
					mine := max(load-others*capEach, 0)
					es = directoryOf(others, capEach, load-mine)
					es = append(es, RoleEntry{ID: "self", Capacity: myCap, Load: mine})
				}
				in := RoleInput{Now: t0.Add(at), Serving: serving, Reachability: network.ReachabilityPublic,
					Uptime: time.Hour, Capacity: myCap, Self: "self", Supernodes: es,
					Home: []peer.ID{fakeID(0), fakeID(1), fakeID(2)}}
				var dec RoleDecision
				dec, st = DecideRole(p, in, st, rng)
				switch dec.Action {
				case RolePromote:
					serving = true
					changes++
				case RoleDemote:
					serving = false
					changes++
				}
			}
			if changes > tc.maxChanges {
				t.Fatalf("%d role changes in 2 h, want at most %d", changes, tc.maxChanges)
			}
			t.Logf("%d role changes", changes)
		})
	}
}

// TestDecideRoleSpread starts 20 eligible nodes at the same moment. Alone,
// their promotions spread over the delay window; together, with each
// promotion reaching the others' directories one evaluation later, the
// first promotions satisfy the need and most nodes stop waiting.
func TestDecideRoleSpread(t *testing.T) {
	p := testPolicy()
	window := p.PromoteDelayMax - p.PromoteDelayMin
	const nodes = 20
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rngs := make([]*rand.Rand, nodes)
			for i := range rngs {
				rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
			}
			// Alone: when would each promote?
			var at []time.Duration
			for i := range nodes {
				act, when, _ := runUntil(p, eligibleInput(), RoleState{}, rngs[i], 10*time.Minute)
				if act != RolePromote {
					t.Fatalf("node %d did not promote alone", i)
				}
				at = append(at, when)
			}
			slices.Sort(at)
			spread := at[nodes-1] - at[0]
			if spread < window*7/10 {
				t.Fatalf("promotions spread over %v of a %v window: %v", spread, window, at)
			}
			// Spread like the uniform distribution: the Kolmogorov-Smirnov
			// distance to it stays under 0.35 (the 1% critical value for 20
			// samples), where a fixed or clustered delay gives ~1.
			ks := 0.0
			for i, a := range at {
				f := float64(a-p.PromoteDelayMin) / float64(window)
				ks = max(ks, math.Abs(f-float64(i)/nodes), math.Abs(f-float64(i+1)/nodes))
			}
			if ks > 0.35 {
				t.Fatalf("promotion times are not spread uniformly over the window (KS distance %.2f): %v", ks, at)
			}
			// Together: the network (6×10, 52 clients) needs one supernode
			// of 50 (spare 8 → 58 per 52 clients). Each evaluation sees
			// the promotions of the previous one.
			var states [nodes]RoleState
			promoted := map[int]bool{}
			var promotedAt []time.Duration
			for tick := time.Duration(0); tick <= 10*time.Minute; tick += time.Second {
				dir := directoryOf(6, 10, 52)
				for i := range promoted {
					dir = append(dir, RoleEntry{ID: fakeID(100 + i), Capacity: 50})
				}
				var now []int
				for i := range nodes {
					if promoted[i] {
						continue
					}
					in := eligibleInput()
					in.Now, in.Supernodes = t0.Add(tick), dir
					var dec RoleDecision
					dec, states[i] = DecideRole(p, in, states[i], rngs[i])
					if dec.Action == RolePromote {
						now = append(now, i)
					}
				}
				for _, i := range now {
					promoted[i] = true
					promotedAt = append(promotedAt, tick)
				}
			}
			if len(promoted) < 1 || len(promoted) > 2 {
				t.Fatalf("%d of %d eligible nodes promoted (at %v); the need was one", len(promoted), nodes, promotedAt)
			}
			t.Logf("alone: first %v, last %v, KS %.2f; together: %d promoted at %v", at[0], at[nodes-1], ks, len(promoted), promotedAt)
		})
	}
}

func TestDecideRoleReason(t *testing.T) {
	in := eligibleInput()
	in.Uptime = time.Second
	dec, _ := DecideRole(testPolicy(), in, RoleState{}, rand.New(rand.NewPCG(1, 1)))
	if dec.Action != RoleStay || dec.Reason == "" || criterion(dec, CritUptime).Held {
		t.Fatalf("%+v", dec)
	}
	t.Log(dec.Reason)
	in.Uptime = time.Hour
	dec, st := DecideRole(testPolicy(), in, RoleState{}, rand.New(rand.NewPCG(1, 1)))
	if st.Pending != RolePromote || st.Delay < 10*time.Second || st.Delay > time.Minute {
		t.Fatalf("state %+v", st)
	}
	t.Log(dec.Reason)
}
