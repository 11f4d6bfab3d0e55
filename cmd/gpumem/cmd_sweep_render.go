package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/sweep"
	"github.com/gpumem/gpumem/pkg/workload"
)

func writeSweep(a *app, format string, in *sweepInput, rows []sweep.Row, fraction float64) error {
	if format == "json" {
		return writeSweepJSON(a.stdout, in, rows, fraction)
	}
	md := format == "markdown"
	bw := bufio.NewWriter(a.stdout)
	if md {
		fmt.Fprintf(bw, "## Sweep of `%s`\n\n", in.source)
		for _, l := range sweepFacts(in, rows, fraction) {
			fmt.Fprintf(bw, "- %s\n", l)
		}
		fmt.Fprintln(bw)
	} else {
		fmt.Fprintf(bw, "Sweep of %s\n", in.source)
		for _, l := range sweepFacts(in, rows, fraction) {
			fmt.Fprintf(bw, "  %s\n", l)
		}
		fmt.Fprintln(bw)
	}
	if err := writeSweepTable(bw, in, rows, fraction, md); err != nil {
		return err
	}
	notes, last := sweepVerdict(in, rows, fraction)
	fmt.Fprintln(bw)
	for _, n := range notes {
		fmt.Fprintln(bw, n)
		if md {
			fmt.Fprintln(bw)
		}
	}
	if md {
		last = "**" + last + "**"
	}
	fmt.Fprintln(bw, last)
	return bw.Flush()
}

func sweepFacts(in *sweepInput, rows []sweep.Row, fraction float64) []string {
	var facts []string
	if in.compare {
		facts = append(facts, fmt.Sprintf("%d rows; each row a workload under one setting", len(rows)))
	} else {
		facts = append(facts, fmt.Sprintf("%d ops, %d settings", in.ops, len(rows)))
		if len(rows) > 0 && rows[0].LowerBound > 0 {
			facts = append(facts, "lower bound (peak live bytes, no setting reserves less): "+figures.FormatBytes(rows[0].LowerBound))
			if off := offlinePeak(in); off > 0 {
				facts = append(facts, fmt.Sprintf("offline planner (knows the whole trace; the best any allocator could do): %s, %.3f× the bound",
					figures.FormatBytes(int64(off)), float64(off)/float64(rows[0].LowerBound)))
			}
		}
	}
	if len(in.cards) == 0 {
		facts = append(facts, "device: unlimited (give --device-memory to see what fits)")
		return facts
	}
	names := make([]string, len(in.cards))
	for i, c := range in.cards {
		names[i] = cardName(c)
	}
	d := "cards: " + strings.Join(names, ", ")
	if in.limitMsg != "" {
		d += " (" + in.limitMsg + ")"
	}
	if fraction > 0 {
		d += fmt.Sprintf(", each capped at %g by set_per_process_memory_fraction", fraction)
	}
	facts = append(facts, d)
	if len(rows) > 0 && len(in.cards) > 1 {
		facts = append(facts, "figures from the largest card, "+cardName(rows[0].Card))
	}
	return facts
}

func cardName(c uint64) string { return figures.FormatUBytes(c) }

func writeSweepTable(w io.Writer, in *sweepInput, rows []sweep.Row, fraction float64, md bool) error {
	first := "setting"
	if in.compare {
		first = "workload"
	}
	header := []string{first, "peak reserved", "× bound", "vs " + in.baseline, "frag at peak", "device allocs", "retries"}
	align := []tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight}
	if len(in.cards) == 0 {
		// With cards, the largest card's column says it.
		header, align = append(header, "OOM"), append(align, tw.AlignLeft)
	}
	for _, c := range in.cards {
		h := cardName(c)
		if fraction > 0 {
			h += fmt.Sprintf(" ×%g", fraction)
		}
		header = append(header, h)
		align = append(align, tw.AlignLeft)
	}
	base := findRow(rows, in.baseline)
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
			figures.FormatBytes(r.PeakReserved()),
			overBound(r),
			vs,
			ratio(r.Fragmentation.AtPeak),
			fmt.Sprint(r.DeviceAllocs()),
			fmt.Sprint(r.Stats.NumAllocRetries),
		}
		if len(in.cards) == 0 {
			row = append(row, oomCell(in, r.OOM, "no", "at "))
		}
		for k := range r.Cards {
			row = append(row, oomCell(in, r.Cards[k].OOM, "fits", "OOM at "))
		}
		cells = append(cells, row)
	}
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
	}
	if md {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	}
	t := tablewriter.NewTable(w, opts...)
	t.Header(header)
	if err := t.Bulk(cells); err != nil {
		return err
	}
	return t.Render()
}

