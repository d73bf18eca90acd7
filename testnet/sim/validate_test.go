package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/testnet"
	"github.com/overlayd/overlayd/testnet/figure"
)

// validation is one run's figures, real or simulated, counted from the
// crash.
type validation struct {
	Orphans   int
	T99, T100 *float64
	PeakLoad  float64 // regular supernodes, load / capacity
	MegaPeak  int
	Accept    int
	Busy      int
	Error     int
	// Lost are sessions that ended on a live supernode (real runs: the
	// process was too loaded to keep them; the model has none).
	Lost int
	// PerSecond are the attempts whose outcome reached their client in
	// each second from the crash.
	PerSecond []float64
	// Real runs only, for finding out why they differ: every attempt and
	// session end of the window, the process's CPU (cores used) per
	// 100 ms from the crash, and the cores it used in the 2 s before.
	Trace      []traceRec `json:",omitempty"`
	CPU        []float64  `json:",omitempty"`
	Background float64    `json:",omitempty"`
	// KillTook and PromotedAt are seconds from the crash until
	// KillSupernodes and PromoteMegas returned; Megas the megas' IDs.
	KillTook   float64  `json:",omitempty"`
	PromotedAt float64  `json:",omitempty"`
	Megas      []string `json:",omitempty"`
	// Crash is the fraction of the supernodes crashed.
	Crash float64 `json:",omitempty"`
}

// traceRec is one attempt (or session end) of a real run, T and Latency in
// seconds from the crash.
type traceRec struct {
	T       float64
	Client  string
	SN      string
	Result  string
	Latency float64
	End     bool `json:",omitempty"`
}

