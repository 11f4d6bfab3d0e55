package htmlreport

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
)

// A chart is an outer SVG of fixed size holding axes and labels, and an
// inner SVG (the plot) whose viewBox is operations across and 0 to plotUnits
// units down, stretched to the plot area: zooming only changes the inner
// viewBox, and the script moves the labels tagged with data-op.
const (
	chartW    = 1200
	plotX     = 84
	plotW     = chartW - plotX - 24
	plotUnits = 1000 // the plot's own vertical units
)

type chart struct {
	ID         string
	H          int     // outer height
	PlotY      int     // plot area top
	PlotH      int     // plot area height in pixels
	X0, XSpan  int     // the operations shown
	YTop       float64 // the value at the top of the plot
	YTicks     []tick
	XTicks     []tick
	Areas      []series
	Lines      []series
	HLines     []hline
	Marks      []mark
	Attrs      []template.HTMLAttr // data-* attributes of the outer SVG
	Legend     []series
	PlotX      int
	PlotW      int
	ViewBox    string // the plot's
	OuterView  string
	LabelLeft  string // y-axis caption
	LabelUnder string // x-axis caption
}

type tick struct {
	Pos   string // pixel position along the axis, in the outer SVG
	Label string
}

type series struct {
	Name, Class string
	D           string // the path
}

type hline struct {
	Y           string // plot units
	LabelY      string // outer pixels
	Class, Text string
}

type mark struct {
	Op          int
	X           string // outer pixels
	Class, Text string
	Anchor      string // of the label: "start", or "end" near the right edge
	LabelY      int
	DX          int // where the label starts, from the line
}

// PlotRight is the right edge of the plot area.
func (c *chart) PlotRight() int { return c.PlotX + c.PlotW }

// PlotBottom is the bottom edge of the plot area.
func (c *chart) PlotBottom() int { return c.PlotY + c.PlotH }

// attr is one data-* attribute; names and values are ours (numbers), so
// they are safe to write unescaped.
func attr(name, value string) template.HTMLAttr {
	return template.HTMLAttr(name + `="` + template.HTMLEscapeString(value) + `"`)
}

func timelineChart(r *figures.Replay, pts []figures.Point, phases []figures.Phase) *chart {
	c := newChart("timeline", 330, pts, r)
	if len(phases) > 0 {
		c.addLabelRows(1)
	}
	peak := peakReserved(r, pts)
	top := peak
	for _, pt := range pts {
		top = max(top, pt.Reserved, pt.Allocated, pt.Active)
	}
	limits := limitLines(r)
	for _, l := range limits {
		top = max(top, int64(min(l.bytes, math.MaxInt64)))
	}
	c.byteAxis(top)
	c.LabelLeft = "memory"
	y := func(pt figures.Point, v func(figures.Point) int64) float64 {
		return plotUnits * (1 - float64(v(pt))/c.YTop)
	}
	get := [...]func(figures.Point) int64{
		func(p figures.Point) int64 { return p.Reserved },
		func(p figures.Point) int64 { return p.Active },
		func(p figures.Point) int64 { return p.Allocated },
	}
	path := func(v func(figures.Point) int64, area bool) string {
		return seriesPath(len(pts), func(i int) float64 { return float64(pts[i].Op) }, func(i int) float64 { return y(pts[i], v) }, area)
	}
	c.Areas = []series{
		{Name: "reserved", Class: "reserved", D: path(get[0], true)},
		{Name: "allocated", Class: "allocated", D: path(get[2], true)},
	}
	c.Lines = []series{
		{Name: "reserved", Class: "reserved", D: path(get[0], false)},
		{Name: "active", Class: "active", D: path(get[1], false)},
		{Name: "allocated", Class: "allocated", D: path(get[2], false)},
	}
	c.Legend = c.Lines
	for _, l := range limits {
		v := float64(l.bytes)
		c.HLines = append(c.HLines, hline{
			Y: num(plotUnits * (1 - v/c.YTop)), LabelY: num(c.pixY(v) - 4),
			Class: l.class, Text: l.name + " " + units.FormatUBytes(l.bytes),
		})
		c.Legend = append(c.Legend, series{Name: l.name, Class: l.class})
	}
	if pm := c.phaseMarks(phases); len(pm) > 0 {
		c.Marks = append(c.Marks, pm...)
		c.Legend = append(c.Legend, series{Name: "phase start", Class: "phase"})
		c.Attrs = append(c.Attrs, attr("data-phases", strconv.Itoa(len(pm))))
	}
	c.Marks = append(c.Marks, c.mark(r.PeakOp, "peak", "peak "+units.FormatBytes(peak)))
	c.Attrs = append(c.Attrs,
		attr("data-peak-reserved", itoa(peak)),
		attr("data-peak-op", strconv.Itoa(r.PeakOp)),
		attr("data-peak-allocated", itoa(figures.PeakAllocated(r.Stats))),
		attr("data-cap", strconv.FormatUint(r.Allowed, 10)),
	)
	if r.OOM != nil {
		c.Marks = append(c.Marks, c.oomMark(r.Ops, "OOM at operation "+units.FormatCount(int64(r.OOM.OpIndex))))
		c.Attrs = append(c.Attrs, attr("data-oom-op", strconv.Itoa(r.Ops)))
	}
	return c
}

