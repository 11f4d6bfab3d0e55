package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/progress"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/internal/workload"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// SweepInput is what a sweep runs over and how.
type SweepInput struct {
	Source          // a trace or a workload; Params also go to Strategies
	Strategies bool // compare the strategy-* built-in workloads instead
	// Grid is the settings to replay under; nil is the default grid (with
	// the trace's recorded settings). The defaults are always added.
	Grid     []sweep.Setting
	Cards    []uint64 // card sizes; none = an unlimited device
	Fraction float64  // memory fraction of every card
	Workers  int      // replays at once
	// Traces are the trace files (ExpandTraces) when there are several,
	// or one snapshot whose devices are ranks: a set, swept rank by rank,
	// each setting's row the worst of its ranks.
	Traces      []string
	DeviceGiven bool // --device picks one device of each file
}

// ParseCards reads --device-memory's comma-separated card sizes.
func ParseCards(s string) ([]uint64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var cards []uint64
	for item := range strings.SplitSeq(s, ",") {
		var n units.Size
		if err := n.Set(item); err != nil {
			return nil, usage("--device-memory: %w", err)
		}
		cards = append(cards, uint64(n))
	}
	return cards, nil
}

func (in *SweepInput) check() error {
	if in.Workers < 1 {
		return usage("--jobs: %d is not a positive count", in.Workers)
	}
	if err := setup.CheckFraction(in.Fraction); err != nil {
		return usage("--memory-fraction: %w", err)
	}
	if in.Fraction != 0 && len(in.Cards) == 0 {
		return hint(Usage, errors.New("--memory-fraction needs --device-memory"), "give the card's size, e.g. --device-memory 80GiB")
	}
	return nil
}

// ParseGrids parses --grid values, each settings separated by ';', and
// refuses a setting given twice across them.
func ParseGrids(list []string) ([]sweep.Setting, error) {
	var grid []sweep.Setting
	for _, g := range list {
		settings, err := sweep.ParseGrid(g)
		if err != nil {
			return nil, usage("--grid: %w", err)
		}
		grid = append(grid, settings...)
	}
	seen := map[string]bool{}
	for _, st := range grid {
		if seen[st.Label] {
			return nil, usage("--grid: setting %q given twice", st.Label)
		}
		seen[st.Label] = true
	}
	return grid, nil
}

// Sweep replays the input under every setting on every card.
func Sweep(ctx context.Context, in SweepInput) (*sweep.Report, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	rep := &sweep.Report{Cards: in.Cards, Fraction: in.Fraction}
	var cases []sweep.Case
	var merge func([]sweep.Row) []sweep.Row
	var settles []settling
	var err error
	switch {
	case in.Strategies:
		cases, err = strategyCases(rep, in)
	case in.Workload != "":
		cases, err = workloadCases(rep, in)
	case len(in.Traces) > 0:
		cases, merge, settles, err = rankSweepCases(ctx, rep, in)
	default:
		cases, err = traceCases(ctx, rep, in)
	}
	if err != nil {
		return nil, err
	}
	for i := range cases {
		cases[i].Setting.Fraction = in.Fraction
	}
	rep.Rows, rep.OfflinePeak, err = runSweep(ctx, in, rep, cases, settles)
	if err != nil {
		return nil, fmt.Errorf("sweeping %s: %w", rep.Source, err)
	}
	if merge != nil {
		rep.Rows = merge(rep.Rows)
	}
	return rep, nil
}

// A settling is a plan made ahead of its private pools and what settles
// it (replay.FromSnapshotAhead).
type settling struct {
	ahead  *replay.Plan
	settle func() *replay.Plan
}

// runSweep replays the cases and runs the offline planner beside them.
// The offline planner is one long serial job, the grid many short ones:
// it goes to the workers first (-j 1: before the replays), then the
// settling of the plans made ahead (started as they were planned: the
// job waits for it), each beside the replays of the plan it settles.
// Most traces used no private pool and their plan stands; a plan that
// changes stops the replays of the plans made ahead, and the sweep runs
// again on the settled plans.
func runSweep(ctx context.Context, in SweepInput, rep *sweep.Report, cases []sweep.Case, settles []settling) ([]sweep.Row, uint64, error) {
	var offline uint64
	run, stop := context.WithCancel(ctx)
	defer stop()
	settled := make([]*replay.Plan, len(settles))
	var changed atomic.Bool
	jobs := []func(){func() { offline = offlinePeak(rep, cases) }}
	for i, s := range settles {
		jobs = append(jobs, func() {
			if settled[i] = s.settle(); settled[i] != s.ahead {
				changed.Store(true)
				stop()
			}
		})
	}
	n := len(cases) * max(len(rep.Cards), 1)
	bar := progress.Count(in.Progress, fmt.Sprintf("replaying %s, %s replays", rep.Source, units.FormatCount(int64(n))), n)
	rows, err := sweep.RunCasesBeside(progress.WithPhase(run, bar), cases, rep.Cards, in.Workers, jobs...)
	bar.Done()
	if !changed.Load() || ctx.Err() != nil {
		return rows, offline, err
	}
	cases = slices.Clone(cases)
	for i, s := range settles {
		if settled[i] == nil { // its job was not reached before the stop
			settled[i] = s.settle()
		}
		for k := range cases {
			if cases[k].Plan == s.ahead {
				cases[k].Plan = settled[i]
			}
		}
	}
	rep.Ops = 0
	for _, c := range cases {
		rep.Ops = max(rep.Ops, len(c.Plan.Ops))
	}
	return runSweep(ctx, in, rep, cases, nil)
}

