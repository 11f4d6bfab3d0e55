package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/internal/sweep"
)

// --grid values add up; a setting given twice, even across flags, or one
// that does not parse is a usage error.
func TestParseGrids(t *testing.T) {
	g, err := ParseGrids([]string{"nocache", "expandable_segments:True"})
	if err != nil || len(g) != 2 || g[0].Label == g[1].Label {
		t.Fatalf("%+v, %v", g, err)
	}
	for _, bad := range [][]string{{"nocache", "nocache"}, {"no_such_option:1"}} {
		_, err := ParseGrids(bad)
		var pe *Error
		if !errors.As(err, &pe) || pe.Kind != Usage {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
}

// A sweep with workers to spare plans each trace ahead of its private
// pools; its report is the same as with one worker, which plans it whole:
// on traces without pools (the plan made ahead stands) and with them
// (mempool_single: the sweep runs again on the settled plan;
// graph_convnet, whose end names its pool: planned with it at once),
// alone or as the ranks of a set, on cards where they run out of memory
// too.
func TestSweepAheadSameReport(t *testing.T) {
	sets := [][]string{
		{pytorchFixture("gpt2_varlen.pickle")},
		{pytorchFixture("mempool_single.pickle")},
		{pytorchFixture("graph_convnet.pickle")},
		{pytorchFixture("mempool_single.pickle"), pytorchFixture("seed_frag.pickle")},
	}
	for _, traces := range sets {
		for _, cards := range [][]uint64{nil, {64 << 20, 1 << 30}} {
			var reps []*sweep.Report
			for _, workers := range []int{1, 2, 3} {
				rep, err := Sweep(context.Background(), SweepInput{Traces: traces, Workers: workers, Cards: cards})
				if err != nil {
					t.Fatal(err)
				}
				reps = append(reps, rep)
			}
			want := printReport(reps[0])
			for i, rep := range reps[1:] {
				if got := printReport(rep); got != want {
					t.Errorf("%v, cards %v: the report with %d workers differs from -j 1's:\n%.2000s\n%.2000s", traces, cards, i+2, got, want)
				}
			}
		}
	}
}

// printReport prints rep with its out-of-memory errors by value, to
// compare reports (NaN ratios are never DeepEqual).
func printReport(rep *sweep.Report) string {
	outcome := func(o sweep.Outcome) string {
		oom := o.OOM
		o.OOM = nil
		if oom != nil {
			return fmt.Sprintf("%+v OOM %+v", o, *oom)
		}
		return fmt.Sprintf("%+v", o)
	}
	r := *rep
	r.Rows = nil
	s := fmt.Sprintf("%+v", r)
	for _, row := range rep.Rows {
		s += fmt.Sprintf("\n%s %+v %s", row.Label, row.Setting, outcome(row.Outcome))
		for _, c := range row.Cards {
			s += "\n\t" + outcome(c)
		}
	}
	return s
}
