package report

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
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

// plotFigure is one image: a title, a band of event labels, one or more
// panels stacked on a shared time axis, and a legend column on the right.
type plotFigure struct {
	title  string
	events []Event
	panels []*plot.Plot
	legend []plotLegendEntry
	// note, if set, is written across the first panel (e.g. no samples).
	note string
}

var _ figure.Drawer = (*plotFigure)(nil)

// plotLegendEntry is one row of a figure's legend.
type plotLegendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

// Draw renders f onto c.
func (f *plotFigure) Draw(c draw.Canvas) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())

	titleStyle := plotText(13, true)
	titleStyle.XAlign, titleStyle.YAlign = draw.XCenter, draw.YTop
	c.FillText(titleStyle, vg.Point{X: c.Center().X, Y: c.Max.Y - vg.Points(4)}, f.title)
	body := draw.Crop(c, vg.Points(4), 0, vg.Points(2), -(titleStyle.Height(f.title) + vg.Points(10)))

	legend := plot.NewLegend()
	legend.TextStyle = plotText(9.5, false)
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(24)
	legend.Padding = vg.Points(2)
	var legendWidth vg.Length
	for _, e := range f.legend {
		legend.Add(e.name, e.thumbs...)
		legendWidth = max(legendWidth, legend.TextStyle.Width(e.name))
	}
	if legendWidth > 0 {
		legendWidth += legend.ThumbnailWidth + legend.TextStyle.Width(" ") + vg.Points(14)
		body = draw.Crop(body, 0, -legendWidth, 0, 0)
	}

	labelStyle := plotText(9, false)
	rowHeight := labelStyle.Height("Xg") + vg.Points(3)
	// Lay the panels out once to learn where each event falls, then again
	// leaving room above them for the rows of labels that needs.
	cells := f.layout(body)
	labels := plotLayoutLabels(f.events, f.panels[0], cells[0], labelStyle)
	rows := 0
	for _, l := range labels {
		rows = max(rows, l.row+1)
	}
	if rows > 0 {
		body = draw.Crop(body, 0, 0, 0, -(vg.Length(rows)*rowHeight + vg.Points(4)))
		cells = f.layout(body)
		labels = plotLayoutLabels(f.events, f.panels[0], cells[0], labelStyle)
	}
	for i, p := range f.panels {
		p.Draw(cells[i])
	}

	top := f.panels[0].DataCanvas(cells[0])
	bottom := f.panels[len(f.panels)-1].DataCanvas(cells[len(cells)-1])
	// Lines from the plot up to each label first, then the labels on a
	// white ground, so a line that passes a lower label goes behind it.
	for _, l := range labels {
		base := top.Max.Y + vg.Points(4) + vg.Length(l.row)*rowHeight
		c.StrokeLine2(figure.Style(plotEventColour(l.kind), 0.8, 2, 2), l.x, top.Max.Y, l.x, base+rowHeight-vg.Points(2))
	}
	for _, l := range labels {
		base := top.Max.Y + vg.Points(4) + vg.Length(l.row)*rowHeight
		w := labelStyle.Width(l.text)
		c.FillPolygon(color.NRGBA{R: 255, G: 255, B: 255, A: 235}, []vg.Point{
			{X: l.left - 1, Y: base}, {X: l.left + w + 1, Y: base},
			{X: l.left + w + 1, Y: base + rowHeight - 1}, {X: l.left - 1, Y: base + rowHeight - 1},
		})
		sty := labelStyle
		sty.Color = plotEventColour(l.kind)
		sty.YAlign = draw.YBottom
		c.FillText(sty, vg.Point{X: l.left, Y: base + vg.Points(1.5)}, l.text)
	}

	if legendWidth > 0 {
		legend.Draw(draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: c.Max.X - legendWidth + vg.Points(8), Y: bottom.Min.Y},
			Max: vg.Point{X: c.Max.X - vg.Points(4), Y: top.Max.Y},
		}})
	}
	if f.note != "" {
		sty := plotText(12, false)
		sty.Color = color.RGBA{R: 120, G: 120, B: 120, A: 255}
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
		c.FillText(sty, top.Center(), f.note)
	}
}

