package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Chart file names, under the results directory.
const (
	HandoverChart   = "handover-latency.png"
	ThroughputChart = "throughput.png"
	MemoryChart     = "memory-per-session.png"
)

// Charts draws the three charts from r: handover latency by system,
// throughput by system, memory per session against sessions.
func Charts(dir string, r *Results) error {
	if err := handoverChart(filepath.Join(dir, HandoverChart), r); err != nil {
		return err
	}
	if err := throughputChart(filepath.Join(dir, ThroughputChart), r); err != nil {
		return err
	}
	if err := floorChart(filepath.Join(dir, FloorChart), r); err != nil {
		return err
	}
	return memoryChart(filepath.Join(dir, MemoryChart), r)
}

// series is one bar colour: a value per system (0: not measured).
type series struct {
	label  string
	values []float64
}

// barSet collects series over a fixed list of categories (systems).
type barSet struct {
	names []string
	idx   map[string]int
	ss    []series
}

func newBarSet(names []string) *barSet {
	b := &barSet{names: names, idx: map[string]int{}}
	for i, n := range names {
		b.idx[n] = i
	}
	return b
}

// add sets the value of category name in the series label, adding the
// series if it is new.
func (b *barSet) add(label, name string, v float64) {
	i := b.idx[name]
	for k := range b.ss {
		if b.ss[k].label == label {
			b.ss[k].values[i] = v
			return
		}
	}
	s := series{label: label, values: make([]float64, len(b.names))}
	s.values[i] = v
	b.ss = append(b.ss, s)
}

// systems lists the systems in the order they were measured.
func systems(r *Results) []string {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, h := range r.Handover {
		add(h.System)
	}
	for _, c := range r.Cycles {
		add(c.System)
	}
	return names
}

func handoverChart(file string, r *Results) error {
	bs := newBarSet(append([]string{"loopback RTT"}, systems(r)...))
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	for _, h := range r.Handover {
		mode := fmt.Sprintf("N=%d", h.Waiters)
		if h.Hold > 0 {
			mode += " after hold"
		}
		bs.add(mode+" p50", h.System, us(h.Latency.P50))
		bs.add(mode+" p99", h.System, us(h.Latency.P99))
	}
	if bl := r.Baseline; bl != nil && len(bs.ss) > 0 {
		// The baseline sits in the first group, under the matching modes.
		for k := range bs.ss {
			switch bs.ss[k].label {
			case "N=8 p50":
				bs.ss[k].values[0] = us(bl.RTT.P50)
			case "N=8 p99":
				bs.ss[k].values[0] = us(bl.RTT.P99)
			case "N=8 after hold p50":
				bs.ss[k].values[0] = us(bl.RTTAfterIdle.P50)
			case "N=8 after hold p99":
				bs.ss[k].values[0] = us(bl.RTTAfterIdle.P99)
			}
		}
	}
	return barChart(file, "Handover latency (holder's unlock → next holder's lock), log scale", "µs", bs.names, bs.ss, true)
}

func throughputChart(file string, r *Results) error {
	bs := newBarSet(systems(r))
	for _, h := range r.Handover {
		if h.Hold == 0 {
			bs.add(fmt.Sprintf("handoffs/s, one lock, N=%d", h.Waiters), h.System, h.HandoffsPerSec)
		}
	}
	for _, c := range r.Cycles {
		bs.add(fmt.Sprintf("cycles/s, %d clients", c.Clients), c.System, c.CyclesPerSec)
	}
	return barChart(file, "Throughput by system", "operations per second", bs.names, bs.ss, false)
}

func barChart(file, title, ylabel string, names []string, ss []series, logY bool) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	if len(names) == 0 || len(ss) == 0 {
		return saveEmpty(p, file)
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	// Each category is one unit of X; its bars fill 80% of it, whatever
	// the number of series, and the picture widens with the categories.
	const barPt = 16.0
	unitPt := barPt * float64(len(ss)) / 0.8
	width := vg.Points(barPt)
	for k, s := range ss {
		b := &bars{values: s.values, width: width, color: plotutil.Color(k),
			offset: width * vg.Length(float64(k)-float64(len(ss)-1)/2)}
		p.Add(b)
		p.Legend.Add(s.label, b)
	}
	lo, hi := positiveRange(ss)
	if logY {
		// Room above the bars for the legend.
		p.Y.Min, p.Y.Max = lo/2, hi*math.Pow(10, 0.4*float64(len(ss)))
	} else {
		p.Y.Min, p.Y.Max = 0, hi*(1.2+0.1*float64(len(ss)))
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	w := vg.Points(max(6*72, unitPt*float64(len(names))+120))
	return p.Save(w, 5*vg.Inch, file)
}

func positiveRange(ss []series) (lo, hi float64) {
	lo, hi = 0, 1
	for _, s := range ss {
		for _, v := range s.values {
			if v <= 0 {
				continue
			}
			if lo == 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
		}
	}
	if lo == 0 {
		lo = 1
	}
	return lo, hi
}

func memoryChart(file string, r *Results) error {
	p := plot.New()
	p.Title.Text = "Baton server memory per session against sessions"
	p.X.Label.Text = "concurrent sessions"
	p.Y.Label.Text = "bytes per session"
	if len(r.Scale) == 0 {
		return saveEmpty(p, file)
	}
	lines := []struct {
		label string
		get   func(s int) float64
	}{
		{"RSS", func(i int) float64 { return r.Scale[i].RSSPerSession }},
		{"Go heap in use", func(i int) float64 { return r.Scale[i].HeapPerSession }},
		{"goroutine stacks", func(i int) float64 { return r.Scale[i].StackPerSession }},
	}
	maxX := 0.0
	for k, l := range lines {
		pts := make(plotter.XYs, len(r.Scale))
		for i, s := range r.Scale {
			pts[i].X, pts[i].Y = float64(s.Live), l.get(i)
			maxX = max(maxX, pts[i].X)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(k)
		points.Color = plotutil.Color(k)
		points.Shape = plotutil.Shape(k)
		p.Add(line, points)
		p.Legend.Add(l.label, line, points)
	}
	goal := plotter.XYs{{X: 0, Y: 4096}, {X: maxX * 1.05, Y: 4096}}
	gl, err := plotter.NewLine(goal)
	if err != nil {
		return err
	}
	gl.Color = color.RGBA{R: 200, A: 255}
	gl.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(gl)
	p.Legend.Add("goal: 4 KiB", gl)
	p.Y.Min = 0
	p.X.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}

func saveEmpty(p *plot.Plot, file string) error {
	p.Title.Text += " (no data in this run)"
	return p.Save(6*vg.Inch, 3*vg.Inch, file)
}
