package htmlreport

import (
	_ "embed"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
)

// DiffPage is what the page of a diff shows: both runs' memory on one
// axis, their figures side by side, the annotated phases and the
// allocation sites that changed. The cells are written by the caller, as
// the diff's table output writes them.
type DiffPage struct {
	Generator string // what wrote the page, shown under the title; "" for none
	A, B      DiffRun
	// Align places both runs' operations on the common axis (A's
	// operations when the runs share annotations).
	Align *figures.Alignment
	// Rows are the table's: a figure, a, b, b − a, change.
	Rows [][]string
	// Phases are the phases table's rows: phase, times, allocated a and
	// b, b − a, reserved a and b.
	Phases [][]string
	// Sites are the allocation sites, the largest change first; NoSites
	// says why there are none.
	Sites   []DiffSite
	NoSites string
	Depth   int // user frames per site
}

// DiffRun is one side of a diff.
type DiffRun struct {
	Report *figures.Replay
	Ranks  int // above one: the side was a set of ranks, Report its worst
	// Marks are its annotations; the matched STARTs of A are drawn.
	Marks []figures.Mark
}

// DiffSite is one allocation site and its bytes at each run's peak.
type DiffSite struct {
	Frames         string // one frame a line, innermost first
	Change         int64  // b − a in bytes
	Delta, A, B    string // the change and the bytes at each peak, as the table shows them
	CountA, CountB int    // allocations
}

//go:embed diff.html.tmpl
var diffText string

var diffTmpl = chartPage("diff", diffText)

// maxDiffSites is how many sites the page lists.
const maxDiffSites = 25

// maxDiffMarks is the most annotation marks drawn on the timeline; past
// it they would hide the curves (the hover still names the phase).
const maxDiffMarks = 100

// WriteDiff writes the HTML page of a diff to w.
func WriteDiff(w io.Writer, p DiffPage) error { return execute(w, diffTmpl())(newDiffView(&p)) }

type diffView struct {
	*DiffPage
	Title    string
	SideA    string
	SideB    string
	AlignBy  string // "annotations" or "operations", for data-align
	Timeline *chart
	Legend   []series
	Figures  []diffRow
	SiteRows []diffSiteRow
	More     int
	Data     template.JS
	Chart    template.JS
}

// diffRow is a row of the figures' table and its data-key, such as
// "peak-reserved".
type diffRow struct {
	Key   string
	Cells []string
}

type diffSiteRow struct {
	DiffSite
	Rank    int
	Class   string // "up", "down", or "" when unchanged
	Top     string // the innermost frame
	HasMore bool
}

// diffSide is one run's timeline on the common axis: x, op, reserved,
// allocated, for the page's hover read-out.
type diffSide struct {
	X  []float64 `json:"x"`
	Op []int     `json:"op"`
	Re []int64   `json:"re"`
	Al []int64   `json:"al"`
}

func newDiffView(p *DiffPage) (*diffView, error) {
	if p.A.Report == nil || p.B.Report == nil || p.Align == nil {
		return nil, errors.New("htmlreport: a diff needs both runs and their alignment")
	}
	v := &diffView{DiffPage: p, Chart: template.JS(chartJS), Data: "null", AlignBy: "operations"}
	if p.Align.Aligned() {
		v.AlignBy = "annotations"
	}
	v.Title = "gpumem diff of " + p.A.Report.Source + " and " + p.B.Report.Source
	v.SideA, v.SideB = sideLine(p.A), sideLine(p.B)
	for _, r := range p.Rows {
		if len(r) > 0 {
			v.Figures = append(v.Figures, diffRow{Key: strings.ReplaceAll(r[0], " ", "-"), Cells: r})
		}
	}
	for i, s := range p.Sites[:min(len(p.Sites), maxDiffSites)] {
		first, _, more := strings.Cut(s.Frames, "\n")
		r := diffSiteRow{DiffSite: s, Rank: i + 1, Top: first, HasMore: more}
		switch { // an unchanged site is neither (it was drawn red)
		case s.Change > 0:
			r.Class = "up"
		case s.Change < 0:
			r.Class = "down"
		}
		v.SiteRows = append(v.SiteRows, r)
	}
	v.More = len(p.Sites) - len(v.SiteRows)
	a, b := p.A.Report, p.B.Report
	if len(a.Timeline) == 0 && len(b.Timeline) == 0 {
		return v, nil
	}
	var err error
	v.Timeline, v.Data, err = diffChart(p)
	v.Legend = v.Timeline.Legend
	return v, err
}

// sideLine names a run: its file, device and settings, and, for a set of
// ranks, that it is the worst of them.
func sideLine(r DiffRun) string {
	settings := r.Report.Settings
	if settings == "" {
		settings = "defaults"
	}
	s := r.Report.Source + " (device " + strconv.Itoa(r.Report.Device) + ", settings " + settings + ")"
	if r.Ranks > 1 {
		s = "the worst of " + strconv.Itoa(r.Ranks) + " ranks: " + s
	}
	return s
}

