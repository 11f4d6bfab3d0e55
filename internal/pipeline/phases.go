package pipeline

import (
	"sort"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// phasePeak is what a run held while in one annotated phase.
type phasePeak struct {
	count               int
	allocated, reserved int64
}

// phasePeaks replays r at full resolution and returns, per annotation
// name (record_function markers, optimizer steps: the snapshot's
// external_annotations), the most memory held between its START and END
// marks; nil when the trace has none.
func (r *Run) phasePeaks() (map[string]phasePeak, error) {
	times := r.times
	if len(times) == 0 || len(r.plan.Ops) == 0 {
		return nil, nil
	}
	o := r.opts
	o.Points, o.Check = len(r.plan.Ops), false
	res, err := replay.Run(r.plan, o)
	if err != nil || res.Timeline == nil || res.Timeline.Stride != 1 {
		return nil, err
	}
	opTime := func(i int) int64 { return times[min(int(r.plan.Event[i]), len(times)-1)] }
	n := min(len(res.Timeline.Allocated), len(r.plan.Event))
	out := map[string]phasePeak{}
	open := map[string][]int64{} // name → start times of the phases not yet ended
	for _, a := range r.snap.Annotations {
		if a.Device != r.Report.Device {
			continue
		}
		name := a.Fields["name"]
		switch a.Fields["stage"] {
		case "START":
			open[name] = append(open[name], a.TimeUS)
		case "END":
			starts := open[name]
			if len(starts) == 0 {
				continue
			}
			start := starts[len(starts)-1]
			open[name] = starts[:len(starts)-1]
			// the ops whose events fall inside [start, end]
			lo := sort.Search(n, func(i int) bool { return opTime(i) >= start })
			p := out[name]
			p.count++
			for i := lo; i < n && opTime(i) <= a.TimeUS; i++ {
				p.allocated = max(p.allocated, res.Timeline.Allocated[i])
				p.reserved = max(p.reserved, res.Timeline.Reserved[i])
			}
			out[name] = p
		}
	}
	return out, nil
}

// timesFor is eventTimes when something will use them: the HTML report
// (detail) or a diff's phases (the snapshot's annotations); else nil, so a
// plain replay keeps no per-event array.
func timesFor(snap *trace.Snapshot, device int, detail bool) []int64 {
	if !detail && len(snap.Annotations) == 0 {
		return nil
	}
	return eventTimes(snap, device)
}

// eventTimes are the times of a device's alloc and free_completed events,
// the events plan.Event counts; nil when the trace recorded no times.
func eventTimes(snap *trace.Snapshot, device int) []int64 {
	if device >= len(snap.Traces) {
		return nil
	}
	var times []int64
	recorded := false
	for _, e := range snap.Traces[device] {
		if e.Action == trace.ActionAlloc || e.Action == trace.ActionFreeCompleted {
			times = append(times, e.TimeUS)
			recorded = recorded || e.TimeUS != 0
		}
	}
	if !recorded {
		return nil
	}
	return times
}

// diffPhases compares the phases both runs recorded, the largest change
// of peak allocated memory first.
func diffPhases(a, b *Run) ([]figures.PhaseDelta, error) {
	pa, err := a.phasePeaks()
	if err != nil || pa == nil {
		return nil, err
	}
	pb, err := b.phasePeaks()
	if err != nil || pb == nil {
		return nil, err
	}
	var out []figures.PhaseDelta
	for name, x := range pa {
		y, ok := pb[name]
		if !ok {
			continue
		}
		out = append(out, figures.PhaseDelta{Name: name, Count: x.count,
			PeakAllocatedA: x.allocated, PeakAllocatedB: y.allocated, PeakReservedA: x.reserved, PeakReservedB: y.reserved})
	}
	abs := func(n int64) int64 { return max(n, -n) }
	sort.Slice(out, func(i, j int) bool {
		ci, cj := abs(out[i].PeakAllocatedB-out[i].PeakAllocatedA), abs(out[j].PeakAllocatedB-out[j].PeakAllocatedA)
		if ci != cj {
			return ci > cj
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
