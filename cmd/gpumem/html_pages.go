package main

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/htmlreport"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/sweep"
	"github.com/gpumem/gpumem/pkg/workload"
)

// writeRunHTML writes the HTML report of a workload run to path: the
// replay report, with the segments at the peak (a second run stopped just
// after the peak operation) and the workload's phases on the timeline.
func writeRunHTML(a *app, path string, w *workload.Workload, rep *figures.Replay, o replay.Options, res *replay.Result) error {
	extra := htmlreport.Extra{Phases: make([]htmlreport.Phase, len(w.Phases))}
	for i, p := range w.Phases {
		extra.Phases[i] = htmlreport.Phase{Name: p.Name, Op: p.Op}
	}
	if n := min(res.Extra.PeakOp+1, len(w.Ops)); res.Done > 0 && n > 0 {
		o.Points, o.Check = 0, false
		peak, err := replay.RunOps(w.Ops[:n], nil, o)
		if err != nil {
			return fmt.Errorf("running %s to its peak: %w", w.Name, err)
		}
		extra.PeakSegments = segmentMaps(peak.Segments)
	}
	return writeHTMLFile(a, path, func(out io.Writer) error { return htmlreport.Write(out, rep, extra) })
}

// writeSweepHTML writes the HTML report of a sweep to path.
func writeSweepHTML(a *app, path string, in *sweepInput, rows []sweep.Row, fraction float64) error {
	return writeHTMLFile(a, path, func(out io.Writer) error {
		return htmlreport.WriteSweep(out, sweepPage(in, rows, fraction))
	})
}

// sweepPage is the sweep as the HTML report shows it: the rows in the
// table's order, and the table output's notes and last line.
func sweepPage(in *sweepInput, rows []sweep.Row, fraction float64) htmlreport.SweepPage {
	p := htmlreport.SweepPage{
		Source: in.source, Compare: in.compare, Baseline: in.baseline,
		Cards: in.cards, Fraction: fraction,
	}
	if !in.compare {
		p.Ops = in.ops
	}
	p.Notes, p.Recommendation = sweepVerdict(in, rows, fraction)
	best := sweep.Lowest(rows, nil)
	if !in.compare {
		best = sweep.Recommend(rows).Best
	}
	if best != nil {
		p.Best = best.Label
	}
	// where a replay ran out of memory, as the table says it; "" = fits
	where := func(o *alloc.OOM) string { return oomCell(in, o, "", "") }
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

// writeFragcheckHTML writes the HTML report of a fragcheck run to path.
func writeFragcheckHTML(a *app, path string, rs []budget.Result) error {
	return writeHTMLFile(a, path, func(out io.Writer) error {
		return htmlreport.WriteFragcheck(out, fragcheckPage(rs))
	})
}

// fragcheckPage is each case's verdict, figures and limits.
func fragcheckPage(rs []budget.Result) htmlreport.FragcheckPage {
	var p htmlreport.FragcheckPage
	for i := range rs {
		r := &rs[i]
		l := r.Case.Limits
		c := htmlreport.FragcheckCase{
			Name: r.Case.Name, Source: r.Case.Source(), Status: r.Status().String(),
			Metric: string(l.Metric), MetricDef: l.Metric.Definition(), Frag: r.Fragmentation(),
			WarnFrag: l.WarnFrag, MaxFrag: l.MaxFrag, MaxReserved: l.MaxReserved, MustFit: l.MustFit,
			PeakReserved: r.Figures.PeakReserved, PeakAllocated: r.Figures.PeakAllocated,
		}
		if r.Err != nil {
			c.Err = r.Err.Error()
		}
		if o := r.Figures.OOM; o != nil {
			c.OOM = fmt.Sprintf("operation %d (%s)", o.OpIndex, o.Verdict())
		}
		for _, f := range r.Findings {
			c.Findings = append(c.Findings, htmlreport.CaseFinding{Status: f.Status.String(), Text: f.Message})
		}
		p.Cases = append(p.Cases, c)
	}
	return p
}

// writeHTMLFile creates path, writes a report into it with write, and
// says so on stderr.
func writeHTMLFile(a *app, path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s\n", path)
	return nil
}
