package report

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"
	"unicode/utf8"

	"github.com/guptarohit/asciigraph"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
)

const chartHeight = 12

// Timeline writes an ASCII chart of reserved and allocated memory over the
// replay, at most o.Width columns wide, with the peak of reserved memory
// marked "^" and the OOM, if any, "X" under the chart. Each column shows
// the most memory seen among the operations it covers, so no peak is lost
// to downsampling; operations between two timeline points keep the
// earlier point's values.
func Timeline(w io.Writer, r *figures.Replay, o Options) error {
	if r == nil {
		return errors.New("report: no replay")
	}
	o = o.withDefaults()
	p := newPalette(o.Color)
	pts := r.Timeline
	if len(pts) == 0 {
		_, err := fmt.Fprintln(w, "no timeline recorded")
		return err
	}
	first, last := pts[0].Op, pts[len(pts)-1].Op
	var top int64
	for _, pt := range pts {
		top = max(top, pt.Reserved, pt.Allocated)
		first, last = min(first, pt.Op), max(last, pt.Op)
	}
	unit, scale := chartUnit(top)
	label := func(v float64) string { return fmt.Sprintf("%.1f %s", v, unit) }

	// The y labels take their width plus " ┤"; the plot gets the rest.
	labelWidth := utf8.RuneCountInString(label(float64(top)/scale)) + 3
	// Differences of ints always fit in a uint64.
	span := uint64(last) - uint64(first)
	cols := max(o.Width-labelWidth, 8)
	if span < uint64(cols) {
		cols = int(span) + 1
	}
	column := func(op int) int {
		if span == 0 {
			return 0
		}
		op = min(max(op, first), last)
		// (op-first)*(cols-1)/span, in 128 bits; the quotient is < cols.
		hi, lo := bits.Mul64(uint64(op)-uint64(first), uint64(cols-1))
		q, _ := bits.Div64(hi, lo, span)
		return int(q)
	}

	reserved := make([]float64, cols)
	allocated := make([]float64, cols)
	seen := make([]bool, cols)
	for _, pt := range pts {
		c := column(pt.Op)
		reserved[c] = max(reserved[c], float64(pt.Reserved)/scale)
		allocated[c] = max(allocated[c], float64(pt.Allocated)/scale)
		seen[c] = true
	}
	for c := 1; c < cols; c++ {
		if !seen[c] {
			reserved[c], allocated[c] = reserved[c-1], allocated[c-1]
		}
	}

	opts := []asciigraph.Option{
		asciigraph.Height(chartHeight),
		asciigraph.LowerBound(0),
		asciigraph.YAxisValueFormatter(label),
	}
	if o.Color {
		// asciigraph writes escapes whenever colours are set, so only then.
		opts = append(opts, asciigraph.SeriesColors(asciigraph.Red, asciigraph.Blue))
	}
	chart := asciigraph.PlotMany([][]float64{reserved, allocated}, opts...)

	var b strings.Builder
	writeWrapped(&b, fmt.Sprintf("%s (upper line) and %s memory",
		p.reserved.Sprint("Reserved"), p.allocated.Sprint("allocated")), o.Width)
	b.WriteString(chart)
	b.WriteString("\n")

	// The axis sits where the first row has its ┤ or ┼; point c is drawn c
	// columns to its right.
	firstLine, _, _ := strings.Cut(chart, "\n")
	axis := 0
	for i, r := range []rune(firstLine) {
		if r == '┤' || r == '┼' {
			axis = i
			break
		}
	}
	marks := []rune(strings.Repeat(" ", axis+cols))
	peakCol := axis + column(r.PeakOp)
	marks[peakCol] = '^'
	oomCol := -1
	if r.OOM != nil {
		oomCol = axis + column(r.OOM.OpIndex)
		marks[oomCol] = 'X'
	}
	line := strings.TrimRight(string(marks), " ")
	if o.Color {
		line = colourMarks(line, p)
	}
	b.WriteString(line)
	b.WriteString("\n")

	legend := fmt.Sprintf("operations %s to %s; %s peak reserved %s at operation %s",
		count(int64(first)), count(int64(last)), p.peak.Sprint("^"),
		units.FormatBytes(figures.PeakReserved(r.Stats)), count(int64(r.PeakOp)))
	if r.OOM != nil {
		legend += fmt.Sprintf("; %s out of memory at operation %s", p.oom.Sprint("X"), count(int64(r.OOM.OpIndex)))
		if oomCol == peakCol {
			legend += " (same column)"
		}
	}
	writeWrapped(&b, legend, o.Width)
	_, err := io.WriteString(w, b.String())
	return err
}

// chartUnit picks the binary unit in which top is at least 1.
func chartUnit(top int64) (string, float64) {
	unit, scale := "B", 1.0
	for _, u := range [...]string{"KiB", "MiB", "GiB", "TiB"} {
		if float64(top) < scale*1024 {
			break
		}
		unit, scale = u, scale*1024
	}
	return unit, scale
}

// writeWrapped writes s wrapped to width, counting only visible columns.
func writeWrapped(b *strings.Builder, s string, width int) {
	for _, l := range wrap(s, width) {
		b.WriteString(l)
		b.WriteString("\n")
	}
}

func colourMarks(line string, p palette) string {
	line = strings.ReplaceAll(line, "^", p.peak.Sprint("^"))
	return strings.ReplaceAll(line, "X", p.oom.Sprint("X"))
}
