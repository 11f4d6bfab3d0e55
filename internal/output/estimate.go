package output

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gpumem/gpumem/internal/estimate"
	"github.com/gpumem/gpumem/internal/report"
	"github.com/gpumem/gpumem/internal/units"
)

// EstimateFormats are the formats of gpumem estimate's result.
var EstimateFormats = &Registry[*estimate.Report]{Kind: "The result of `estimate`", Formats: []Format[*estimate.Report]{
	{Table, "the card, what the memory held at its peak, then the replay report of the run", RenderFunc[*estimate.Report](estimateTable)},
	{JSON, "the same with stable snake_case keys; `replay` is the replay report's document", RenderFunc[*estimate.Report](estimateJSON)},
}}

// EstimateJSON is the document of estimate -o json.
type EstimateJSON struct {
	Stamp
	Command        []string               `json:"command"`
	Card           estimateCard           `json:"card"`
	AllocConf      string                 `json:"alloc_conf"`
	Trace          string                 `json:"trace"`
	ExitOK         bool                   `json:"script_succeeded"`
	Error          *estimate.ScriptError  `json:"error"`
	PeakAllocated  int64                  `json:"peak_allocated_bytes"`
	PeakReserved   int64                  `json:"peak_reserved_bytes"`
	Composition    map[string]int64       `json:"composition_at_peak"`
	TopActivations []estimate.ModuleBytes `json:"top_activation_modules"`
	StandIns       []estimate.StandIn     `json:"stand_ins"`
	NotModelled    []estimate.StandIn     `json:"not_modelled"`
	OOMs           []estimateOOM          `json:"ooms"`
	Replay         *report.Document       `json:"replay"`
	// --nproc: every rank, in order, and the worst one, whose figures the
	// document's are; no ranks and a null worst_rank without it
	Ranks     []estimate.RankRow `json:"ranks"`
	WorstRank *int               `json:"worst_rank"`
}

type estimateCard struct {
	Name     string `json:"name"`
	Total    uint64 `json:"total_bytes"`
	Usable   uint64 `json:"usable_bytes"` // what the allocator could take: total less the CUDA context
	Measured bool   `json:"measured"`     // the figures were read off a real card, not derived
}

func cardJSON(c estimate.Card) estimateCard {
	return estimateCard{c.Name, c.Total, c.Capacity(), c.Measured}
}

type estimateOOM struct {
	Size    uint64   `json:"size"`
	Message string   `json:"message"`
	Site    string   `json:"site"`
	Stack   []string `json:"stack"`
}

func estimateDoc(r *estimate.Report) (EstimateJSON, error) {
	res := r.Result
	d := EstimateJSON{Stamp: stamp(), Command: r.Command, Card: cardJSON(r.Card),
		AllocConf: r.AllocConf, Trace: r.Trace, ExitOK: res.Err == nil,
		PeakAllocated: res.Stats.AllocatedBytes[0].Peak, PeakReserved: res.Stats.ReservedBytes[0].Peak,
		Composition: map[string]int64{}, TopActivations: []estimate.ModuleBytes{}, StandIns: []estimate.StandIn{},
		NotModelled: []estimate.StandIn{}, OOMs: []estimateOOM{}, Ranks: []estimate.RankRow{}}
	if len(r.Ranks) > 0 {
		w := r.Rank
		d.Ranks, d.WorstRank = r.Ranks, &w
	}
	if r.Replay != nil {
		d.PeakAllocated, d.PeakReserved = r.Replay.Stats.AllocatedBytes[0].Peak, r.Replay.Stats.ReservedBytes[0].Peak
		doc, err := report.NewDocument(r.Replay)
		if err != nil {
			return d, err
		}
		d.Replay = doc
	}
	if in := res.Info; in != nil {
		d.Error = in.Error
		if in.Composition != nil {
			d.Composition = in.Composition
		}
		if in.TopActivations != nil {
			d.TopActivations = in.TopActivations
		}
		if in.StandIns != nil {
			d.StandIns = in.StandIns
		}
		if in.NotModelled != nil {
			d.NotModelled = in.NotModelled
		}
	}
	for i, o := range res.OOMs {
		e := estimateOOM{Size: o.Size, Message: o.Message, Stack: []string{}}
		if in := res.Info; in != nil && i < len(in.OOMs) {
			e.Site, e.Stack = in.OOMs[i].Site, in.OOMs[i].Stack
		}
		d.OOMs = append(d.OOMs, e)
	}
	return d, nil
}

