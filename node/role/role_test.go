package role_test

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

	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/overlay/cluster"
)

// testPolicy is the policy of these tests, with R = cluster.Size. The
// fixtures (home clusters of three, directories of two to eight
// supernodes) are built for R = 3; a change of cluster.Size must rebuild
// them, so testPolicy fails rather than let them test something else.
func testPolicy(tb testing.TB) role.Policy {
	tb.Helper()
	if cluster.Size != 3 {
		tb.Fatalf("the fixtures are built for cluster.Size 3, not %d: rebuild them", cluster.Size)
	}
	return role.Policy{
		MinUptime: time.Minute, MinCapacity: 10,
		SpareLow: 0.25, SpareHigh: 1.0, HomeHighLoad: 0.9, ClusterSize: cluster.Size,
		PromoteDelayMin: 10 * time.Second, PromoteDelayMax: 60 * time.Second,
		DemoteAfter: 2 * time.Minute,
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fakeID(i int) peer.ID { return peer.ID(fmt.Sprintf("sn-%03d", i)) }

// directoryOf builds k regular supernodes of capacity c, with the total
// load spread over them (never above capacity).
func directoryOf(k, c, load int) []role.Entry {
	es := make([]role.Entry, k)
	for i := range es {
		es[i] = role.Entry{ID: fakeID(i), Capacity: c}
	}
	for i := 0; load > 0; i = (i + 1) % k {
		if es[i].Load < c {
			es[i].Load++
			load--
		} else if slices.IndexFunc(es, func(e role.Entry) bool { return e.Load < e.Capacity }) < 0 {
			break
		}
	}
	return es
}

// eligibleInput is an ordinary node that meets every promotion criterion
// through the spare capacity alone: 6 supernodes of capacity 10 carrying
// 52 clients (spare 8: 0.15 per client); its home cluster of 3 has room
// (loads 9, 8, 8).
func eligibleInput() role.Input {
	return role.Input{
		Now: t0, Reachability: network.ReachabilityPublic, Uptime: time.Hour, Capacity: 50,
		Self: "self", Supernodes: directoryOf(6, 10, 52), Home: []peer.ID{fakeID(3), fakeID(4), fakeID(5)},
	}
}

// runUntil evaluates every second from in.Now for d and returns the first
// non-stay action and when it came.
func runUntil(p role.Policy, in role.Input, st role.State, rng *rand.Rand, d time.Duration) (role.Action, time.Duration, role.Decision) {
	var dec role.Decision
	start := in.Now
	for at := time.Duration(0); at <= d; at += time.Second {
		in.Now = start.Add(at)
		dec, st = role.Decide(p, in, st, rng)
		if dec.Action != role.Stay {
			return dec.Action, at, dec
		}
	}
	return role.Stay, d, dec
}

func criterion(d role.Decision, name string) role.Criterion {
	for _, c := range d.Criteria {
		if c.Name == name {
			return c
		}
	}
	return role.Criterion{Name: "missing " + name}
}

func TestDecidePromotionCriteria(t *testing.T) {
	p := testPolicy(t)
	tests := []struct {
		name    string
		tweak   func(*role.Input)
		failing string // the criterion that must not hold ("" = promote)
	}{
		{"all hold", func(*role.Input) {}, ""},
		{"private", func(in *role.Input) { in.Reachability = network.ReachabilityPrivate }, role.CritReachable},
		{"reachability unknown", func(in *role.Input) { in.Reachability = network.ReachabilityUnknown }, role.CritReachable},
		{"young", func(in *role.Input) { in.Uptime = 59 * time.Second }, role.CritUptime},
		{"small", func(in *role.Input) { in.Capacity = 9 }, role.CritCapacity},
		{"zero capacity", func(in *role.Input) { in.Capacity = 0 }, role.CritCapacity},
		{"enough spare, home has room", func(in *role.Input) { in.Supernodes = directoryOf(6, 10, 40) }, role.CritNeeded},
		{"no clients, spare", func(in *role.Input) { in.Supernodes = directoryOf(6, 10, 0) }, role.CritNeeded},
		{"mega room does not count", func(in *role.Input) {
			in.Supernodes = append(directoryOf(6, 10, 52), role.Entry{ID: "mega", Mega: true, Capacity: 1000})
		}, ""},
		{"mega clients count", func(in *role.Input) {
			in.Supernodes = append(directoryOf(6, 10, 40), role.Entry{ID: "mega", Mega: true, Capacity: 1000, Load: 60})
		}, ""},
		{"home cluster short", func(in *role.Input) {
			in.Supernodes = directoryOf(2, 100, 10) // spare 190 per 10 clients, but only 2 members
			in.Home = []peer.ID{fakeID(0), fakeID(1)}
		}, ""},
		{"home cluster all full", func(in *role.Input) {
			in.Supernodes = directoryOf(6, 10, 42) // 7 each: spare 12 per 48 clients = 0.25
			for i := 3; i < 6; i++ {
				in.Supernodes[i].Load = 9
			}
		}, ""},
		{"home cluster all full, spare above the middle mark", func(in *role.Input) {
			in.Supernodes = directoryOf(6, 10, 0) // spare 33 per 27 clients
			for i := 3; i < 6; i++ {
				in.Supernodes[i].Load = 9
			}
		}, role.CritNeeded},
		{"no supernodes at all", func(in *role.Input) { in.Supernodes, in.Home = nil, nil }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := eligibleInput()
			tt.tweak(&in)
			act, at, dec := runUntil(p, in, role.State{}, rand.New(rand.NewPCG(1, 2)), 10*time.Minute)
			if tt.failing == "" {
				if act != role.Promote {
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
			if act != role.Stay {
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

func TestDecideDemotion(t *testing.T) {
	p := testPolicy(t)
	// Self (capacity 20, no clients) plus 4 others of capacity 10 each.
	serving := func(load int, reach network.Reachability) role.Input {
		in := eligibleInput()
		in.Serving, in.Reachability, in.Capacity = true, reach, 20
		in.Supernodes = append(directoryOf(4, 10, load), role.Entry{ID: "self", Capacity: 20})
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
		in       role.Input
		want     role.Action
		min, max time.Duration
	}{
		{"needed", serving(38, network.ReachabilityPublic), role.Stay, 0, 0},
		{"surplus", serving(10, network.ReachabilityPublic), role.Demote, p.DemoteAfter, 2*p.DemoteAfter + time.Second},
		{"between the marks", serving(30, network.ReachabilityPublic), role.Stay, 0, 0}, // spare 30/30 = 1.0, not above
		// Spare 202 per 38 clients is far above SpareHigh, but without
		// this node's 200 it would be 2/38, below SpareLow: a promotion
		// never creates the surplus that would undo it.
		{"surplus only with me", big, role.Stay, 0, 0},
		{"home full without me", homeFull, role.Stay, 0, 0},
		{"lost reachability", serving(38, network.ReachabilityPrivate), role.Demote, p.PromoteDelayMin, p.PromoteDelayMax + time.Second},
		{"reachability unknown keeps serving", serving(38, network.ReachabilityUnknown), role.Stay, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act, at, dec := runUntil(p, tt.in, role.State{}, rand.New(rand.NewPCG(3, 4)), 10*time.Minute)
			if act != tt.want {
				t.Fatalf("got %v after %v, want %v: %s", act, at, tt.want, dec.Reason)
			}
			if act != role.Stay && (at < tt.min || at > tt.max) {
				t.Fatalf("%v after %v, want within [%v, %v]", act, at, tt.min, tt.max)
			}
		})
	}
	t.Run("too few would remain", func(t *testing.T) {
		in := serving(0, network.ReachabilityPublic)
		in.Supernodes = append(directoryOf(2, 100, 5), role.Entry{ID: "self", Capacity: 20})
		act, _, dec := runUntil(p, in, role.State{}, rand.New(rand.NewPCG(5, 6)), 10*time.Minute)
		if act != role.Stay || criterion(dec, role.CritSurplus).Held {
			t.Fatalf("demoted below cluster.Size regular supernodes: %v %s", act, dec.Reason)
		}
	})
	t.Run("surplus must be sustained", func(t *testing.T) {
		// Surplus except for one evaluation in every DemoteAfter/2: never
		// demotes.
		rng := rand.New(rand.NewPCG(7, 8))
		var st role.State
		var dec role.Decision
		for at := time.Duration(0); at < time.Hour; at += time.Second {
			in := serving(10, network.ReachabilityPublic)
			if at%(p.DemoteAfter/2) == 0 {
				in = serving(38, network.ReachabilityPublic)
			}
			in.Now = t0.Add(at)
			if dec, st = role.Decide(p, in, st, rng); dec.Action != role.Stay {
				t.Fatalf("demoted at %v on an interrupted surplus", at)
			}
		}
	})
}

// TestDecideNoFlapping feeds a load that oscillates around the low
// mark (and, later, the high mark) to one auto node whose own promotion
// and demotion change the directory it sees, and counts role changes.
func TestDecideNoFlapping(t *testing.T) {
	p := testPolicy(t)
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
			var st role.State
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
					es = append(es, role.Entry{ID: "self", Capacity: myCap, Load: mine})
				}
				in := role.Input{Now: t0.Add(at), Serving: serving, Reachability: network.ReachabilityPublic,
					Uptime: time.Hour, Capacity: myCap, Self: "self", Supernodes: es,
					Home: []peer.ID{fakeID(0), fakeID(1), fakeID(2)}}
				var dec role.Decision
				dec, st = role.Decide(p, in, st, rng)
				switch dec.Action {
				case role.Promote:
					serving = true
					changes++
				case role.Demote:
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

// TestDecideSpread starts 20 eligible nodes at the same moment. Alone,
// their promotions spread over the delay window; together, with each
// promotion reaching the others' directories one evaluation later, the
// first promotions satisfy the need and most nodes stop waiting.
func TestDecideSpread(t *testing.T) {
	p := testPolicy(t)
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
				act, when, _ := runUntil(p, eligibleInput(), role.State{}, rngs[i], 10*time.Minute)
				if act != role.Promote {
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
			var states [nodes]role.State
			promoted := map[int]bool{}
			var promotedAt []time.Duration
			for tick := time.Duration(0); tick <= 10*time.Minute; tick += time.Second {
				dir := directoryOf(6, 10, 52)
				for i := range promoted {
					dir = append(dir, role.Entry{ID: fakeID(100 + i), Capacity: 50})
				}
				var now []int
				for i := range nodes {
					if promoted[i] {
						continue
					}
					in := eligibleInput()
					in.Now, in.Supernodes = t0.Add(tick), dir
					var dec role.Decision
					dec, states[i] = role.Decide(p, in, states[i], rngs[i])
					if dec.Action == role.Promote {
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

func TestDecideReason(t *testing.T) {
	in := eligibleInput()
	in.Uptime = time.Second
	dec, _ := role.Decide(testPolicy(t), in, role.State{}, rand.New(rand.NewPCG(1, 1)))
	if dec.Action != role.Stay || dec.Reason == "" || criterion(dec, role.CritUptime).Held {
		t.Fatalf("%+v", dec)
	}
	t.Log(dec.Reason)
	in.Uptime = time.Hour
	dec, st := role.Decide(testPolicy(t), in, role.State{}, rand.New(rand.NewPCG(1, 1)))
	if st.Pending != role.Promote || st.Delay < 10*time.Second || st.Delay > time.Minute {
		t.Fatalf("state %+v", st)
	}
	t.Log(dec.Reason)
}

// The hand-back schedule: every excess client is detached within the
// steps, evenly (no two steps differ by more than one client, earlier
// steps taking the remainder), and nothing is detached past the last
// step or without excess.
func TestDrainStep(t *testing.T) {
	for _, excess := range []int{1, 3, 9, 10, 11, 37, 197, 1000} {
		left := excess
		var got []int
		for i := range role.DrainSteps {
			k := role.DrainStep(left, i)
			got = append(got, k)
			left -= k
		}
		if left != 0 {
			t.Errorf("excess %d: %d left after %d steps (%v)", excess, left, role.DrainSteps, got)
		}
		if slices.Max(got)-slices.Min(got) > 1 || !slices.IsSortedFunc(got, func(a, b int) int { return b - a }) {
			t.Errorf("excess %d: steps %v are not an even, front-loaded spread", excess, got)
		}
	}
	if role.DrainStep(37, 0) != 4 || role.DrainStep(37, role.DrainSteps-1) != 37 || role.DrainStep(0, 0) != 0 ||
		role.DrainStep(5, role.DrainSteps) != 0 || role.DrainStep(5, -1) != 0 {
		t.Error("DrainStep at the edges")
	}
	if role.DrainStepInterval(10*time.Second) != time.Second || role.DrainStepInterval(time.Millisecond) != time.Millisecond {
		t.Error("DrainStepInterval")
	}
}
