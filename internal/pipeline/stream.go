package pipeline

import (
	"bufio"
	"context"
	"errors"
	"io"
	"slices"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// A replay that reads only the report can plan a snapshot pickle's traces
// as the file is read (replay.Planner) and keep no event: a big trace then
// needs memory for its live blocks and packed operations alone, a few
// bytes an event. Traces with segment events, or cut short by a ring
// buffer, need their end state and their peak before the first event is
// planned: the file is read twice, once for those (replay.StartState),
// once to plan (replay.NewSnapshotPlanner). Traces that used private pools
// need their pools before the first event is planned: the planner
// declines them, and two more reads walk them for their pools
// (replay.PoolWalk, 9 bytes an event) and plan them with those
// (replay.NewPoolPlanner). The events' times are not kept: they place the
// annotations (Run.Marks, the HTML report), which a lean replay does not
// read.

// errDeclined stops reading a trace that cannot be planned as it streams.
var errDeclined = errors.New("the trace cannot be planned as it is read")

// errNotPickle stops reading a file that is not a pickle.
var errNotPickle = errors.New("not a pickle")

// streamPlans reads the snapshot pickle at path and plans each device's
// trace as it is read. plans has one entry per device of the snapshot,
// nil for a device without events. ok is false, with no error, when the
// file must be read the usual way: not a pickle, a pipe or standard
// input (which can be read only once), a trace a planner declined, or an
// error (which the usual way reports).
func streamPlans(ctx context.Context, path string, progress io.Writer) (snap *trace.Snapshot, plans []*replay.Plan, cls []*categories.Result, ok bool) {
	if readsOnce(path) {
		return nil, nil, nil, false
	}
	snap, plans, cls, ok, pickle := streamOnce(ctx, path, progress)
	if !ok && pickle && ctx.Err() == nil {
		return streamTwice(ctx, path, progress)
	}
	return snap, plans, cls, ok
}

// streamPickle reads the snapshot pickle at path with sink; it declines a
// file that is not a pickle.
func streamPickle(ctx context.Context, path string, progress io.Writer, sink trace.PickleSink) (snap *trace.Snapshot, lists []int, err error) {
	err = readTrace(ctx, path, progress, func(r io.Reader, name, _ string, size int64) error {
		br := bufio.NewReaderSize(r, 64<<10)
		if head, _ := br.Peek(1); len(head) == 0 || head[0] != 0x80 {
			return errNotPickle
		}
		var err error
		snap, lists, err = trace.StreamPickle(br, name, size, sink)
		return err
	})
	return snap, lists, err
}

// streamOnce plans in one read the traces that start with the program and
// have no segment events. pickle says the file is a pickle the planners
// declined, which streamTwice may plan.
func streamOnce(ctx context.Context, path string, progress io.Writer) (snap *trace.Snapshot, plans []*replay.Plan, cls []*categories.Result, ok, pickle bool) {
	var planners []*replay.Planner
	var builders []*categories.Builder
	var lists []int
	sink := trace.PickleSink{
		Event: func(list int, e *trace.Event) error {
			if list == len(planners) {
				planners = append(planners, replay.NewPlanner())
				builders = append(builders, categories.NewBuilder())
			}
			pl := planners[list]
			pl.Add(e)
			builders[list].Add(e)
			if pl.Declined() != "" {
				return errDeclined
			}
			return nil
		},
		// the end state a replay is checked against needs the whole
		// trace: streamTwice reads it first
		Segment: func(*trace.Segment) error { return errDeclined },
	}
	snap, lists, err := streamPickle(ctx, path, progress, sink)
	if err != nil {
		return nil, nil, nil, false, errors.Is(err, errDeclined)
	}
	plans = make([]*replay.Plan, len(lists))
	cls = make([]*categories.Result, len(lists))
	for d, l := range lists {
		if l < 0 {
			continue
		}
		if plans[d] = planners[l].Plan(snap); plans[d] == nil {
			return nil, nil, nil, false, true
		}
		cls[d] = builders[l].Result(snap, d)
	}
	return snap, plans, cls, true, false
}

// streamTwice plans the snapshot pickle at path in two reads: the first
// rebuilds the state each trace began in, the second plans it.
func streamTwice(ctx context.Context, path string, progress io.Writer) (*trace.Snapshot, []*replay.Plan, []*categories.Result, bool) {
	var starts []*replay.StartState
	first, lists, err := streamPickle(ctx, path, inPhase(progress, "finding the start state of"), trace.PickleSink{
		Event: func(list int, e *trace.Event) error {
			if list == len(starts) {
				starts = append(starts, replay.NewStartState())
			}
			starts[list].Add(e)
			return nil
		},
	})
	if err != nil {
		return nil, nil, nil, false
	}
	planners := make([]*replay.Planner, len(starts))
	declined := false
	for d, l := range lists {
		if l >= 0 {
			planners[l] = replay.NewSnapshotPlanner(first, d, starts[l])
			declined = declined || planners[l].Declined() != ""
		}
	}
	if declined {
		return streamPools(ctx, path, progress, first, lists, starts)
	}
	snap, plans, cls, err := planRead(ctx, path, progress, lists, planners)
	if errors.Is(err, errDeclined) {
		return streamPools(ctx, path, progress, first, lists, starts)
	}
	return snap, plans, cls, err == nil
}

// streamPools plans the traces a snapshot planner declined (they used
// private pools) in two more reads: one walks each trace for its pools,
// the next plans it with them. first and starts come from the first read.
func streamPools(ctx context.Context, path string, progress io.Writer, first *trace.Snapshot, lists []int,
	starts []*replay.StartState) (*trace.Snapshot, []*replay.Plan, []*categories.Result, bool) {
	walks := make([]*replay.PoolWalk, len(starts))
	for d, l := range lists {
		if l >= 0 {
			walks[l] = replay.NewPoolWalk(first, d, starts[l])
		}
	}
	_, lists3, err := streamPickle(ctx, path, inPhase(progress, "inferring the private pools of"), trace.PickleSink{
		Event: func(list int, e *trace.Event) error {
			if list >= len(walks) || walks[list] == nil {
				return errDeclined // a list of no device: the usual way reports it
			}
			walks[list].Add(e)
			return nil
		},
	})
	if err != nil || !slices.Equal(lists, lists3) {
		return nil, nil, nil, false
	}
	planners := make([]*replay.Planner, len(starts))
	for d, l := range lists {
		if l >= 0 {
			planners[l] = replay.NewPoolPlanner(first, d, starts[l], walks[l])
			walks[l], starts[l] = nil, nil // their per-event records are no longer needed
		}
	}
	snap, plans, cls, err := planRead(ctx, path, progress, lists, planners)
	return snap, plans, cls, err == nil
}

// planRead reads the snapshot pickle at path once more, planning each
// device's trace with its planner and classifying its allocations;
// errDeclined when a planner declines.
func planRead(ctx context.Context, path string, progress io.Writer, lists []int, planners []*replay.Planner) (*trace.Snapshot, []*replay.Plan, []*categories.Result, error) {
	builders := make([]*categories.Builder, len(planners))
	for i := range builders {
		builders[i] = categories.NewBuilder()
	}
	snap, lists2, err := streamPickle(ctx, path, inPhase(progress, "planning"), trace.PickleSink{
		Event: func(list int, e *trace.Event) error {
			if list >= len(planners) || planners[list] == nil {
				return errDeclined // a list of no device: the usual way reports it
			}
			pl := planners[list]
			pl.Add(e)
			builders[list].Add(e)
			if pl.Declined() != "" {
				return errDeclined
			}
			return nil
		},
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if !slices.Equal(lists, lists2) {
		return nil, nil, nil, errors.New("the file changed between reads")
	}
	plans := make([]*replay.Plan, len(lists))
	cls := make([]*categories.Result, len(lists))
	for d, l := range lists {
		if l < 0 {
			continue
		}
		if plans[d] = planners[l].Plan(snap); plans[d] == nil {
			return nil, nil, nil, errDeclined
		}
		cls[d] = builders[l].Result(snap, d)
	}
	return snap, plans, cls, nil
}

// streamRank is openRank for a replay that reads only the report; ok is
// false when the file must be opened the usual way.
func streamRank(ctx context.Context, src SetSource, p string) ([]rankPlan, bool, error) {
	snap, plans, cls, ok := streamPlans(ctx, p, src.Progress)
	if !ok {
		return nil, false, ctx.Err()
	}
	var devs []int
	if src.DeviceGiven {
		devs = []int{src.Device}
	} else {
		for d, pl := range plans {
			if pl != nil {
				devs = append(devs, d)
			}
		}
		if len(devs) == 0 {
			devs = []int{src.Device}
		}
		if RankOf(p) >= 0 && len(devs) > 1 {
			return nil, false, nil // the busiest device counts the events
		}
	}
	if err := checkDevice(p, snap, devs[0]); err != nil {
		return nil, true, err
	}
	ranks := make([]rankPlan, 0, len(devs))
	for _, d := range devs {
		if plans[d] == nil {
			return nil, false, nil // no events: the usual way plans the empty trace
		}
		r := RankOf(p)
		if r < 0 || len(devs) > 1 {
			r = d
		}
		ranks = append(ranks, rankPlan{path: p, device: d, rank: r, snap: snap, plan: plans[d], cls: cls[d]})
	}
	return ranks, true, nil
}