type limit struct {
	name, class string
	bytes       uint64
}

// limitLines are the horizontal lines of the memory chart: the cap, and
// the card when it is smaller than the cap or there is none.
func limitLines(r *figures.Replay) []limit {
	var ls []limit
	if r.Allowed > 0 {
		ls = append(ls, limit{"cap", "cap", r.Allowed})
	}
	if r.DeviceMemory > 0 && (r.Allowed == 0 || r.DeviceMemory < r.Allowed) {
		ls = append(ls, limit{"device memory", "device", r.DeviceMemory})
	}
	return ls
}

func fragChart(r *figures.Replay, pts []figures.Point, frag []float64) *chart {
	c := newChart("fragmentation", 170, pts, r)
	c.YTop = 1
	c.LabelLeft = "1 − allocated/reserved"
	for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
		c.YTicks = append(c.YTicks, tick{Pos: num(c.pixY(v)), Label: strconv.Itoa(int(v*100)) + "%"})
	}
	var b strings.Builder
	pen := false
	for i, pt := range pts {
		f := frag[i]
		if math.IsNaN(f) || math.IsInf(f, 0) {
			pen = false
			continue
		}
		f = min(max(f, 0), 1)
		if pen {
			b.WriteByte('L')
		} else {
			b.WriteByte('M')
			pen = true
		}
		b.WriteString(strconv.Itoa(pt.Op))
		b.WriteByte(' ')
		b.WriteString(num(plotUnits * (1 - f)))
	}
	c.Lines = []series{{Name: "fragmentation", Class: "frag", D: b.String()}}
	c.Legend = c.Lines
	// stretches where memory is reserved and nothing allocated have no
	// fragmentation to speak of: shade them instead of drawing 100%
	var idle strings.Builder
	stretches := 0
	for i := 0; i < len(pts); i++ {
		if !idleAt(pts[i]) {
			continue
		}
		j := i
		for j+1 < len(pts) && idleAt(pts[j+1]) {
			j++
		}
		end := pts[j].Op + 1
		if j+1 < len(pts) {
			end = pts[j+1].Op
		}
		fmt.Fprintf(&idle, "M%d 0H%dV%dH%dZ", pts[i].Op, end, plotUnits, pts[i].Op)
		stretches++
		i = j
	}
	if stretches > 0 {
		c.Areas = append(c.Areas, series{Name: "nothing allocated", Class: "idle", D: idle.String()})
		c.Legend = append(c.Legend, series{Name: "nothing allocated", Class: "idle"})
	}
	c.Attrs = append(c.Attrs, attr("data-idle-stretches", strconv.Itoa(stretches)))
	c.Marks = []mark{c.mark(r.PeakOp, "peak", "peak")}
	if r.OOM != nil {
		c.Marks = append(c.Marks, c.oomMark(r.Ops, "OOM"))
	}
	c.Attrs = append(c.Attrs, attr("data-frag-at-peak", num4(r.Fragmentation().AtPeak)))
	return c
}

// idleAt says memory is reserved at pt and none of it allocated.
func idleAt(pt figures.Point) bool { return pt.Reserved > 0 && pt.Allocated <= 0 }

