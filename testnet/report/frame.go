package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
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
