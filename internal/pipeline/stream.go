package pipeline

import (
	"bufio"
	"context"
	"errors"
	"io"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// A replay that reads only the report plans a snapshot pickle's traces
// as the file is read, keeping no event (replay.PlanReads decides how
// many reads each trace needs); the events' times are not kept: they
// place the annotations (Run.Marks, the HTML report), which a lean replay
// does not read. The categories of each device's allocations are built
// from the read that planned it.

// errNotPickle stops reading a file that is not a pickle.
var errNotPickle = errors.New("not a pickle")

// streamPlans reads the snapshot pickle at path and plans each device's
// trace as it is read. plans has one entry per device of the snapshot,
// nil for a device without events. ok is false, with no error, when the
// file must be read the usual way: not a pickle, a pipe or standard
// input (which can be read only once), a trace a planner declined, or an
// error (which the usual way reports).
// With timed, tlogs holds each device's event times (see timeLog), for
// the HTML explorer.
func streamPlans(ctx context.Context, path string, progress io.Writer, timed bool) (snap *trace.Snapshot, plans []*replay.Plan, cls []*categories.Result, tlogs []*timeLog, ok bool) {
	if readsOnce(path) {
		return nil, nil, nil, nil, false
	}
	read := func(phase string, sink trace.PickleSink) (*trace.Snapshot, []int, error) {
		p := progress
		if phase != "reading" {
			p = inPhase(progress, phase)
		}
		return streamPickle(ctx, path, p, sink)
	}
	var builders []*categories.Builder // of the read that planned
	var times []*timeLog
	watch := func() replay.Watch {
		builders, times = nil, nil
		return replay.Watch{
			Events: func(list int, events []trace.Event, open []int32) {
				for list >= len(builders) {
					builders = append(builders, categories.NewBuilder())
					times = append(times, &timeLog{})
				}
				builders[list].AddOpen(events, open)
				if timed {
					for i := range events {
						if e := &events[i]; e.Action == trace.ActionAlloc || e.Action == trace.ActionFreeCompleted {
							times[list].add(e.TimeUS)
						}
					}
				}
			},
			End: func(list int, open []uint64) {
				if list < len(builders) { // a list of no events has no builder
					builders[list].EndOpen(open)
				}
			},
		}
	}
	snap, plans, lists, ok := replay.PlanReads(read, watch)
	if !ok {
		return nil, nil, nil, nil, false
	}
	// The decoder's memo and pages are garbage now, a big trace's largest
	// after its plan and blocks: collected at once on a big heap
	// (membudget.Collect), the report's replays and figures reuse their
	// memory instead of growing the heap to the pacer's goal, twice the live
	// heap of the collection before.
	membudget.Collect()
	cls = make([]*categories.Result, len(plans))
	tlogs = make([]*timeLog, len(plans))
	for d, l := range lists {
		if l >= 0 && l < len(builders) {
			cls[d] = builders[l].Result(snap, d)
			if timed {
				tlogs[d] = times[l]
			}
		}
	}
	return snap, plans, cls, tlogs, true
}

// streamPickle reads the snapshot pickle at path with sink; it declines a
// file that is not a pickle.
func streamPickle(ctx context.Context, path string, progress io.Writer, sink trace.PickleSink) (snap *trace.Snapshot, lists []int, err error) {
	if m, ok := openMapped(ctx, path); ok {
		defer m.Close()
		if progress == nil || m.size < progressFrom { // no bar to draw as it is read (a mapped file reads none)
			err = readMapped(m, func(r io.Reader) error {
				var err error
				snap, lists, err = trace.StreamPickle(r, path, m.size, sink)
				return err
			})
			return snap, lists, err
		}
	}
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

// streamRank is openRank for a replay that reads only the report; ok is
// false when the file must be opened the usual way.
func streamRank(ctx context.Context, src SetSource, p string) ([]rankPlan, bool, error) {
	snap, plans, cls, tlogs, ok := streamPlans(ctx, p, src.Progress, src.Keep == KeepDetail)
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
		rp := rankPlan{path: p, device: d, rank: r, snap: snap, plan: plans[d], cls: cls[d], tlog: tlogs[d]}
		if src.Keep == KeepDetail { // the explorer shows every device of the file
			for o, pl := range plans {
				if o != d && pl != nil {
					rp.others = append(rp.others, otherPlan{o, pl, newClock(nil, tlogs[o])})
				}
			}
		}
		ranks = append(ranks, rp)
	}
	return ranks, true, nil
}
