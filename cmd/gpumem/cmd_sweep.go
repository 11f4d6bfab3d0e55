package main

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/sweep"
	"github.com/gpumem/gpumem/pkg/workload"
)

type sweepOpts struct {
	workload     string
	params       []string
	strategies   bool
	grid         []string
	deviceMemory string
	fraction     float64
	output       string
	workers      int
	device       int
	html         string
}

func newSweepCmd(a *app) *cobra.Command {
	o := &sweepOpts{}
	cmd := &cobra.Command{
		Use:   "sweep TRACE | --workload W | --strategies",
		Short: "Replay under a grid of allocator settings and recommend the one that reserves least",
		Long: `Replay a trace (or a workload) under many allocator settings at once, in
parallel on every core, one allocator per replay, and print one table sorted
by peak reserved memory: fragmentation at the peak, device allocations (each a
slow cudaMalloc on a real GPU), allocation retries and out-of-memory errors.

The default grid holds PyTorch's defaults, expandable_segments:True, several
max_split_size_mb and roundup_power2_divisions values, the trace's recorded
settings when they differ, and every other allocation policy gpumem offers
(nocache). garbage_collection_threshold acts only under a cap, so its values
join the grid when --memory-fraction is given. --grid replaces the grid:
PYTORCH_CUDA_ALLOC_CONF values separated by ';' (or given one per --grid),
"defaults", or a policy name; the defaults are always added as the baseline.

--device-memory takes one or more card sizes: each setting is replayed on each
card, and a column per card says "fits" or the operation where it runs out of
memory. The table's figures are then those of the largest card. Without it,
the device is unlimited.

The last line recommends the PYTORCH_CUDA_ALLOC_CONF that reserves least while
fitting every card (ties go to fewer device allocations) and what it saves
against the defaults. Policies PyTorch cannot be switched to through
PYTORCH_CUDA_ALLOC_CONF are never recommended; a line above says when one
would reserve less.

--strategies compares the strategy-* built-in workloads (the same toy training
loop written five ways) in one table, one row per strategy, under the defaults
or each --grid setting; --param sets their shared parameters.`,
		Example: `  gpumem sweep snapshot.pickle
  gpumem sweep snapshot.pickle --device-memory 24GiB,40GiB,80GiB
  gpumem sweep snapshot.pickle --device-memory 80GiB --memory-fraction 0.9
  gpumem sweep snapshot.pickle --grid 'expandable_segments:True;max_split_size_mb:256' -o json
  gpumem sweep --workload transformer --param batch=16
  gpumem sweep --strategies --device-memory 24GiB`,
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if o.workload != "" || o.strategies {
				if len(args) > 0 {
					return errors.New("give a TRACE, --workload or --strategies, not several")
				}
				if o.workload != "" && o.strategies {
					return errors.New("--workload and --strategies exclude each other")
				}
				return nil
			}
			if len(args) != 1 {
				return errors.New("want one TRACE, or --workload W, or --strategies")
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd, a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.workload, "workload", "", "sweep a built-in workload or workload script instead of a trace")
	fl.StringArrayVarP(&o.params, "param", "p", nil, "workload parameter name=value (repeatable)")
	fl.BoolVar(&o.strategies, "strategies", false, "compare the strategy-* built-in workloads in one table")
	fl.StringArrayVar(&o.grid, "grid", nil, "settings to sweep instead of the default grid, separated by ';' (repeatable)")
	fl.StringVar(&o.deviceMemory, "device-memory", "", "card sizes, comma-separated (e.g. 24GiB,40GiB,80GiB); unlimited without it")
	fl.Float64Var(&o.fraction, "memory-fraction", 0, "set_per_process_memory_fraction of each card, for every setting")
	fl.StringVarP(&o.output, "output", "o", "table", "output format: table, json or markdown")
	fl.IntVarP(&o.workers, "jobs", "j", runtime.GOMAXPROCS(0), "replays to run at once")
	fl.IntVar(&o.device, "device", 0, "which device's trace to replay")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	return cmd
}

// sweepInput is what a sweep runs over.
type sweepInput struct {
	source   string
	ops      int
	cases    []sweep.Case
	cards    []uint64
	capped   bool
	compare  bool   // rows are workloads (--strategies), not settings
	baseline string // the row others are measured against
	limitMsg string // why the cards are what they are, when not given
	phases   []workload.Phase
}

func runSweep(cmd *cobra.Command, a *app, o *sweepOpts, args []string) error {
	if err := checkOutput(o.output, "table", "json", "markdown"); err != nil {
		return err
	}
	if o.workers < 1 {
		return usageError{fmt.Errorf("--jobs: %d is not a positive count", o.workers)}
	}
	cards, err := parseCards(o.deviceMemory)
	if err != nil {
		return err
	}
	if o.fraction != 0 {
		if o.fraction < 0 || o.fraction > 1 {
			return usageError{fmt.Errorf("--memory-fraction: %v is not in [0, 1]", o.fraction)}
		}
		if len(cards) == 0 {
			return withHint(usageError{errors.New("--memory-fraction needs --device-memory")},
				"give the card's size, e.g. --device-memory 80GiB")
		}
	}
	var grid []sweep.Setting
	for _, g := range o.grid {
		s, err := sweep.ParseGrid(g)
		if err != nil {
			return usageError{fmt.Errorf("--grid: %w", err)}
		}
		grid = append(grid, s...)
	}
	if err := checkLabels(grid); err != nil {
		return err
	}
	in := &sweepInput{cards: cards, capped: o.fraction > 0}
	switch {
	case o.strategies:
		err = strategyCases(in, o, grid)
	case o.workload != "":
		err = workloadCases(in, o, grid)
	default:
		err = traceCases(a, in, o, grid, args[0])
	}
	if err != nil {
		return err
	}
	for i := range in.cases {
		in.cases[i].Setting.Fraction = o.fraction
	}
	start := time.Now()
	rows, err := sweep.RunCases(cmd.Context(), in.cases, in.cards, o.workers)
	if err != nil {
		return fmt.Errorf("sweeping %s: %w", in.source, err)
	}
	elapsed := time.Since(start)
	if o.output != "json" {
		n := len(in.cases) * max(len(in.cards), 1)
		fmt.Fprintf(a.stderr, "gpumem: %d replays on %d workers in %v\n", n, min(o.workers, n), elapsed.Round(time.Millisecond))
	}
	if err := writeSweep(a, o.output, in, rows, o.fraction); err != nil || o.html == "" {
		return err
	}
	return writeSweepHTML(a, o.html, in, rows, o.fraction)
}

// parseCards reads --device-memory's comma-separated sizes.
func parseCards(s string) ([]uint64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var cards []uint64
	for item := range strings.SplitSeq(s, ",") {
		n, err := budget.ParseSize(item)
		if err != nil || n == 0 {
			return nil, usageError{fmt.Errorf("--device-memory: invalid size %q", strings.TrimSpace(item))}
		}
		cards = append(cards, n)
	}
	return cards, nil
}

// checkLabels refuses a setting given twice across --grid flags.
func checkLabels(grid []sweep.Setting) error {
	seen := map[string]bool{}
	for _, s := range grid {
		if seen[s.Label] {
			return usageError{fmt.Errorf("--grid: setting %q given twice", s.Label)}
		}
		seen[s.Label] = true
	}
	return nil
}

// withBaseline puts the defaults first when a given grid lacks them.
func withBaseline(grid []sweep.Setting) []sweep.Setting {
	if slices.ContainsFunc(grid, func(s sweep.Setting) bool { return s.IsDefault() && s.Settable() }) {
		return grid
	}
	return append([]sweep.Setting{sweep.Defaults()}, grid...)
}

func traceCases(a *app, in *sweepInput, o *sweepOpts, grid []sweep.Setting, path string) error {
	if len(o.params) > 0 {
		return usageError{errors.New("--param is for --workload and --strategies")}
	}
	snap, err := openTrace(a, path)
	if err != nil {
		return inputError{err}
	}
	if o.device < 0 || o.device >= len(snap.Traces) {
		if len(snap.Traces) == 0 {
			return inputError{fmt.Errorf("%s: the snapshot holds no allocation trace (record it with torch.cuda.memory._record_memory_history)", path)}
		}
		return usageError{fmt.Errorf("--device %d: %s has traces for devices 0 to %d", o.device, path, len(snap.Traces)-1)}
	}
	plan := replay.FromSnapshot(snap, o.device)
	if grid == nil {
		grid = sweep.DefaultGrid(in.capped)
		// The settings the trace was recorded with, when they are not
		// already in the grid.
		if rec := recordedConfig(snap.Settings); rec != nil && !slices.ContainsFunc(grid, func(s sweep.Setting) bool {
			return sameConfig(s.Config, *rec)
		}) {
			grid = append(grid, sweep.Setting{Label: "recorded: " + rec.Text, Config: *rec})
		}
	}
	grid = withBaseline(grid)
	in.source, in.ops, in.baseline = path, len(plan.Ops), sweep.DefaultsLabel
	for _, s := range grid {
		in.cases = append(in.cases, sweep.Case{Label: s.Label, Plan: plan, Setting: s})
	}
	return nil
}

func sameConfig(a, b alloc.Config) bool {
	a.Text, b.Text = "", ""
	return a == b
}

func workloadCases(in *sweepInput, o *sweepOpts, grid []sweep.Setting) error {
	params, err := parseParams(o.params)
	if err != nil {
		return err
	}
	w, err := loadWorkload(o.workload, params)
	if err != nil {
		return err
	}
	if grid == nil {
		grid = sweep.DefaultGrid(in.capped)
	}
	grid = withBaseline(grid)
	if len(in.cards) == 0 && w.Limit > 0 {
		in.cards = []uint64{w.Limit}
		in.limitMsg = "the workload's own limit"
	}
	plan := &replay.Plan{Ops: w.Ops}
	in.source, in.ops, in.baseline, in.phases = w.Name, len(w.Ops), sweep.DefaultsLabel, w.Phases
	for _, s := range grid {
		in.cases = append(in.cases, sweep.Case{Label: s.Label, Plan: plan, Setting: s})
	}
	return nil
}

// strategyCases builds every strategy-* builtin, each under every setting
// of the grid (the defaults when none is given). --param values go to the
// strategies that take them.
func strategyCases(in *sweepInput, o *sweepOpts, grid []sweep.Setting) error {
	params, err := parseParams(o.params)
	if err != nil {
		return err
	}
	if grid == nil {
		grid = []sweep.Setting{sweep.Defaults()}
	}
	used := map[string]bool{}
	for _, b := range workload.Builtins() {
		if !strings.HasPrefix(b.Name, "strategy-") {
			continue
		}
		mine := map[string]string{}
		for _, p := range b.Params {
			if v, ok := params[p.Name]; ok {
				mine[p.Name] = v
				used[p.Name] = true
			}
		}
		w, err := b.Build(mine)
		if err != nil {
			return usageError{err}
		}
		plan := &replay.Plan{Ops: w.Ops}
		for _, s := range grid {
			label := w.Name
			if len(grid) > 1 {
				label += " / " + s.Label
			}
			in.cases = append(in.cases, sweep.Case{Label: label, Plan: plan, Setting: s})
		}
		if in.baseline == "" || b.Name == "strategy-default" {
			in.baseline = in.cases[len(in.cases)-len(grid)].Label
		}
	}
	for k := range params {
		if !used[k] {
			return usageError{fmt.Errorf("--param %s: no strategy workload takes it", k)}
		}
	}
	if len(in.cases) == 0 {
		return errors.New("no strategy-* built-in workloads")
	}
	in.source, in.compare = "the strategy-* workloads", true
	return nil
}
