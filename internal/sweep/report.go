package sweep

import "github.com/gpumem/gpumem/internal/figures"

// Report is a finished sweep: what the renderers read.
type Report struct {
	Source   string   // the trace file, workload name, or "the strategy-* workloads"
	Ops      int      // operations of the trace or workload (0 when comparing)
	Cards    []uint64 // card sizes; none = an unlimited device
	Fraction float64  // set_per_process_memory_fraction of each card; 0 = none
	Compare  bool     // rows are workloads (--strategies), not settings
	Baseline string   // the label of the row the others are measured against
	LimitMsg string   // why the cards are what they are, when not given
	Phases   []figures.Phase
	// OfflinePeak is what the offline planner reserves for the single
	// trace or workload (0 when comparing several): the lower limit for
	// any placement that knows the future.
	OfflinePeak uint64
	Rows        []Row // sorted as Sort orders them
}

// FindRow returns the row with the given label, or nil.
func (r *Report) FindRow(label string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Label == label {
			return &r.Rows[i]
		}
	}
	return nil
}
