package sim

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"

	"github.com/overlayd/overlayd/testnet/figure"
)

// The report's figures, drawn from the series with gonum/plot (as
// testnet's are; testnet's WritePlots draws one line per node from its
// samples, while the simulator's series are quantiles over thousands of
// supernodes, so the figures are drawn here). Each is saved by
// figure.SavePNG, 960 × 480 pixels like testnet's.

// Plot is one figure of the report: its file name and what it shows.
type Plot struct {
	File    string
	Caption string
	build   func(r *Report) (*plot.Plot, error)
}

// Plots lists the report's figures in the order report.md shows them.
func Plots() []Plot {
	return []Plot{
		{"attached.png", "fraction of the clients attached to a live supernode", plotAttachedFraction},
		{"alive.png", "regular supernodes and megas alive (and the auto tier, in the auto-roles scenario)", plotAlive},
		{"load.png", "regular supernodes' load / capacity over time: min–max band, median and 90th percentile; capacity at 1", plotLoadBands},
		{"attempts.png", "attach attempts per 100 ms (outcomes reaching their client)", plotAttempts},
		{"megas.png", "clients on the megas, all together, against their capacity", plotMegas},
	}
}

// WritePlots draws r's figures into dir (which must exist) and returns
// their paths.
func WritePlots(r *Report, dir string) ([]string, error) {
	var out []string
	for _, f := range Plots() {
		p, err := f.build(r)
		if err != nil {
			return nil, fmt.Errorf("sim: plot %s: %w", f.File, err)
		}
		path := filepath.Join(dir, f.File)
		if err := figure.SavePNG(path, p); err != nil {
			return nil, fmt.Errorf("sim: plot %s: %w", f.File, err)
		}
		out = append(out, path)
	}
	return out, nil
}

// The simulator's figures' colours (Okabe–Ito, with red and grey).
const (
	colBlue   figure.Colour = 0x0072b2ff
	colOrange figure.Colour = 0xe69f00ff
	colGreen  figure.Colour = 0x009e73ff
	colRed    figure.Colour = 0xd21e1eff
	colBand   figure.Colour = 0x0072b246 // colBlue, mostly transparent
	colGrey   figure.Colour = 0x6e6e6eff
	colPink   figure.Colour = 0xcc79a7ff
)

