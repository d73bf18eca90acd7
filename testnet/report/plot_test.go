package report

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/overlayd/overlayd/testnet/figure"
)

// plotSynthetic is a made-up run of supernodes regular supernodes (sn0,
// sn1, ...) and megas megas over 30 s, sampled every 0.5 s: the first
// killed supernodes die at 8 s and come back at 18 s, a partition from
// 12 s heals at 21 s with a storm just after it starts, and a mega is
// promoted at 8.2 s. The refusal counter drops when the killed nodes'
// counters leave the sum.
func plotSynthetic(supernodes, megas, killed int) *Report {
	const clients, capacity, megaCapacity = 120, 40, 100
	r := &Report{
		Schema:   Schema,
		Scenario: "recovery",
		Seed:     0x7265_6330,
		Versions: Versions{Overlayd: "v0.0.0-test", Go: "go1.26.8", Libp2p: "v0.52.0"},
		Config: Sizes{Supernodes: supernodes, Clients: clients, Megas: megas, Capacity: capacity,
			AnnounceIntervalSeconds: 5, KeepaliveSeconds: 2.5},
		DurationSeconds: 30,
		Criteria: []Criterion{
			{Name: "all attached within 10 s of the kill", Want: "<= 10 s", Got: "6.5 s", Pass: true},
			{Name: "no client | lost", Want: "0", Got: "2", Pass: false},
		},
		Figures: map[string]float64{"recovery_seconds": 6.5, "attach_p99_seconds": 0.125, "failovers": 42},
		Events: []Event{
			{T: 8, Kind: EventPromote, Detail: "mega0 takes regular clients"},
			{T: 12, Kind: EventPartition, Detail: "sn0 | rest"},
			{T: 12.3, Kind: EventStorm, Detail: "all clients reconnect"},
			{T: 21, Kind: EventHeal},
		},
	}
	for k := range killed {
		r.Events = append(r.Events,
			Event{T: 8, Kind: EventKill, Detail: fmt.Sprintf("sn%d", k)},
			Event{T: 18, Kind: EventRestart, Detail: fmt.Sprintf("sn%d", k)})
	}
	var refusals, sent, delivered uint64
	for i := 0; i <= 60; i++ {
		t := float64(i) / 2
		down := t >= 8 && t < 18
		s := Sample{T: t, Clients: clients, Supernodes: supernodes + megas}
		if down {
			s.Supernodes -= killed
		}
		s.Attached = clients
		if t >= 8 && t < 14 {
			s.Attached = clients - int(float64(clients)/3*(14-t)/6)
		}
		if i%3 == 0 {
			refusals += 4
		}
		if t >= 8 && t < 10 {
			refusals += 25
		}
		if t == 8 {
			refusals = 2 // the killed nodes' counters left the sum
		}
		sent += 50
		if !(t >= 12 && t < 21) {
			delivered += 200
		} else {
			delivered += 60
		}
		s.Refusals, s.Sent, s.Delivered = refusals, sent, delivered
		// Each supernode has its own level; while the killed ones are down
		// the survivors and megas take their clients, and a restarted node
		// fills up again over a few seconds.
		extra := 0.0
		if down {
			extra = float64(killed*12) / float64(supernodes-killed+megas)
		}
		for j := range supernodes {
			if down && j < killed {
				continue
			}
			load := float64(8 + 3*(j%8))
			switch {
			case j < killed && t >= 18:
				load = min(load, 2*(t-18))
			default:
				load += extra
			}
			s.Load = append(s.Load, Load{Name: fmt.Sprintf("sn%d", j), Attached: min(capacity, int(load)), Capacity: capacity})
		}
		for j := range megas {
			s.Load = append(s.Load, Load{Name: fmt.Sprintf("mega%d", j), Attached: 20 + 15*j + int(3*extra), Capacity: megaCapacity, Mega: true})
		}
		r.Samples = append(r.Samples, s)
	}
	return r
}

// plotFiles are the files Write writes, in the order it returns them.
func plotFiles() []string {
	return []string{"report.json", "attached.png", "load.png", "rates.png", "report.md"}
}

