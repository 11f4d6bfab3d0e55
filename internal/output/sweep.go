package output

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// SweepFormats are the formats of gpumem sweep.
var SweepFormats = &Registry[*sweep.Report]{Kind: "The report of `sweep`", Formats: []Format[*sweep.Report]{
	{Table, "the facts, one row per setting, the notes and the recommendation (sweep_table.go)",
		RenderFunc[*sweep.Report](func(w io.Writer, s *sweep.Report, _ Options) error { return sweepText(w, s, false) })},
	{JSON, "the same with stable snake_case keys (sweep_json.go)", RenderFunc[*sweep.Report](sweepJSONDoc)},
	{Markdown, "the table output as Markdown (sweep_table.go)",
		RenderFunc[*sweep.Report](func(w io.Writer, s *sweep.Report, _ Options) error { return sweepText(w, s, true) })},
}}

// This file holds what the sweep's formats share: the facts above the
// table, its cells, and the verdict below it.

// sweepFacts are the lines above the table: the input, the lower bound
// and the offline planner's peak, the cards.
func sweepFacts(sw *sweep.Report) []string {
	rows, fraction := sw.Rows, sw.Fraction
	var facts []string
	if sw.Compare {
		facts = append(facts, fmt.Sprintf("%d rows; each row a workload under one setting", len(rows)))
	} else {
		facts = append(facts, fmt.Sprintf("%s ops, %d settings", units.FormatCount(int64(sw.Ops)), len(rows)))
		if len(rows) > 0 && rows[0].LowerBound > 0 {
			facts = append(facts, "lower bound (peak live bytes, no setting reserves less): "+units.FormatBytes(rows[0].LowerBound))
			if off := sw.OfflinePeak; off > 0 {
				facts = append(facts, fmt.Sprintf("offline planner (knows the whole trace; the best any allocator could do): %s, %.3f× the bound",
					units.FormatBytes(int64(off)), float64(off)/float64(rows[0].LowerBound)))
			}
		}
	}
	if len(sw.Cards) == 0 {
		facts = append(facts, "device: unlimited (give --device-memory to see what fits)")
		return facts
	}
	names := make([]string, len(sw.Cards))
	for i, c := range sw.Cards {
		names[i] = cardName(c)
	}
	d := "cards: " + strings.Join(names, ", ")
	if sw.LimitMsg != "" {
		d += " (" + sw.LimitMsg + ")"
	}
	if fraction > 0 {
		d += fmt.Sprintf(", each capped at %g by set_per_process_memory_fraction", fraction)
	}
	facts = append(facts, d)
	if len(rows) > 0 && len(sw.Cards) > 1 {
		facts = append(facts, "figures from the largest card, "+cardName(rows[0].Card))
	}
	return facts
}

func cardName(c uint64) string { return units.FormatUBytes(c) }

// overBound is peak reserved as a multiple of the lower bound.
func overBound(r *sweep.Row) string {
	if r.LowerBound <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f×", float64(r.PeakReserved())/float64(r.LowerBound))
}

