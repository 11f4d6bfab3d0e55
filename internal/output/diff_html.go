package output

import (
	"io"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/htmlreport"
	"github.com/gpumem/gpumem/internal/units"
)

// DiffHTML writes the self-contained HTML page of a diff: both runs'
// timelines overlaid, aligned on the annotations they share, and the
// figures and sites of the table output.
func DiffHTML(w io.Writer, d *figures.Diff) error {
	return htmlreport.WriteDiff(w, diffPage(d))
}

func diffPage(d *figures.Diff) htmlreport.DiffPage {
	p := htmlreport.DiffPage{
		Generator: generatorLine(),
		A:         htmlreport.DiffRun{Report: d.A, Ranks: d.RanksA, Marks: d.MarksA},
		B:         htmlreport.DiffRun{Report: d.B, Ranks: d.RanksB, Marks: d.MarksB},
		Align:     figures.Align(d.MarksA, d.MarksB, d.A.Ops, d.B.Ops),
		Rows:      diffRows(d), Phases: phaseRows(d), Depth: d.Depth,
	}
	if d.Sites == nil {
		p.NoSites = noSites(d)
	}
	for _, s := range d.Sites {
		p.Sites = append(p.Sites, htmlreport.DiffSite{Frames: s.Frames, Change: s.Change(),
			Delta: signed(s.Change(), true), A: units.FormatUBytes(s.BytesA), B: units.FormatUBytes(s.BytesB),
			CountA: s.CountA, CountB: s.CountB})
	}
	return p
}
