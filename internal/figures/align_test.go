package figures

import (
	"math"
	"strings"
	"testing"
)

// steps marks n optimizer steps, each a START and an END, the k-th
// starting at starts[k] and lasting len operations.
func steps(starts []int, length int) []Mark {
	var ms []Mark
	for _, s := range starts {
		ms = append(ms, Mark{"Optimizer.step", "START", s}, Mark{"Optimizer.step", "END", s + length})
	}
	return ms
}

func TestAlignMatched(t *testing.T) {
	// B's steps come later and its first stretch is twice as long
	a := steps([]int{100, 300, 500}, 50)
	b := append([]Mark{{"warmup", "START", 10}}, steps([]int{200, 400, 600}, 100)...)
	al := Align(a, b, 700, 900)
	if !al.Aligned() || len(al.Pairs) != 6 || al.UnmatchedA != 0 || al.UnmatchedB != 1 {
		t.Fatalf("aligned %v, pairs %v, unmatched %d/%d", al.Aligned(), al.Pairs, al.UnmatchedA, al.UnmatchedB)
	}
	if !strings.Contains(al.Note, "aligned on the annotations both runs recorded: 3× Optimizer.step (6 marks)") ||
		!strings.Contains(al.Note, "0 of a's and 1 of b's marks have no counterpart") {
		t.Errorf("note: %s", al.Note)
	}
	for _, c := range []struct{ b, x float64 }{
		{0, 0}, {100, 50}, {200, 100}, // before the first step: [0, 200] → [0, 100]
		{250, 125},             // halfway through step 1: [200, 300] → [100, 150]
		{300, 150}, {400, 300}, // step 1's END, step 2's START
		{700, 550}, {800, 625}, {900, 700}, // after the last END: [700, 900] → [550, 700]
		{1000, 700}, // past B's end: A's end
	} {
		if got := al.XOfB(c.b); math.Abs(got-c.x) > 1e-9 {
			t.Errorf("op %v of b at x %v, want %v", c.b, got, c.x)
		}
	}
	if al.Span() != 700 {
		t.Errorf("span %d, want a's 700 ops", al.Span())
	}
}

func TestAlignKeepsMonotonic(t *testing.T) {
	// the runs enter two phases in opposite orders: only one of each pair
	// of crossing matches can be kept
	a := []Mark{{"x", "START", 10}, {"y", "START", 20}, {"z", "START", 30}}
	b := []Mark{{"y", "START", 5}, {"x", "START", 15}, {"z", "START", 40}}
	al := Align(a, b, 50, 50)
	if len(al.Pairs) != 2 || al.Pairs[1] != [2]int{30, 40} || al.UnmatchedA != 1 || al.UnmatchedB != 1 {
		t.Fatalf("pairs %v, unmatched %d/%d", al.Pairs, al.UnmatchedA, al.UnmatchedB)
	}
	for i := 1; i < len(al.Pairs); i++ {
		if al.Pairs[i][0] <= al.Pairs[i-1][0] || al.Pairs[i][1] <= al.Pairs[i-1][1] {
			t.Errorf("pairs not increasing: %v", al.Pairs)
		}
	}
	// marks at one op in both runs (an END and the next START) make one pair
	same := Align(steps([]int{10, 20}, 10), steps([]int{10, 20}, 10), 40, 40)
	if len(same.Pairs) != 3 || same.UnmatchedA != 0 || same.UnmatchedB != 0 || !strings.Contains(same.Note, "2× Optimizer.step (4 marks)") {
		t.Errorf("back-to-back steps: pairs %v, want 3 distinct ops; unmatched %d/%d; %s", same.Pairs, same.UnmatchedA, same.UnmatchedB, same.Note)
	}
	for _, op := range []float64{0, 7, 10, 25, 40} {
		if x := same.XOfB(op); x != op {
			t.Errorf("identical runs: op %v at %v", op, x)
		}
	}
}

func TestAlignUnmatched(t *testing.T) {
	a := steps([]int{100}, 10)
	for _, c := range []struct {
		name string
		a, b []Mark
		note string
	}{
		{"different names", a, []Mark{{"forward", "START", 5}}, "no shared annotations"},
		{"a empty", nil, a, "a recorded no annotations"},
		{"b empty", a, nil, "b recorded no annotations"},
		{"both empty", nil, nil, "no annotations in either run"},
	} {
		al := Align(c.a, c.b, 100, 300)
		if al.Aligned() || al.Pairs != nil || !strings.Contains(al.Note, c.note) || !strings.HasSuffix(al.Note, "aligned on operation index") {
			t.Errorf("%s: aligned %v, pairs %v, note %q", c.name, al.Aligned(), al.Pairs, al.Note)
		}
		if x := al.XOfB(250); x != 250 || al.Span() != 300 {
			t.Errorf("%s: op 250 of b at %v, span %d; want the op index and the longer run", c.name, x, al.Span())
		}
	}
}
