package budget

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/pkg/figures"
)

// WriteTable writes rs for people: a table with each case's status,
// figures and the limits it crossed, then every finding in words, what
// the fragmentation figures mean, and a count by status. color turns on
// ANSI colours for the statuses.
func WriteTable(w io.Writer, rs []Result, colored bool) error {
	paint := map[Status]*color.Color{
		Pass:  color.New(color.FgGreen),
		Warn:  color.New(color.FgYellow),
		Fail:  color.New(color.FgRed, color.Bold),
		Error: color.New(color.FgRed, color.Bold),
	}
	for _, c := range paint {
		if colored {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	var metrics []Metric
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
		row := []string{r.Case.Name, paint[st].Sprint(st), "-", "-", "-", crossedCell(r)}
		if r.Err == nil {
			row[2] = FormatRatio(r.Fragmentation())
			if len(metrics) > 1 {
				row[2] += " " + string(r.Case.Limits.Metric)
			}
			row[3] = figures.FormatBytes(r.Figures.PeakReserved)
			row[4] = figures.FormatBytes(r.Figures.PeakAllocated)
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
			lines = append(lines, fmt.Sprintf("%s: %s: %v", r.Case.Name, paint[Error].Sprint(Error), r.Err))
		}
		for _, f := range r.Findings {
			label := "note"
			if f.Status != Pass {
				label = paint[f.Status].Sprint(f.Status)
			}
			lines = append(lines, fmt.Sprintf("%s: %s: %s", r.Case.Name, label, f.Message))
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
	fmt.Fprintln(bw, Summarize(rs))
	return bw.Flush()
}

var tableAlign = []tw.Align{tw.AlignLeft, tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignLeft}

// crossedCell names the limits r crossed with their values.
func crossedCell(r *Result) string {
	if r.Err != nil {
		return "input"
	}
	l := r.Case.Limits
	var parts []string
	for _, k := range r.Crossed() {
		switch k {
		case "warn_frag":
			k += " " + FormatRatio(l.WarnFrag)
		case "max_frag":
			k += " " + FormatRatio(l.MaxFrag)
		case "max_reserved":
			k += " " + figures.FormatUBytes(l.MaxReserved)
		case "must_fit":
			if l.MustFit > 0 {
				k += " " + figures.FormatUBytes(l.MustFit)
			}
		}
		parts = append(parts, k)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func containsMetric(list []Metric, m Metric) bool {
	for _, x := range list {
		if x == m {
			return true
		}
	}
	return false
}

// WriteAnnotations writes a GitHub Actions workflow command for every
// warning, failure and error in rs ("::error title=...::message"), which
// GitHub shows on the run's summary and, for cases from a budget file, on
// the file's line.
func WriteAnnotations(w io.Writer, rs []Result) error {
	bw := bufio.NewWriter(w)
	for i := range rs {
		r := &rs[i]
		props := []string{}
		if r.Case.File != "" {
			props = append(props, "file="+escapeProperty(r.Case.File))
			if r.Case.Line > 0 {
				props = append(props, fmt.Sprintf("line=%d", r.Case.Line))
			}
		}
		props = append(props, "title="+escapeProperty("gpumem fragcheck: "+r.Case.Name))
		emit := func(level, msg string) {
			fmt.Fprintf(bw, "::%s %s::%s\n", level, strings.Join(props, ","), escapeData(msg))
		}
		if r.Err != nil {
			emit("error", r.Err.Error())
		}
		for _, f := range r.Findings {
			switch f.Status {
			case Fail:
				emit("error", f.Message)
			case Warn:
				emit("warning", f.Message)
			}
		}
	}
	return bw.Flush()
}

// escapeData and escapeProperty escape as the Actions runner unescapes
// workflow commands (actions/toolkit, command.ts).
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