// overBound is peak reserved as a multiple of the lower bound.
func overBound(r *sweep.Row) string {
	if r.LowerBound <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f×", float64(r.PeakReserved())/float64(r.LowerBound))
}

// offlinePeak is what the offline planner reserves for a single trace or
// workload (0 when comparing several): the trace's own lower limit for any
// placement that knows the future.
func offlinePeak(in *sweepInput) uint64 {
	if in.compare || len(in.cases) == 0 || in.cases[0].Plan == nil {
		return 0
	}
	return replay.OfflinePeak(in.cases[0].Plan.Ops)
}

func findRow(rows []sweep.Row, label string) *sweep.Row {
	for i := range rows {
		if rows[i].Label == label {
			return &rows[i]
		}
	}
	return nil
}

func ratio(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// oomCell names where a replay ran out of memory: the op (the event index
// for traces) and, for workloads, the phase it fell in.
func oomCell(in *sweepInput, o *alloc.OOM, ok, prefix string) string {
	if o == nil {
		return ok
	}
	s := fmt.Sprintf("%sop %d", prefix, o.OpIndex)
	if p := phaseAt(in.phases, o.OpIndex); p != "" {
		s += " (" + p + ")"
	}
	return s
}

func phaseAt(phases []workload.Phase, op int) string {
	name := ""
	for _, p := range phases {
		if p.Op > op {
			break
		}
		name = p.Name
	}
	return name
}

// sweepVerdict returns the notes and the last line: the recommendation
// (or, comparing workloads, the one that reserves least).
func sweepVerdict(in *sweepInput, rows []sweep.Row, fraction float64) (notes []string, last string) {
	where := "on every card"
	if len(in.cards) == 1 {
		where = "on " + cardName(in.cards[0])
	}
	if in.compare {
		best, base := sweep.Lowest(rows, nil), findRow(rows, in.baseline)
		switch {
		case best == nil:
			return nil, "least reserved: none, nothing fits " + where
		case base == nil || best == base:
			return nil, fmt.Sprintf("least reserved: %s, %s", best.Label, figures.FormatBytes(best.PeakReserved()))
		}
		return nil, fmt.Sprintf("least reserved: %s, %s: %s less than %s", best.Label,
			figures.FormatBytes(best.PeakReserved()), saving(base.PeakReserved()-best.PeakReserved(), base.PeakReserved()), base.Label)
	}
	rec := sweep.Recommend(rows)
	for _, r := range rec.Unsettable {
		notes = append(notes, unsettableNote(r, rec.Baseline))
	}
	if len(rec.TooSmall) > 0 && len(rec.TooSmall) < len(in.cards) {
		var small []string
		for _, k := range rec.TooSmall {
			small = append(small, cardName(in.cards[k]))
		}
		notes = append(notes, fmt.Sprintf("note: no setting fits %s; the recommendation is for the other cards",
			strings.Join(small, " or ")))
		where = "on the other cards"
	}
	if len(in.cards) == 0 {
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
			frac, figures.FormatBytes(best.PeakReserved()))
	}
	env := "PYTORCH_CUDA_ALLOC_CONF=" + best.Setting.Env()
	if base == nil {
		return notes, fmt.Sprintf("recommendation: %s%s: peak reserved %s", env, frac, figures.FormatBytes(best.PeakReserved()))
	}
	switch {
	case !rec.Fits(base):
		return notes, fmt.Sprintf("recommendation: %s%s: fits%s where the defaults do not; peak reserved %s (defaults %s)",
			env, frac, where, figures.FormatBytes(best.PeakReserved()), figures.FormatBytes(base.PeakReserved()))
	case rec.Saved == 0:
		return notes, fmt.Sprintf("recommendation: %s%s: the same peak reserved as the defaults (%s) with %d fewer device allocations",
			env, frac, figures.FormatBytes(best.PeakReserved()), base.DeviceAllocs()-best.DeviceAllocs())
	}
	return notes, fmt.Sprintf("recommendation: %s%s: peak reserved %s, saves %s against the defaults",
		env, frac, figures.FormatBytes(best.PeakReserved()), saving(rec.Saved, base.PeakReserved()))
}

