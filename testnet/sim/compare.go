package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"

	"github.com/overlayd/overlayd/testnet/figure"
)

// Side by side: the same scenario and seed under several policies, on one
// chart each for the attached fraction and the supernodes alive, and one
// table (`overlayd testnet sim --policy all`).

// policyColor tells the policies apart on the comparison charts (the
// first is overlayd's, the second 2010's).
func policyColor(k int) figure.Colour {
	colours := [...]figure.Colour{colBlue, colRed, colOrange, colGreen, colGrey, colPink}
	return colours[k%len(colours)]
}

// WriteComparison writes policies-attached.png, policies-alive.png and
// policies.md for reports of one scenario under different policies into
// dir (which must exist) and returns their paths.
func WriteComparison(reps []*Report, dir string) ([]string, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("sim: compare: no reports")
	}
	var out []string
	for _, f := range []struct {
		file  string
		build func([]*Report) (*plot.Plot, error)
	}{{"policies-attached.png", compareAttached}, {"policies-alive.png", compareAlive}} {
		p, err := f.build(reps)
		if err != nil {
			return nil, fmt.Errorf("sim: compare %s: %w", f.file, err)
		}
		path := filepath.Join(dir, f.file)
		if err := figure.SavePNG(path, p); err != nil {
			return nil, fmt.Errorf("sim: compare %s: %w", f.file, err)
		}
		out = append(out, path)
	}
	path := filepath.Join(dir, "policies.md")
	if err := os.WriteFile(path, ComparisonMarkdown(reps), 0o644); err != nil {
		return nil, err
	}
	return append(out, path), nil
}

func comparePlot(reps []*Report, what, ylabel string) *plot.Plot {
	p := newPlot(reps[0], what, ylabel)
	c := reps[0].Config
	p.Title.Text = fmt.Sprintf("%s — %s, seed %d, %d clients / %d supernodes, by policy", what, c.Scenario, c.Seed, c.Clients, c.Supernodes)
	return p
}

func compareAttached(reps []*Report) (*plot.Plot, error) {
	return compareLines(reps, "attached", "fraction of the clients", 1.05,
		func(r *Report, i int) float64 { return r.Series.Attached[i] })
}

func compareAlive(reps []*Report) (*plot.Plot, error) {
	return compareLines(reps, "regular supernodes alive", "supernodes alive", float64(reps[0].Config.Supernodes)*1.3,
		func(r *Report, i int) float64 { return float64(r.Series.AliveRegular[i]) })
}

// compareLines draws y of every report, one line per policy, with the
// crash marked.
func compareLines(reps []*Report, what, ylabel string, ymax float64, y func(r *Report, i int) float64) (*plot.Plot, error) {
	p := comparePlot(reps, what, ylabel)
	p.Y.Min, p.Y.Max = 0, ymax
	for k, r := range reps {
		// Dashes for all but the first two, so lines that coincide (an
		// ablation that changes nothing) stay visible.
		var dash []float64
		if k >= 2 {
			dash = []float64{float64(2 + 2*k), 3}
		}
		if err := addLine(p, r.Config.Policy.Name, series(r.Series.T, func(i int) float64 { return y(r, i) }), figure.Style(policyColor(k), 1.4, dash...)); err != nil {
			return nil, err
		}
	}
	return p, markCrash(p, reps[0], ymax)
}

// ComparisonMarkdown is a table of the reports' summaries, one row per
// policy.
func ComparisonMarkdown(reps []*Report) []byte {
	var b strings.Builder
	c := reps[0].Config
	fmt.Fprintf(&b, "# %s, seed %d: %d clients, %d supernodes of capacity %d, by policy\n\n", c.Scenario, c.Seed, c.Clients, c.Supernodes, c.Capacity)
	b.WriteString("| policy | time to 99% / 100% attached | lowest / final attached | supernodes crashed + failed | fewest regular alive | peak load / capacity (above) | most on the megas | attempts accept / busy / error | peak per 100 ms | events |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	t := func(p *float64) string {
		if p == nil {
			return "never"
		}
		return fmt.Sprintf("%.1f s", *p)
	}
	for _, r := range reps {
		s := r.Summary
		fmt.Fprintf(&b, "| %s | %s / %s | %.3f / %.3f | %d + %d | %.2f | %.2f (%d) | %d | %d / %d / %d | %d | %d |\n",
			r.Config.Policy.Name, t(s.TimeTo99), t(s.TimeTo100), s.LowestAttached, s.FinalAttached,
			s.SupernodesCrashed, s.SupernodesFailed, s.RegularAliveMin, s.PeakLoad, s.AboveCapacity, s.MegaPeak,
			s.Attempts.Accept, s.Attempts.Busy, s.Attempts.Error, s.PeakAttempts100, s.Events)
	}
	b.WriteString("\n![attached](policies-attached.png)\n\n![alive](policies-alive.png)\n")
	return []byte(b.String())
}
