package htmlreport

import (
	"errors"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// SweepPage is what the report of a sweep shows: one bar of peak reserved
// memory per setting, marks for the cards each fits on, and the
// recommendation.
type SweepPage struct {
	Source    string // what was swept: a trace, a workload, or several
	Generator string // what wrote the report, shown under the title; "" for none
	// Ops is how many operations each setting replayed; 0 when the rows
	// replay different plans.
	Ops int
	// Compare says the rows are workloads (each under a setting), not
	// settings of one trace.
	Compare bool
	// Baseline is the label of the row the others are measured against;
	// "" for none.
	Baseline string
	// Best is the label of the recommended row; "" when there is none.
	Best string
	// Cards are the card sizes each setting was replayed on, in the order
	// given; nil for one unlimited device.
	Cards []uint64
	// Fraction is the memory fraction each card was capped at; 0 = none.
	Fraction float64
	// Rows are in the order of the sweep's table: least peak reserved
	// first, rows that ran out of memory last.
	Rows []SweepRow
	// Notes are said before the recommendation: settings not advised,
	// cards nothing fits.
	Notes []string
	// Recommendation is the sweep's last line.
	Recommendation string
}

// SweepRow is one setting (or workload) of a sweep. Its figures are those
// of the headline replay: on the largest card, or on an unlimited device.
type SweepRow struct {
	Label         string
	PeakReserved  int64
	PeakAllocated int64
	// LowerBound is the peak of live bytes: no setting reserves less.
	LowerBound   int64
	FragAtPeak   float64 // NaN when nothing was reserved
	DeviceAllocs int64
	Retries      int64
	// Settable says PYTORCH_CUDA_ALLOC_CONF can select the setting.
	Settable bool
	// OOM says where the headline replay ran out of memory, such as
	// "op 1234"; "" when it ran to the end.
	OOM string
	// Cards holds the replay on each of the page's Cards, in their order.
	Cards []CardOutcome
}

// CardOutcome is a setting's replay on one card.
type CardOutcome struct {
	PeakReserved int64
	OOM          string // where it ran out of memory; "" = it fits
}

// WriteSweep writes the HTML report of a sweep to w.
func WriteSweep(w io.Writer, p SweepPage) error {
	v, err := newSweepView(&p)
	if err != nil {
		return err
	}
	return render(w, pagesTmpl(), "sweep", v)
}

// Sweep chart layout: a label column, the bars, their figures, then one
// column of fits/OOM marks per card.
const (
	swLabelW = 300
	swPlotX  = swLabelW + 10
	swTop    = 42 // room for the axis labels and the card names
	swRowH   = 26
	swBarH   = 16
	swValueW = 150
	// valueCharW is about how wide a character of a value label is.
	valueCharW = 7
	swLineH    = 17 // one label line under the bars
	// swOffScale: a card line is drawn when the card is at most this many
	// times the largest bar; larger cards would squash the bars.
	swOffScale = 1.5
)

type sweepView struct {
	Title          string
	Generator      string
	Kind           string // "setting" or "workload"
	Facts          []fact
	Recommendation string
	Best           bool // a row is recommended
	Notes          []string
	Chart          *sweepChart
	Table          []sweepTableRow
	CardNames      []string
	Baseline       string
}

type sweepChart struct {
	H, PlotX, PlotW, PlotRight int
	ViewBox                    string
	Ticks                      []tick
	Bars                       []sweepBar
	VLines                     []vline
	CardHeads                  []cardHead
	OffScale                   string // cards not drawn, for the note
	HasBound, HasCardLines     bool
	Attrs                      []template.HTMLAttr
	GridTop, GridBottom        int
	AxisY                      int
	LabelX, BarY, BarH, TextY  int // within a row
	RowH                       int
}

type sweepBar struct {
	Y          int    // the row's top
	Label      string // as shown: shortened when long
	Full       string
	Class      string
	W          string
	ValueX     string
	Value      string
	Title      string
	Attrs      []template.HTMLAttr
	BoundX     string // this row's own lower bound, when rows differ
	Cards      []cardMark
	Recommends bool
}

// valueBox is where a bar's value label is drawn.
type valueBox struct {
	top, bottom int
	x0, x1      float64
}

type vline struct {
	D                             template.HTML // the line, in pieces around value labels
	X, Class, Text, Anchor, TextX string
	LabelY                        int
	Attrs                         []template.HTMLAttr
}

type cardHead struct {
	X, Text string
}

type cardMark struct {
	X, Class, Text, Title string
	Attrs                 []template.HTMLAttr
}

type sweepTableRow struct {
	Label, Peak, VsBase, OverBound, Frag, Allocs, Retries string
	Class                                                 string
	Cards                                                 []cardMark
}

func newSweepView(p *SweepPage) (*sweepView, error) {
	if len(p.Rows) == 0 {
		return nil, errors.New("htmlreport: a sweep without rows")
	}
	for _, r := range p.Rows {
		if len(r.Cards) != len(p.Cards) {
			return nil, fmt.Errorf("htmlreport: sweep row %q has %d card outcomes for %d cards", r.Label, len(r.Cards), len(p.Cards))
		}
	}
	v := &sweepView{
		Title:          "gpumem sweep of " + p.Source,
		Generator:      p.Generator,
		Kind:           "setting",
		Recommendation: p.Recommendation,
		Notes:          p.Notes,
		Baseline:       p.Baseline,
	}
	if p.Compare {
		v.Kind = "workload"
	}
	for _, c := range p.Cards {
		v.CardNames = append(v.CardNames, cardLabel(c, p.Fraction))
	}
	base := sweepRowOf(p, p.Baseline)
	best := sweepRowOf(p, p.Best)
	v.Best = best != nil
	v.Facts = sweepFacts(p, base, best)
	v.Chart = sweepBars(p, base)
	for i := range p.Rows {
		r := &p.Rows[i]
		tr := sweepTableRow{
			Label: r.Label, Peak: units.FormatBytes(r.PeakReserved),
			VsBase: vsBaseline(r, base), OverBound: overBound(r.PeakReserved, r.LowerBound),
			Frag: percent(r.FragAtPeak), Allocs: units.FormatCount(r.DeviceAllocs), Retries: units.FormatCount(r.Retries),
			Class: v.Chart.Bars[i].Class,
		}
		tr.Cards = v.Chart.Bars[i].Cards
		v.Table = append(v.Table, tr)
	}
	return v, nil
}

func sweepRowOf(p *SweepPage, label string) *SweepRow {
	if label == "" {
		return nil
	}
	for i := range p.Rows {
		if p.Rows[i].Label == label {
			return &p.Rows[i]
		}
	}
	return nil
}

// commonBound is the rows' lower bound when they share one (one plan
// under many settings), else 0.
func commonBound(rows []SweepRow) int64 {
	b := rows[0].LowerBound
	for _, r := range rows[1:] {
		if r.LowerBound != b {
			return 0
		}
	}
	return b
}

func sweepFacts(p *SweepPage, base, best *SweepRow) []fact {
	noun := "settings"
	if p.Compare {
		noun = "rows"
	}
	fs := []fact{{Label: noun, Value: strconv.Itoa(len(p.Rows)), Key: "rows", Raw: strconv.Itoa(len(p.Rows))}}
	if p.Ops > 0 {
		fs = append(fs, fact{Label: "operations", Value: units.FormatCount(int64(p.Ops)), Key: "ops", Raw: strconv.Itoa(p.Ops)})
	}
	if b := commonBound(p.Rows); b > 0 {
		fs = append(fs, fact{Label: "lower bound", Value: units.FormatBytes(b), Note: "peak live bytes", Key: "lower-bound", Raw: itoa(b)})
	}
	if best != nil {
		fs = append(fs, fact{Label: "recommended", Value: units.FormatBytes(best.PeakReserved), Note: best.Label, Key: "best", Raw: itoa(best.PeakReserved)})
	}
	if base != nil {
		fs = append(fs, fact{Label: p.Baseline, Value: units.FormatBytes(base.PeakReserved), Note: "the baseline", Key: "baseline", Raw: itoa(base.PeakReserved)})
	}
	if len(p.Cards) == 0 {
		fs = append(fs, fact{Label: "device", Value: "unlimited", Key: "cards"})
	} else {
		names := make([]string, len(p.Cards))
		for i, c := range p.Cards {
			names[i] = units.FormatUBytes(c)
		}
		f := fact{Label: "cards", Value: strings.Join(names, ", "), Key: "cards"}
		var notes []string
		if p.Fraction > 0 {
			notes = append(notes, "each capped at "+strconv.FormatFloat(p.Fraction, 'g', -1, 64))
		}
		if len(p.Cards) > 1 {
			notes = append(notes, "figures from the largest, "+sizeText(slices.Max(p.Cards)))
		}
		f.Note = strings.Join(notes, "; ")
		fs = append(fs, f)
	}
	return fs
}

func cardLabel(c uint64, fraction float64) string {
	s := units.FormatUBytes(c)
	if fraction > 0 {
		s += " ×" + strconv.FormatFloat(fraction, 'g', -1, 64)
	}
	return s
}

func vsBaseline(r, base *SweepRow) string {
	switch {
	case base == nil || base.PeakReserved <= 0:
		return "-"
	case r == base:
		return "baseline"
	}
	return fmt.Sprintf("%+.1f%%", 100*(float64(r.PeakReserved)/float64(base.PeakReserved)-1))
}

func overBound(peak, bound int64) string {
	if bound <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(peak)/float64(bound), 'f', 3, 64) + "×"
}

