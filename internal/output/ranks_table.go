package output

import (
	"bufio"
	"fmt"
	"io"
	"math"

	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/report"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// ranksText writes the set as a table for people, or in Markdown: a row
// per rank, the worst rank, the spread, then the worst rank's report.
func ranksText(w io.Writer, r *figures.Ranks, o Options, md bool) error {
	if len(r.Replays) == 0 || r.Worst < 0 {
		return fmt.Errorf("output: no ranks")
	}
	bw := bufio.NewWriter(w)
	if md {
		fmt.Fprintf(bw, "## %d ranks\n\n", len(r.Replays))
	} else {
		fmt.Fprintf(bw, "%d ranks\n\n", len(r.Replays))
	}
	header := []string{"rank", "source", "device", "peak reserved", "peak allocated", "frag at peak", "device allocs", "OOM"}
	align := []tw.Align{tw.AlignRight, tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignLeft}
	var cells [][]string
	for i, x := range r.Replays {
		oom := "no"
		if x.OOM != nil {
			oom = "at op " + units.FormatCount(int64(x.OOM.OpIndex))
		}
		name := rankName(r, i)
		if i == r.Worst {
			name += " *"
		}
		cells = append(cells, []string{
			name, textsafe.Line(x.Source), fmt.Sprint(x.Device),
			units.FormatBytes(figures.PeakReserved(x.Stats)),
			units.FormatBytes(figures.PeakAllocated(x.Stats)),
			ratio(x.Fragmentation().AtPeak),
			units.FormatCount(x.Stats.NumDeviceAlloc),
			oom,
		})
	}
	if err := writeTable(bw, header, align, cells, md); err != nil {
		return err
	}
	worst := r.Replays[r.Worst]
	why := "the highest peak reserved"
	if worst.OOM != nil {
		why = "ran out of memory"
	}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, x := range r.Replays {
		lo, hi = min(lo, figures.PeakReserved(x.Stats)), max(hi, figures.PeakReserved(x.Stats))
	}
	spread := "-"
	if s := r.Spread(); !math.IsNaN(s) {
		spread = fmt.Sprintf("%.3f× (%s to %s)", s, units.FormatBytes(lo), units.FormatBytes(hi))
	}
	fmt.Fprintln(bw)
	fmt.Fprintf(bw, "worst rank  %s (%s): %s\n", rankName(r, r.Worst), why, textsafe.Line(worst.Source))
	fmt.Fprintf(bw, "spread      max/min peak reserved %s\n\n", spread)
	if md {
		fmt.Fprintln(bw)
		err := report.Markdown(bw, worst, reportOptions(o))
		if err != nil {
			return err
		}
		return bw.Flush()
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return replayTable(w, worst, o)
}
