package sim

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/protocol"
)

// autoSim is the auto-roles scenario at test size: 1,000 clients (50
// auto nodes that can promote, 3 pinned supernodes), the crash at 10
// minutes (formation takes about 5), 16 minutes in all. edit, if set,
// changes the configuration first.
func autoSim(t testing.TB, policy string, seed uint64, edit func(*Config)) *Sim {
	t.Helper()
	cfg, err := NewConfig("auto-roles", mustPolicy(t, policy), 1000, 0, seed)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CrashAt, cfg.Duration = 10*time.Minute, 16*time.Minute
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// surplusPolicy makes auto supernodes demote. The rules stop promotions
// at (SpareLow+SpareHigh)/2 spare per client, so a surplus needs capacity
// from elsewhere: half the supernodes crash at 10 minutes, the auto tier
// re-forms, and at 13 minutes the two crashed pinned supernodes restart
// (Config.HandBackAt), which lifts the spare per client above SpareHigh
// 0.3; a surplus must last only 30 s to 1 minute.
func surplusPolicy(c *Config) {
	a := *c.Auto
	a.Policy.SpareHigh, a.Policy.DemoteAfter = 0.3, 30*time.Second
	c.Auto = &a
	c.CrashFraction, c.HandBackAt, c.Duration = 0.5, 13*time.Minute, 18*time.Minute
}

// checkEval replays one of the simulator's evaluations through the
// daemon's code path: node.roleInput's role.NewInput on the same view
// must give the input the simulator used, and role.Decide on it, with the
// node's state and its random source as they were, the same decision and
// next state.
func checkEval(pol role.Policy, e autoEval) error {
	if want := role.NewInput(e.view); !reflect.DeepEqual(e.in, want) {
		return fmt.Errorf("input differs from role.NewInput's:\n sim    %+v\n daemon %+v", e.in, want)
	}
	var src rand.PCG
	if err := src.UnmarshalBinary(e.rng); err != nil {
		return err
	}
	dec, st := role.Decide(pol, e.in, e.before, rand.New(&src))
	if !reflect.DeepEqual(dec, e.dec) {
		return fmt.Errorf("decision differs: sim %v (%s), daemon %v (%s)", e.dec.Action, e.dec.Reason, dec.Action, dec.Reason)
	}
	if st != e.after {
		return fmt.Errorf("next state differs: sim %+v, daemon %+v", e.after, st)
	}
	return nil
}

// recordedEvals runs the surplus variant (promotions, waits, demotions
// and drains) and returns every evaluation it made.
func recordedEvals(t *testing.T) (*Sim, []autoEval) {
	t.Helper()
	s := autoSim(t, "overlayd", 3, surplusPolicy)
	s.auto.keep = math.MaxInt
	s.Run()
	return s, s.auto.evals
}

// TestAutoRolesMatchDaemon is the divergence test of the auto tier: every
// evaluation the simulator made (its input, state and random source)
// gives the same input, decision and next state through the daemon's
// code, and the run holds every kind of decision; and a simulator that
// diverged (a mutated evaluation) fails the check.
func TestAutoRolesMatchDaemon(t *testing.T) {
	s, evals := recordedEvals(t)
	pol := s.cfg.Auto.Policy
	kinds := map[string]int{}
	for i, e := range evals {
		if err := checkEval(pol, e); err != nil {
			t.Fatalf("evaluation %d (node %d at %v): %v", i, e.node, e.in.Now.Sub(epoch), err)
		}
		switch {
		case e.dec.Action != role.Stay:
			kinds[e.dec.Action.String()]++
		case e.after.Pending != role.Stay:
			kinds["waiting"]++
		case e.in.Uptime < pol.MinUptime:
			kinds["too young"]++
		default:
			kinds["stay"]++
		}
	}
	t.Logf("%d evaluations: %v", len(evals), kinds)
	for _, k := range []string{"promote", "demote", "waiting", "too young", "stay"} {
		if kinds[k] == 0 {
			t.Errorf("no %q evaluation among %d: the test covers less than it claims", k, len(evals))
		}
	}
	if a := s.auto; kinds["promote"] != a.promotions || kinds["demote"] != a.demotions {
		t.Errorf("recorded %d promotions and %d demotions, the simulator counted %d and %d", kinds["promote"], kinds["demote"], a.promotions, a.demotions)
	}
	t.Run("divergence caught", func(t *testing.T) { divergenceCaught(t, pol, evals) })
}

// divergenceCaught: a simulator that built its input or took its decision
// differently from the daemon fails checkEval.
func divergenceCaught(t *testing.T, pol role.Policy, evals []autoEval) {
	find := func(f func(autoEval) bool) autoEval {
		t.Helper()
		for _, e := range evals {
			if f(e) {
				// The entries are shared between evaluations: copy them
				// before a mutation.
				e.in.Supernodes = slices.Clone(e.in.Supernodes)
				return e
			}
		}
		t.Fatal("no such evaluation")
		return autoEval{}
	}
	promote := func(e autoEval) bool { return e.dec.Action == role.Promote }
	for _, tc := range []struct {
		name   string
		pick   func(autoEval) bool
		mutate func(*autoEval)
	}{
		{"uptime not modelled", promote, func(e *autoEval) { e.in.Uptime = 0 }},
		{"capacity not clamped", promote, func(e *autoEval) { e.in.Supernodes[0].Capacity++ }},
		{"load of a supernode stale", promote, func(e *autoEval) { e.in.Supernodes[0].Load-- }},
		{"home cluster not rebuilt", promote, func(e *autoEval) { e.in.Home = e.in.Home[:len(e.in.Home)-1] }},
		{"own entry from the directory", func(e autoEval) bool { return e.in.Serving }, func(e *autoEval) {
			e.in.Supernodes[len(e.in.Supernodes)-1].Load++
		}},
		{"uptime rule ignored", func(e autoEval) bool { return e.in.Uptime < 5*time.Minute && e.dec.Action == role.Stay }, func(e *autoEval) {
			e.dec.Action = role.Promote
		}},
		{"promotion wait not kept", func(e autoEval) bool { return e.before.Pending == role.Promote && e.dec.Action == role.Stay }, func(e *autoEval) {
			e.before = role.State{}
		}},
		{"shared random source", func(e autoEval) bool { return e.before.Pending == role.Stay && e.after.Pending == role.Promote }, func(e *autoEval) {
			var src rand.PCG
			_ = src.UnmarshalBinary(e.rng)
			src.Uint64()
			e.rng, _ = src.MarshalBinary()
		}},
		{"surplus rule ignored", func(e autoEval) bool {
			return e.in.Serving && e.dec.Action == role.Stay && e.after.Pending == role.Stay
		},
			func(e *autoEval) { e.dec.Action = role.Demote }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := find(tc.pick)
			if err := checkEval(pol, e); err != nil {
				t.Fatalf("the unmutated evaluation fails: %v", err)
			}
			tc.mutate(&e)
			if err := checkEval(pol, e); err == nil {
				t.Fatal("the divergence went unnoticed")
			} else {
				t.Logf("caught: %.120s", err)
			}
		})
	}
}