// offlinePeak is the offline planner's peak for one plan, or the highest
// over a set's ranks; none when the report compares workloads.
func offlinePeak(rep *sweep.Report, cases []sweep.Case) uint64 {
	if rep.Compare {
		return 0
	}
	var peak uint64
	done := map[*replay.Plan]bool{}
	for _, c := range cases {
		if c.Plan != nil && !done[c.Plan] {
			done[c.Plan] = true
			peak = max(peak, replay.OfflinePeak(c.Plan.Ops))
		}
	}
	return peak
}

// withBaseline puts the defaults first when a given grid lacks them.
func withBaseline(grid []sweep.Setting) []sweep.Setting {
	if slices.ContainsFunc(grid, func(s sweep.Setting) bool { return s.IsDefault() && s.Settable() }) {
		return grid
	}
	return append([]sweep.Setting{sweep.Defaults()}, grid...)
}

// onePlan makes a case of plan under each setting of grid.
func onePlan(plan *replay.Plan, grid []sweep.Setting) []sweep.Case {
	cases := make([]sweep.Case, 0, len(grid))
	for _, s := range grid {
		cases = append(cases, sweep.Case{Label: s.Label, Plan: plan, Setting: s})
	}
	return cases
}

func traceCases(ctx context.Context, rep *sweep.Report, in SweepInput) ([]sweep.Case, error) {
	snap, err := openDevice(ctx, in.Trace, in.Device, in.Progress)
	if err != nil {
		return nil, err
	}
	plan := replay.FromSnapshot(snap, in.Device)
	grid := in.Grid
	rec := setup.Recorded(snap.Settings)
	if grid == nil {
		grid = defaultTraceGrid(in, rec)
	}
	rep.Source, rep.Ops, rep.Baseline = in.Trace, len(plan.Ops), sweep.DefaultsLabel
	return onePlan(plan, markRecorded(withBaseline(grid), rec)), nil
}

// markRecorded marks the setting of grid that the trace was recorded
// with (rec; nil when it recorded none), PyTorch's own policy.
func markRecorded(grid []sweep.Setting, rec *alloc.Config) []sweep.Setting {
	if rec == nil {
		return grid
	}
	grid = slices.Clone(grid)
	for i, s := range grid {
		c := s.Config
		if c.Policy == "" {
			c.Policy = alloc.PolicyPyTorch
		}
		grid[i].Recorded = c.Policy == alloc.PolicyPyTorch && sameConfig(c, *rec)
	}
	return grid
}

// defaultTraceGrid is the default grid, plus the settings the trace was
// recorded with when they are not already in it.
func defaultTraceGrid(in SweepInput, rec *alloc.Config) []sweep.Setting {
	grid := sweep.DefaultGrid(in.Fraction > 0)
	if rec != nil && !slices.ContainsFunc(grid, func(s sweep.Setting) bool { return sameConfig(s.Config, *rec) }) {
		grid = append(grid, sweep.Setting{Label: "recorded: " + rec.Text, Config: *rec})
	}
	return grid
}

func sameConfig(a, b alloc.Config) bool {
	a.Text, b.Text = "", ""
	return a == b
}

func workloadCases(rep *sweep.Report, in SweepInput) ([]sweep.Case, error) {
	w, err := LoadWorkload(in.Workload, in.Params)
	if err != nil {
		return nil, err
	}
	grid := in.Grid
	if grid == nil {
		grid = sweep.DefaultGrid(in.Fraction > 0)
	}
	if len(rep.Cards) == 0 && w.Limit > 0 {
		rep.Cards = []uint64{w.Limit}
		rep.LimitMsg = "the workload's own limit"
	}
	rep.Source, rep.Ops, rep.Baseline = w.Name, len(w.Ops), sweep.DefaultsLabel
	for _, p := range w.Phases {
		rep.Phases = append(rep.Phases, figures.Phase{Name: p.Name, Op: p.Op})
	}
	return onePlan(&replay.Plan{Ops: w.Ops}, withBaseline(grid)), nil
}

// strategyCases builds every strategy-* builtin, each under every setting
// of the grid (the defaults when none is given). Params go to the
// strategies that take them.
func strategyCases(rep *sweep.Report, in SweepInput) ([]sweep.Case, error) {
	grid := in.Grid
	if grid == nil {
		grid = []sweep.Setting{sweep.Defaults()}
	}
	var cases []sweep.Case
	used := map[string]bool{}
	for _, b := range workload.Builtins() {
		if !strings.HasPrefix(b.Name, "strategy-") {
			continue
		}
		mine := map[string]string{}
		for _, p := range b.Params {
			if v, ok := in.Params[p.Name]; ok {
				mine[p.Name] = v
				used[p.Name] = true
			}
		}
		w, err := b.Build(mine)
		if err != nil {
			return nil, &Error{Kind: Usage, Err: err}
		}
		plan := &replay.Plan{Ops: w.Ops}
		for _, s := range grid {
			label := w.Name
			if len(grid) > 1 {
				label += " / " + s.Label
			}
			cases = append(cases, sweep.Case{Label: label, Plan: plan, Setting: s})
		}
		if rep.Baseline == "" || b.Name == "strategy-default" {
			rep.Baseline = cases[len(cases)-len(grid)].Label
		}
	}
	for k := range in.Params {
		if !used[k] {
			return nil, usage("--param %s: no strategy workload takes it", k)
		}
	}
	if len(cases) == 0 {
		return nil, errors.New("no strategy-* built-in workloads")
	}
	rep.Source, rep.Compare = "the strategy-* workloads", true
	return cases, nil
}