func sweepBars(p *SweepPage, base *SweepRow) *sweepChart {
	cardW := 84
	if len(p.Cards) > 4 {
		cardW = 64
	}
	c := &sweepChart{PlotX: swPlotX}
	c.PlotW = max(chartW-swPlotX-swValueW-cardW*len(p.Cards)-8, 200)
	c.PlotRight = c.PlotX + c.PlotW
	bound := commonBound(p.Rows)

	// the scale: every bar and bound, and the cards that do not squash them
	var top int64
	for _, r := range p.Rows {
		top = max(top, r.PeakReserved, r.LowerBound)
	}
	type cardLine struct {
		name  string
		bytes int64
	}
	var lines []cardLine
	var off []string
	for _, card := range p.Cards {
		capped := float64(card)
		if p.Fraction > 0 {
			capped *= p.Fraction
		}
		if capped <= swOffScale*float64(max(top, 1)) {
			lines = append(lines, cardLine{cardLabel(card, p.Fraction), int64(capped)})
		} else {
			off = append(off, cardLabel(card, p.Fraction))
		}
	}
	scaleTop := top
	for _, l := range lines {
		scaleTop = max(scaleTop, l.bytes)
	}
	end, ticks, labels := byteScale(scaleTop)
	px := func(v int64) float64 { return float64(c.PlotX) + float64(c.PlotW)*float64(v)/end }
	for i, t := range ticks {
		c.Ticks = append(c.Ticks, tick{Pos: num(float64(c.PlotX) + float64(c.PlotW)*t/end), Label: labels[i]})
	}
	if len(off) > 0 {
		c.OffScale = strings.Join(off, ", ")
	}

	c.AxisY, c.GridTop = swTop-24, swTop-16
	c.LabelX, c.BarY, c.BarH, c.TextY, c.RowH = swLabelW, (swRowH-swBarH)/2, swBarH, swRowH/2+4, swRowH
	y := swTop
	var values []valueBox
	for i := range p.Rows {
		r := &p.Rows[i]
		b := sweepBar{
			Y:    y,
			Full: r.Label, Label: shorten(r.Label, 44),
			W:     num(max(px(max(r.PeakReserved, 0))-float64(c.PlotX), 1)),
			Class: "fits",
			Attrs: []template.HTMLAttr{
				attr("data-label", r.Label),
				attr("data-peak-reserved", itoa(r.PeakReserved)),
				attr("data-oom", strconv.FormatBool(r.OOM != "")),
			},
		}
		switch {
		case r.OOM != "":
			b.Class = "oom"
		case r.Label == p.Best:
			b.Class, b.Recommends = "best", true
		case !r.Settable && !p.Compare:
			b.Class = "unsettable"
		case r == base:
			b.Class = "baseline"
		}
		if r.OOM != "" {
			b.Attrs = append(b.Attrs, attr("data-oom-at", r.OOM))
		}
		if r.Label == p.Best {
			b.Attrs = append(b.Attrs, attr("data-recommended", "true"))
		}
		b.Value = units.FormatBytes(r.PeakReserved)
		switch vs := vsBaseline(r, base); {
		case r.OOM != "":
			b.Value += " · OOM"
		case vs != "-":
			b.Value += " · " + strings.Replace(vs, "-", "−", 1)
		}
		if b.Recommends {
			b.Value += " · recommended"
		}
		vx := px(max(r.PeakReserved, 0)) + 6
		b.ValueX = num(vx)
		values = append(values, valueBox{top: y + c.TextY - 12, bottom: y + c.TextY + 4, x0: vx - 2,
			x1: vx + valueCharW*float64(len([]rune(b.Value)))})
		if bound == 0 && r.LowerBound > 0 {
			b.BoundX = num(px(r.LowerBound))
		}
		b.Title = sweepTitle(r, base, p)
		x := c.PlotRight + swValueW
		for k := range r.Cards {
			o := &r.Cards[k]
			m := cardMark{X: strconv.Itoa(x + k*cardW + cardW/2), Class: "fits", Text: "✓ fits",
				Title: cardLabel(p.Cards[k], p.Fraction) + ": fits, peak reserved " + units.FormatBytes(o.PeakReserved),
				Attrs: []template.HTMLAttr{attr("data-card", strconv.FormatUint(p.Cards[k], 10)), attr("data-fits", "true")}}
			if o.OOM != "" {
				m.Class, m.Text = "oom", "✗ OOM"
				m.Title = cardLabel(p.Cards[k], p.Fraction) + ": out of memory at " + o.OOM
				m.Attrs[1] = attr("data-fits", "false")
				m.Attrs = append(m.Attrs, attr("data-oom-at", o.OOM))
			}
			b.Cards = append(b.Cards, m)
		}
		c.Bars = append(c.Bars, b)
		y += swRowH
	}
	for k := range p.Cards {
		c.CardHeads = append(c.CardHeads, cardHead{X: strconv.Itoa(c.PlotRight + swValueW + k*cardW + cardW/2), Text: cardLabel(p.Cards[k], p.Fraction)})
	}
	c.GridBottom = y + 4

	// vertical lines, each labelled on its own line under the bars
	ly := y + 4 + swLineH
	addLine := func(v int64, class, text string, attrs ...template.HTMLAttr) {
		x := px(v)
		l := vline{X: num(x), Class: class, Text: text, LabelY: ly, Anchor: "start", TextX: num(x + 4), Attrs: attrs}
		// drawn in pieces between the value labels it would cross
		d, from := "", c.GridTop
		for _, b := range values {
			if x >= b.x0 && x <= b.x1 {
				d += fmt.Sprintf("M%s %dV%d", num(x), from, b.top)
				from = b.bottom
			}
		}
		l.D = template.HTML(d + fmt.Sprintf("M%s %dV%d", num(x), from, c.GridBottom))
		if x > float64(c.PlotX+c.PlotW/2) {
			l.Anchor, l.TextX = "end", num(x-4)
		}
		c.VLines = append(c.VLines, l)
		ly += swLineH
	}
	c.HasBound, c.HasCardLines = bound > 0, len(lines) > 0
	if bound > 0 {
		addLine(bound, "bound", "lower bound "+units.FormatBytes(bound)+" (peak live bytes: no setting reserves less)",
			attr("data-lower-bound", itoa(bound)))
	}
	for _, l := range lines {
		addLine(l.bytes, "card", l.name+" card", attr("data-card-line", itoa(l.bytes)))
	}
	c.H = ly
	c.ViewBox = "0 0 " + strconv.Itoa(chartW) + " " + strconv.Itoa(c.H)
	c.Attrs = []template.HTMLAttr{attr("data-rows", strconv.Itoa(len(p.Rows))), attr("data-scale", num(end))}
	if bound > 0 {
		c.Attrs = append(c.Attrs, attr("data-lower-bound", itoa(bound)))
	}
	return c
}

// sweepTitle is a bar's hover text.
func sweepTitle(r, base *SweepRow, p *SweepPage) string {
	var b strings.Builder
	b.WriteString(r.Label)
	b.WriteString("\npeak reserved " + units.FormatBytes(r.PeakReserved))
	if vs := vsBaseline(r, base); vs != "-" && vs != "baseline" {
		b.WriteString(" (" + vs + " against " + p.Baseline + ")")
	}
	if r.LowerBound > 0 {
		b.WriteString("\n" + overBound(r.PeakReserved, r.LowerBound) + " the lower bound")
	}
	b.WriteString("\npeak allocated " + units.FormatBytes(r.PeakAllocated))
	b.WriteString("\nfragmentation at the peak " + percent(r.FragAtPeak))
	b.WriteString("\ndevice allocations " + units.FormatCount(r.DeviceAllocs) + ", retries " + units.FormatCount(r.Retries))
	if r.OOM != "" {
		b.WriteString("\nout of memory at " + r.OOM)
	}
	if !r.Settable && !p.Compare {
		b.WriteString("\nnot a PYTORCH_CUDA_ALLOC_CONF setting")
	}
	return b.String()
}

// shorten cuts s to at most n runes, ending it with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
