package output

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/htmlreport"
	"github.com/gpumem/gpumem/internal/units"
)

// FragcheckHTML writes the self-contained HTML report of a fragcheck run.
func FragcheckHTML(w io.Writer, rs []budget.Result) error {
	p := fragcheckPage(rs)
	p.Generator = generatorLine()
	return htmlreport.WriteFragcheck(w, p)
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
			c.OOM = fmt.Sprintf("operation %s (%s)", units.FormatCount(int64(o.OpIndex)), o.Verdict())
		}
		for _, f := range r.Findings {
			c.Findings = append(c.Findings, htmlreport.CaseFinding{Status: f.Status.String(), Text: f.Message})
		}
		p.Cases = append(p.Cases, c)
	}
	return p
}