func newChart(id string, h int, pts []figures.Point, r *figures.Replay) *chart {
	last := max(pts[len(pts)-1].Op, r.PeakOp)
	if r.OOM != nil {
		last = max(last, r.Ops)
	}
	c := spanChart(id, h, pts[0].Op, last)
	c.Attrs = append([]template.HTMLAttr{attr("data-points", strconv.Itoa(len(pts)))}, c.Attrs...)
	return c
}

// spanChart is a chart over operations x0 to x1, with its x axis.
func spanChart(id string, h, x0, x1 int) *chart {
	c := &chart{ID: id, H: h, PlotY: 26, PlotX: plotX, PlotW: plotW}
	c.PlotH = h - c.PlotY - 34
	c.X0 = x0
	c.XSpan = max(x1-c.X0, 1)
	c.ViewBox = strconv.Itoa(c.X0) + " 0 " + strconv.Itoa(c.XSpan) + " " + strconv.Itoa(plotUnits)
	c.OuterView = "0 0 " + strconv.Itoa(chartW) + " " + strconv.Itoa(h)
	c.LabelUnder = "operation"
	c.Attrs = []template.HTMLAttr{
		attr("data-x0", strconv.Itoa(c.X0)),
		attr("data-x1", strconv.Itoa(c.X0+c.XSpan)),
	}
	step := niceStep(float64(c.XSpan)/8, 1)
	for v := math.Ceil(float64(c.X0)/step) * step; v <= float64(c.X0+c.XSpan); v += step {
		c.XTicks = append(c.XTicks, tick{Pos: num(c.pixX(v)), Label: units.FormatCount(int64(v))})
	}
	return c
}

// seriesPath is the path through n points (x(i), y(i)) in plot units; an
// area closes it along the plot's foot.
func seriesPath(n int, x, y func(i int) float64, area bool) string {
	var b strings.Builder
	b.Grow(n * 14)
	for i := range n {
		if i == 0 && !area {
			b.WriteByte('M')
		} else {
			b.WriteByte('L')
		}
		b.WriteString(num(x(i)))
		b.WriteByte(' ')
		b.WriteString(num(y(i)))
	}
	if area {
		return "M" + num(x(0)) + " " + num(plotUnits) + b.String() + "L" + num(x(n-1)) + " " + num(plotUnits) + "Z"
	}
	return b.String()
}

func (c *chart) pixX(op float64) float64 {
	return plotX + (op-float64(c.X0))/float64(c.XSpan)*plotW
}

func (c *chart) pixY(v float64) float64 {
	return float64(c.PlotY) + float64(c.PlotH)*(1-v/c.YTop)
}

func (c *chart) mark(op int, class, text string) mark {
	x := c.pixX(float64(op))
	anchor := "start"
	if x > chartW-160 {
		anchor = "end"
	}
	m := mark{Op: op, X: num(x), Class: class, Text: text, Anchor: anchor, LabelY: labelRow + 2, DX: 4} // the top row
	// the y axis's caption shares the top row, at the plot's left
	if caption := float64(c.PlotX + captionCharW*len([]rune(c.LabelLeft)) + 8); anchor == "end" {
		m.DX = -4
	} else if x+4 < caption {
		m.DX = int(math.Ceil(caption - x))
	}
	return m
}

// Phase labels: about charW pixels a character, in a row of their own
// above the plot, so that no curve or mark line crosses them.
const (
	charW = 6
	// labelRow is the height of a row of labels above the plot.
	labelRow = 16
)

// captionCharW is about how wide a character of an axis caption is.
const captionCharW = 7

// addLabelRows makes room for n more rows of labels above the plot (the
// first row, at the top, holds the peak's); call it before the axes.
func (c *chart) addLabelRows(n int) {
	c.PlotY += n * labelRow
	c.PlotH -= n * labelRow
}

// phaseMarks marks where each phase starts, labelled in the row just above
// the plot (see addLabelRows) where a label does not run into the one
// before it; the hover read-out names every phase.
func (c *chart) phaseMarks(phases []figures.Phase) []mark {
	var ms []mark
	free := math.Inf(-1) // where the next label may start
	for _, p := range phases {
		if p.Op < c.X0 || p.Op > c.X0+c.XSpan {
			continue
		}
		m := c.mark(p.Op, "phase", "")
		m.Anchor, m.LabelY, m.DX = "start", c.PlotY-8, 4
		x := c.pixX(float64(p.Op))
		room := float64(c.PlotRight()) - x - 4
		if x >= free && room >= 4*charW {
			r := []rune(p.Name)
			if n := int(room / charW); len(r) > n {
				r = append(r[:n-1], '…') // at the plot's right edge only
			}
			m.Text = string(r)
			free = x + 4 + float64(len(r)*charW) + 8
		}
		ms = append(ms, m)
	}
	return ms
}

