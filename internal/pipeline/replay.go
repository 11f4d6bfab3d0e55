package pipeline

import (
	"context"
	"fmt"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/internal/workload"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Run is one replay of a source and its report.
type Run struct {
	Report *figures.Replay
	// Notes are facts about the input worth telling on stderr, such as a
	// trace cut short by its ring buffer.
	Notes []string

	plan *replay.Plan       // workloads: their ops alone
	snap *trace.Snapshot    // nil for workloads
	work *workload.Workload // nil for traces
	opts replay.Options
	res  *replay.Result

	device int
	times  []int64            // the recorded time of each alloc/free_completed event; nil when none
	tlog   *timeLog           // or those times packed, for a trace planned as it was read
	others []otherPlan        // the other devices planned as the trace was read, for the explorer
	cls    *categories.Result // the categories of a trace's allocations; nil for workloads
	ex     *explored          // the explorer the report's replay stepped through; nil when none
	ride   *catRide           // the categories' timeline made beside the replay; nil: none
}

// Replay replays src under s and builds its report. Once ctx is done it
// stops, with ctx's error, wherever it is.
func Replay(ctx context.Context, src Source, s Settings) (*Run, error) {
	if src.Trace != "" {
		return replayTrace(ctx, src, s)
	}
	lim := workload.DefaultLimits
	lim.Context = ctx
	if src.MaxOps > 0 {
		lim.Ops, lim.OpsHint = src.MaxOps, "raise it with --max-ops"
	}
	// Open checks the workload without keeping its operations: Replay
	// streams them to the allocator, so a long script needs no memory for
	// them (Detail makes them when the HTML report needs them).
	w, err := workload.Open(src.Workload, src.Params, lim)
	if err != nil {
		return nil, workloadErr(err)
	}
	o, err := s.options(nil)
	if err != nil {
		return nil, err
	}
	o.Context = ctx
	r := &Run{plan: &replay.Plan{Ops: w.Ops}, work: w, opts: o}
	if r.res, err = w.Replay(o); err != nil {
		return nil, replayErr("running "+w.Name, err)
	}
	r.Report = buildReport(w.Name, o, r.res, r.plan, nil)
	return r, nil
}

func replayTrace(ctx context.Context, src Source, s Settings) (*Run, error) {
	path := src.Trace
	if (src.Keep == KeepReport || src.Keep == KeepDetail) && src.StopAt == 0 {
		ranks, ok, err := streamRank(ctx, SetSource{Device: src.Device, DeviceGiven: true, Progress: src.Progress, Keep: src.Keep}, path)
		if err != nil {
			return nil, err
		}
		if ok {
			rp := ranks[0]
			r, err := replayPlanned(ctx, path, src.Device, rp.snap, rp.plan, nil, rp.cls, s, stepFor(src.Pack, src.Keep, rp.tlog, rp.cls))
			if err == nil {
				r.tlog, r.others = rp.tlog, rp.others
				err = r.addCategories(rp.cls)
			}
			return r, err
		}
	}
	snap, err := openDevice(ctx, path, src.Device, src.Progress)
	if err != nil {
		return nil, err
	}
	plan, times := replay.FromSnapshot(snap, src.Device), timesFor(snap, src.Device, src.Keep == KeepDetail)
	if src.StopAt > 0 && src.StopAt < len(plan.Ops) {
		plan.Ops, plan.Event, plan.Stack = plan.Ops[:src.StopAt], plan.Event[:src.StopAt], plan.Stack[:src.StopAt]
	}
	var cls *categories.Result
	if src.StopAt == 0 {
		cls = categories.Classify(snap, src.Device)
	}
	if len(snap.Traces) == 1 {
		snap.Traces = nil // the plan holds what the replay needs; Detail replays the other devices
	}
	var step *explorerStep
	if src.StopAt == 0 {
		step = stepFor(src.Pack, src.Keep, nil, cls)
	}
	r, err := replayPlanned(ctx, path, src.Device, snap, plan, times, cls, s, step)
	if err == nil {
		err = r.addCategories(cls)
	}
	return r, err
}

// explorerStep is what the replay that makes the report needs to step
// through its ops for the HTML explorer too (Run.exploreStepped).
type explorerStep struct {
	pack figures.ExplorerPacker
	tlog *timeLog
	cls  *categories.Result
}

// stepFor is the explorerStep of a source kept for Detail with packer
// pack; nil when there is none.
func stepFor(pack figures.ExplorerPacker, keep Keep, tlog *timeLog, cls *categories.Result) *explorerStep {
	if pack == nil || keep != KeepDetail {
		return nil
	}
	return &explorerStep{pack: pack, tlog: tlog, cls: cls}
}

// replayPlanned replays one device's plan of snap, read from path, and
// steps through it for the explorer too as step says (nil: not); cls
// (nil: none) are the categories addCategories will add.
func replayPlanned(ctx context.Context, path string, device int, snap *trace.Snapshot, plan *replay.Plan, times []int64,
	cls *categories.Result, s Settings, step *explorerStep) (*Run, error) {
	o, err := s.options(setup.Recorded(snap.Settings))
	if err != nil {
		return nil, err
	}
	o.Context = ctx
	r := &Run{plan: plan, snap: snap, opts: o, times: times}
	if r.plan.Truncated {
		r.Notes = append(r.Notes, fmt.Sprintf("%s starts after the program had allocated (a max_entries ring buffer): "+
			"%s segments and %s live blocks were rebuilt from its final state; peaks cover the kept events only",
			path, units.FormatCount(int64(len(r.plan.Seeds))), units.FormatCount(int64(r.plan.Seeded))))
	}
	r.device = device
	ro := o
	if cls != nil && o.Points > 0 {
		r.ride = newCatRide(plan, cls)
		ro.Observe, ro.BlockSizes = r.ride.observe, r.ride.wantSizes
	}
	var explore func() (*explored, error)
	if step != nil && plan.Len() > 0 {
		r.res, explore, err = r.exploreStepped(ro, step.pack, newClock(times, step.tlog), step.cls)
	} else {
		r.res, err = replay.Run(r.plan, ro)
	}
	if err != nil {
		return nil, replayErr("replaying "+path, err)
	}
	if r.res.OOM != nil {
		plan.Materialize() // the report reads the stacks up to the out-of-memory
	}
	if r.res.SeedOOM {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: the state the trace starts in (%s segments rebuilt from its final state) "+
			"does not fit the card: out of memory before its first event", path, units.FormatCount(int64(len(plan.Seeds)))))
	}
	if c := r.res.Cap; c != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %s; override with --device-memory/--memory-fraction", path, c.Describe()))
	}
	if d := r.res.Divergence; d != nil && !d.WhatIf { // a what-if's own answer is no news
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %s", path, d.Describe()))
	}
	r.Report = buildReport(path, o, r.res, r.plan, snap)
	r.Report.Device = device
	if explore != nil {
		if r.ex, err = explore(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// finishHead completes the head of the run's own explorer: the verdict on
// an out-of-memory, a workload's phases as spans.
func (r *Run) finishHead(ex *figures.Explorer, phases []figures.Phase) {
	if r.Report.OOM != nil {
		ex.Verdict = r.Report.OOM.Verdict()
	}
	for i, p := range phases {
		end := ex.Ops
		if i+1 < len(phases) {
			end = phases[i+1].Op
		}
		ex.Spans = append(ex.Spans, figures.Span{Name: p.Name, Start: p.Op, End: end})
	}
}

// Detail is what the HTML report adds to the report: the segments at the
// peak and the allocation sites live there when the trace recorded
// stacks, a workload's phases, and the explorer's data for each device of
// the trace. One replay stepped one op at a time gives them all (the other
// devices' replays their explorers); pack makes the sinks that pack each
// explorer as it is made (Detail.Packed), so that a big trace needs memory
// for its live blocks and what the sinks keep, not for every op's change.
// A nil pack keeps the explorers whole (Detail.Explorers).
func (r *Run) Detail(pack figures.ExplorerPacker) (figures.Detail, error) {
	var d figures.Detail
	if r.work != nil {
		d.Phases = make([]figures.Phase, len(r.work.Phases))
		for i, p := range r.work.Phases {
			d.Phases[i] = figures.Phase{Name: p.Name, Op: p.Op}
		}
	}
	if r.work != nil && r.work.Ops == nil {
		if err := r.work.Materialize(); err != nil {
			return d, workloadErr(err)
		}
		r.plan.Ops = r.work.Ops
	}
	n := min(r.res.Extra.PeakOp+1, r.plan.Len())
	if r.res.Done == 0 || n <= 0 {
		return d, nil
	}
	sinks := func() figures.ExplorerSink {
		if pack == nil {
			return &collector{}
		}
		return pack()
	}
	keep := func(s figures.ExplorerSink) {
		if c, ok := s.(*collector); ok {
			d.Explorers = append(d.Explorers, c.e)
		} else {
			d.Packed = append(d.Packed, s)
		}
	}
	st := &stepOpts{device: r.device, plan: r.plan, o: r.opts, res: r.res, snap: r.snap, clock: newClock(r.times, r.tlog),
		cls: r.cls, peakN: n, finish: func(ex *figures.Explorer) { r.finishHead(ex, d.Phases) }}
	if ex := r.ex; ex != nil && pack != nil && !ex.again { // the report's replay stepped through the ops
		keep(ex.sink)
		st.reached, st.peak, st.sites = true, ex.peak, ex.sites
		r.ex = nil // a sink is finished once
	} else {
		sink := sinks()
		if ex != nil && pack != nil { // it asked for the ops again: they come from this replay
			sink, r.ex = ex.sink, nil
		}
		if err := explore(sink, st); err != nil {
			return d, fmt.Errorf("stepping through %s: %w", r.Report.Source, err)
		}
		keep(sink)
	}
	o := r.opts
	o.Points, o.Check = 0, false
	if st.reached {
		d.PeakSegments, d.Sites = st.peak, st.sites
	} else { // the explorer stopped before the peak (an out-of-memory): replay to it
		upto := *r.plan // the same plan, seeds included, stopped after the peak
		upto.Materialize()
		upto.Ops, upto.Event, upto.Stack = upto.Ops[:n], upto.Event[:min(n, len(upto.Event))], upto.Stack[:min(n, len(upto.Stack))]
		peak, err := replay.Run(&upto, o)
		if err != nil {
			doing := "replaying "
			if r.work != nil {
				doing = "running "
			}
			return d, fmt.Errorf("%s%s to its peak: %w", doing, r.Report.Source, err)
		}
		d.PeakSegments = segmentMaps(peak.Segments)
		d.Sites = peakSites(&upto, r.snap, n)
	}
	for _, od := range r.otherDevices() {
		res, err := replay.Run(od.plan, o)
		if err != nil {
			return d, fmt.Errorf("replaying device %d of %s: %w", od.device, r.Report.Source, err)
		}
		sink := sinks()
		if err := explore(sink, &stepOpts{device: od.device, plan: od.plan, o: o, res: res, snap: r.snap, clock: od.clock}); err != nil {
			return d, fmt.Errorf("stepping through device %d of %s: %w", od.device, r.Report.Source, err)
		}
		keep(sink)
	}
	return d, nil
}

// otherPlan is a device of the trace other than the run's, for the
// explorer: its plan and its events' times.
type otherPlan struct {
	device int
	plan   *replay.Plan
	clock  *clock
}

// otherDevices are the trace's devices with events other than the run's,
// in order: from the trace read whole, or planned as it was read.
func (r *Run) otherDevices() []otherPlan {
	var out []otherPlan
	if r.snap != nil {
		for dev, events := range r.snap.Traces {
			if dev == r.device || len(events) == 0 {
				continue
			}
			out = append(out, otherPlan{dev, replay.FromSnapshot(r.snap, dev), newClock(eventTimes(r.snap, dev), nil)})
		}
	}
	return append(out, r.others...)
}

// ReportOnly lets go of what only Run.Detail, Marks and PeakSites read in
// runs (the plan, the result it came from, the categories of its
// allocations, the snapshot), keeping their reports and notes, and collects
// it at once where the heap is big (membudget.Collect): a big trace's plan
// is tens of megabytes, and rendering the report then reuses their memory
// instead of growing the heap to the pacer's goal, twice the plan. Those
// methods may not be called after it.
func ReportOnly(runs ...*Run) {
	for _, r := range runs {
		r.plan, r.res, r.cls, r.snap = nil, nil, nil, nil
		r.times, r.tlog, r.others, r.ride = nil, nil, nil, nil
	}
	membudget.Collect()
}