func estimateJSON(w io.Writer, r *estimate.Report, _ Options) error {
	d, err := estimateDoc(r)
	if err != nil {
		return err
	}
	return writeJSON(w, d, false)
}

func estimateTable(w io.Writer, r *estimate.Report, o Options) error {
	d, err := estimateDoc(r)
	if err != nil {
		return err
	}
	size := func(n int64) string { return units.FormatSizeTorch(uint64(max(n, 0))) }
	fmt.Fprintf(w, "Estimate of: %s\n", strings.Join(r.Command, " "))
	conf := r.AllocConf
	if conf == "" {
		conf = "(defaults)"
	}
	fmt.Fprintf(w, "Virtual card: %s, %s (%s usable%s); PYTORCH_CUDA_ALLOC_CONF %s\n", r.Card.Name, size(int64(r.Card.Total)),
		size(int64(r.Card.Capacity())), derived(r.Card), conf)
	if len(d.Ranks) > 0 {
		rankTable(w, d, size)
	}
	fmt.Fprintf(w, "Peak allocated: %s   Peak reserved: %s\n", size(d.PeakAllocated), size(d.PeakReserved))
	switch {
	case d.Error != nil && d.Error.Type == "OutOfMemoryError" && len(d.OOMs) > 0:
		fmt.Fprintf(w, "The script died of an out-of-memory error at %s (the last below)\n", d.Error.Site)
	case d.Error != nil:
		fmt.Fprintf(w, "The script failed at %s: %s: %s\n", d.Error.Site, d.Error.Type, firstLine(d.Error.Message))
	case !d.ExitOK:
		fmt.Fprintf(w, "The script failed (see its output above)\n")
	}
	for i, oom := range d.OOMs {
		fmt.Fprintf(w, "torch.OutOfMemoryError at %s: %s\n", oom.Site, oom.Message)
		if i == len(d.OOMs)-1 && len(oom.Stack) > 0 {
			fmt.Fprintf(w, "  raised from (innermost last):\n")
			for _, fr := range oom.Stack[max(len(oom.Stack)-6, 0):] {
				fmt.Fprintf(w, "    %s\n", fr)
			}
		}
	}
	// the replay's section shows the composition when there is a replay
	if len(d.Composition) > 0 && (r.Replay == nil || r.Replay.Categories == nil) {
		var total int64
		keys := make([]string, 0, len(d.Composition))
		for k, v := range d.Composition {
			keys = append(keys, k)
			total += v
		}
		sort.Slice(keys, func(i, j int) bool { return d.Composition[keys[i]] > d.Composition[keys[j]] })
		fmt.Fprintf(w, "\nAt the allocated peak, the live tensors held %s:\n", size(total))
		for _, k := range keys {
			fmt.Fprintf(w, "  %-20s %12s\n", k, size(d.Composition[k]))
		}
		if len(d.TopActivations) > 0 {
			fmt.Fprintf(w, "Activations by module:\n")
			for _, m := range d.TopActivations {
				fmt.Fprintf(w, "  %-40s %12s\n", m.Module, size(m.Bytes))
			}
		}
	}
	if len(d.StandIns) > 0 {
		fmt.Fprintf(w, "\nStand-in values (fake tensors hold no data):\n")
		for _, s := range d.StandIns {
			fmt.Fprintf(w, "  %-6s x%-6d %s\n", s.Kind, s.Count, s.Site)
		}
	}
	if len(d.NotModelled) > 0 {
		fmt.Fprintf(w, "\nNot modelled (the estimate is low by their scratch):\n")
		for _, s := range d.NotModelled {
			fmt.Fprintf(w, "  x%-6d %s  (%s)\n", s.Count, s.Kind, s.Site)
		}
	}
	if r.Replay != nil {
		fmt.Fprintln(w)
		return replayTable(w, r.Replay, o)
	}
	fmt.Fprintf(w, "\nThe script allocated no CUDA memory.\n")
	return nil
}

