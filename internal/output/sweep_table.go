package output

import (
	"bufio"
	"fmt"
	"io"

	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/report"
	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// noteWidth is the most columns a note below the table takes, wrapped.
const noteWidth = 100

// sweepText writes the sweep as a table for people, or in Markdown.
func sweepText(w io.Writer, sw *sweep.Report, md bool) error {
	bw := bufio.NewWriter(w)
	if md {
		fmt.Fprintf(bw, "## Sweep of `%s`\n\n", textsafe.Line(sw.Source))
		for _, l := range sweepFacts(sw) {
			fmt.Fprintf(bw, "- %s\n", l)
		}
		fmt.Fprintln(bw)
	} else {
		fmt.Fprintf(bw, "Sweep of %s\n", textsafe.Line(sw.Source))
		for _, l := range sweepFacts(sw) {
			fmt.Fprintf(bw, "  %s\n", l)
		}
		fmt.Fprintln(bw)
	}
	if err := sweepTable(bw, sw, md); err != nil {
		return err
	}
	notes, last := sweepVerdict(sw)
	fmt.Fprintln(bw)
	for _, n := range notes {
		if md {
			fmt.Fprintf(bw, "%s\n\n", n)
			continue
		}
		for i, l := range report.Wrap(n, noteWidth) {
			if i > 0 {
				l = "  " + l
			}
			fmt.Fprintln(bw, l)
		}
	}
	if md {
		last = "**" + last + "**"
	}
	fmt.Fprintln(bw, last)
	return bw.Flush()
}

func sweepTable(w io.Writer, sw *sweep.Report, md bool) error {
	rows, fraction := sw.Rows, sw.Fraction
	first := "setting"
	if sw.Compare {
		first = "workload"
	}
	header := []string{first, "peak reserved", "× bound", "vs " + sw.Baseline, "frag at peak", "device allocs", "retries"}
	align := []tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight}
	if len(sw.Cards) == 0 {
		// With cards, the largest card's column says it.
		header, align = append(header, "OOM"), append(align, tw.AlignLeft)
	}
	for _, c := range sw.Cards {
		h := cardName(c)
		if fraction > 0 {
			h += fmt.Sprintf(" ×%g", fraction)
		}
		header = append(header, h)
		align = append(align, tw.AlignLeft)
	}
	base := sw.FindRow(sw.Baseline)
	var cells [][]string
	for i := range rows {
		r := &rows[i]
		vs := "-"
		switch {
		case r == base:
			vs = "baseline"
		case base != nil && base.PeakReserved() > 0:
			vs = fmt.Sprintf("%+.1f%%", 100*(float64(r.PeakReserved())/float64(base.PeakReserved())-1))
		}
		row := []string{
			r.Label,
			units.FormatBytes(r.PeakReserved()),
			overBound(r),
			vs,
			ratio(r.Fragmentation.AtPeak),
			units.FormatCount(r.DeviceAllocs()),
			units.FormatCount(r.Stats.NumAllocRetries),
		}
		if len(sw.Cards) == 0 {
			row = append(row, oomCell(sw, r.OOM, "no", "at "))
		}
		for k := range r.Cards {
			row = append(row, oomCell(sw, r.Cards[k].OOM, "fits", "OOM at "))
		}
		cells = append(cells, row)
	}
	return writeTable(w, header, align, cells, md)
}
