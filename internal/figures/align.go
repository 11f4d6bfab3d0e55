package figures

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// Mark is an annotation of a run placed at an operation: the START or END
// of a record_function range or an optimizer step (a snapshot's
// external_annotations), or where a workload's phase starts.
type Mark struct {
	Name  string
	Stage string // "START", "END", or "" for a point mark
	Op    int    // the first operation at or after the mark
}

// Alignment maps the operations of two runs onto one axis, that of run A:
// the marks both runs recorded (the k-th START of a name in A with the
// k-th START of that name in B, and so on) line up, and B's operations
// between two of them are stretched linearly. Without shared marks, both
// keep their operation index.
type Alignment struct {
	// Pairs are the matched marks' operations, A's and B's, increasing in
	// both; nil when aligned on operation index.
	Pairs [][2]int
	// Names are the matched marks' names, most matched first.
	Names []string
	// UnmatchedA and UnmatchedB count the marks of each run left out.
	UnmatchedA, UnmatchedB int
	// Note says in a sentence which alignment was used and why.
	Note   string
	opsA   int
	opsB   int
	onMark bool
}

// Aligned says the runs were aligned on their marks.
func (al *Alignment) Aligned() bool { return al.onMark }

// Align matches the marks of runs A and B (of opsA and opsB operations).
func Align(a, b []Mark, opsA, opsB int) *Alignment {
	al := &Alignment{opsA: opsA, opsB: opsB}
	type key struct {
		name, stage string
		k           int
	}
	keys := func(ms []Mark) []key {
		seen := map[[2]string]int{}
		out := make([]key, len(ms))
		for i, m := range ms {
			n := [2]string{m.Name, m.Stage}
			out[i] = key{m.Name, m.Stage, seen[n]}
			seen[n]++
		}
		return out
	}
	inA := map[key]int{} // key → index in a
	for i, k := range keys(a) {
		inA[k] = i
	}
	type pair struct{ a, b int } // indexes into a and b
	var cand []pair
	for j, k := range keys(b) {
		if i, ok := inA[k]; ok {
			cand = append(cand, pair{i, j})
		}
	}
	// the longest run of pairs increasing in both runs' operations: by B's
	// op, ties by A's op falling, so that no two of one op of B are kept
	slices.SortStableFunc(cand, func(x, y pair) int {
		return cmp.Or(cmp.Compare(b[x.b].Op, b[y.b].Op), cmp.Compare(a[y.a].Op, a[x.a].Op))
	})
	kept := increasing(len(cand), func(i int) int { return a[cand[i].a].Op })
	for _, i := range kept {
		al.Pairs = append(al.Pairs, [2]int{a[cand[i].a].Op, b[cand[i].b].Op})
	}
	// every matched mark at a kept pair's operations lines up, not only
	// the one kept for it (an END and the next START at one op)
	inLine := map[[2]int]bool{}
	for _, p := range al.Pairs {
		inLine[p] = true
	}
	counts := map[[2]string]int{} // name, stage → marks lined up
	lined := 0
	for _, p := range cand {
		if inLine[[2]int{a[p.a].Op, b[p.b].Op}] {
			counts[[2]string{a[p.a].Name, a[p.a].Stage}]++
			lined++
		}
	}
	al.UnmatchedA, al.UnmatchedB = len(a)-lined, len(b)-lined
	// a name counts its STARTs (or ENDs, or point marks, whichever most)
	times := map[string]int{}
	for k, n := range counts {
		times[k[0]] = max(times[k[0]], n)
	}
	for n := range times {
		al.Names = append(al.Names, n)
	}
	slices.SortFunc(al.Names, func(x, y string) int { return cmp.Or(cmp.Compare(times[y], times[x]), strings.Compare(x, y)) })
	al.onMark = len(al.Pairs) > 0
	switch {
	case al.onMark:
		var named []string
		for i, n := range al.Names {
			if i == 3 {
				named = append(named, units.FormatCount(int64(len(al.Names)-3))+" more")
				break
			}
			named = append(named, units.FormatCount(int64(times[n]))+"× "+n)
		}
		al.Note = fmt.Sprintf("aligned on the annotations both runs recorded: %s (%s marks); b's operations are stretched between them so that each lines up with a's",
			strings.Join(named, ", "), units.FormatCount(int64(lined)))
		if al.UnmatchedA+al.UnmatchedB > 0 {
			al.Note += fmt.Sprintf("; %s of a's and %s of b's marks have no counterpart", units.FormatCount(int64(al.UnmatchedA)), units.FormatCount(int64(al.UnmatchedB)))
		}
	case len(a) == 0 && len(b) == 0:
		al.Note = "no annotations in either run: aligned on operation index"
	case len(a) == 0:
		al.Note = "a recorded no annotations: aligned on operation index"
	case len(b) == 0:
		al.Note = "b recorded no annotations: aligned on operation index"
	default:
		al.Note = "no shared annotations (the runs' marks have different names): aligned on operation index"
	}
	return al
}

// increasing returns the indexes of a longest strictly increasing
// subsequence of v(0), ..., v(n-1), in order.
func increasing(n int, v func(int) int) []int {
	var tails []int // tails[k]: index ending the best run of length k+1
	prev := make([]int, n)
	for i := range n {
		k := sort.Search(len(tails), func(k int) bool { return v(tails[k]) >= v(i) })
		prev[i] = -1
		if k > 0 {
			prev[i] = tails[k-1]
		}
		if k == len(tails) {
			tails = append(tails, i)
		} else {
			tails[k] = i
		}
	}
	out := make([]int, len(tails))
	for k, i := len(tails)-1, -1; k >= 0; k-- {
		if k == len(tails)-1 {
			i = tails[k]
		} else {
			i = prev[i]
		}
		out[k] = i
	}
	return out
}

// XOfB is where operation op of B falls on the common axis.
func (al *Alignment) XOfB(op float64) float64 {
	if !al.onMark {
		return op
	}
	// the stretch of B holding op, between two matched marks or a mark
	// and an end of the run
	p := al.Pairs
	k := sort.Search(len(p), func(k int) bool { return float64(p[k][1]) > op })
	var a0, b0, a1, b1 float64
	switch {
	case k == 0:
		a1, b1 = float64(p[0][0]), float64(p[0][1])
	case k == len(p):
		a0, b0 = float64(p[k-1][0]), float64(p[k-1][1])
		a1, b1 = float64(max(al.opsA, p[k-1][0])), float64(max(al.opsB, p[k-1][1]))
	default:
		a0, b0, a1, b1 = float64(p[k-1][0]), float64(p[k-1][1]), float64(p[k][0]), float64(p[k][1])
	}
	if b1 <= b0 {
		return a0
	}
	return a0 + (min(op, b1)-b0)/(b1-b0)*(a1-a0)
}

// Span is the common axis's extent: A's operations when aligned on marks,
// else the longer run's.
func (al *Alignment) Span() int {
	if al.onMark {
		return al.opsA
	}
	return max(al.opsA, al.opsB)
}