// oomMark marks the out-of-memory, which ends the timeline: its label
// goes inside the plot, left of the line, clear of the peak's.
func (c *chart) oomMark(op int, text string) mark {
	m := c.mark(op, "oom", text)
	m.Anchor, m.LabelY, m.DX = "end", c.PlotY+14, -4
	return m
}

// byteAxis sets the top of a byte axis at or above top, and its ticks.
func (c *chart) byteAxis(top int64) {
	var ticks []float64
	var labels []string
	c.YTop, ticks, labels = byteScale(top)
	for i, v := range ticks {
		c.YTicks = append(c.YTicks, tick{Pos: num(c.pixY(v)), Label: labels[i]})
	}
}

// byteScale returns the end of a byte axis at or above top and its ticks'
// values and labels: round steps of a binary unit, about five of them.
func byteScale(top int64) (end float64, ticks []float64, labels []string) {
	unit, name := byteUnit(float64(top))
	t := max(float64(top)/unit, 1e-9)
	step := niceStep(t/5, 0)
	if unit == 1 {
		step = max(step, 1)
	}
	n := max(math.Ceil(t/step-1e-9), 1)
	for i := 0.0; i <= n; i++ {
		v := math.Round(i*step*1e6) / 1e6
		ticks = append(ticks, v*unit)
		labels = append(labels, strconv.FormatFloat(v, 'f', -1, 64)+" "+name)
	}
	return n * step * unit, ticks, labels
}

// byteUnit is the largest binary unit not above v.
func byteUnit(v float64) (float64, string) {
	for _, u := range []struct {
		size float64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if v >= u.size {
			return u.size, u.name
		}
	}
	return 1, "B"
}

// niceStep rounds raw up to 1, 2, 2.5 or 5 times a power of ten, and to
// at least least.
func niceStep(raw, least float64) float64 {
	if raw <= 0 {
		return max(least, 1)
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if least >= 1 && m == 2.5 && p < 10 { // whole operations only
			continue
		}
		if m*p >= raw*(1-1e-9) {
			return max(m*p, least)
		}
	}
	return max(10*p, least)
}

// timelineData is the figures the script reads for hover read-outs.
func timelineData(pts []figures.Point, frag []float64, phases []figures.Phase, c *chart) template.JS {
	var b strings.Builder
	b.Grow(len(pts) * 48)
	list := func(name string, v func(i int) string) {
		b.WriteString(`"` + name + `":[`)
		for i := range pts {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(v(i))
		}
		b.WriteString("],")
	}
	b.WriteByte('{')
	list("op", func(i int) string { return strconv.Itoa(pts[i].Op) })
	list("re", func(i int) string { return itoa(pts[i].Reserved) })
	list("ac", func(i int) string { return itoa(pts[i].Active) })
	list("al", func(i int) string { return itoa(pts[i].Allocated) })
	list("fr", func(i int) string {
		if math.IsNaN(frag[i]) || math.IsInf(frag[i], 0) {
			return "null"
		}
		return num4(frag[i])
	})
	if len(phases) > 0 {
		// [[op, name], ...]; json.Marshal escapes <, > and & in the names,
		// so no name can close the script element
		ph := make([][2]any, len(phases))
		for i, p := range phases {
			ph[i] = [2]any{p.Op, p.Name}
		}
		j, err := json.Marshal(ph)
		if err == nil {
			b.WriteString(`"ph":`)
			b.Write(j)
			b.WriteByte(',')
		}
	}
	b.WriteString(`"x0":` + strconv.Itoa(c.X0) + `,"x1":` + strconv.Itoa(c.X0+c.XSpan) + `}`)
	// digits, signs, dots, commas, brackets, fixed names and JSON strings
	return template.JS(b.String())
}

// num formats a coordinate with one decimal, dropping a trailing ".0".
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	if s == "-0" {
		return "0"
	}
	return s
}

func num4(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "NaN"
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}
