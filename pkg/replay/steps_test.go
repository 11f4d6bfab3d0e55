package replay

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// RunSteps is Run with every op handed to the Stepper in order: the same
// result (statistics, timeline, divergence, out-of-memory errors), on an
// unlimited card and on a small one (an out-of-memory), and when the
// Stepper stops following the ops part way.
func TestRunStepsIsRun(t *testing.T) {
	for _, f := range loadFixtures(t) {
		for _, card := range []uint64{0, 1 << 30} {
			for _, stopAt := range []int{-1, 100} {
				t.Run(fmt.Sprint(f.name, card, stopAt), func(t *testing.T) {
					o := Options{Points: 500, Check: true, RecordedCap: true}
					if card > 0 {
						o.Device = alloc.Sim(card)
					}
					want, err := Run(f.plan, o)
					if err != nil {
						t.Fatal(err)
					}
					var bs alloc.BlockSteps
					defer bs.Free()
					steps, peak := 0, -1
					got, err := RunSteps(f.plan, o, &Stepper{Blocks: &bs, KeyGap: 64, After: func(s *BlockStep) bool {
						if s.I != steps {
							t.Fatalf("op %d handed after %d ops", s.I, steps)
						}
						if s.Change.Peak {
							peak = s.I
						}
						steps++
						return stopAt < 0 || steps < stopAt
					}})
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("stepped:\n%+v\nrun:\n%+v", got, want)
					}
					wantSteps := want.Done
					if want.OOM != nil {
						wantSteps++ // the failing op's change
					}
					if stopAt >= 0 {
						wantSteps = min(wantSteps, stopAt)
					}
					if steps != wantSteps {
						t.Fatalf("%d ops stepped, want %d", steps, wantSteps)
					}
					if stopAt < 0 && peak != want.Extra.PeakOp && !(peak < 0 && want.Extra.PeakOp <= 0) {
						t.Fatalf("the last op to raise the peak %d, PeakOp %d", peak, want.Extra.PeakOp)
					}
				})
			}
		}
	}
}
