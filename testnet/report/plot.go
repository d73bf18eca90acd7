package report

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"

	"github.com/overlayd/overlayd/testnet/figure"
)

// Figure layout (the size of every figure, 960 × 480 pixels, is
// figure.Width × figure.Height at figure.DPI).
const (
	// plotLabelRows is how many rows of event labels the band above a plot
	// may stack before labels are allowed to overlap.
	plotLabelRows = 4
	// plotPalette is how many regular supernodes load.png draws in colours
	// of their own, each with a legend entry; more share one legend entry
	// and shades of blue.
	plotPalette = 10
	// plotLegendRows is how many legend entries fit beside a figure.
	plotLegendRows = 18
)

// WritePlots draws r into dir (which must exist) as three PNG figures and
// returns their paths in this order:
//
//   - attached.png: attached clients, live clients and live supernodes
//     over time;
//   - load.png: each supernode's attached clients over time against its
//     capacity (megas dashed; a gap and a cross where a node was not live);
//   - rates.png: deliveries and sends per second (top) and BUSY refusals
//     per second (bottom), from the cumulative counters (see counterRates).
//
// Every figure marks each of r.Events as a vertical line labelled with its
// kind (partitions shaded until the next heal), and its title names the
// figure, the scenario, the seed and the verdict. Times are seconds since
// the run began. A report without samples or events still gets all three
// figures, with empty axes and a note.
func WritePlots(r *Report, dir string) ([]string, error) {
	if r == nil {
		return nil, errors.New("report: plots: nil report")
	}
	figures := []struct {
		name  string
		build func(*Report) (*plotFigure, error)
	}{
		{"attached.png", plotAttached},
		{"load.png", plotLoad},
		{"rates.png", plotRates},
	}
	paths := make([]string, 0, len(figures))
	for _, f := range figures {
		fig, err := f.build(r)
		if err != nil {
			return nil, fmt.Errorf("report: plot %s: %w", f.name, err)
		}
		path := filepath.Join(dir, f.name)
		if err := figure.SavePNG(path, fig); err != nil {
			return nil, fmt.Errorf("report: plot %s: %w", f.name, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// counterRate is a counter's mean rate over one interval between samples.
type counterRate struct {
	From, To  float64 // seconds since the run began
	PerSecond float64
}

// counterRates turns a cumulative counter of ss into its rate over each
// interval between consecutive samples. Samples with a non-finite time
// are skipped, and so is a sample that is not later than the one before it
// (the next interval starts from that earlier sample), so intervals never
// overlap; a counter that went backwards (a supernode whose counter was in
// the sum died) gives a rate of 0 for that interval, never a negative one.
func counterRates(ss []Sample, counter func(Sample) uint64) []counterRate {
	var out []counterRate
	var prev *Sample
	for i := range ss {
		s := &ss[i]
		if !plotFinite(s.T) {
			continue
		}
		if prev != nil {
			dt := s.T - prev.T
			if dt <= 0 {
				continue
			}
			var perSec float64
			if c, p := counter(*s), counter(*prev); c > p {
				perSec = float64(c-p) / dt
			}
			out = append(out, counterRate{From: prev.T, To: s.T, PerSecond: perSec})
		}
		prev = s
	}
	return out
}

// plotAttached builds attached.png.
func plotAttached(r *Report) (*plotFigure, error) {
	var attached, clients, supers plotter.XYs
	ymax := 0.0
	for _, s := range r.Samples {
		if !plotFinite(s.T) {
			continue
		}
		attached = append(attached, plotter.XY{X: s.T, Y: float64(s.Attached)})
		clients = append(clients, plotter.XY{X: s.T, Y: float64(s.Clients)})
		supers = append(supers, plotter.XY{X: s.T, Y: float64(s.Supernodes)})
		ymax = max(ymax, float64(s.Attached), float64(s.Clients), float64(s.Supernodes))
	}
	p := plotPanel(r, "nodes", ymax, true)
	fig := &plotFigure{title: plotTitle(r, "Attached clients"), events: r.Events, panels: []*plot.Plot{p}}
	for _, l := range []struct {
		name  string
		xys   plotter.XYs
		style draw.LineStyle
	}{
		{"live clients", clients, figure.Style(color.RGBA{R: 90, G: 90, B: 90, A: 255}, 1.5, 5, 3)},
		{"attached clients", attached, figure.Style(color.RGBA{R: 31, G: 100, B: 190, A: 255}, 2)},
		{"live supernodes", supers, figure.Style(color.RGBA{R: 20, G: 140, B: 60, A: 255}, 1.5, 1.5, 2)},
	} {
		if _, err := figure.AddLine(p, l.xys, l.style); err != nil {
			return nil, err
		}
		fig.legend = append(fig.legend, plotLegendEntry{l.name, []plot.Thumbnailer{figure.Thumb(l.style)}})
	}
	if len(attached) == 0 {
		fig.note = "no samples recorded"
	}
	return fig, nil
}

// plotNode is one supernode's line in load.png: its runs of consecutive
// samples in which it was live, and where each run ended before the last
// sample (it was killed, stopped or left).
type plotNode struct {
	name   string
	mega   bool
	runs   []plotter.XYs
	gone   plotter.XYs
	colour color.Color
}

// plotLoad builds load.png.
func plotLoad(r *Report) (*plotFigure, error) {
	nodes, caps, ymax := plotLoadSeries(r.Samples)
	p := plotPanel(r, "attached clients per supernode", ymax, true)
	fig := &plotFigure{title: plotTitle(r, "Supernode load"), events: r.Events, panels: []*plot.Plot{p}}

	var regular, megas []*plotNode
	for _, n := range nodes {
		if n.mega {
			megas = append(megas, n)
		} else {
			regular = append(regular, n)
		}
	}
	// One legend entry per node while they fit and their colours can be
	// told apart; beyond that a group shares one entry and one hue.
	groupMegas := len(megas) > 6
	megaRows := len(megas)
	if groupMegas {
		megaRows = 1
	}
	groupRegular := len(regular) > plotPalette || len(regular)+megaRows+2 > plotLegendRows
	palette := figure.Palette()
	for i, n := range regular {
		if groupRegular {
			n.colour = plotShade(color.RGBA{R: 8, G: 48, B: 107, A: 255}, color.RGBA{R: 120, G: 180, B: 225, A: 255}, i, len(regular))
		} else {
			n.colour = palette[i%len(palette)]
		}
	}
	megaColours := []color.Color{
		color.RGBA{A: 255},
		color.RGBA{R: 170, G: 0, B: 120, A: 255},
		color.RGBA{R: 210, G: 90, B: 0, A: 255},
		color.RGBA{R: 0, G: 120, B: 110, A: 255},
		color.RGBA{R: 110, G: 60, B: 20, A: 255},
		color.RGBA{R: 100, G: 0, B: 170, A: 255},
	}
	for i, n := range megas {
		if groupMegas {
			n.colour = plotShade(color.RGBA{R: 90, G: 0, B: 30, A: 255}, color.RGBA{R: 230, G: 110, B: 120, A: 255}, i, len(megas))
		} else {
			n.colour = megaColours[i%len(megaColours)]
		}
	}

	capRef := plotCapacity(caps)
	p.Add(capRef)
	anyGone := false
	for _, group := range []struct {
		nodes   []*plotNode
		grouped bool
		what    string
	}{{regular, groupRegular, "supernodes"}, {megas, groupMegas, "megas"}} {
		for i, n := range group.nodes {
			style := figure.Style(n.colour, 1.5)
			if n.mega {
				style = figure.Style(n.colour, 2, 6, 3)
			}
			for _, run := range n.runs {
				if _, err := figure.AddLine(p, run, style); err != nil {
					return nil, err
				}
			}
			if len(n.gone) > 0 {
				anyGone = true
				p.Add(&plotter.Scatter{XYs: n.gone, GlyphStyle: plotGoneGlyph(n.colour)})
			}
			switch {
			case !group.grouped:
				fig.legend = append(fig.legend, plotLegendEntry{n.name, []plot.Thumbnailer{figure.Thumb(style)}})
			case i == 0:
				name := fmt.Sprintf("%d %s (%s…%s)", len(group.nodes), group.what, n.name, group.nodes[len(group.nodes)-1].name)
				fig.legend = append(fig.legend, plotLegendEntry{name, []plot.Thumbnailer{figure.Thumb(style)}})
			}
		}
	}
	if len(caps) > 0 {
		fig.legend = append(fig.legend, plotLegendEntry{"capacity", []plot.Thumbnailer{figure.Thumb(capRef.style())}})
	}
	if anyGone {
		fig.legend = append(fig.legend, plotLegendEntry{"no longer live", []plot.Thumbnailer{
			&plotter.Scatter{GlyphStyle: plotGoneGlyph(color.RGBA{R: 60, G: 60, B: 60, A: 255})},
		}})
	}
	switch {
	case len(r.Samples) == 0:
		fig.note = "no samples recorded"
	case len(nodes) == 0:
		fig.note = "no supernode load in the samples"
	}
	return fig, nil
}

// plotLoadSeries splits the samples' loads into one plotNode per supernode
// name (regular supernodes first, then megas, each in natural name order),
// and returns the capacities seen with the names that had each, and the
// largest value to plot.
func plotLoadSeries(ss []Sample) (nodes []*plotNode, caps map[int][]string, ymax float64) {
	byName := map[string]*plotNode{}
	caps = map[int][]string{}
	capSeen := map[string]bool{}
	for _, s := range ss {
		for _, l := range s.Load {
			n := byName[l.Name]
			if n == nil {
				n = &plotNode{name: l.Name}
				byName[l.Name] = n
				nodes = append(nodes, n)
			}
			n.mega = n.mega || l.Mega
			if key := strconv.Itoa(l.Capacity) + "\x00" + l.Name; l.Capacity > 0 && !capSeen[key] {
				capSeen[key] = true
				caps[l.Capacity] = append(caps[l.Capacity], l.Name)
				ymax = max(ymax, float64(l.Capacity))
			}
		}
	}
	slices.SortFunc(nodes, func(a, b *plotNode) int {
		if a.mega != b.mega {
			if a.mega {
				return 1
			}
			return -1
		}
		return plotNameCmp(a.name, b.name)
	})
	// Walk the samples once per node: a run goes on while the node is in
	// consecutive samples; a node missing from a sample ends its run there.
	var times []int
	for i, s := range ss {
		if plotFinite(s.T) {
			times = append(times, i)
		}
	}
	for _, n := range nodes {
		var run plotter.XYs
		for _, i := range times {
			s := ss[i]
			at, live := 0, false
			for _, l := range s.Load {
				if l.Name == n.name {
					at, live = l.Attached, true
					break
				}
			}
			if !live {
				if len(run) > 0 {
					n.runs = append(n.runs, run)
					n.gone = append(n.gone, run[len(run)-1])
					run = nil
				}
				continue
			}
			run = append(run, plotter.XY{X: s.T, Y: float64(at)})
			ymax = max(ymax, float64(at))
		}
		if len(run) > 0 {
			n.runs = append(n.runs, run)
		}
	}
	for c := range caps {
		slices.SortFunc(caps[c], plotNameCmp)
	}
	return nodes, caps, ymax
}

// plotNameCmp orders node names naturally: sn2 before sn10.
func plotNameCmp(a, b string) int {
	pa, na := plotSplitNumber(a)
	pb, nb := plotSplitNumber(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	if c := cmp.Compare(na, nb); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// plotSplitNumber splits a name into its text and its trailing number
// (-1 without one).
func plotSplitNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}

// plotRates builds rates.png: two panels sharing the time axis, because
// deliveries run orders of magnitude above refusals.
func plotRates(r *Report) (*plotFigure, error) {
	delivered := counterRates(r.Samples, func(s Sample) uint64 { return s.Delivered })
	sent := counterRates(r.Samples, func(s Sample) uint64 { return s.Sent })
	refused := counterRates(r.Samples, func(s Sample) uint64 { return s.Refusals })
	steps := func(rs []counterRate) (plotter.XYs, float64) {
		xys := make(plotter.XYs, 0, 2*len(rs))
		top := 0.0
		for _, r := range rs {
			xys = append(xys, plotter.XY{X: r.From, Y: r.PerSecond}, plotter.XY{X: r.To, Y: r.PerSecond})
			top = max(top, r.PerSecond)
		}
		return xys, top
	}
	dXY, dMax := steps(delivered)
	sXY, sMax := steps(sent)
	rXY, rMax := steps(refused)

	msgs := plotPanel(r, "messages/s", max(dMax, sMax), false)
	busy := plotPanel(r, "refusals/s", rMax, true)
	fig := &plotFigure{title: plotTitle(r, "Message and refusal rates"), events: r.Events, panels: []*plot.Plot{msgs, busy}}
	for _, l := range []struct {
		name  string
		p     *plot.Plot
		xys   plotter.XYs
		style draw.LineStyle
	}{
		{"sent/s", msgs, sXY, figure.Style(color.RGBA{R: 90, G: 90, B: 90, A: 255}, 1.2, 5, 3)},
		{"deliveries/s", msgs, dXY, figure.Style(color.RGBA{R: 31, G: 100, B: 190, A: 255}, 1.5)},
		{"BUSY refusals/s", busy, rXY, figure.Style(color.RGBA{R: 200, G: 60, B: 0, A: 255}, 1.5)},
	} {
		if _, err := figure.AddLine(l.p, l.xys, l.style); err != nil {
			return nil, err
		}
		fig.legend = append(fig.legend, plotLegendEntry{l.name, []plot.Thumbnailer{figure.Thumb(l.style)}})
	}
	switch {
	case len(r.Samples) == 0:
		fig.note = "no samples recorded"
	case len(delivered) == 0:
		fig.note = "fewer than two samples: no rates"
	}
	return fig, nil
}
