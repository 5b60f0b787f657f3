package report

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// bars is a bar chart that rises from the bottom of the Y axis rather than
// from 0, so it works on a log scale (gonum's BarChart starts at 0, which
// a log scale cannot place). Values of 0 or less are not drawn.
type bars struct {
	values []float64
	width  vg.Length
	offset vg.Length
	color  color.Color
}

// Plot implements plot.Plotter.
func (b *bars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	bottom := trY(plt.Y.Min)
	for i, v := range b.values {
		if v <= 0 {
			continue
		}
		x := trX(float64(i)) + b.offset
		top := trY(min(v, plt.Y.Max))
		left, right := x-b.width/2, x+b.width/2
		c.FillPolygon(b.color, c.ClipPolygonY([]vg.Point{
			{X: left, Y: bottom}, {X: left, Y: top}, {X: right, Y: top}, {X: right, Y: bottom},
		}))
	}
}

// DataRange implements plot.DataRanger: X spans the categories; Y is set
// by the caller.
func (b *bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	return -0.5, float64(len(b.values)) - 0.5, 0, 0
}

// Thumbnail implements plot.Thumbnailer, for the legend.
func (b *bars) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.color, []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y},
	})
}