// rankTable lists the ranks of --nproc; the rest of the report is the
// worst rank's.
func rankTable(w io.Writer, d EstimateJSON, size func(int64) string) {
	fmt.Fprintf(w, "Ranks: %d (torchrun-style, fake process groups, a virtual card each)\n", len(d.Ranks))
	fmt.Fprintf(w, "  %-6s %16s %16s %6s  %s\n", "rank", "peak allocated", "peak reserved", "OOMs", "script")
	for _, k := range d.Ranks {
		st := "ok"
		if !k.OK {
			st = "failed"
			if k.Failure != "" {
				st += ": " + k.Failure
			}
		}
		mark := ""
		if k.Rank == *d.WorstRank {
			mark = " (worst)"
		}
		fmt.Fprintf(w, "  %-6d %16s %16s %6d  %s%s\n", k.Rank, size(k.PeakAllocated), size(k.PeakReserved), k.OOMs, st, mark)
	}
	fmt.Fprintf(w, "The worst rank is rank %d; the figures below are its own.\n", *d.WorstRank)
}

// derived marks a card's figures that were not read off a real one.
func derived(c estimate.Card) string {
	if c.Measured || c.Usable == 0 {
		return ""
	}
	return "; nominal, not measured"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// VaryResult is gpumem estimate --vary or --find-max's result.
type VaryResult struct {
	Name      string
	Card      estimate.Card
	AllocConf string
	Command   []string
	Trials    []estimate.Trial
	FindMax   bool
	Max       *int64 // the largest value that fits (--find-max); nil: none
}

// VaryFormats are the formats of estimate --vary and --find-max.
var VaryFormats = &Registry[*VaryResult]{Kind: "The result of `estimate --vary` and `--find-max`", Formats: []Format[*VaryResult]{
	{Table, "a row per value: peak allocated and reserved, whether it fits", RenderFunc[*VaryResult](varyTable)},
	{JSON, "the same with stable snake_case keys", RenderFunc[*VaryResult](varyJSON)},
}}

type varyTrialJSON struct {
	Value         string `json:"value"`
	PeakAllocated int64  `json:"peak_allocated_bytes"`
	PeakReserved  int64  `json:"peak_reserved_bytes"`
	Fits          bool   `json:"fits"`
	Failure       string `json:"failure"`
}

// VaryJSON is the document of estimate --vary/--find-max -o json.
type VaryJSON struct {
	Stamp
	Command   []string        `json:"command"`
	Name      string          `json:"name"`
	Card      estimateCard    `json:"card"`
	AllocConf string          `json:"alloc_conf"`
	Trials    []varyTrialJSON `json:"trials"`
	FindMax   bool            `json:"find_max"`
	Max       *int64          `json:"max"`
}

func varyJSON(w io.Writer, r *VaryResult, _ Options) error {
	d := VaryJSON{Stamp: stamp(), Command: r.Command, Name: r.Name, Card: cardJSON(r.Card),
		AllocConf: r.AllocConf, Trials: []varyTrialJSON{}, FindMax: r.FindMax, Max: r.Max}
	for _, t := range r.Trials {
		d.Trials = append(d.Trials, varyTrialJSON{t.Value, t.PeakAllocated, t.PeakReserved, t.Fits, t.Failure})
	}
	return writeJSON(w, d, false)
}

func varyTable(w io.Writer, r *VaryResult, _ Options) error {
	size := func(n int64) string { return units.FormatSizeTorch(uint64(max(n, 0))) }
	fmt.Fprintf(w, "Virtual card: %s, %s (%s usable%s)\n", r.Card.Name, size(int64(r.Card.Total)),
		size(int64(r.Card.Capacity())), derived(r.Card))
	fmt.Fprintf(w, "%-12s %16s %16s  %s\n", r.Name, "peak allocated", "peak reserved", "fits")
	for _, t := range r.Trials {
		fits := "yes"
		if !t.Fits {
			fits = "no: " + t.Failure
		}
		fmt.Fprintf(w, "%-12s %16s %16s  %s\n", t.Value, size(t.PeakAllocated), size(t.PeakReserved), fits)
	}
	if r.FindMax {
		if r.Max != nil {
			fmt.Fprintf(w, "largest %s that fits: %d\n", r.Name, *r.Max)
		} else {
			fmt.Fprintf(w, "no %s in the range fits\n", r.Name)
		}
	}
	return nil
}