// plotCheckFiles checks what was written into dir: the want files in
// order, none empty, PNGs of the figure size, and a report.md naming every
// criterion and linking every plot.
func plotCheckFiles(t *testing.T, r *Report, dir string, files, want []string) {
	t.Helper()
	var names []string
	for _, f := range files {
		if filepath.Dir(f) != dir {
			t.Errorf("%s is not in %s", f, dir)
		}
		names = append(names, filepath.Base(f))
	}
	if !slices.Equal(names, want) {
		t.Fatalf("wrote %v, want %v", names, want)
	}
	wantW, wantH := int(math.Round(float64(figure.Width/vg.Inch)*figure.DPI)), int(math.Round(float64(figure.Height/vg.Inch)*figure.DPI))
	var md string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Errorf("%s is empty", f)
		}
		switch filepath.Ext(f) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			if got := img.Bounds().Size(); got.X != wantW || got.Y != wantH {
				t.Errorf("%s is %dx%d pixels, want %dx%d", f, got.X, got.Y, wantW, wantH)
			}
		case ".md":
			md = string(b)
		}
	}
	for _, c := range r.Criteria {
		if !strings.Contains(md, mdText(c.Name)) {
			t.Errorf("report.md does not name criterion %q", c.Name)
		}
	}
	for _, p := range []string{"attached.png", "load.png", "rates.png"} {
		if !strings.Contains(md, "]("+p+")") {
			t.Errorf("report.md does not link %s", p)
		}
	}
}

// plotKeep also writes r's report into $OVERLAYD_PLOT_DIR/name, for a person
// to look at the figures; without OVERLAYD_PLOT_DIR it does nothing.
func plotKeep(t *testing.T, r *Report, name string) {
	t.Helper()
	dir := os.Getenv("OVERLAYD_PLOT_DIR")
	if dir == "" {
		return
	}
	if _, err := Write(r, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func TestWriteReport(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		supernodes, megas, kills int
	}{
		{"small", 4, 1, 1},
		{"large", 20, 3, 6},
		{"no-megas", 3, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := plotSynthetic(tc.supernodes, tc.megas, tc.kills)
			dir := filepath.Join(t.TempDir(), "out") // Write creates it
			files, err := Write(r, dir)
			if err != nil {
				t.Fatal(err)
			}
			plotCheckFiles(t, r, dir, files, plotFiles())
			plotKeep(t, r, tc.name)
		})
	}
}

func TestWriteReportEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *Report
	}{
		{"zero", &Report{}},
		{"events-no-samples", &Report{Scenario: "storm", DurationSeconds: 10, Criteria: []Criterion{{Name: "ran", Want: "yes", Got: "no"}},
			Events: []Event{{T: 2, Kind: EventStorm}, {T: 2, Kind: EventStorm}}}},
		{"one-sample", &Report{Scenario: "one", Samples: []Sample{{T: 0, Attached: 1, Clients: 1, Supernodes: 1,
			Load: []Load{{Name: "sn0", Attached: 1, Capacity: 4}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files, err := Write(tc.r, dir)
			if err != nil {
				t.Fatal(err)
			}
			plotCheckFiles(t, tc.r, dir, files, plotFiles())
			plotKeep(t, tc.r, "empty-"+tc.name)
		})
	}
}

// TestWritePlotsNonFinite: report.json cannot hold NaN or ±Inf, but the
// plots and report.md skip such times rather than fail.
func TestWritePlotsNonFinite(t *testing.T) {
	r := &Report{Scenario: "nan", DurationSeconds: math.Inf(1), Samples: []Sample{{T: math.NaN()}, {T: 1, Attached: 3}, {T: 2, Attached: 4}},
		Events: []Event{{T: math.Inf(-1), Kind: EventKill}, {T: 1.5, Kind: EventHeal}}, Figures: map[string]float64{"nan": math.NaN()}}
	dir := t.TempDir()
	plots, err := WritePlots(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	md, err := WriteMarkdown(r, dir, plots)
	if err != nil {
		t.Fatal(err)
	}
	plotCheckFiles(t, r, dir, append(plots, md), plotFiles()[1:])
}

func TestWritePlotsNil(t *testing.T) {
	if _, err := WritePlots(nil, t.TempDir()); err == nil {
		t.Error("WritePlots(nil) did not fail")
	}
	if _, err := WriteMarkdown(nil, t.TempDir(), nil); err == nil {
		t.Error("WriteMarkdown(nil) did not fail")
	}
}

func TestCounterRates(t *testing.T) {
	refusals := func(s Sample) uint64 { return s.Refusals }
	at := func(t float64, n uint64) Sample { return Sample{T: t, Refusals: n} }
	for _, tc := range []struct {
		name    string
		samples []Sample
		want    []counterRate
	}{
		{"none", nil, nil},
		{"one", []Sample{at(0, 5)}, nil},
		{"steady", []Sample{at(0, 0), at(0.5, 10), at(1.5, 30)},
			[]counterRate{{0, 0.5, 20}, {0.5, 1.5, 20}}},
		{"backwards", []Sample{at(0, 100), at(1, 40), at(2, 50)},
			[]counterRate{{0, 1, 0}, {1, 2, 10}}},
		{"time-stands-still", []Sample{at(0, 0), at(1, 10), at(1, 20), at(0.5, 25), at(2, 40)},
			[]counterRate{{0, 1, 10}, {1, 2, 30}}},
		{"non-finite-time", []Sample{at(0, 0), at(math.NaN(), 7), at(math.Inf(1), 9), at(2, 4)},
			[]counterRate{{0, 2, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := counterRates(tc.samples, refusals)
			if !slices.Equal(got, tc.want) {
				t.Errorf("counterRates = %v, want %v", got, tc.want)
			}
			for _, r := range got {
				if r.PerSecond < 0 {
					t.Errorf("negative rate %v", r)
				}
			}
		})
	}
}

func TestCounterRatesOfSyntheticRunNeverNegative(t *testing.T) {
	r := plotSynthetic(4, 1, 2)
	rs := counterRates(r.Samples, func(s Sample) uint64 { return s.Refusals })
	if len(rs) != len(r.Samples)-1 {
		t.Fatalf("%d rates from %d samples", len(rs), len(r.Samples))
	}
	zero := false
	for _, x := range rs {
		if x.PerSecond < 0 {
			t.Fatalf("negative rate %v", x)
		}
		if x.From == 7.5 {
			zero = x.PerSecond == 0
		}
	}
	if !zero {
		t.Error("the refusal counter's drop at 8 s did not give a rate of 0")
	}
}

func TestPlotLoadSeries(t *testing.T) {
	r := plotSynthetic(12, 2, 2)
	nodes, caps, ymax := plotLoadSeries(r.Samples)
	var names []string
	for _, n := range nodes {
		names = append(names, n.name)
	}
	want := []string{"sn0", "sn1", "sn2", "sn3", "sn4", "sn5", "sn6", "sn7", "sn8", "sn9", "sn10", "sn11", "mega0", "mega1"}
	if !slices.Equal(names, want) {
		t.Errorf("nodes in order %v, want %v", names, want)
	}
	for _, n := range nodes {
		wantRuns, wantGone := 1, 0
		if n.name == "sn0" || n.name == "sn1" {
			wantRuns, wantGone = 2, 1 // killed at 8 s, back at 18 s
		}
		if len(n.runs) != wantRuns || len(n.gone) != wantGone {
			t.Errorf("%s: %d runs and %d gone marks, want %d and %d", n.name, len(n.runs), len(n.gone), wantRuns, wantGone)
		}
		if n.mega != strings.HasPrefix(n.name, "mega") {
			t.Errorf("%s: mega = %v", n.name, n.mega)
		}
	}
	if g := nodes[0].gone; len(g) == 1 && g[0].X != 7.5 {
		t.Errorf("sn0 marked gone at %v s, want 7.5 s (its last live sample)", g[0].X)
	}
	if len(caps) != 2 || len(caps[40]) != 12 || !slices.Equal(caps[100], []string{"mega0", "mega1"}) {
		t.Errorf("capacities %v, want 40 for sn0..sn11 and 100 for mega0, mega1", caps)
	}
	if ymax < 100 {
		t.Errorf("ymax %v below the largest capacity", ymax)
	}
}

// plotTestCanvas is a blank canvas of a figure's size.
func plotTestCanvas() draw.Canvas {
	return draw.New(figure.NewCanvas())
}

func TestPlotLayoutLabels(t *testing.T) {
	r := &Report{DurationSeconds: 100, Events: []Event{
		{T: 50, Kind: EventKill}, {T: 50, Kind: EventKill}, {T: 50, Kind: EventKill},
		{T: 50, Kind: EventPromote}, {T: 50.5, Kind: EventStorm}, {T: 90, Kind: EventHeal}, {T: 10, Kind: EventPartition},
	}}
	fig, err := plotAttached(r)
	if err != nil {
		t.Fatal(err)
	}
	cells := fig.layout(plotTestCanvas())
	labels := plotLayoutLabels(r.Events, fig.panels[0], cells[0], plotText(9, false))
	got := map[string]int{}
	for _, l := range labels {
		got[l.text] = l.row
	}
	if len(labels) != 5 {
		t.Fatalf("labels %+v, want 5 (three kills at one spot share one)", labels)
	}
	if _, ok := got["kill ×3"]; !ok {
		t.Errorf("no \"kill ×3\" label in %+v", labels)
	}
	rows := map[int]bool{}
	for _, k := range []string{"kill ×3", "promote", "storm"} {
		rows[got[k]] = true
	}
	if len(rows) != 3 {
		t.Errorf("labels of events close together share rows: %+v", labels)
	}
	if got["partition"] != 0 || got["heal"] != 0 {
		t.Errorf("labels of events far apart should sit in the first row: %+v", labels)
	}
}

func TestWriteMarkdown(t *testing.T) {
	r := plotSynthetic(4, 1, 1)
	dir := t.TempDir()
	path, err := WriteMarkdown(r, dir, []string{filepath.Join("/elsewhere", "load.png"), filepath.Join(dir, "attached.png")})
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "report.md") {
		t.Errorf("path %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, s := range []string{
		"# Scenario recovery: FAIL",
		"`0x72656330`",
		"overlayd v0.0.0-test, Go go1.26.8, go-libp2p v0.52.0",
		"| announce interval (s) | 5 |",
		"| keepalive (s) | 2.5 |",
		"| all attached within 10 s of the kill | <= 10 s | 6.5 s | PASS |",
		"| no client \\| lost | 0 | 2 | FAIL |",
		"| 12 | partition | sn0 \\| rest |",
		"![load.png](load.png)",
		"![attached.png](attached.png)",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report.md lacks %q:\n%s", s, md)
		}
	}
	// Figures sorted by name.
	a, f, rs := strings.Index(md, "| attach_p99_seconds | 0.125 |"), strings.Index(md, "| failovers | 42 |"), strings.Index(md, "| recovery_seconds | 6.5 |")
	if a < 0 || f < 0 || rs < 0 || !(a < f && f < rs) {
		t.Errorf("figures missing or not sorted by name (at %d, %d, %d):\n%s", a, f, rs, md)
	}
	// Events in time order, though the report lists the kill last.
	if k, p := strings.Index(md, "| 8 | kill | sn0 |"), strings.Index(md, "| 12 | partition |"); k < 0 || k > p {
		t.Errorf("events not in time order:\n%s", md)
	}
	// Plots in the order given, each with its sentence.
	if strings.Index(md, "(load.png)") > strings.Index(md, "(attached.png)") {
		t.Error("plots not in the order given")
	}
	if !strings.Contains(md, mdPlotCaption("load.png")) {
		t.Error("load.png has no caption")
	}

	r.Passed = true
	if _, err := WriteMarkdown(r, dir, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !strings.HasPrefix(string(b), "# Scenario recovery: PASS\n") {
		t.Errorf("passed run not headed PASS:\n%s", b)
	}
}

func TestMarkdownNumber(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{0, "0"}, {42, "42"}, {-3, "-3"}, {0.1 + 0.2, "0.3"}, {123456.789, "123457"}, {1e20, "1e+20"}, {math.NaN(), "NaN"}, {math.Inf(1), "+Inf"}} {
		if got := mdNumber(tc.v); got != tc.want {
			t.Errorf("mdNumber(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// TestPlotNameCmp checks the natural order of node names: by text, then
// by trailing number, then as strings.
func TestPlotNameCmp(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"sn2", "sn10", -1},
		{"sn10", "sn2", 1},
		{"mega0", "sn0", -1},
		{"sn", "sn0", -1},
		{"sn1", "sn1", 0},
	} {
		t.Run(tc.a+"-"+tc.b, func(t *testing.T) {
			if got := plotNameCmp(tc.a, tc.b); got != tc.want {
				t.Errorf("plotNameCmp(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

// TestPlotTitle checks a title names the verdict and an unnamed scenario.
func TestPlotTitle(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *Report
		want string
	}{
		{"passed", &Report{Scenario: "steady", Seed: 7, Passed: true}, "load — steady, seed 0x7 (PASS)"},
		{"failed-unnamed", &Report{Seed: 1}, "load — (unnamed scenario), seed 0x1 (FAIL)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := plotTitle(tc.r, "load"); got != tc.want {
				t.Errorf("plotTitle = %q, want %q", got, tc.want)
			}
		})
	}
}