// layout places f's panels in body, one above the other with their data
// areas aligned.
func (f *plotFigure) layout(body draw.Canvas) []draw.Canvas {
	grid := make([][]*plot.Plot, len(f.panels))
	for i, p := range f.panels {
		grid[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(f.panels), Cols: 1, PadY: vg.Points(6), PadRight: vg.Points(4)}
	cells := plot.Align(grid, tiles, body)
	out := make([]draw.Canvas, len(cells))
	for i := range cells {
		out[i] = cells[i][0]
	}
	return out
}

// plotLabel is where one event label goes in the band above the plot.
type plotLabel struct {
	text string
	kind string
	x    vg.Length // the event line
	left vg.Length // the text's left edge
	row  int       // 0 is nearest the plot
}

// plotLayoutLabels places a label for each event above p's data area in
// cell. Events of one kind that fall on the same spot share a label
// ("kill ×6"); a label goes in the lowest row where it does not overlap the
// one before it, up to plotLabelRows rows.
func plotLayoutLabels(evs []Event, p *plot.Plot, cell draw.Canvas, sty text.Style) []plotLabel {
	dc := p.DataCanvas(cell)
	trX, _ := p.Transforms(&dc)
	sorted := slices.Clone(evs)
	slices.SortStableFunc(sorted, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	var labels []plotLabel
	var counts []int
	for _, e := range sorted {
		if !plotFinite(e.T) {
			continue
		}
		x := trX(e.T)
		kind := e.Kind
		if kind == "" {
			kind = "event"
		}
		if n := len(labels); n > 0 && labels[n-1].kind == kind && x-labels[n-1].x < vg.Points(2) {
			counts[n-1]++
			continue
		}
		labels = append(labels, plotLabel{kind: kind, x: x})
		counts = append(counts, 1)
	}
	var ends []vg.Length // per row, the right edge of its last label
	gap := vg.Points(4)
	for i := range labels {
		l := &labels[i]
		l.text = l.kind
		if counts[i] > 1 {
			l.text = fmt.Sprintf("%s ×%d", l.kind, counts[i])
		}
		w := sty.Width(l.text)
		l.left = l.x + vg.Points(2)
		if l.left+w > cell.Max.X {
			l.left = l.x - vg.Points(2) - w
		}
		l.row = -1
		for r, end := range ends {
			if end+gap <= l.left {
				l.row = r
				break
			}
		}
		if l.row < 0 {
			if len(ends) < plotLabelRows {
				ends = append(ends, 0)
				l.row = len(ends) - 1
			} else {
				l.row = 0
				for r, end := range ends {
					if end < ends[l.row] {
						l.row = r
					}
				}
			}
		}
		ends[l.row] = l.left + w
	}
	return labels
}

// plotPanel returns a panel of r's time axis (seconds since the run began)
// with the y axis from 0 to just above ymax, a light grid and r's events
// marked. Only the bottom panel of a figure has time labels.
func plotPanel(r *Report, ylabel string, ymax float64, timeLabels bool) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = "time since the run began (s)"
	p.Y.Label.Text = ylabel
	p.X.Label.TextStyle.Font = plotFont(11, false)
	p.Y.Label.TextStyle.Font = plotFont(11, false)
	p.X.Tick.Label.Font = plotFont(10, false)
	p.Y.Tick.Label.Font = plotFont(10, false)
	p.X.Padding, p.Y.Padding = 0, 0
	if !timeLabels {
		p.X.Label.Text = ""
		p.X.Tick.Marker = plotBareTicks{}
	}
	grid := plotter.NewGrid()
	grid.Vertical = figure.Style(color.RGBA{R: 228, G: 228, B: 228, A: 255}, 0.5)
	grid.Horizontal = grid.Vertical
	p.Add(grid, plotEvents(r.Events))
	p.X.Min, p.X.Max = plotTimeRange(r)
	p.Y.Min, p.Y.Max = 0, 1
	if ymax > 0 && plotFinite(ymax) {
		p.Y.Max = ymax * 1.08
	}
	return p
}

// plotTimeRange is the time axis of every figure: from the run's start (or
// the earliest sample or event, if earlier) to its end (or the latest
// sample or event, if later).
func plotTimeRange(r *Report) (lo, hi float64) {
	if plotFinite(r.DurationSeconds) {
		hi = r.DurationSeconds
	}
	for _, s := range r.Samples {
		if plotFinite(s.T) {
			lo, hi = min(lo, s.T), max(hi, s.T)
		}
	}
	for _, e := range r.Events {
		if plotFinite(e.T) {
			lo, hi = min(lo, e.T), max(hi, e.T)
		}
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// plotBareTicks are the default ticks without labels, for a panel whose
// time labels are on the panel below.
type plotBareTicks struct{}

// Ticks implements plot.Ticker.
func (plotBareTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		ts[i].Label = ""
	}
	return ts
}

// plotEvents marks events in a panel: a dashed vertical line per event in
// its kind's colour, and a light shade from each partition to the heal
// after it (or the end of the axis).
type plotEvents []Event

// Plot implements plot.Plotter.
func (evs plotEvents) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	sorted := slices.Clone([]Event(evs))
	slices.SortStableFunc(sorted, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	shade := func(from, to float64) {
		x0, x1 := max(trX(from), c.Min.X), min(trX(to), c.Max.X)
		if x1 > x0 {
			c.FillPolygon(color.NRGBA{R: 255, G: 150, B: 40, A: 34}, []vg.Point{
				{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y},
			})
		}
	}
	open := math.NaN()
	for _, e := range sorted {
		switch {
		case !plotFinite(e.T):
		case e.Kind == EventPartition && math.IsNaN(open):
			open = e.T
		case e.Kind == EventHeal && !math.IsNaN(open):
			shade(open, e.T)
			open = math.NaN()
		}
	}
	if !math.IsNaN(open) {
		shade(open, p.X.Max)
	}
	for _, e := range sorted {
		if !plotFinite(e.T) {
			continue
		}
		if x := trX(e.T); c.ContainsX(x) {
			c.StrokeLine2(figure.Style(plotEventColour(e.Kind), 1, 4, 2.5), x, c.Min.Y, x, c.Max.Y)
		}
	}
}

// plotCapacity returns the capacity references of load.png: with one
// capacity, a dashed grey line; with several, a thin grey line each, named
// with the nodes that had it.
func plotCapacity(caps map[int][]string) plotCapacityRefs {
	refs := plotCapacityRefs{}
	values := make([]int, 0, len(caps))
	for c := range caps {
		values = append(values, c)
	}
	slices.Sort(values)
	for _, v := range values {
		label := fmt.Sprintf("capacity %d", v)
		if len(values) > 1 {
			names := caps[v]
			if len(names) <= 3 {
				label += " (" + strings.Join(names, ", ") + ")"
			} else {
				label += fmt.Sprintf(" (%d nodes)", len(names))
			}
		}
		refs.values = append(refs.values, float64(v))
		refs.labels = append(refs.labels, label)
	}
	return refs
}

// plotCapacityRefs draws horizontal capacity references across a panel,
// each labelled at its right end.
type plotCapacityRefs struct {
	values []float64
	labels []string
}

// style is the references' line style.
func (r plotCapacityRefs) style() draw.LineStyle {
	grey := color.RGBA{R: 110, G: 110, B: 110, A: 255}
	if len(r.values) > 1 {
		return figure.Style(grey, 0.8)
	}
	return figure.Style(grey, 1.2, 6, 4)
}

// Plot implements plot.Plotter.
func (r plotCapacityRefs) Plot(c draw.Canvas, p *plot.Plot) {
	_, trY := p.Transforms(&c)
	sty := plotText(8.5, false)
	sty.Color = color.RGBA{R: 80, G: 80, B: 80, A: 255}
	sty.XAlign, sty.YAlign = draw.XRight, draw.YBottom
	for i, v := range r.values {
		y := trY(v)
		c.StrokeLine2(r.style(), c.Min.X, y, c.Max.X, y)
		// On a white ground, so event lines behind it do not cut it.
		right, base := c.Max.X-vg.Points(3), y+vg.Points(1.5)
		w, h := sty.Width(r.labels[i]), sty.Height(r.labels[i])
		c.FillPolygon(color.NRGBA{R: 255, G: 255, B: 255, A: 220}, []vg.Point{
			{X: right - w - 2, Y: base}, {X: right + 1, Y: base}, {X: right + 1, Y: base + h}, {X: right - w - 2, Y: base + h},
		})
		c.FillText(sty, vg.Point{X: right, Y: base}, r.labels[i])
	}
}

// plotGoneGlyph marks where a supernode stopped being live.
func plotGoneGlyph(c color.Color) draw.GlyphStyle {
	return draw.GlyphStyle{Color: c, Radius: vg.Points(3.5), Shape: draw.CrossGlyph{}}
}

// plotTitle is a figure's title: what it shows, the scenario, the seed (as
// the runner prints it) and the verdict.
func plotTitle(r *Report, what string) string {
	verdict := "FAIL"
	if r.Passed {
		verdict = "PASS"
	}
	name := r.Scenario
	if name == "" {
		name = "(unnamed scenario)"
	}
	return fmt.Sprintf("%s — %s, seed %#x (%s)", what, name, r.Seed, verdict)
}

// plotFont is the figures' sans-serif font at size points.
func plotFont(size float64, bold bool) font.Font {
	f := font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(size)}
	if bold {
		f.Weight = xfont.WeightBold
	}
	return f
}

// plotText is a black text style in plotFont.
func plotText(size float64, bold bool) text.Style {
	return text.Style{Color: color.Black, Font: plotFont(size, bold), Handler: plot.DefaultTextHandler}
}

// plotEventColour is the colour that marks an event of kind.
func plotEventColour(kind string) color.Color {
	switch kind {
	case EventKill:
		return color.RGBA{R: 210, G: 30, B: 30, A: 255}
	case EventRestart:
		return color.RGBA{R: 30, G: 150, B: 50, A: 255}
	case EventPartition:
		return color.RGBA{R: 230, G: 120, B: 0, A: 255}
	case EventHeal:
		return color.RGBA{R: 0, G: 140, B: 160, A: 255}
	case EventStorm:
		return color.RGBA{R: 140, G: 60, B: 190, A: 255}
	case EventPromote:
		return color.RGBA{R: 150, G: 90, B: 40, A: 255}
	case EventHandBack:
		return color.RGBA{R: 200, G: 60, B: 150, A: 255}
	case EventJoin, EventLeave:
		return color.RGBA{R: 110, G: 110, B: 110, A: 255}
	}
	return color.RGBA{R: 60, G: 60, B: 60, A: 255}
}

// plotShade is the i-th of n colours evenly between a and b.
func plotShade(a, b color.RGBA, i, n int) color.Color {
	f := 0.0
	if n > 1 {
		f = float64(i) / float64(n-1)
	}
	mix := func(x, y uint8) uint8 { return uint8(math.Round(float64(x) + f*(float64(y)-float64(x)))) }
	return color.RGBA{R: mix(a.R, b.R), G: mix(a.G, b.G), B: mix(a.B, b.B), A: 255}
}

// plotFinite reports whether v is a number a plot can place.
func plotFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