func ratio(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// oomCell names where a replay ran out of memory: the op (the event index
// for traces) and, for workloads, the phase it fell in.
func oomCell(sw *sweep.Report, o *alloc.OOM, ok, prefix string) string {
	if o == nil {
		return ok
	}
	s := prefix + "op " + units.FormatCount(int64(o.OpIndex))
	if p := figures.PhaseAt(sw.Phases, o.OpIndex); p != "" {
		s += " (" + p + ")"
	}
	return s
}

// sweepVerdict returns the notes and the last line: the recommendation
// (or, comparing workloads, the one that reserves least).
func sweepVerdict(sw *sweep.Report) (notes []string, last string) {
	rows, fraction := sw.Rows, sw.Fraction
	where := "on every card"
	if len(sw.Cards) == 1 {
		where = "on " + cardName(sw.Cards[0])
	}
	if sw.Compare {
		best, base := sweep.Lowest(rows, nil), sw.FindRow(sw.Baseline)
		switch {
		case best == nil:
			return nil, "least reserved: none, nothing fits " + where
		case base == nil || best == base:
			return nil, fmt.Sprintf("least reserved: %s, %s", best.Label, units.FormatBytes(best.PeakReserved()))
		}
		return nil, fmt.Sprintf("least reserved: %s, %s: %s less than %s", best.Label,
			units.FormatBytes(best.PeakReserved()), saving(base.PeakReserved()-best.PeakReserved(), base.PeakReserved()), base.Label)
	}
	rec := sweep.Recommend(rows)
	for _, r := range rec.Unsettable {
		notes = append(notes, unsettableNote(r, rec.Baseline))
	}
	if len(rec.TooSmall) > 0 && len(rec.TooSmall) < len(sw.Cards) {
		var small []string
		for _, k := range rec.TooSmall {
			small = append(small, cardName(sw.Cards[k]))
		}
		notes = append(notes, fmt.Sprintf("note: no setting fits %s; the recommendation is for the other cards",
			strings.Join(small, " or ")))
		where = "on the other cards"
	}
	if len(sw.Cards) == 0 {
		where = ""
	} else {
		where = " " + where
	}
	best, base := rec.Best, rec.Baseline
	if best == nil {
		if low := sweep.Lowest(rows, nil); low == nil {
			return notes, "recommendation: none: no setting fits" + where + "; the program needs a larger card or less memory"
		}
		return notes, "recommendation: none: no PYTORCH_CUDA_ALLOC_CONF setting fits" + where
	}
	frac := ""
	if fraction > 0 {
		frac = fmt.Sprintf(", with set_per_process_memory_fraction(%g)", fraction)
	}
	if best.Setting.IsDefault() {
		return notes, fmt.Sprintf("recommendation: keep the defaults (leave PYTORCH_CUDA_ALLOC_CONF unset%s): no PYTORCH_CUDA_ALLOC_CONF setting reserves less than %s",
			frac, units.FormatBytes(best.PeakReserved()))
	}
	env := "PYTORCH_CUDA_ALLOC_CONF=" + best.Setting.Env()
	if base == nil {
		return notes, fmt.Sprintf("recommendation: %s%s: peak reserved %s", env, frac, units.FormatBytes(best.PeakReserved()))
	}
	switch {
	case !rec.Fits(base):
		return notes, fmt.Sprintf("recommendation: %s%s: fits%s where the defaults do not; peak reserved %s (defaults %s)",
			env, frac, where, units.FormatBytes(best.PeakReserved()), units.FormatBytes(base.PeakReserved()))
	case rec.Saved == 0:
		return notes, fmt.Sprintf("recommendation: %s%s: the same peak reserved as the defaults (%s) with %s fewer device allocations",
			env, frac, units.FormatBytes(best.PeakReserved()), units.FormatCount(int64(base.DeviceAllocs()-best.DeviceAllocs())))
	}
	return notes, fmt.Sprintf("recommendation: %s%s: peak reserved %s, saves %s against the defaults",
		env, frac, units.FormatBytes(best.PeakReserved()), saving(rec.Saved, base.PeakReserved()))
}

func saving(saved, of int64) string {
	return fmt.Sprintf("%s (%.1f%%)", units.FormatBytes(saved), 100*float64(saved)/float64(max(of, 1)))
}

func unsettableNote(r *sweep.Row, base *sweep.Row) string {
	than := ""
	if base != nil && base.PeakReserved() > r.PeakReserved() {
		than = ", " + saving(base.PeakReserved()-r.PeakReserved(), base.PeakReserved()) + " less than the defaults,"
	}
	why := "it is not PyTorch's caching allocator, and PYTORCH_CUDA_ALLOC_CONF cannot select it"
	// the policy's own reason (from its row in the policy table) comes first
	info, _ := r.Setting.Config.Policy.Info()
	if own := info.NotAdvisedBecause(units.FormatCount(r.DeviceAllocs())); own != "" {
		why = own
	} else if c := r.Setting.Config; c.Backend != "native" {
		why = "gpumem does not simulate the " + c.Backend + " backend (these are the native allocator's figures)"
	}
	return fmt.Sprintf("note: %s reserves %s%s but is not advised: %s", r.Label, units.FormatBytes(r.PeakReserved()), than, why)
}