// newPlot is a figure with the run in its title, the time axis, and the
// crash marked.
func newPlot(r *Report, what, ylabel string) *plot.Plot {
	p := plot.New()
	c := r.Config
	p.Title.Text = fmt.Sprintf("%s — %s, policy %s, seed %d, %d clients / %d supernodes", what, c.Scenario, c.Policy.Name, c.Seed, c.Clients, c.Supernodes)
	p.X.Label.Text = "simulated time (s)"
	p.Y.Label.Text = ylabel
	p.X.Min, p.X.Max = 0, c.Duration.Seconds()
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

// markCrash draws the scenario's moment (a crash, or the start of the
// restarts) as a vertical line from 0 to ymax.
func markCrash(p *plot.Plot, r *Report, ymax float64) error {
	c := r.Config
	label := "crash"
	if c.CrashFraction == 0 {
		label = "restarts begin"
	}
	t := c.CrashAt.Seconds()
	l, err := plotter.NewLine(plotter.XYs{{X: t, Y: 0}, {X: t, Y: ymax}})
	if err != nil {
		return err
	}
	l.LineStyle = figure.Style(colRed, 1, 4, 3)
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

// addLine adds xys to p as a line in style (figure.AddLine), named in
// the legend unless name is empty.
func addLine(p *plot.Plot, name string, xys plotter.XYs, style draw.LineStyle) error {
	th, err := figure.AddLine(p, xys, style)
	if err != nil || th == nil {
		return err
	}
	if name != "" {
		p.Legend.Add(name, th)
	}
	return nil
}

func series(t []float64, y func(i int) float64) plotter.XYs {
	xys := make(plotter.XYs, len(t))
	for i := range t {
		xys[i] = plotter.XY{X: t[i], Y: y(i)}
	}
	return xys
}

func plotAttachedFraction(r *Report) (*plot.Plot, error) {
	s := r.Series
	p := newPlot(r, "attached", "fraction of the clients")
	p.Y.Min, p.Y.Max = 0, 1.05
	if err := addLine(p, "attached", series(s.T, func(i int) float64 { return s.Attached[i] }), figure.Style(colBlue, 1.5)); err != nil {
		return nil, err
	}
	if err := addLine(p, "0.99", plotter.XYs{{X: 0, Y: 0.99}, {X: r.Config.Duration.Seconds(), Y: 0.99}}, figure.Style(colGrey, 0.8, 2, 2)); err != nil {
		return nil, err
	}
	return p, markCrash(p, r, 1.05)
}

func plotAlive(r *Report) (*plot.Plot, error) {
	s := r.Series
	p := newPlot(r, "alive supernodes", "supernodes alive")
	ymax := float64(r.Config.Supernodes+r.Config.Megas) * 1.05
	for i := range s.AutoServing {
		ymax = max(ymax, float64(s.AliveRegular[i]+s.AutoServing[i])*1.3) // room for the legend
	}
	p.Y.Min, p.Y.Max = 0, ymax
	if err := addLine(p, "regular", series(s.T, func(i int) float64 { return float64(s.AliveRegular[i]) }), figure.Style(colBlue, 1.5)); err != nil {
		return nil, err
	}
	if len(s.AutoServing) > 0 {
		// The auto-roles scenario: the promoted tier, and all together.
		if err := addLine(p, "auto (promoted)", series(s.T, func(i int) float64 { return float64(s.AutoServing[i]) }), figure.Style(colGreen, 1.5)); err != nil {
			return nil, err
		}
		if err := addLine(p, "regular + auto", series(s.T, func(i int) float64 { return float64(s.AliveRegular[i] + s.AutoServing[i]) }), figure.Style(colGrey, 1.2)); err != nil {
			return nil, err
		}
	}
	if r.Config.Megas > 0 {
		if err := addLine(p, "megas", series(s.T, func(i int) float64 { return float64(s.AliveMegas[i]) }), figure.Style(colOrange, 1.5)); err != nil {
			return nil, err
		}
	}
	return p, markCrash(p, r, ymax)
}

func plotLoadBands(r *Report) (*plot.Plot, error) {
	s := r.Series
	p := newPlot(r, "supernode load", fmt.Sprintf("load / capacity (capacity %d)", s.Capacity))
	ymax := 1.1
	for _, v := range s.LoadMax {
		ymax = max(ymax, v*1.05)
	}
	p.Y.Min, p.Y.Max = 0, ymax
	if len(s.T) > 0 {
		band := make(plotter.XYs, 0, 2*len(s.T))
		for i := range s.T {
			band = append(band, plotter.XY{X: s.T[i], Y: s.LoadMax[i]})
		}
		for i := len(s.T) - 1; i >= 0; i-- {
			band = append(band, plotter.XY{X: s.T[i], Y: s.LoadMin[i]})
		}
		poly, err := plotter.NewPolygon(band)
		if err != nil {
			return nil, err
		}
		poly.Color, poly.LineStyle.Width = colBand, 0
		p.Add(poly)
		p.Legend.Add("min–max", poly)
	}
	if err := addLine(p, "90th percentile", series(s.T, func(i int) float64 { return s.LoadP90[i] }), figure.Style(colOrange, 1.2)); err != nil {
		return nil, err
	}
	if err := addLine(p, "median", series(s.T, func(i int) float64 { return s.LoadP50[i] }), figure.Style(colBlue, 1.5)); err != nil {
		return nil, err
	}
	if err := addLine(p, "capacity", plotter.XYs{{X: 0, Y: 1}, {X: r.Config.Duration.Seconds(), Y: 1}}, figure.Style(color.Black, 1, 6, 3)); err != nil {
		return nil, err
	}
	return p, markCrash(p, r, ymax)
}

func plotAttempts(r *Report) (*plot.Plot, error) {
	a := r.Series.AttemptsPer100
	p := newPlot(r, "attach attempts", "attempts per 100 ms")
	ymax := 1.0
	xys := make(plotter.XYs, len(a))
	for i, v := range a {
		xys[i] = plotter.XY{X: float64(i+1) / 10, Y: float64(v)}
		ymax = max(ymax, float64(v)*1.05)
	}
	p.Y.Min, p.Y.Max = 0, ymax
	if err := addLine(p, "attempts", xys, figure.Style(colGreen, 1)); err != nil {
		return nil, err
	}
	return p, markCrash(p, r, ymax)
}

func plotMegas(r *Report) (*plot.Plot, error) {
	s := r.Series
	c := r.Config
	p := newPlot(r, "megas' load", "clients on the megas")
	total := float64(c.Megas * c.MegaCapacity)
	if !c.Policy.Megas {
		total = 0
	}
	ymax := max(1, total*1.05)
	for _, v := range s.MegaLoad {
		ymax = max(ymax, float64(v)*1.05)
	}
	p.Y.Min, p.Y.Max = 0, ymax
	if err := addLine(p, "clients on the megas", series(s.T, func(i int) float64 { return float64(s.MegaLoad[i]) }), figure.Style(colOrange, 1.5)); err != nil {
		return nil, err
	}
	if total > 0 {
		name := fmt.Sprintf("capacity (%d × %d)", c.Megas, c.MegaCapacity)
		if err := addLine(p, name, plotter.XYs{{X: 0, Y: total}, {X: c.Duration.Seconds(), Y: total}}, figure.Style(color.Black, 1, 6, 3)); err != nil {
			return nil, err
		}
	}
	return p, markCrash(p, r, ymax)
}
