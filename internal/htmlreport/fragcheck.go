package htmlreport

import (
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"

	"github.com/gpumem/gpumem/internal/units"
)

// FragcheckPage is what the report of a fragcheck run shows: each case
// against its limits.
type FragcheckPage struct {
	Cases     []FragcheckCase // in the order they were given
	Generator string          // what wrote the report, shown under the title; "" for none
}

// FragcheckCase is one case and its verdict.
type FragcheckCase struct {
	Name   string
	Source string // the trace, or "workload NAME"
	// Status is the verdict: pass, warn, fail or error (could not run).
	Status string
	// Err says why the case could not run; "" when it ran.
	Err string
	// Metric names the fragmentation ratio the limits apply to, and
	// MetricDef says how it is computed.
	Metric, MetricDef string
	// Frag is the case's fragmentation by Metric; NaN when not measured.
	Frag float64
	// WarnFrag and MaxFrag are the fragmentation warning level and limit;
	// +Inf turns one off.
	WarnFrag, MaxFrag float64
	PeakReserved      int64
	PeakAllocated     int64
	// MaxReserved is the most peak reserved memory allowed; 0 = no limit.
	MaxReserved uint64
	// MustFit is the card the case must fit on; 0 = none (the case ran on
	// an unlimited device, or on the card a workload names).
	MustFit uint64
	// OOM says where the replay ran out of memory; "" when it ran to the
	// end.
	OOM      string
	Findings []CaseFinding
}

// CaseFinding is one thing the check of a case found.
type CaseFinding struct {
	Status string // pass (a note), warn or fail
	Text   string
}

// WriteFragcheck writes the HTML report of a fragcheck run to w.
func WriteFragcheck(w io.Writer, p FragcheckPage) error {
	v, err := newFragcheckView(&p)
	if err != nil {
		return err
	}
	return render(w, pagesTmpl(), "fragcheck", v)
}

var statuses = []string{"pass", "warn", "fail", "error"}

// Gauge layout: a track with the figure's bar and its limits' marks.
const (
	gaugeW = 220
	gaugeH = 30
	trackY = 8
	trackH = 12
)

type fragcheckView struct {
	Title     string
	Generator string
	Status    string // the worst status
	Summary   string
	Facts     []fact
	Rows      []caseRow
	Metrics   []fact // each metric used and its definition
	// FragEnd is the end of the fragmentation scale every row shares.
	FragEnd string
}

type caseRow struct {
	Name, Source, Status, Err string
	Attrs                     []template.HTMLAttr
	Frag, FragLimits          string
	FragGauge                 *gauge
	Peak, PeakLimits          string
	PeakGauge                 *gauge
	OOM                       string
	Findings                  []CaseFinding
}

type gauge struct {
	ViewBox string
	W       string // the bar's width
	Class   string // the bar's colour: ok, warn or fail
	Marks   []gaugeMark
	Title   string
	TrackW  int
}

type gaugeMark struct {
	X, Class, Title string
}

func newFragcheckView(p *FragcheckPage) (*fragcheckView, error) {
	if len(p.Cases) == 0 {
		return nil, errors.New("htmlreport: a fragcheck run without cases")
	}
	count := map[string]int{}
	worst := 0
	for _, c := range p.Cases {
		k := statusRank(c.Status)
		if k < 0 {
			return nil, fmt.Errorf("htmlreport: case %q: unknown status %q (want pass, warn, fail or error)", c.Name, c.Status)
		}
		count[c.Status]++
		worst = max(worst, k)
	}
	v := &fragcheckView{Title: "gpumem fragcheck", Generator: p.Generator, Status: statuses[worst]}
	noun := "cases"
	if len(p.Cases) == 1 {
		noun = "case"
	}
	v.Summary = fmt.Sprintf("%d %s: %d passed, %d warned, %d failed, %d could not run",
		len(p.Cases), noun, count["pass"], count["warn"], count["fail"], count["error"])
	v.Facts = []fact{
		{Label: "cases", Value: strconv.Itoa(len(p.Cases)), Key: "cases", Raw: strconv.Itoa(len(p.Cases))},
		{Label: "passed", Value: strconv.Itoa(count["pass"]), Key: "pass", Raw: strconv.Itoa(count["pass"])},
		{Label: "warned", Value: strconv.Itoa(count["warn"]), Key: "warn", Raw: strconv.Itoa(count["warn"])},
		{Label: "failed", Value: strconv.Itoa(count["fail"]), Key: "fail", Raw: strconv.Itoa(count["fail"])},
		{Label: "could not run", Value: strconv.Itoa(count["error"]), Key: "error", Raw: strconv.Itoa(count["error"])},
	}

	// one fragmentation scale for every row, so that bars compare: at
	// least 50%, else a tenth above the highest figure or limit
	top := 0.5
	seen := map[string]bool{}
	for _, c := range p.Cases {
		for _, f := range []float64{c.Frag, c.WarnFrag, c.MaxFrag} {
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				top = max(top, math.Ceil(f*1.1*10)/10)
			}
		}
		if c.Metric != "" && !seen[c.Metric] && c.Status != "error" {
			seen[c.Metric] = true
			v.Metrics = append(v.Metrics, fact{Label: c.Metric, Value: c.MetricDef})
		}
	}
	top = min(top, 1)
	v.FragEnd = percent(top)
	for i := range p.Cases {
		v.Rows = append(v.Rows, newCaseRow(&p.Cases[i], top))
	}
	return v, nil
}

