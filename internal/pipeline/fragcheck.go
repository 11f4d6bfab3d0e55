package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/workload"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Check runs the cases, at most jobs at once, checks each against its
// budget with k, and returns the results in the cases' order. A case that
// cannot run fails alone.
func Check(ctx context.Context, cases []budget.Case, k *budget.Checker, jobs int) []budget.Result {
	results := make([]budget.Result, len(cases))
	sem := make(chan struct{}, jobs)
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := ctx.Err(); err != nil {
				results[i] = k.Failed(c, err)
				return
			}
			f, err := runCase(ctx, c)
			if err != nil {
				results[i] = k.Failed(c, err)
				return
			}
			results[i] = k.Check(c, f)
		})
	}
	wg.Wait()
	return results
}

// runCase replays one case and returns its figures.
func runCase(ctx context.Context, c budget.Case) (fig budget.Figures, err error) {
	// One case's crash must not take the others' reports with it.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("internal error replaying %s (please report it): %v", c.Source(), p)
		}
	}()
	if c.Traces != nil || (c.Trace != "" && isSetArg(c.Path(c.Trace))) {
		return runSetCase(ctx, c)
	}
	if c.Trace != "" {
		return runTraceCase(ctx, c)
	}
	return runWorkloadCase(c)
}

// isSetArg reports whether a case's trace names several: a glob or a
// folder.
func isSetArg(path string) bool {
	if fi, err := os.Stat(path); err == nil {
		return fi.IsDir()
	}
	return strings.ContainsAny(path, "*?[")
}

// runSetCase replays every rank of a case naming a set; its budget
// applies to the worst rank.
func runSetCase(ctx context.Context, c budget.Case) (budget.Figures, error) {
	args := c.Traces
	if args == nil {
		args = []string{c.Trace}
	}
	var paths []string
	for _, a := range args {
		paths = append(paths, c.Path(a))
	}
	files, err := ExpandTraces(paths)
	if err != nil {
		return budget.Figures{}, err
	}
	ranks, err := openRanks(ctx, SetSource{Paths: files, Device: c.Device, DeviceGiven: c.Device != 0})
	if err != nil {
		return budget.Figures{}, err
	}
	reports := make([]*figures.Replay, len(ranks))
	for i, rp := range ranks {
		o, err := caseOptions(c, setup.Recorded(rp.snap.Settings), 0)
		if err != nil {
			return budget.Figures{}, err
		}
		o.Context = ctx
		res, err := replay.Run(rp.plan, o)
		if err != nil {
			return budget.Figures{}, fmt.Errorf("replaying %s: %w", rp.path, err)
		}
		reports[i] = buildReport(rp.path, o, res, rp.plan, rp.snap)
		reports[i].Device = rp.device
		if err := caseCategories(c, reports[i], rp.plan, rp.snap, o, res, rp.cls); err != nil {
			return budget.Figures{}, err
		}
	}
	worst := reports[figures.Worst(reports)]
	return budget.FiguresOf(worst), nil
}

func runTraceCase(ctx context.Context, c budget.Case) (budget.Figures, error) {
	path := c.Path(c.Trace)
	snap, err := openDevice(ctx, path, c.Device, nil)
	if de := (*DeviceError)(nil); errors.As(err, &de) {
		return budget.Figures{}, fmt.Errorf("%s: no trace for device %d (it has devices 0 to %d)", path, c.Device, de.Count-1)
	}
	if err != nil {
		return budget.Figures{}, err
	}
	o, err := caseOptions(c, setup.Recorded(snap.Settings), 0)
	if err != nil {
		return budget.Figures{}, err
	}
	plan := replay.FromSnapshot(snap, c.Device)
	res, err := replay.Run(plan, o)
	if err != nil {
		return budget.Figures{}, fmt.Errorf("replaying %s: %w", path, err)
	}
	rep := buildReport(c.Source(), o, res, plan, snap)
	rep.Device = c.Device
	if err := caseCategories(c, rep, plan, snap, o, res, nil); err != nil {
		return budget.Figures{}, err
	}
	return budget.FiguresOf(rep), nil
}

func runWorkloadCase(c budget.Case) (budget.Figures, error) {
	name := c.Workload
	if !isBuiltin(name) {
		name = c.Path(name)
	}
	w, err := workload.Lookup(name, c.Params)
	if err != nil {
		return budget.Figures{}, err
	}
	o, err := caseOptions(c, nil, w.Limit)
	if err != nil {
		return budget.Figures{}, err
	}
	res, err := replay.RunOps(w.Ops, nil, o)
	if err != nil {
		return budget.Figures{}, fmt.Errorf("running %s: %w", w.Name, err)
	}
	return budget.FiguresOf(buildReport(c.Source(), o, res, nil, nil)), nil
}

// caseOptions are the replay options of c: its setup over the recorded
// settings (nil: PyTorch's defaults), on its must_fit card, or else the
// card a workload names (limit; 0 = none), or else an unlimited one (and
// a trace's recorded cap, as every command replays it).
func caseOptions(c budget.Case, recorded *alloc.Config, limit uint64) (replay.Options, error) {
	s := c.Setup
	if s.Card == 0 {
		s.Card = limit
	}
	o, err := s.Options(recorded)
	if err != nil {
		return o, setupErr(err)
	}
	return o, nil
}

func isBuiltin(name string) bool {
	for _, b := range workload.Builtins() {
		if b.Name == name {
			return true
		}
	}
	return false
}

// caseCategories adds the categories at the peak to a case's report when
// the case limits a category.
func caseCategories(c budget.Case, rep *figures.Replay, plan *replay.Plan, snap *trace.Snapshot, o replay.Options,
	res *replay.Result, cls *categories.Result) error {
	if c.Limits.Categories == ([len(budget.CategoryNames)]uint64{}) {
		return nil
	}
	if cls == nil {
		cls = categories.Classify(snap, rep.Device)
	}
	r := &Run{Report: rep, plan: plan, snap: snap, opts: o, res: res, device: rep.Device}
	return r.addCategories(cls)
}
