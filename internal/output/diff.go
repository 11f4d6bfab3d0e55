package output

import (
	"fmt"
	"io"
	"math"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// DiffFormats are the formats of gpumem diff: two runs side by side.
var DiffFormats = &Registry[*figures.Diff]{Kind: "The report of `diff`", Formats: []Format[*figures.Diff]{
	{Table, "the two runs' figures and their changes, then the allocation sites that changed most (diff_table.go)",
		RenderFunc[*figures.Diff](func(w io.Writer, d *figures.Diff, o Options) error { return diffText(w, d, false) })},
	{JSON, "`a` and `b` (each the object a single replay prints), `delta` and `sites` (diff_json.go)", RenderFunc[*figures.Diff](diffJSON)},
	{Markdown, "the table output as Markdown (diff_table.go)",
		RenderFunc[*figures.Diff](func(w io.Writer, d *figures.Diff, o Options) error { return diffText(w, d, true) })},
}}

// diffFigure is one compared figure of the two runs.
type diffFigure struct {
	name  string
	a, b  int64
	bytes bool
}

func diffFigures(d *figures.Diff) []diffFigure {
	return []diffFigure{
		{"peak reserved", figures.PeakReserved(d.A.Stats), figures.PeakReserved(d.B.Stats), true},
		{"peak allocated", figures.PeakAllocated(d.A.Stats), figures.PeakAllocated(d.B.Stats), true},
		{"lower bound", int64(min(d.A.LowerBound, math.MaxInt64)), int64(min(d.B.LowerBound, math.MaxInt64)), true},
		{"device allocs", d.A.Stats.NumDeviceAlloc, d.B.Stats.NumDeviceAlloc, false},
		{"alloc retries", d.A.Stats.NumAllocRetries, d.B.Stats.NumAllocRetries, false},
		{"OOMs", d.A.Stats.NumOOMs, d.B.Stats.NumOOMs, false},
	}
}

// signed shows a change with its sign.
func signed(n int64, bytes bool) string {
	s := fmt.Sprint(n)
	if bytes {
		s = units.FormatBytes(n)
	}
	if n > 0 {
		s = "+" + s
	}
	return s
}

// percent is b against a, or "-" when a is zero.
func percent(a, b int64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(float64(b)/float64(a)-1))
}

// diffRows are the rows of the diff's table, as the table output and the
// HTML page show them: each figure of both runs, b − a, and the change.
func diffRows(d *figures.Diff) [][]string {
	var rows [][]string
	for _, f := range diffFigures(d) {
		show := func(n int64) string {
			if f.bytes {
				return units.FormatBytes(n)
			}
			return units.FormatCount(n)
		}
		rows = append(rows, []string{f.name, show(f.a), show(f.b), signed(f.b-f.a, f.bytes), percent(f.a, f.b)})
	}
	fa, fb := d.A.Fragmentation().AtPeak, d.B.Fragmentation().AtPeak
	change := "-"
	if fa == fa && fb == fb { // neither NaN
		change = fmt.Sprintf("%+.1f pt", 100*(fb-fa))
	}
	rows = append(rows, []string{"frag at peak", ratio(fa), ratio(fb), change, ""})
	return append(rows, []string{"outcome", oomWord(d.A), oomWord(d.B), "", ""})
}

// phaseRows are the annotated phases both runs recorded: name, times,
// peak allocated in a and b and its change, peak reserved in a and b.
func phaseRows(d *figures.Diff) [][]string {
	var rows [][]string
	for _, p := range d.Phases {
		rows = append(rows, []string{textsafe.Line(p.Name), units.FormatCount(int64(p.Count)),
			units.FormatBytes(p.PeakAllocatedA), units.FormatBytes(p.PeakAllocatedB), signed(p.PeakAllocatedB-p.PeakAllocatedA, true),
			units.FormatBytes(p.PeakReservedA), units.FormatBytes(p.PeakReservedB)})
	}
	return rows
}
