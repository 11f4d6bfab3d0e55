package output

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// RanksFormats are the formats of the report of a set of ranks (replay of
// several traces, or of a snapshot holding several devices' traces).
var RanksFormats = &Registry[*figures.Ranks]{Kind: "The report of `replay` over a set of ranks", Formats: []Format[*figures.Ranks]{
	{Table, "a row per rank, the worst rank and the spread, then the worst rank's full report (ranks_table.go)",
		RenderFunc[*figures.Ranks](func(w io.Writer, r *figures.Ranks, o Options) error { return ranksText(w, r, o, false) })},
	{JSON, "`runs` (per rank, the object a single replay prints) and `worst`, its index (ranks_json.go)", RenderFunc[*figures.Ranks](ranksJSON)},
	{Markdown, "the rank table and the worst rank's summary as Markdown (ranks_table.go)",
		RenderFunc[*figures.Ranks](func(w io.Writer, r *figures.Ranks, o Options) error { return ranksText(w, r, o, true) })},
}}

// rankName is how a rank's row is labelled: its rank number, else its
// file.
func rankName(r *figures.Ranks, i int) string {
	if r.Ranks[i] >= 0 {
		return fmt.Sprint(r.Ranks[i])
	}
	return textsafe.Line(r.Replays[i].Source)
}
