package output

import (
	"io"

	"github.com/gpumem/gpumem/internal/htmlreport"
	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// SweepHTML writes the self-contained HTML report of a sweep.
func SweepHTML(w io.Writer, s *sweep.Report) error {
	p := sweepPage(s)
	p.Generator = generatorLine()
	return htmlreport.WriteSweep(w, p)
}

// sweepPage is the sweep as the HTML report shows it: the rows in the
// table's order, and the table output's notes and last line.
func sweepPage(sw *sweep.Report) htmlreport.SweepPage {
	rows, fraction := sw.Rows, sw.Fraction
	p := htmlreport.SweepPage{
		Source: sw.Source, Compare: sw.Compare, Baseline: sw.Baseline,
		Cards: sw.Cards, Fraction: fraction,
	}
	if !sw.Compare {
		p.Ops = sw.Ops
	}
	p.Notes, p.Recommendation = sweepVerdict(sw)
	best := sweep.Lowest(rows, nil)
	if !sw.Compare {
		best = sweep.Recommend(rows).Best
	}
	if best != nil {
		p.Best = best.Label
	}
	// where a replay ran out of memory, as the table says it; "" = fits
	where := func(o *alloc.OOM) string { return oomCell(sw, o, "", "") }
	for i := range rows {
		r := &rows[i]
		row := htmlreport.SweepRow{
			Label: r.Label, PeakReserved: r.PeakReserved(),
			PeakAllocated: r.Stats.AllocatedBytes[alloc.All].Peak, LowerBound: r.LowerBound,
			FragAtPeak: r.Fragmentation.AtPeak, DeviceAllocs: r.DeviceAllocs(), Retries: r.Stats.NumAllocRetries,
			Settable: r.Setting.Settable(), OOM: where(r.OOM),
		}
		for k := range r.Cards {
			c := &r.Cards[k]
			row.Cards = append(row.Cards, htmlreport.CardOutcome{PeakReserved: c.PeakReserved(), OOM: where(c.OOM)})
		}
		p.Rows = append(p.Rows, row)
	}
	return p
}