// diffChart draws reserved and allocated memory of both runs on the common
// axis, and returns the figures the hover read-out shows.
func diffChart(p *DiffPage) (*chart, template.JS, error) {
	al := p.Align
	xa := func(op int) float64 { return float64(op) }
	xb := func(op int) float64 { return al.XOfB(float64(op)) }
	type run struct {
		name string
		r    *figures.Replay
		pts  []figures.Point
		x    func(int) float64
	}
	runs := []run{{"a", p.A.Report, thin(p.A.Report.Timeline), xa}, {"b", p.B.Report, thin(p.B.Report.Timeline), xb}}
	end, top := float64(al.Span()), int64(0)
	for _, r := range runs {
		if n := len(r.pts); n > 0 {
			end = max(end, r.x(r.pts[n-1].Op))
		}
		if r.r.OOM != nil {
			end = max(end, r.x(r.r.Ops))
		}
		top = max(top, peakReserved(r.r, r.pts))
		for _, pt := range r.pts {
			top = max(top, pt.Reserved, pt.Allocated)
		}
	}
	// the phases both runs share, where a's start; the peaks; the OOMs
	var phases []figures.Phase
	matched := map[int]bool{}
	for _, pr := range al.Pairs {
		matched[pr[0]] = true
	}
	for _, m := range p.A.Marks {
		if matched[m.Op] && m.Stage != "END" && (len(phases) == 0 || phases[len(phases)-1].Op != m.Op) {
			phases = append(phases, figures.Phase{Name: m.Name, Op: m.Op})
		}
	}
	c := spanChart("diff-timeline", 380, 0, int(math.Ceil(end)))
	// a row of labels above the plot for each run's peak, and one for the
	// shared phases: none drawn over a curve
	c.addLabelRows(len(runs) - 1)
	if len(phases) > 0 && len(phases) <= maxDiffMarks {
		c.addLabelRows(1)
	}
	c.byteAxis(top)
	c.LabelLeft = "memory"
	if al.Aligned() {
		c.LabelUnder = "op of a"
	}
	data := map[string]any{"x0": c.X0, "x1": c.X0 + c.XSpan}
	for _, r := range runs {
		c.Attrs = append(c.Attrs, attr("data-points-"+r.name, strconv.Itoa(len(r.pts))),
			attr("data-peak-reserved-"+r.name, itoa(peakReserved(r.r, r.pts))))
		if len(r.pts) == 0 {
			continue
		}
		d := diffSide{}
		for _, pt := range r.pts {
			d.X = append(d.X, math.Round(r.x(pt.Op)*10)/10)
			d.Op, d.Re, d.Al = append(d.Op, pt.Op), append(d.Re, pt.Reserved), append(d.Al, pt.Allocated)
		}
		data[r.name] = d
		for _, s := range []struct {
			what string
			v    []int64
		}{{"reserved", d.Re}, {"allocated", d.Al}} {
			y := func(i int) float64 { return plotUnits * (1 - float64(s.v[i])/c.YTop) }
			c.Lines = append(c.Lines, series{Name: r.name + " " + s.what, Class: r.name + "-" + s.what[:2],
				D: seriesPath(len(d.X), func(i int) float64 { return d.X[i] }, y, false)})
		}
	}
	c.Legend = c.Lines
	if len(phases) > 0 {
		ph := make([][2]any, len(phases))
		for i, f := range phases {
			ph[i] = [2]any{f.Op, f.Name}
		}
		data["ph"] = ph
	}
	if pm := c.phaseMarks(phases); len(pm) > 0 && len(pm) <= maxDiffMarks {
		c.Marks = append(c.Marks, pm...)
		c.Legend = append(c.Legend, series{Name: "shared annotation", Class: "phase"})
	}
	c.Attrs = append(c.Attrs, attr("data-phases", strconv.Itoa(len(phases))))
	for k, r := range runs {
		peak := c.mark(int(math.Round(r.x(r.r.PeakOp))), "peak peak-"+r.name, r.name+" peak "+units.FormatBytes(peakReserved(r.r, r.pts)))
		peak.LabelY += labelRow * k
		c.Marks = append(c.Marks, peak)
		if r.r.OOM != nil {
			m := c.oomMark(int(math.Round(r.x(r.r.Ops))), r.name+" OOM at operation "+units.FormatCount(int64(r.r.OOM.OpIndex)))
			m.LabelY += 16 * (k + 1)
			c.Marks = append(c.Marks, m)
			c.Attrs = append(c.Attrs, attr("data-oom-"+r.name, strconv.Itoa(r.r.Ops)))
		}
	}
	// json.Marshal writes <, > and & as \u003c..., so no name can end the
	// script element early
	j, err := json.Marshal(data)
	return c, template.JS(j), err
}

// thin is a timeline with at most MaxPoints points, as the replay report
// draws it.
func thin(pts []figures.Point) []figures.Point { return Downsample(pts, MaxPoints) }
