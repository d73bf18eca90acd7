package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/testnet"
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
	for b.Loop() {
		// OVERLAYD_SIM_VALIDATE=reuse reads the real run of an earlier
		// invocation from real.json in the report directory.
		var real validation
		var load string
		saved := filepath.Join(dir, "real.json")
		if b2, err := os.ReadFile(saved); err == nil && os.Getenv("OVERLAYD_SIM_VALIDATE") == "reuse" {
			var rr struct {
				V    validation
				Load string
			}
			if err := json.Unmarshal(b2, &rr); err != nil {
				b.Fatal(err)
			}
			real, load = rr.V, rr.Load
		} else {
			real, load = realRecovery(b, window)
			js, _ := json.Marshal(struct {
				V    validation
				Load string
			}{real, load})
			if err := os.WriteFile(saved, js, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		var sims, silent []validation
		for seed := uint64(1); seed <= 9; seed++ {
			sims = append(sims, simRecovery(b, seed, window, true))
			silent = append(silent, simRecovery(b, seed, window, false))
		}
		md, err := writeValidation(dir, real, load, sims, silent)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("\n%s", md)
	}
}

// realRecovery runs the in-process testnet: the network of
// testnet.BenchmarkRecovery (its settings at announce 5 s), a crash of
// 30% of the supernodes and the megas promoted at once, observed for
// window.
func realRecovery(b *testing.B, window time.Duration) (validation, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type att struct {
		t      time.Time
		result string
		end    bool // a session end, not an attempt
		sn     string
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
			return []node.Option{node.WithObserver(func(e client.Event) {
				if e.Kind == client.EventAttempt || e.Kind == client.EventSessionEnd {
					mu.Lock()
					atts = append(atts, att{e.Time, e.Result, e.Kind == client.EventSessionEnd, e.Supernode.String()})
					mu.Unlock()
				}
			})}
		}}
	n, err := testnet.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	if err := n.WaitAttached(ctx, nil); err != nil {
		b.Fatal(err)
	}
	settle := time.NewTimer(2 * time.Second)
	<-settle.C
	// Sample every 250 ms, as BenchmarkRecovery does.
	type sample struct {
		t        float64
		attached int
		peak     float64
		mega     int
	}
	var samples []sample
	ids := map[string]string{} // name → peer ID
	for _, nd := range n.Supernodes() {
		ids[n.Name(nd)] = nd.ID().String()
	}
	pre := n.Sample()
	t0 := time.Now()
	killed := n.KillSupernodes(0.3)
	killedIDs := map[string]bool{}
	var v validation
	for _, k := range killed {
		killedIDs[ids[k]] = true
		for _, l := range pre.Load {
			if l.Name == k {
				v.Orphans += l.Attached
			}
		}
	}
	if _, err := n.PromoteMegas(ctx); err != nil {
		b.Fatal(err)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Since(t0) < window {
		<-tick.C
		s := n.Sample()
		sm := sample{t: time.Since(t0).Seconds(), attached: s.Attached}
		for _, l := range s.Load {
			if l.Mega || strings.HasPrefix(l.Name, "mega") {
				sm.mega += l.Attached
			} else if l.Capacity > 0 {
				sm.peak = max(sm.peak, float64(l.Attached)/float64(l.Capacity))
			}
		}
		samples = append(samples, sm)
	}
	for _, s := range samples {
		if v.T99 == nil && 100*s.attached >= 99*cfg.Clients {
			v.T99 = &s.t
		}
		if v.T100 == nil && s.attached == cfg.Clients {
			v.T100 = &s.t
		}
		v.PeakLoad = max(v.PeakLoad, s.peak)
		v.MegaPeak = max(v.MegaPeak, s.mega)
	}
	v.PerSecond = make([]float64, int(window/time.Second))
	mu.Lock()
	for _, a := range atts {
		d := a.t.Sub(t0)
		if d < 0 || d >= window {
			continue
		}
		if a.end {
			if !killedIDs[a.sn] {
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
	mu.Unlock()
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("real: killed %v; load average %s", killed, strings.TrimSpace(string(load)))
	return v, strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " ")
}

// simRecovery runs the simulator's recovery scenario with seed.
func simRecovery(b *testing.B, seed uint64, window time.Duration, resets bool) validation {
	cfg, err := NewConfig("recovery", mustPolicy(b, "overlayd"), 0, 0, seed)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Params.CrashResets = resets
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

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[len(s)/2]
}

// writeValidation writes validate.md and validate-attempts.png and returns
// the Markdown.
func writeValidation(dir string, real validation, load string, sims, silent []validation) (string, error) {
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
	var b strings.Builder
	fmt.Fprintf(&b, "| figure | real testnet (1 run, load average %s) | simulator, crashes reset connections (as the testnet's), median of %d seeds [min–max] | sim vs real (tolerance) | simulator, crashed hosts vanish (keepalive silence) | sim vs real |\n|---|---|---|---|---|---|\n", load, len(sims))
	row := func(name string, realv float64, f func(v validation) float64, unit string, tol float64) {
		fmt.Fprintf(&b, "| %s | %.4g%s ", name, realv, unit)
		for _, vs := range [][]validation{sims, silent} {
			med, lo, hi := col(vs, f)
			tolS := "—"
			if tol > 0 {
				tolS = within(med, realv, tol) + fmt.Sprintf(", ±%.0f%%", 100*tol)
			}
			fmt.Fprintf(&b, "| %.4g%s [%.4g–%.4g] | %s ", med, unit, lo, hi, tolS)
		}
		b.WriteString("|\n")
	}
	row("orphans", float64(real.Orphans), func(v validation) float64 { return float64(v.Orphans) }, "", 0)
	row("time to 99% attached", tf(real.T99), func(v validation) float64 { return tf(v.T99) }, " s", 0.3)
	row("time to 100% attached", tf(real.T100), func(v validation) float64 { return tf(v.T100) }, " s", 0.3)
	row("peak load / capacity, regular", real.PeakLoad, func(v validation) float64 { return v.PeakLoad }, "", 0.2)
	row("most clients on the megas", float64(real.MegaPeak), func(v validation) float64 { return float64(v.MegaPeak) }, "", 0)
	row("attempts: accept", float64(real.Accept), func(v validation) float64 { return float64(v.Accept) }, "", 0)
	row("attempts: busy or redirect", float64(real.Busy), func(v validation) float64 { return float64(v.Busy) }, "", 0)
	row("attempts: failed (dead supernode, timeout)", float64(real.Error), func(v validation) float64 { return float64(v.Error) }, "", 0)
	row("sessions lost on live supernodes (real: harness overload)", float64(real.Lost), func(v validation) float64 { return float64(v.Lost) }, "", 0)
	peakAt := func(xs []float64) float64 { return float64(slices.Index(xs, slices.Max(xs))) }
	row("second with the most attempts (from the crash)", peakAt(real.PerSecond), func(v validation) float64 { return peakAt(v.PerSecond) }, "", 0)
	row("most attempts in a second", slices.Max(real.PerSecond), func(v validation) float64 { return slices.Max(v.PerSecond) }, "", 0)
	md := b.String()
	if err := os.WriteFile(filepath.Join(dir, "validate.md"), []byte(md), 0o644); err != nil {
		return "", err
	}
	// The chart: real and the simulator's median per second.
	r := &Report{Config: Config{Scenario: "recovery", Policy: Policy{Name: "overlayd"}, Clients: 600, Supernodes: 20, Duration: 60 * time.Second}}
	p := newPlot(r, "attempts per second after the crash, real vs simulated", "attempts per second")
	p.Title.Text = "recovery: attach attempts per second after the crash — real testnet vs simulator"
	p.X.Label.Text = "seconds since the crash"
	realXY := make(plotter.XYs, len(real.PerSecond))
	simXY := make(plotter.XYs, len(real.PerSecond))
	silentXY := make(plotter.XYs, len(real.PerSecond))
	for i := range real.PerSecond {
		med := func(vs []validation) float64 {
			var xs []float64
			for _, v := range vs {
				xs = append(xs, v.PerSecond[i])
			}
			return median(xs)
		}
		realXY[i] = plotter.XY{X: float64(i) + 0.5, Y: real.PerSecond[i]}
		simXY[i] = plotter.XY{X: float64(i) + 0.5, Y: med(sims)}
		silentXY[i] = plotter.XY{X: float64(i) + 0.5, Y: med(silent)}
	}
	if err := addLine(p, "real testnet", realXY, lineStyle(colBlue, 1.5)); err != nil {
		return "", err
	}
	if err := addLine(p, fmt.Sprintf("simulator, crashes reset (median of %d seeds)", len(sims)), simXY, lineStyle(colOrange, 1.5, 5, 2)); err != nil {
		return "", err
	}
	if err := addLine(p, "simulator, crashed hosts vanish", silentXY, lineStyle(colGreen, 1.2, 2, 2)); err != nil {
		return "", err
	}
	p.X.Min, p.X.Max = 0, 30
	if err := savePNG(p, filepath.Join(dir, "validate-attempts.png")); err != nil {
		return "", err
	}
	return md, nil
}
