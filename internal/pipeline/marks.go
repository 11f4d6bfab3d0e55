package pipeline

import (
	"sort"

	"github.com/gpumem/gpumem/internal/figures"
)

// Marks are the run's annotations at the operations they fall before: a
// trace's record_function ranges and optimizer steps on its device (the
// snapshot's external_annotations), a workload's phases; nil when it has
// none, or its trace recorded no times to place them by.
func (r *Run) Marks() []figures.Mark {
	var out []figures.Mark
	if r.work != nil {
		for _, p := range r.work.Phases {
			out = append(out, figures.Mark{Name: p.Name, Stage: "START", Op: p.Op})
		}
		return out
	}
	if r.snap == nil || len(r.times) == 0 {
		return nil
	}
	times := opTimes(r.times, r.plan)
	for _, a := range r.snap.Annotations {
		if a.Device != r.device {
			continue
		}
		op := sort.Search(len(times), func(i int) bool { return times[i] >= a.TimeUS })
		out = append(out, figures.Mark{Name: a.Fields["name"], Stage: a.Fields["stage"], Op: op})
	}
	// annotations are recorded in time order; keep them so when equal
	sort.SliceStable(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return out
}