func statusRank(s string) int {
	for i, x := range statuses {
		if x == s {
			return i
		}
	}
	return -1
}

func newCaseRow(c *FragcheckCase, fragTop float64) caseRow {
	r := caseRow{Name: c.Name, Source: c.Source, Status: c.Status, Err: c.Err, OOM: c.OOM, Findings: c.Findings}
	r.Attrs = []template.HTMLAttr{
		attr("data-case", c.Name),
		attr("data-status", c.Status),
		attr("data-frag", num4(c.Frag)),
		attr("data-warn-frag", limitRatio(c.WarnFrag)),
		attr("data-max-frag", limitRatio(c.MaxFrag)),
		attr("data-peak-reserved", itoa(c.PeakReserved)),
		attr("data-max-reserved", strconv.FormatUint(c.MaxReserved, 10)),
		attr("data-must-fit", strconv.FormatUint(c.MustFit, 10)),
		attr("data-oom", strconv.FormatBool(c.OOM != "")),
	}
	r.FragLimits = "warn " + ratioOrNone(c.WarnFrag) + " · max " + ratioOrNone(c.MaxFrag)
	r.PeakLimits = limitsText(c)
	if c.Status == "error" {
		r.Frag, r.Peak = "-", "-"
		return r
	}
	r.Frag = percent(c.Frag)
	if c.Metric != "" {
		r.Frag += " " + c.Metric
	}
	r.Peak = units.FormatBytes(c.PeakReserved)

	// fragmentation against its warning level and limit
	g := &gauge{Class: "ok"}
	switch {
	case math.IsNaN(c.Frag):
		g.Class = "none"
	case c.Frag > c.MaxFrag:
		g.Class = "fail"
	case c.Frag > c.WarnFrag:
		g.Class = "warn"
	}
	f := c.Frag
	if math.IsNaN(f) {
		f = 0
	}
	g.setBar(min(max(f, 0), fragTop) / fragTop)
	for _, m := range []struct {
		v           float64
		class, name string
	}{{c.WarnFrag, "warn", "warn_frag"}, {c.MaxFrag, "fail", "max_frag"}} {
		if !math.IsInf(m.v, 0) && !math.IsNaN(m.v) && m.v <= fragTop {
			g.mark(m.v/fragTop, m.class, m.name+" "+percent(m.v))
		}
	}
	g.Title = "fragmentation " + percent(c.Frag) + "; " + r.FragLimits
	r.FragGauge = g

	// peak reserved against max_reserved and the must_fit card, when
	// there is either
	if c.MaxReserved == 0 && c.MustFit == 0 {
		return r
	}
	scale := float64(max(c.PeakReserved, 1))
	for _, l := range []uint64{c.MaxReserved, c.MustFit} {
		scale = max(scale, float64(l))
	}
	scale *= 1.08
	pg := &gauge{Class: "ok"}
	if (c.MaxReserved > 0 && c.PeakReserved > 0 && uint64(c.PeakReserved) > c.MaxReserved) || c.OOM != "" {
		pg.Class = "fail"
	}
	pg.setBar(float64(max(c.PeakReserved, 0)) / scale)
	if c.MaxReserved > 0 {
		pg.mark(float64(c.MaxReserved)/scale, "fail", "max_reserved "+sizeText(c.MaxReserved))
	}
	if c.MustFit > 0 {
		pg.mark(float64(c.MustFit)/scale, "card", "must_fit "+sizeText(c.MustFit)+" card")
	}
	pg.Title = "peak reserved " + units.FormatBytes(c.PeakReserved) + "; " + r.PeakLimits
	r.PeakGauge = pg
	return r
}

func (g *gauge) setBar(frac float64) {
	g.TrackW = gaugeW
	g.ViewBox = "0 0 " + strconv.Itoa(gaugeW) + " " + strconv.Itoa(gaugeH)
	g.W = num(max(frac*gaugeW, 0))
}

func (g *gauge) mark(frac float64, class, title string) {
	g.Marks = append(g.Marks, gaugeMark{X: num(frac * gaugeW), Class: class, Title: title})
}

func limitsText(c *FragcheckCase) string {
	s := "max_reserved " + "none"
	if c.MaxReserved > 0 {
		s = "max_reserved " + sizeText(c.MaxReserved)
	}
	if c.MustFit > 0 {
		s += " · must_fit " + sizeText(c.MustFit)
	} else {
		s += " · no must_fit"
	}
	return s
}

func sizeText(n uint64) string { return units.FormatUBytes(n) }

// limitRatio writes a ratio limit for a data-* attribute: "none" when off.
func limitRatio(v float64) string {
	if math.IsInf(v, 1) {
		return "none"
	}
	return num4(v)
}

func ratioOrNone(v float64) string {
	if math.IsInf(v, 1) {
		return "none"
	}
	return percent(v)
}
