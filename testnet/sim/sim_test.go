package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
)

func mustPolicy(t testing.TB, name string) Policy {
	t.Helper()
	p, err := FindPolicy(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSim(t testing.TB, scenario, policy string, clients, supernodes int, seed uint64, dur time.Duration) *Sim {
	t.Helper()
	cfg, err := NewConfig(scenario, mustPolicy(t, policy), clients, supernodes, seed)
	if err != nil {
		t.Fatal(err)
	}
	if dur > 0 {
		cfg.Duration = dur
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func reportJSON(t testing.TB, s *Sim) []byte {
	t.Helper()
	b, err := s.Run().JSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The same seed gives byte-identical report.json; another seed another.
func TestDeterminism(t *testing.T) {
	for _, pol := range []string{"overlayd", "2010"} {
		a := reportJSON(t, mustSim(t, "skype2010", pol, 2000, 20, 7, 90*time.Second))
		b := reportJSON(t, mustSim(t, "skype2010", pol, 2000, 20, 7, 90*time.Second))
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: the same seed gave different reports (%d and %d bytes)", pol, len(a), len(b))
		}
		c := reportJSON(t, mustSim(t, "skype2010", pol, 2000, 20, 8, 90*time.Second))
		if bytes.Equal(a, c) {
			t.Fatalf("%s: seeds 7 and 8 gave the same report", pol)
		}
	}
}

// cloneRand returns a source in the state of the simulator's, so that a
// reference call draws what the simulator's call drew.
func cloneRand(t testing.TB, s *Sim) *rand.Rand {
	t.Helper()
	st, err := s.src.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var src rand.PCG
	if err := src.UnmarshalBinary(st); err != nil {
		t.Fatal(err)
	}
	return rand.New(&src)
}

func ids(ais []peer.AddrInfo) []peer.ID {
	out := make([]peer.ID, len(ais))
	for i, a := range ais {
		out[i] = a.ID
	}
	return out
}

// The divergence test for the failover plan: a simulated client's pass
// plans exactly what node/client plans from the same directory, ring,
// last supernode, alternatives, waits and random state. The reference
// builds the ring and home cluster itself from the directory, with the
// daemon's functions, so a simulator that planned with another ring, home,
// last, alternatives or wait list, or with a copy of plan, fails here.
func TestPlanMatchesDaemon(t *testing.T) {
	// 90% full and no megas: after the crash passes keep failing, with
	// waits and alternatives, and some clients were away from home.
	s := mustSim(t, "skype2010", "no-megas", 2000, 20, 3, 0)
	ringRef := func() *ring.Ring {
		r, err := ring.New(cluster.Members(s.snap, s.time(), cluster.DefaultPolicy(s.p.AnnounceInterval, true)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var afterDeath, afterPass int
	compare := func(i int) {
		c := &s.clients[i]
		r := ringRef()
		id := s.clientID(int32(i))
		var last peer.ID
		if c.last >= 0 {
			last = s.sns[c.last].id
		}
		nb := map[peer.ID]time.Time{}
		for k, v := range c.nb() {
			nb[k] = v
		}
		want := client.NewPass(client.PassInput{Self: id, Home: cluster.Home(r, []byte(id)), Last: last,
			Alts: slices.Clone(c.alts()), Snapshot: s.snap, NotBefore: nb, Now: s.time(),
			RedirectWait: s.p.AnnounceInterval}, cloneRand(t, s)).Candidates()
		got := s.startPass(int32(i)).Candidates()
		if !slices.Equal(ids(got), ids(want)) {
			t.Fatalf("t=%v client %d: simulator planned %v, node/client plans %v", time.Duration(s.now), i, ids(got), ids(want))
		}
	}
	for step := s.cfg.CrashAt; afterDeath <= 20 || afterPass <= 20; step += 100 * time.Millisecond {
		if step > s.cfg.CrashAt+60*time.Second {
			t.Fatalf("compared %d plans after a session died and %d after a refused pass; want more than 20 of each", afterDeath, afterPass)
		}
		s.RunUntil(step)
		for i := range s.clients {
			c := &s.clients[i]
			if c.state != csWaiting || (c.last < 0 && len(c.alts()) == 0 && len(c.nb()) == 0) {
				continue
			}
			if c.last >= 0 {
				afterDeath++
			}
			if len(c.alts()) > 0 || len(c.nb()) > 0 {
				afterPass++
			}
			compare(i)
		}
	}
	// Inputs the run rarely makes: the last supernode live and away from
	// home, alternatives offered and waits pending, all at once.
	rng := rand.New(rand.NewPCG(1, 1))
	n := 0
	for i := range s.clients {
		c := &s.clients[i]
		if c.state != csAttached || c.run != nil || n == 50 {
			continue
		}
		n++
		s.detach(int32(i))
		c.state, c.last = csWaiting, int32(rng.IntN(s.cfg.Supernodes))
		c.setNB(map[peer.ID]time.Time{s.sns[rng.IntN(len(s.sns))].id: s.time().Add(time.Second)})
		c.setAlts([]peer.AddrInfo{{ID: s.sns[rng.IntN(len(s.sns))].id}, {ID: s.sns[rng.IntN(len(s.sns))].id}})
		compare(i)
	}
}

// The simulated clients' waits are overlay/backoff's: full jitter with
// the client's own Backoff, or Fixed without jitter.
func TestBackoffMatchesDaemon(t *testing.T) {
	for _, pol := range []string{"overlayd", "no-jitter"} {
		s := mustSim(t, "skype2010", pol, 200, 4, 5, 0)
		ref := cloneRand(t, s)
		var want backoff.Strategy = backoff.Fixed(s.p.FixedRetry)
		if s.cfg.Policy.Jitter {
			b, err := backoff.New(s.p.Backoff, ref)
			if err != nil {
				t.Fatal(err)
			}
			want = b
		}
		for k, ra := range []time.Duration{0, 0, 2 * time.Second, 0, 0, 0, 0, 0, 0, 5 * time.Second} {
			if got, w := s.retryDelay(0, ra), want.Next(ra); got != w {
				t.Fatalf("%s: wait %d: simulator %v, overlay/backoff %v", pol, k, got, w)
			}
		}
	}
}

// A BUSY's alternatives are what supernode.Admission offers: node's
// candidates (every entry but the refusing supernode with spare capacity)
// sampled by cluster.Sample.
func TestAlternativesMatchNode(t *testing.T) {
	s := mustSim(t, "recovery", "overlayd", 0, 0, 9, 0)
	s.RunUntil(s.cfg.CrashAt + 15*time.Second)
	for b := range int32(len(s.sns)) {
		self := s.sns[b].id
		var ais []peer.AddrInfo
		var spare []int
		for _, e := range s.snap.Entries {
			if sp := cluster.Spare(e); e.ID != self && sp > 0 {
				ais = append(ais, peer.AddrInfo{ID: e.ID})
				spare = append(spare, sp)
			}
		}
		var want []peer.ID
		for _, k := range cluster.Sample(spare, 4, cloneRand(t, s)) {
			want = append(want, ais[k].ID)
		}
		if got := ids(s.alternatives(b)); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("supernode %d offers %v, node would offer %v", b, got, want)
		}
	}
}

// The cascade: under the 2010 policy the survivors of a 30% crash take
// every orphan, overload and fail one after another, far below the 70%
// that survived the crash; under overlayd's no supernode fails and none
// goes above its capacity, and everyone is attached again.
func TestCascade(t *testing.T) {
	old := mustSim(t, "skype2010", "2010", 10000, 100, 1, 3*time.Minute).Run().Summary
	if old.SupernodesCrashed != 30 || old.RegularAliveMin > 0.35 || old.SupernodesFailed < 35 {
		t.Errorf("2010: crashed %d, failed %d, fewest alive %.2f: want 30 crashed and the cascade taking the alive fraction below 0.35",
			old.SupernodesCrashed, old.SupernodesFailed, old.RegularAliveMin)
	}
	ours := mustSim(t, "skype2010", "overlayd", 10000, 100, 1, 3*time.Minute).Run().Summary
	if ours.SupernodesFailed != 0 || ours.AboveCapacity != 0 || ours.PeakLoad > 1 || ours.RegularAliveMin != 0.7 {
		t.Errorf("overlayd: failed %d, above capacity %d, peak load %.2f, fewest alive %.2f: want 0, 0, <= 1, 0.70",
			ours.SupernodesFailed, ours.AboveCapacity, ours.PeakLoad, ours.RegularAliveMin)
	}
	if ours.TimeTo100 == nil || ours.FinalAttached != 1 {
		t.Errorf("overlayd: not every client attached again (final %.4f)", ours.FinalAttached)
	}
	for name, sum := range map[string]Summary{"2010": old, "overlayd": ours} {
		b, _ := json.Marshal(sum)
		t.Logf("%s: %s", name, b)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := NewConfig("nope", mustPolicy(t, "overlayd"), 10, 1, 1); err == nil {
		t.Error("unknown scenario accepted")
	}
	if _, err := FindPolicy("nope"); err == nil {
		t.Error("unknown policy accepted")
	}
	for name, f := range map[string]func(*Config){
		"clients":   func(c *Config) { c.Clients = 0 },
		"loss":      func(c *Config) { c.Params.Loss = 1 },
		"sample":    func(c *Config) { c.Params.Sample = 150 * time.Millisecond },
		"latency":   func(c *Config) { c.Params.LatencyMean = c.Params.LatencyMin - 1 },
		"duration":  func(c *Config) { c.Duration = 0 },
		"too short": func(c *Config) { c.Duration = c.CrashAt },
		"too large": func(c *Config) { c.Supernodes = 1 << 16 },
	} {
		c, err := NewConfig("skype2010", mustPolicy(t, "overlayd"), 100, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	files, err := mustSim(t, "recovery", "overlayd", 0, 0, 1, 0).Run().Write(dir)
	if err != nil || len(files) != 2+len(Plots()) {
		t.Fatalf("Write = %v, %v", files, err)
	}
	md, err := os.ReadFile(files[1])
	if err != nil || !bytes.Contains(md, []byte("time to 99% / 100% attached")) || !bytes.Contains(md, []byte("--policy overlayd")) {
		t.Fatalf("report.md: %v\n%s", err, md)
	}
	// Every plot is a PNG of some substance, linked from report.md.
	for i, p := range Plots() {
		b, err := os.ReadFile(files[2+i])
		if err != nil || len(b) < 10000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: %d bytes, %v", p.File, len(b), err)
		}
		if !bytes.Contains(md, []byte("("+p.File+")")) {
			t.Errorf("report.md does not link %s", p.File)
		}
	}
}

// restart-wave: every client leaves and attaches again once, and the
// network stays whole.
func TestRestartWave(t *testing.T) {
	sum := mustSim(t, "restart-wave", "overlayd", 2000, 20, 1, 0).Run().Summary
	if sum.Attempts.Accept < 2000 || sum.FinalAttached != 1 || sum.LowestAttached == 1 || sum.SupernodesFailed != 0 || sum.AboveCapacity != 0 {
		t.Fatalf("%+v: want every client to attach again (2,000 accepts at least), all attached at the end, none failed or above capacity", sum)
	}
}

// churn: clients keep restarting (about clients × duration / mean of
// them), each attaches again, and nothing fails.
func TestChurn(t *testing.T) {
	s := mustSim(t, "churn", "overlayd", 2000, 20, 1, 0)
	want := int(float64(2000) * float64(s.cfg.Duration-s.cfg.CrashAt) / float64(s.cfg.ChurnMean))
	sum := s.Run().Summary
	if sum.Attempts.Accept < want*8/10 || sum.LowestAttached > 0.999 || sum.FinalAttached < 0.97 || sum.SupernodesFailed != 0 || sum.AboveCapacity != 0 {
		b, _ := json.Marshal(sum)
		t.Fatalf("%s: want about %d re-attaches, clients briefly away, at least 97%% attached at the end, none failed or above capacity", b, want)
	}
}

// The return-home decision: a simulated client away from home asks what
// node/client.ReturnTargets names for the home cluster the daemon's
// functions give it.
func TestReturnMatchesDaemon(t *testing.T) {
	s := mustSim(t, "recovery", "overlayd", 0, 0, 2, 0)
	compared, nonEmpty := 0, 0
	for step := s.cfg.CrashAt + 5*time.Second; step < s.cfg.Duration && nonEmpty < 10; step += time.Second {
		s.RunUntil(step)
		r, err := ring.New(cluster.Members(s.snap, s.time(), cluster.DefaultPolicy(s.p.AnnounceInterval, true)))
		if err != nil {
			t.Fatal(err)
		}
		for i := range s.clients {
			c := &s.clients[i]
			if c.state != csAttached || c.run != nil || c.home {
				continue
			}
			id := s.clientID(int32(i))
			home := cluster.Home(r, []byte(id))
			cur := s.sns[c.sn].id
			if slices.Contains(home, cur) {
				continue
			}
			want := ids(client.ReturnTargets(id, home, cur, s.snap, c.nb(), s.time()))
			s.tryReturn(int32(i))
			var got []peer.ID
			if c.run != nil {
				got = ids(c.run.targets)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("client %d: simulator asks %v, node/client would ask %v", i, got, want)
			}
			compared++
			if len(want) > 0 {
				nonEmpty++
			}
		}
	}
	if nonEmpty < 10 {
		t.Fatalf("compared %d return decisions, %d with somewhere to go; want at least 10 of those", compared, nonEmpty)
	}
}

// The hand-back divergence test: each demoted mega detaches, at step i
// of its drain, exactly what roledriver.Drain would (role.DrainStep of its
// load above the regular capacity it keeps), the steps
// role.DrainStepInterval apart from the demotion, and the megas end at
// their regular capacity with every client attached.
func TestHandBackMatchesDaemon(t *testing.T) {
	s := mustSim(t, "recovery", "overlayd", 0, 0, 2, 0)
	rep := s.Run()
	hb := rep.Summary.HandBack
	if hb == nil || hb.Excess == 0 || len(s.drainLog) == 0 {
		t.Fatalf("no hand-back to check: %+v, %d steps", hb, len(s.drainLog))
	}
	step := role.DrainStepInterval(s.p.DrainPeriod)
	demoted := int64(hb.DemotedAt * 1e9)
	for _, d := range s.drainLog {
		if want := role.DrainStep(d.load-d.keep, d.i); d.k != want || d.keep != s.cfg.MegaBefore {
			t.Errorf("mega %d step %d: detached %d of load %d keeping %d, want role.DrainStep = %d keeping %d", d.b, d.i, d.k, d.load, d.keep, want, s.cfg.MegaBefore)
		}
		if d.at != demoted+int64(d.i)*int64(step) {
			t.Errorf("mega %d step %d at %v, want %v", d.b, d.i, time.Duration(d.at), time.Duration(demoted+int64(d.i)*int64(step)))
		}
	}
	if hb.TimeToHandedBack == nil || rep.Summary.FinalAttached != 1 {
		t.Errorf("not handed back: %+v, final attached %v", hb, rep.Summary.FinalAttached)
	}
	for b := s.cfg.Supernodes; b < len(s.sns); b++ {
		if sn := &s.sns[b]; sn.mega || len(sn.clients) > sn.capacity {
			t.Errorf("ex-mega %d: mega %v, %d clients over capacity %d", b, sn.mega, len(sn.clients), sn.capacity)
		}
	}
}

// A crash that resets connections (Params.CrashResets, the testnet's
// CloseAbruptlyForTest) is noticed one hop later; a vanished host only
// after the keepalive silence. The recovery scenario (keepalive 1 s,
// silence 3 s) re-attaches 99% before the silence with resets, and not
// without.
func TestCrashResets(t *testing.T) {
	for _, resets := range []bool{true, false} {
		cfg, err := NewConfig("recovery", mustPolicy(t, "overlayd"), 0, 0, 3)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Params.CrashResets = resets
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sum := s.Run().Summary
		silence := (time.Duration(3) * cfg.Params.Keepalive).Seconds()
		if sum.TimeTo99 == nil || (*sum.TimeTo99 < silence) != resets {
			t.Errorf("resets %v: 99%% attached at %v s, silence %v s", resets, sum.TimeTo99, silence)
		}
	}
}

// In one process the attempts and the crash's work share what the steady
// state leaves free: each at half while both wait, then the rest at all
// of it; and the recovery scenario re-attaches later than with a core per
// supernode, because its burst queues on the process's 2 cores.
func TestProcessCPU(t *testing.T) {
	cfg, err := NewConfig("recovery", mustPolicy(t, "overlayd"), 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params.ProcessCores, cfg.Params.ProcessBackground = 2, 1 // 1 core free
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.proc.backlog, s.proc.crash, s.proc.upd = 1, 0.5, s.now
	// 0.5 s of attempts more: 1.5 s of attempts and 0.5 s of crash share
	// the free core until the crash's is done (1 s), then 1 s alone.
	if got := s.processFinish(0.5); math.Abs(got-2) > 1e-9 {
		t.Fatalf("finish = %v s, want 2", got)
	}
	s.now += int64(time.Second)
	s.advanceProcess()
	if math.Abs(s.proc.backlog-0.5) > 1e-9 || s.proc.crash != 0 {
		t.Fatalf("after 1 s: attempts %v, crash %v; want 0.5 and 0", s.proc.backlog, s.proc.crash)
	}
	s.now += int64(time.Second)
	s.advanceProcess()
	if s.proc.backlog != 0 || s.delay(0) != 0 {
		t.Fatalf("after 2 s: attempts %v, delay %v; want none", s.proc.backlog, s.delay(0))
	}

	t99 := func(cores float64) float64 {
		cfg, err := NewConfig("recovery", mustPolicy(t, "overlayd"), 0, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Params.ProcessCores = cores
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := s.Run()
		if r.Summary.TimeTo99 == nil {
			t.Fatalf("cores %v: 99%% never reached", cores)
		}
		return *r.Summary.TimeTo99
	}
	if one, own := t99(2), t99(0); one < own+0.5 {
		t.Fatalf("time to 99%%: one process %.2f s, a core per supernode %.2f s: the process's queue should delay the burst", one, own)
	}
}