func saving(saved, of int64) string {
	return fmt.Sprintf("%s (%.1f%%)", figures.FormatBytes(saved), 100*float64(saved)/float64(max(of, 1)))
}

func unsettableNote(r *sweep.Row, base *sweep.Row) string {
	than := ""
	if base != nil && base.PeakReserved() > r.PeakReserved() {
		than = ", " + saving(base.PeakReserved()-r.PeakReserved(), base.PeakReserved()) + " less than the defaults,"
	}
	why := "it is not PyTorch's caching allocator, and PYTORCH_CUDA_ALLOC_CONF cannot select it"
	switch c := r.Setting.Config; {
	case c.Policy == alloc.PolicyNoCache:
		why = fmt.Sprintf("it is PYTORCH_NO_CUDA_MEMORY_CACHING=1, not a PYTORCH_CUDA_ALLOC_CONF setting: every allocation "+
			"becomes a cudaMalloc and every free a cudaFree (%d device allocations here), which is slow", r.DeviceAllocs())
	case c.Policy == alloc.PolicyCUDAAsync:
		why = "backend:cudaMallocAsync selects the driver's pool, whose internals are closed: gpumem models it, " +
			"it does not replicate it, so measure on the GPU before switching"
	case c.Policy == alloc.PolicyGPUMem:
		why = "it is gpumem's own policy; PyTorch has no such allocator"
	case c.Backend != "native":
		why = "gpumem does not simulate the " + r.Setting.Config.Backend + " backend (these are the native allocator's figures)"
	}
	return fmt.Sprintf("note: %s reserves %s%s but is not advised: %s", r.Label, figures.FormatBytes(r.PeakReserved()), than, why)
}

// The JSON document of a sweep. Add keys, never rename or drop them.
type sweepJSON struct {
	Source         string            `json:"source"`
	Ops            int               `json:"ops"`
	DeviceMemory   []uint64          `json:"device_memory"`
	MemoryFraction float64           `json:"memory_fraction"`
	Baseline       string            `json:"baseline"`
	OfflinePeak    uint64            `json:"offline_peak"`
	Rows           []sweepJSONRow    `json:"rows"`
	Recommendation *sweepJSONAdvice  `json:"recommendation"`
	NotAdvised     []sweepJSONAdvice `json:"not_advised"`
}

type sweepJSONRow struct {
	Label         string           `json:"label"`
	AllocConf     string           `json:"alloc_conf"`
	Policy        string           `json:"policy"`
	Settable      bool             `json:"settable"`
	DeviceMemory  uint64           `json:"device_memory"` // the headline card; 0 = unlimited
	Allowed       uint64           `json:"allowed"`
	PeakReserved  int64            `json:"peak_reserved"`
	PeakAllocated int64            `json:"peak_allocated"`
	LowerBound    int64            `json:"lower_bound"`
	FragAtPeak    *float64         `json:"fragmentation_at_peak"`
	DeviceAllocs  int64            `json:"device_allocs"`
	Retries       int64            `json:"alloc_retries"`
	OOMOpIndex    *int             `json:"oom_op_index"`
	Cards         []sweepJSONCard  `json:"cards"`
	MemoryStats   map[string]int64 `json:"memory_stats"`
}