// maxRegular is the most regular supernodes (pinned and auto) serving at
// any sample of r's series.
func maxRegular(r *Report, from, to float64) int {
	m := 0
	for i, t := range r.Series.T {
		if t >= from && t < to {
			m = max(m, r.Series.AliveRegular[i]+r.Series.AutoServing[i])
		}
	}
	return m
}

// TestAutoRolesScenario asserts what the rules imply for the auto-roles
// scenario under policy overlayd, for the scenario's crash of 30% and a
// harder one of 50% (which the survivors cannot absorb: the auto tier
// must re-form before the clients can re-attach).
//
// With N clients, capacity C, R = ClusterSize and mid = (SpareLow +
// SpareHigh)/2: an ordinary node promotes only while the spare capacity
// per attached client is below mid (the spare rule, below SpareLow, and
// the full home cluster rule, below mid) or its home cluster has fewer
// than R members. M regular supernodes have M·C - attached spare, so no
// rule holds once M ≥ (1+mid)·N/C: the count never exceeds
// ceil((1+mid)·N/C), plus the promotions that fire within one directory
// tick of each other on the same snapshot (allowed: 2). Once formed, the
// spare per client is at least SpareLow: M ≥ (1+SpareLow)·N/C.
//
// Re-attachment after the crash, within B: sessions end after the
// keepalive silence (3 keepalives, 15 s); the spare rule sees the loss
// once the crashed entries expire (3 announce intervals, 30 s); a
// needed node promotes within PromoteDelayMax (5 min) of its criteria
// holding, evaluated every role.EvalInterval (2.5 s), and a client in
// backoff tries again within Backoff.Max (1 min). B = 407.5 s is that
// chain end to end for one wave of promotions; the run must meet it.
func TestAutoRolesScenario(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash float64
	}{{"crash 30%", 0.3}, {"crash 50%", 0.5}} {
		t.Run(tc.name, func(t *testing.T) {
			s := autoSim(t, "overlayd", 1, func(c *Config) { c.CrashFraction = tc.crash })
			r := s.Run()
			c, sum, a := r.Config, r.Summary, r.Summary.Auto
			pol, n := c.Auto.Policy, float64(c.Clients)
			mid := (pol.SpareLow + pol.SpareHigh) / 2
			upper := int(math.Ceil((1+mid)*n/float64(c.Auto.Capacity))) + 2
			lower := int(math.Ceil((1 + pol.SpareLow) * n / float64(c.Auto.Capacity)))
			crashAt := c.CrashAt.Seconds()
			formed, reformed := maxRegular(r, 0, crashAt), maxRegular(r, crashAt, math.Inf(1))
			t.Logf("formed at %vs with %d supernodes (%d auto), %d after the re-formation; bounds [%d, %d]; %d promotions, %d demotions; 99%%/100%% re-attached after %v/%v s",
				*a.FormedAt, formed, a.ServingAtCrash, reformed, lower, upper, a.Promotions, a.Demotions, *sum.TimeTo99, *sum.TimeTo100)
			if a.FormedAt == nil || *a.FormedAt >= crashAt {
				t.Fatalf("the network did not form before the crash: %v", a.FormedAt)
			}
			if formed > upper || reformed > upper {
				t.Errorf("more supernodes than the rules allow: %d before the crash, %d after, bound %d", formed, reformed, upper)
			}
			atCrash := a.ServingAtCrash + c.Supernodes
			if atCrash < lower {
				t.Errorf("%d supernodes at the crash: the spare rule wants at least %d", atCrash, lower)
			}
			end := r.Series.AliveRegular[len(r.Series.T)-1] + a.ServingEnd
			if end < lower {
				t.Errorf("the auto tier did not re-form: %d supernodes at the end, the spare rule wants at least %d", end, lower)
			}
			if a.Crashed == 0 || a.Demotions != 0 {
				t.Errorf("%d auto supernodes crashed, %d demoted: want some crashed and none demoted (no surplus above SpareHigh)", a.Crashed, a.Demotions)
			}
			const bound = 407.5
			if sum.TimeTo99 == nil || *sum.TimeTo99 > bound {
				t.Errorf("99%% re-attached after %v s, want within %v s", sum.TimeTo99, bound)
			}
			for k := range s.auto.nodes {
				if n := &s.auto.nodes[k]; n.sn >= 0 && s.clients[n.client].sn == n.sn {
					t.Errorf("auto node %d is a client of its own supernode", k)
				}
			}
			if sum.FinalAttached != 1 || sum.SupernodesFailed != 0 || sum.AboveCapacity != 0 || a.AboveCapacity != 0 {
				t.Errorf("final attached %v, %d failed, %d pinned and %d auto supernodes above capacity: want 1, 0, 0, 0",
					sum.FinalAttached, sum.SupernodesFailed, sum.AboveCapacity, a.AboveCapacity)
			}
		})
	}
}

