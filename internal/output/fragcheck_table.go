package output

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// fragcheckTable writes rs for people: a table with each case's status,
// figures and the limits it crossed, then every finding in words, what
// the fragmentation figures mean, and a count by status, coloured with
// o.Color.
func fragcheckTable(w io.Writer, rs []budget.Result, o Options) error {
	colored := o.Color
	paint := map[budget.Status]*color.Color{
		budget.Pass:  color.New(color.FgGreen),
		budget.Warn:  color.New(color.FgYellow),
		budget.Fail:  color.New(color.FgRed, color.Bold),
		budget.Error: color.New(color.FgRed, color.Bold),
	}
	for _, c := range paint {
		if colored {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	var metrics []budget.Metric
	for i := range rs {
		if m := rs[i].Case.Limits.Metric; !containsMetric(metrics, m) {
			metrics = append(metrics, m)
		}
	}
	bw := bufio.NewWriter(w)
	t := tablewriter.NewTable(bw,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignmentConfig(tw.CellAlignment{PerColumn: tableAlign}),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: tableAlign}),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
	)
	t.Header([]string{"Case", "Status", "Fragmentation", "Peak reserved", "Peak allocated", "Limit crossed"})
	for i := range rs {
		r := &rs[i]
		st := r.Status()
		row := []string{textsafe.Line(r.Case.Name), paint[st].Sprint(st), "-", "-", "-", crossedCell(r)}
		if r.Err == nil {
			row[2] = units.FormatRatio(r.Fragmentation())
			if len(metrics) > 1 {
				row[2] += " " + string(r.Case.Limits.Metric)
			}
			row[3] = units.FormatBytes(r.Figures.PeakReserved)
			row[4] = units.FormatBytes(r.Figures.PeakAllocated)
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	var lines []string
	for i := range rs {
		r := &rs[i]
		if r.Err != nil {
			lines = append(lines, fmt.Sprintf("%s: %s: %s", textsafe.Line(r.Case.Name), paint[budget.Error].Sprint(budget.Error), textsafe.Line(r.Err.Error())))
		}
		for _, f := range r.Findings {
			label := "note"
			if f.Status != budget.Pass {
				label = paint[f.Status].Sprint(f.Status)
			}
			lines = append(lines, fmt.Sprintf("%s: %s: %s", textsafe.Line(r.Case.Name), label, textsafe.Line(f.Message)))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(bw)
		for _, l := range lines {
			fmt.Fprintln(bw, l)
		}
	}
	fmt.Fprintln(bw)
	for _, m := range metrics {
		fmt.Fprintf(bw, "fragmentation (%s) = %s\n", m, m.Definition())
	}
	fmt.Fprintln(bw, budget.Summarize(rs))
	return bw.Flush()
}

var tableAlign = []tw.Align{tw.AlignLeft, tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignLeft}

// crossedCell names the limits r crossed with their values.
func crossedCell(r *budget.Result) string {
	if r.Err != nil {
		return "input"
	}
	l := r.Case.Limits
	var parts []string
	for _, k := range r.Crossed() {
		switch k {
		case "warn_frag":
			k += " " + units.FormatRatio(l.WarnFrag)
		case "max_frag":
			k += " " + units.FormatRatio(l.MaxFrag)
		case "max_reserved":
			k += " " + units.FormatUBytes(l.MaxReserved)
		case "must_fit":
			if l.MustFit > 0 {
				k += " " + units.FormatUBytes(l.MustFit)
			}
		}
		parts = append(parts, k)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func containsMetric(list []budget.Metric, m budget.Metric) bool {
	for _, x := range list {
		if x == m {
			return true
		}
	}
	return false
}
