package figure

import (
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

func TestSavePNG(t *testing.T) {
	p := plot.New()
	if _, err := AddLine(p, plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}}, Style(Palette()[0], 1.5, 4, 2)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "f.png")
	if err := SavePNG(path, p); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width != 960 || cfg.Height != 480 {
		t.Errorf("PNG is %d × %d, want 960 × 480", cfg.Width, cfg.Height)
	}
	if err := SavePNG(filepath.Join(t.TempDir(), "missing", "f.png"), p); err == nil {
		t.Error("SavePNG into a missing directory: no error")
	}
}

func TestAddLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		xys   plotter.XYs
		added bool
	}{
		{"none", nil, false},
		{"one point", plotter.XYs{{X: 1, Y: 2}}, true},
		{"line", plotter.XYs{{X: 1, Y: 2}, {X: 2, Y: 3}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plot.New()
			th, err := AddLine(p, tc.xys, Style(Palette()[1], 1))
			if err != nil {
				t.Fatal(err)
			}
			if (th != nil) != tc.added {
				t.Errorf("added %v, want %v", th != nil, tc.added)
			}
		})
	}
}

// TestColour checks a Colour converts as the color.NRGBA it spells.
func TestColour(t *testing.T) {
	for _, c := range []struct {
		hex  Colour
		want color.NRGBA
	}{
		{0x0072b2ff, color.NRGBA{R: 0, G: 114, B: 178, A: 255}},
		{0x0072b246, color.NRGBA{R: 0, G: 114, B: 178, A: 70}},
		{0, color.NRGBA{}},
	} {
		r, g, b, a := c.hex.RGBA()
		wr, wg, wb, wa := c.want.RGBA()
		if r != wr || g != wg || b != wb || a != wa {
			t.Errorf("%#08x: RGBA %d %d %d %d, want %d %d %d %d", uint32(c.hex), r, g, b, a, wr, wg, wb, wa)
		}
	}
}
