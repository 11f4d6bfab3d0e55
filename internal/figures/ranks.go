package figures

import "math"

// The figures of a set of ranks (the processes of one distributed job).

// Worst indexes the worst of the ranks' replays: the first that ran out of
// memory, else the one with the highest peak reserved memory (the first on
// a tie); -1 for none.
func Worst(rs []*Replay) int {
	worst := -1
	for i, r := range rs {
		switch {
		case worst < 0:
			worst = i
		case (r.OOM != nil) != (rs[worst].OOM != nil):
			if r.OOM != nil {
				worst = i
			}
		case PeakReserved(r.Stats) > PeakReserved(rs[worst].Stats):
			worst = i
		}
	}
	return worst
}

// Spread is the highest peak reserved memory over the lowest, or NaN when
// a rank reserved nothing or there is none.
func Spread(rs []*Replay) float64 {
	if len(rs) == 0 {
		return math.NaN()
	}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, r := range rs {
		p := PeakReserved(r.Stats)
		lo, hi = min(lo, p), max(hi, p)
	}
	if lo <= 0 {
		return math.NaN()
	}
	return float64(hi) / float64(lo)
}

// Ranks is what the report of a set of ranks shows: every rank's replay,
// in rank order, and the worst of them.
type Ranks struct {
	Replays []*Replay
	Ranks   []int // each replay's rank; -1 when unknown
	Worst   int   // index into Replays (Worst)
}

// Spread is the ranks' highest peak reserved memory over their lowest.
func (r *Ranks) Spread() float64 { return Spread(r.Replays) }
