package figures

import "math"

// Diff is two runs side by side: before (A) and after (B) a change of
// code or settings.
type Diff struct {
	A, B *Replay
	// Sites are the allocation sites live at either run's peak reserved
	// memory, the largest change first; nil unless both runs recorded
	// stacks.
	Sites []SiteDelta
	// Depth is how many user frames make a site.
	Depth int
	// Phases are the annotated phases both runs recorded, the largest
	// change of peak allocated memory first; nil when either has none.
	Phases []PhaseDelta
	// StacksA and StacksB say whether each run recorded stacks; sites
	// are compared only when both did.
	StacksA, StacksB bool
	// MarksA and MarksB are each run's annotations at their operations
	// (the HTML page aligns the runs' timelines on them); nil when a run
	// recorded none.
	MarksA, MarksB []Mark
	// RanksA and RanksB count the ranks of each side: above one, the side
	// was a set of ranks and its worst rank stands for it.
	RanksA, RanksB int
	// Categories compares what each run's allocated memory held at its
	// peak, by category, the largest change first; nil unless both runs
	// have categories (DiffCategories).
	Categories []CategoryDelta
}

// SiteDelta is what one allocation site held at each run's peak.
type SiteDelta struct {
	Frames         string // its top user frames, innermost first, one per line
	BytesA, BytesB uint64
	CountA, CountB int
}

// Change is BytesB − BytesA.
func (s SiteDelta) Change() int64 { return int64(s.BytesB) - int64(s.BytesA) }

// Growth is B's peak reserved memory over A's, minus one (0.05 = 5%
// more); NaN when A reserved nothing.
func (d *Diff) Growth() float64 {
	a := PeakReserved(d.A.Stats)
	if a == 0 {
		return math.NaN()
	}
	return float64(PeakReserved(d.B.Stats))/float64(a) - 1
}

// PhaseDelta is one annotated phase (a record_function name, such as
// "Optimizer.step#AdamW.step") and the most memory each run held while in
// it, over all its occurrences.
type PhaseDelta struct {
	Name                           string
	Count                          int // occurrences in A
	PeakAllocatedA, PeakAllocatedB int64
	PeakReservedA, PeakReservedB   int64
}