// TestAutoRolesDemotion: with a surplus, auto supernodes demote, hand
// every client back on role.DrainStep's schedule and leave the directory;
// no client is lost.
func TestAutoRolesDemotion(t *testing.T) {
	s := autoSim(t, "overlayd", 3, surplusPolicy)
	r := s.Run()
	a := r.Summary.Auto
	departed := 0
	for k := range s.auto.nodes {
		departed += s.auto.nodes[k].departs
	}
	if a.Demotions == 0 || departed != a.Demotions {
		t.Fatalf("%d demotions, %d completed: want some, all completed", a.Demotions, departed)
	}
	for k := range s.auto.nodes {
		n := &s.auto.nodes[k]
		if n.departs == 0 || n.serving {
			continue
		}
		sn := &s.sns[n.sn]
		if sn.alive || len(sn.clients) != 0 || sn.sem.InUse() != 0 {
			t.Errorf("auto node %d demoted but its supernode is alive %v with %d clients (%d slots)", k, sn.alive, len(sn.clients), sn.sem.InUse())
		}
		for _, e := range s.snap.Entries {
			if e.ID == n.id {
				t.Errorf("auto node %d demoted but still in the directory", k)
			}
		}
	}
	if r.Summary.FinalAttached != 1 || r.Summary.SupernodesFailed != 0 {
		t.Errorf("final attached %v, %d failed", r.Summary.FinalAttached, r.Summary.SupernodesFailed)
	}
	t.Logf("%d promotions, %d demotions; lowest attached %v", a.Promotions, a.Demotions, r.Summary.LowestAttached)
}

// TestAutoRolesDeterminism: the same seed gives byte-identical
// report.json with the auto tier.
func TestAutoRolesDeterminism(t *testing.T) {
	run := func(seed uint64) []byte {
		b, err := autoSim(t, "overlayd", seed, func(c *Config) { c.Duration = 11 * time.Minute }).Run().JSON()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := run(5), run(5)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different reports")
	}
	if !bytes.Contains(a, []byte(`"auto_serving"`)) {
		t.Fatal("no auto series in the report")
	}
}

// TestAutoRolesConfig: the defaults are the daemon's role policy, and a
// bad population is refused.
func TestAutoRolesConfig(t *testing.T) {
	c, err := NewConfig("auto-roles", mustPolicy(t, "overlayd"), 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Clients != 10000 || c.Supernodes != 5 || c.Auto == nil || c.Auto.Policy.ClusterSize != 3 || c.Auto.Policy.MinUptime != 10*time.Minute {
		t.Fatalf("defaults %+v", c)
	}
	c.Auto.Public = 2
	if err := c.Validate(); err == nil {
		t.Fatal("Public 2 accepted")
	}
	c.Auto.Public = 0.05
	if s, err := New(c); err != nil || s.auto == nil || len(s.auto.nodes) != 500 {
		t.Fatalf("New: %v", err)
	}
	if protocol.MissedAnnouncements != 3 || protocol.MissedKeepalives != 3 || c.Params.AnnounceInterval != 10*time.Second ||
		c.Params.Keepalive != 5*time.Second || c.Params.Backoff.Max != time.Minute || c.Auto.Policy.PromoteDelayMax != 5*time.Minute {
		t.Fatal("the re-attach bound of TestAutoRolesScenario (407.5 s) is computed from settings that changed: recompute it")
	}
}
