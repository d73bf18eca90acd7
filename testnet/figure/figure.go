package figure

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Figure geometry: every figure is Width × Height at DPI dots per inch,
// so each PNG is 960 × 480 pixels.
const (
	Width  = 8 * vg.Inch
	Height = 4 * vg.Inch
	DPI    = 120
)

// Drawer is a figure that draws itself onto a canvas: a *plot.Plot, or a
// figure of several panels.
type Drawer interface {
	Draw(c draw.Canvas)
}

var _ Drawer = (*plot.Plot)(nil)

// NewCanvas returns a blank image of a figure's size.
func NewCanvas() *vgimg.Canvas {
	return vgimg.NewWith(vgimg.UseWH(Width, Height), vgimg.UseDPI(DPI))
}

// SavePNG draws d onto a canvas of a figure's size and writes it to path
// as a PNG, replacing any file there. On an error the file may be left
// partly written.
func SavePNG(path string, d Drawer) error {
	img := NewCanvas()
	d.Draw(draw.New(img))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("figure: save png: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("figure: save png %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("figure: save png %s: %w", path, err)
	}
	return nil
}

// Style is a line style of width points, dashed if dashes (on, off, ...
// in points) are given.
func Style(c color.Color, width float64, dashes ...float64) draw.LineStyle {
	s := draw.LineStyle{Color: c, Width: vg.Points(width)}
	for _, d := range dashes {
		s.Dashes = append(s.Dashes, vg.Points(d))
	}
	return s
}

// AddLine adds xys to p as a line in style; a lone point, which a line
// would not show, gets a dot. No points add nothing. It returns what it
// added (nil for nothing), for a legend entry.
func AddLine(p *plot.Plot, xys plotter.XYs, style draw.LineStyle) (plot.Thumbnailer, error) {
	switch len(xys) {
	case 0:
		return nil, nil
	case 1:
		s := &plotter.Scatter{XYs: xys, GlyphStyle: draw.GlyphStyle{Color: style.Color, Radius: style.Width + vg.Points(0.5), Shape: draw.CircleGlyph{}}}
		p.Add(s)
		return s, nil
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, fmt.Errorf("figure: line: %w", err)
	}
	line.LineStyle = style
	p.Add(line)
	return line, nil
}

// Thumb is a legend thumbnail: a line in style.
func Thumb(style draw.LineStyle) plot.Thumbnailer {
	return &plotter.Line{LineStyle: style}
}

// Palette is a colour-blind-safe qualitative set of ten colours (the
// Okabe–Ito colours first), in the order figures use them.
func Palette() []color.Color {
	return []color.Color{
		color.RGBA{R: 0, G: 114, B: 178, A: 255},
		color.RGBA{R: 230, G: 159, B: 0, A: 255},
		color.RGBA{R: 0, G: 158, B: 115, A: 255},
		color.RGBA{R: 204, G: 121, B: 167, A: 255},
		color.RGBA{R: 86, G: 180, B: 233, A: 255},
		color.RGBA{R: 213, G: 94, B: 0, A: 255},
		color.RGBA{R: 120, G: 120, B: 40, A: 255},
		color.RGBA{R: 90, G: 60, B: 160, A: 255},
		color.RGBA{R: 150, G: 150, B: 150, A: 255},
		color.RGBA{R: 160, G: 40, B: 60, A: 255},
	}
}

// Colour is a constant colour, 0xRRGGBBAA (not premultiplied), so a
// palette can be a block of constants rather than package variables.
type Colour uint32

// RGBA implements color.Color.
func (c Colour) RGBA() (r, g, b, a uint32) {
	return color.NRGBA{R: uint8(c >> 24), G: uint8(c >> 16), B: uint8(c >> 8), A: uint8(c)}.RGBA()
}

var _ color.Color = Colour(0)