// BenchmarkValidateRecovery runs the recovery scenario (20 supernodes of
// capacity 40, 600 clients, 30% crash, 3 megas of 200 promoted at the
// crash, the settings of testnet.BenchmarkRecovery at announce 5 s) in
// the real in-process testnet once and in the simulator with several
// seeds, and writes a table (validate.md) and the attempts per second of
// both on one chart (validate-attempts.png) into OVERLAYD_REPORT_DIR (or
// a temporary directory). The real network takes a few minutes of CPU: it
// runs only with OVERLAYD_SIM_VALIDATE=1.
//
//	OVERLAYD_SIM_VALIDATE=1 OVERLAYD_REPORT_DIR=/tmp/val \
//	  go test -run '^$' -bench ValidateRecovery -benchtime=1x -timeout 15m ./testnet/sim
//
// OVERLAYD_SIM_VALIDATE_CRASH sets the fraction of the supernodes that
// crash (default 0.3): the model's figures come from the 30% crash, and
// another fraction checks them out of sample.
func BenchmarkValidateRecovery(b *testing.B) {
	if os.Getenv("OVERLAYD_SIM_VALIDATE") == "" {
		b.Skip("set OVERLAYD_SIM_VALIDATE=1: runs the real 623-node testnet for about two minutes")
	}
	dir := os.Getenv("OVERLAYD_REPORT_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	const window = 60 * time.Second
	crash := 0.3
	if v := os.Getenv("OVERLAYD_SIM_VALIDATE_CRASH"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f >= 1 {
			b.Fatalf("OVERLAYD_SIM_VALIDATE_CRASH=%q: want a fraction in (0, 1)", v)
		}
		crash = f
	}
	runs := 3
	if v := os.Getenv("OVERLAYD_SIM_VALIDATE_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("OVERLAYD_SIM_VALIDATE_RUNS=%q: want a count >= 1", v)
		}
		runs = n
	}
	for b.Loop() {
		// OVERLAYD_SIM_VALIDATE=reuse reads the real runs of an earlier
		// invocation from real.json in the report directory.
		var saved struct {
			Runs  []validation
			Loads []string
		}
		path := filepath.Join(dir, "real.json")
		if js, err := os.ReadFile(path); err == nil && os.Getenv("OVERLAYD_SIM_VALIDATE") == "reuse" {
			if err := json.Unmarshal(js, &saved); err != nil {
				b.Fatal(err)
			}
			if len(saved.Runs) == 0 {
				b.Fatalf("%s: no runs", path)
			}
			if c := saved.Runs[0].Crash; c != 0 {
				crash = c
			}
		} else {
			for range runs {
				v, load := realRecovery(b, window, crash)
				saved.Runs, saved.Loads = append(saved.Runs, v), append(saved.Loads, load)
			}
			js, _ := json.Marshal(saved)
			if err := os.WriteFile(path, js, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		cpuFigures(b, saved.Runs, crash)
		var sims, silent []validation
		for seed := uint64(1); seed <= 9; seed++ {
			sims = append(sims, simRecovery(b, seed, window, func(c *Config) { c.CrashFraction = crash }))
			// The same without the one process: every supernode its own
			// core, the clients free (the model before the process's
			// queue was added).
			silent = append(silent, simRecovery(b, seed, window, func(c *Config) { c.CrashFraction, c.Params.ProcessCores = crash, 0 }))
		}
		md, err := writeValidation(dir, saved.Runs, saved.Loads, sims, silent)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("\n%s", md)
	}
}

// cpuFigures logs, per real run and their median, what the recovery
// scenario's one-process figures come from: the background is the
// process's CPU from 20 s to 59 s after the crash (the recovery is over;
// a 2 s window before the crash was too short: one garbage collection
// moved it by ±0.3 cores); the crash's own work is the CPU above that
// background in the 4 s after the crash, less the attempts of those 4 s
// at the scenario's measured costs, per crashed supernode.
func cpuFigures(b *testing.B, runs []validation, crash float64) {
	cfg, err := NewConfig("recovery", mustPolicy(b, "overlayd"), 0, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	p := cfg.Params
	var bgs, works []float64
	for i, v := range runs {
		if len(v.CPU) < 590 {
			continue
		}
		var bg float64
		for _, c := range v.CPU[200:590] {
			bg += c / 390
		}
		var excess, attempts float64
		for _, c := range v.CPU[:40] {
			excess += (c - bg) / 10
		}
		for _, t := range v.Trace {
			switch {
			case t.T >= 4 || t.End:
			case t.Result == "error":
				attempts += p.DeadDialCPU.Seconds()
			case t.Result == "accept":
				attempts += (p.DialCPU + p.AttemptCPU + p.AcceptCPU).Seconds()
			default:
				attempts += (p.DialCPU + p.AttemptCPU).Seconds()
			}
		}
		work := (excess - attempts) / math.Round(crash*20)
		bgs, works = append(bgs, bg), append(works, work)
		b.Logf("real run %d: background %.2f cores; CPU above it in the 4 s after the crash %.2f s, of which attempts %.2f s: the crash's own work %.0f ms per crashed supernode",
			i+1, bg, excess, attempts, 1000*work)
	}
	if len(bgs) > 0 {
		b.Logf("real runs, median: background %.2f cores, crash work %.0f ms per crashed supernode (the model: ProcessBackground %.2f, CrashCPU %v)",
			median(bgs), 1000*median(works), p.ProcessBackground, p.CrashCPU)
	}
}

// realRecovery runs the in-process testnet: the network of
// testnet.BenchmarkRecovery (its settings at announce 5 s), a crash of
// 30% of the supernodes and the megas promoted at once, observed for
// window.
func realRecovery(b *testing.B, window time.Duration, crash float64) (validation, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type att struct {
		t      time.Time
		result string
		end    bool // a session end, not an attempt
		sn     string
		client string
		lat    time.Duration
	}
	var mu sync.Mutex
	var atts []att
	cfg := testnet.Config{Supernodes: 20, Clients: 600, Megas: 3, Capacity: 40, MegaCapacity: 200,
		AnnounceInterval: 5 * time.Second, Keepalive: time.Second, BusyRetryAfter: time.Second,
		RetryBase: 500 * time.Millisecond, RetryMax: 4 * time.Second, ReturnInterval: 5 * time.Second, DrainPeriod: 10 * time.Second,
		Seed: 0x72656330, SingleBootstrap: true, NoGroup: true, StartParallel: 32,
		Options: func(s testnet.Slot) []node.Option {
			if s.Kind != testnet.KindClient {
				return nil
			}
			name := s.Name
			return []node.Option{node.WithObserver(func(e client.Event) {
				if e.Kind == client.EventAttempt || e.Kind == client.EventSessionEnd {
					mu.Lock()
					atts = append(atts, att{e.Time, e.Result, e.Kind == client.EventSessionEnd, e.Supernode.String(), name, e.Latency})
					mu.Unlock()
				}
			})}
		}}
	var v validation
	n, err := testnet.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	if err := n.WaitAttached(ctx, nil); err != nil {
		b.Fatal(err)
	}
	// The process's CPU, every 100 ms from 2 s before the crash: the
	// steady state's share and what the recovery costs.
	cpu0 := processCPU()
	settle := time.NewTimer(2 * time.Second)
	<-settle.C
	v.Background = (processCPU() - cpu0).Seconds() / 2
	cpuDone := make(chan []float64)
	go func() {
		var used []float64
		prev := processCPU()
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for range int(window / (100 * time.Millisecond)) {
			<-tk.C
			now := processCPU()
			used = append(used, (now-prev).Seconds()/0.1)
			prev = now
		}
		cpuDone <- used
	}()
	// Everything after the crash is computed from the clients' own
	// events, not by sampling: a sample reads 623 nodes' Status and takes
	// about 0.6 s of CPU, which on this 2-core machine took half the CPU
	// the recovery itself needed (an earlier harness sampled back to back
	// and reported times quantised by its 0.6 s samples).
	ids := map[string]string{} // name → peer ID
	for _, nd := range n.Supernodes() {
		ids[n.Name(nd)] = nd.ID().String()
	}
	pre := n.Sample()
	t0 := time.Now()
	killed := n.KillSupernodes(crash)
	v.KillTook = time.Since(t0).Seconds()
	v.Crash = crash
	killedIDs := map[string]bool{}
	for _, k := range killed {
		killedIDs[ids[k]] = true
	}
	load := map[string]int{} // supernode ID → clients, from the clients' view
	capacity := map[string]int{}
	mega := map[string]bool{}
	for _, l := range pre.Load {
		id := ids[l.Name]
		load[id], capacity[id], mega[id] = l.Attached, l.Capacity, strings.HasPrefix(l.Name, "mega")
		if killedIDs[id] {
			v.Orphans += l.Attached
		}
	}
	if _, err := n.PromoteMegas(ctx); err != nil {
		b.Fatal(err)
	}
	v.PromotedAt = time.Since(t0).Seconds()
	for id, m := range mega {
		if m {
			v.Megas = append(v.Megas, id)
		}
	}
	slices.Sort(v.Megas)
	v.CPU = <-cpuDone
	mu.Lock()
	evs := slices.Clone(atts)
	mu.Unlock()
	slices.SortFunc(evs, func(a, b att) int { return a.t.Compare(b.t) })
	// Replay, counting as the simulator does: a client is attached when
	// its session is on a live supernode. The crash's orphans are
	// unattached from the crash (their clients notice a little later);
	// any other client from a session end (other than a move home, whose
	// new session is already accepted) to its next ACCEPT. A supernode's
	// load is its clients before the crash plus ACCEPTs minus session
	// ends.
	unattached := map[string]bool{}
	noticed := 0 // orphans whose session end has been seen
	for _, a := range evs {
		d := a.t.Sub(t0)
		if d < 0 || d >= window {
			continue
		}
		switch {
		case a.end && killedIDs[a.sn]:
			noticed++
			unattached[a.client] = true
		case a.end:
			load[a.sn]--
			if a.result != "returned home" {
				unattached[a.client] = true
			}
		case a.result == "accept":
			load[a.sn]++
			delete(unattached, a.client)
		}
		attached := cfg.Clients - len(unattached) - (v.Orphans - noticed)
		since := d.Seconds()
		if v.T99 == nil && 100*attached >= 99*cfg.Clients {
			v.T99 = &since
		}
		if v.T100 == nil && attached == cfg.Clients {
			v.T100 = &since
		}
		if !mega[a.sn] && capacity[a.sn] > 0 {
			v.PeakLoad = max(v.PeakLoad, float64(load[a.sn])/float64(capacity[a.sn]))
		}
		megas := 0
		for id, m := range mega {
			if m {
				megas += load[id]
			}
		}
		v.MegaPeak = max(v.MegaPeak, megas)
	}
	v.PerSecond = make([]float64, int(window/time.Second))
	for _, a := range evs {
		d := a.t.Sub(t0)
		if d < 0 || d >= window {
			continue
		}
		v.Trace = append(v.Trace, traceRec{T: d.Seconds(), Client: a.client, SN: a.sn, Result: a.result, Latency: a.lat.Seconds(), End: a.end})
		if a.end {
			if !killedIDs[a.sn] && a.result != "returned home" {
				v.Lost++
			}
			continue
		}
		v.PerSecond[int(d/time.Second)]++
		switch a.result {
		case "accept":
			v.Accept++
		case "busy", "redirect":
			v.Busy++
		default:
			v.Error++
		}
	}
	avg, _ := os.ReadFile("/proc/loadavg")
	b.Logf("real: killed %v; load average %s", killed, strings.TrimSpace(string(avg)))
	return v, strings.Join(strings.Fields(string(avg))[:min(3, len(strings.Fields(string(avg))))], " ")
}

// processCPU is the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// simRecovery runs the simulator's recovery scenario with seed.
func simRecovery(b *testing.B, seed uint64, window time.Duration, vary func(*Config)) validation {
	cfg, err := NewConfig("recovery", mustPolicy(b, "overlayd"), 0, 0, seed)
	if err != nil {
		b.Fatal(err)
	}
	vary(&cfg)
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	r := s.Run()
	sum := r.Summary
	v := validation{Orphans: sum.Orphans, T99: sum.TimeTo99, T100: sum.TimeTo100, PeakLoad: sum.PeakLoad, MegaPeak: sum.MegaPeak}
	// Attempts after the crash, per second (from the 100 ms buckets:
	// bucket i covers (i/10, (i+1)/10] s).
	crash := int(r.Config.CrashAt / (100 * time.Millisecond))
	v.PerSecond = make([]float64, int(window/time.Second))
	for i, k := range r.Series.AttemptsPer100 {
		if j := (i - crash) / 10; i >= crash && j < len(v.PerSecond) {
			v.PerSecond[j] += float64(k)
		}
	}
	v.Accept, v.Busy, v.Error = sum.Attempts.Accept, sum.Attempts.Busy, sum.Attempts.Error
	return v
}

// correlation is Pearson's r of xs and ys (equal lengths).
func correlation(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, syy, sxy float64
	for i := range xs {
		sx, sy = sx+xs[i], sy+ys[i]
		sxx, syy, sxy = sxx+xs[i]*xs[i], syy+ys[i]*ys[i], sxy+xs[i]*ys[i]
	}
	return (n*sxy - sx*sy) / math.Sqrt((n*sxx-sx*sx)*(n*syy-sy*sy))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch n := len(s); {
	case n == 0:
		return math.NaN()
	case n%2 == 0:
		return (s[n/2-1] + s[n/2]) / 2
	default:
		return s[n/2]
	}
}

// writeValidation writes validate.md and validate-attempts.png and returns
// the Markdown: the real runs' median [min–max] against the simulator's
// median of its seeds, in the one-process model and without it.
func writeValidation(dir string, reals []validation, loads []string, sims, silent []validation) (string, error) {
	tf := func(p *float64) float64 {
		if p == nil {
			return math.Inf(1)
		}
		return *p
	}
	col := func(vs []validation, f func(v validation) float64) (med, lo, hi float64) {
		var xs []float64
		for _, v := range vs {
			xs = append(xs, f(v))
		}
		return median(xs), slices.Min(xs), slices.Max(xs)
	}
	within := func(simv, realv, tol float64) string {
		if realv == 0 || math.IsInf(realv, 0) || math.IsInf(simv, 0) {
			return "—"
		}
		d := (simv - realv) / realv
		ok := "yes"
		if math.Abs(d) > tol {
			ok = "**no**"
		}
		return fmt.Sprintf("%+.0f%% (%s)", 100*d, ok)
	}
	// The real curve is the median of the runs, second by second.
	realCurve := make([]float64, len(reals[0].PerSecond))
	for i := range realCurve {
		var xs []float64
		for _, v := range reals {
			xs = append(xs, v.PerSecond[i])
		}
		realCurve[i] = median(xs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| figure | real testnet, median of %d runs [min–max] | simulator: one process of 2 cores, median of %d seeds [min–max] | sim vs real (tolerance) | simulator without the process (a core per supernode, clients free) | sim vs real |\n|---|---|---|---|---|---|\n", len(reals), len(sims))
	row := func(name string, f func(v validation) float64, unit string, tol float64) {
		rm, rlo, rhi := col(reals, f)
		fmt.Fprintf(&b, "| %s | %.4g%s [%.4g–%.4g] ", name, rm, unit, rlo, rhi)
		for _, vs := range [][]validation{sims, silent} {
			med, lo, hi := col(vs, f)
			tolS := "—"
			if tol > 0 {
				tolS = within(med, rm, tol) + fmt.Sprintf(", ±%.0f%%", 100*tol)
			}
			fmt.Fprintf(&b, "| %.4g%s [%.4g–%.4g] | %s ", med, unit, lo, hi, tolS)
		}
		b.WriteString("|\n")
	}
	row("orphans", func(v validation) float64 { return float64(v.Orphans) }, "", 0)
	row("time to 99% attached", func(v validation) float64 { return tf(v.T99) }, " s", 0.3)
	row("time to 100% attached", func(v validation) float64 { return tf(v.T100) }, " s", 0.3)
	row("peak load / capacity, regular", func(v validation) float64 { return v.PeakLoad }, "", 0.2)
	row("most clients on the megas", func(v validation) float64 { return float64(v.MegaPeak) }, "", 0)
	row("attempts: accept", func(v validation) float64 { return float64(v.Accept) }, "", 0)
	row("attempts: busy or redirect", func(v validation) float64 { return float64(v.Busy) }, "", 0)
	row("attempts: failed (dead supernode, timeout)", func(v validation) float64 { return float64(v.Error) }, "", 0)
	row("sessions lost on live supernodes (real: process overload)", func(v validation) float64 { return float64(v.Lost) }, "", 0)
	peakAt := func(xs []float64) float64 { return float64(slices.Index(xs, slices.Max(xs))) }
	row("second with the most attempts (from the crash)", func(v validation) float64 { return peakAt(v.PerSecond) }, "", 0)
	row("most attempts in a second", func(v validation) float64 { return slices.Max(v.PerSecond) }, "", 0)
	// The curves' shape: Pearson's correlation with the real runs' median
	// curve over the first 20 s.
	row("attempts per second: correlation with the real runs' median curve, first 20 s", func(v validation) float64 { return correlation(realCurve[:20], v.PerSecond[:20]) }, "", 0)
	fmt.Fprintf(&b, "\nLoad average at the end of each real run: %s.\n", strings.Join(loads, "; "))
	md := b.String()
	if err := os.WriteFile(filepath.Join(dir, "validate.md"), []byte(md), 0o644); err != nil {
		return "", err
	}
	// The chart: every real run, and the simulator's medians, per second.
	r := &Report{Config: Config{Scenario: "recovery", Policy: Policy{Name: "overlayd"}, Clients: 600, Supernodes: 20, Duration: 60 * time.Second}}
	p := newPlot(r, "attempts per second after the crash, real vs simulated", "attempts per second")
	p.Title.Text = "recovery: attach attempts per second after the crash — real testnet vs simulator"
	p.X.Label.Text = "seconds since the crash"
	perSecond := func(y func(i int) float64) plotter.XYs {
		xys := make(plotter.XYs, len(realCurve))
		for i := range xys {
			xys[i] = plotter.XY{X: float64(i) + 0.5, Y: y(i)}
		}
		return xys
	}
	med := func(vs []validation) func(i int) float64 {
		return func(i int) float64 {
			var xs []float64
			for _, v := range vs {
				xs = append(xs, v.PerSecond[i])
			}
			return median(xs)
		}
	}
	for k, v := range reals {
		name := ""
		if k == 0 {
			name = fmt.Sprintf("real testnet (%d runs)", len(reals))
		}
		if err := addLine(p, name, perSecond(func(i int) float64 { return v.PerSecond[i] }), figure.Style(colBlue, 1.2)); err != nil {
			return "", err
		}
	}
	if err := addLine(p, fmt.Sprintf("simulator, one process (median of %d seeds)", len(sims)), perSecond(med(sims)), figure.Style(colOrange, 1.8, 5, 2)); err != nil {
		return "", err
	}
	if err := addLine(p, "simulator, a core per supernode", perSecond(med(silent)), figure.Style(colGreen, 1.2, 2, 2)); err != nil {
		return "", err
	}
	p.X.Min, p.X.Max = 0, 20
	if err := figure.SavePNG(filepath.Join(dir, "validate-attempts.png"), p); err != nil {
		return "", err
	}
	return md, nil
}