type sweepJSONCard struct {
	DeviceMemory uint64 `json:"device_memory"`
	Allowed      uint64 `json:"allowed"`
	Fits         bool   `json:"fits"`
	OOMOpIndex   *int   `json:"oom_op_index"`
	PeakReserved int64  `json:"peak_reserved"`
	Retries      int64  `json:"alloc_retries"`
}

type sweepJSONAdvice struct {
	Label        string  `json:"label"`
	AllocConf    string  `json:"alloc_conf"` // "" = leave PYTORCH_CUDA_ALLOC_CONF unset
	PeakReserved int64   `json:"peak_reserved"`
	SavedBytes   int64   `json:"saved_bytes"` // against the baseline
	SavedPercent float64 `json:"saved_percent"`
	Text         string  `json:"text"`
}

func writeSweepJSON(w io.Writer, in *sweepInput, rows []sweep.Row, fraction float64) error {
	doc := sweepJSON{
		Source: in.source, Ops: in.ops, DeviceMemory: in.cards, MemoryFraction: fraction,
		Baseline: in.baseline, OfflinePeak: offlinePeak(in), Rows: []sweepJSONRow{}, NotAdvised: []sweepJSONAdvice{},
	}
	if doc.DeviceMemory == nil {
		doc.DeviceMemory = []uint64{}
	}
	opIndex := func(o *alloc.OOM) *int {
		if o == nil {
			return nil
		}
		return &o.OpIndex
	}
	for i := range rows {
		r := &rows[i]
		jr := sweepJSONRow{
			Label: r.Label, AllocConf: r.Setting.Config.Text, Policy: string(r.Setting.Config.Policy),
			Settable: r.Setting.Settable(), DeviceMemory: r.Card, Allowed: r.Allowed,
			PeakReserved: r.PeakReserved(), PeakAllocated: r.Stats.AllocatedBytes[alloc.All].Peak,
			LowerBound: r.LowerBound, DeviceAllocs: r.DeviceAllocs(), Retries: r.Stats.NumAllocRetries,
			OOMOpIndex: opIndex(r.OOM), Cards: []sweepJSONCard{}, MemoryStats: r.Stats.Map(),
		}
		if f := r.Fragmentation.AtPeak; !math.IsNaN(f) {
			jr.FragAtPeak = &f
		}
		for k := range r.Cards {
			c := &r.Cards[k]
			jr.Cards = append(jr.Cards, sweepJSONCard{DeviceMemory: c.Card, Allowed: c.Allowed, Fits: c.Fits(),
				OOMOpIndex: opIndex(c.OOM), PeakReserved: c.PeakReserved(), Retries: c.Stats.NumAllocRetries})
		}
		doc.Rows = append(doc.Rows, jr)
	}
	_, last := sweepVerdict(in, rows, fraction)
	advice := func(r, base *sweep.Row, text string) sweepJSONAdvice {
		a := sweepJSONAdvice{Label: r.Label, AllocConf: r.Setting.Env(), PeakReserved: r.PeakReserved(), Text: text}
		if base != nil {
			a.SavedBytes = base.PeakReserved() - r.PeakReserved()
			a.SavedPercent = 100 * float64(a.SavedBytes) / float64(max(base.PeakReserved(), 1))
		}
		return a
	}
	if in.compare {
		if best := sweep.Lowest(rows, nil); best != nil {
			a := advice(best, findRow(rows, in.baseline), last)
			a.AllocConf = best.Setting.Config.Text
			doc.Recommendation = &a
		}
	} else {
		rec := sweep.Recommend(rows)
		if rec.Best != nil {
			a := advice(rec.Best, rec.Baseline, last)
			doc.Recommendation = &a
		}
		for _, r := range rec.Unsettable {
			doc.NotAdvised = append(doc.NotAdvised, advice(r, rec.Baseline, unsettableNote(r, rec.Baseline)))
		}
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(doc)
}
