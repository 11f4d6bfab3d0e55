package pipeline

import (
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// TestMarks places the fixture's 8 optimizer steps (each a START and END
// of step and of zero_grad) on its operations, in order.
func TestMarks(t *testing.T) {
	path := pytorchFixture("gpt2_varlen_stacks.pickle")
	snap, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r := replaySnap(t, path, snap)
	ms := r.Marks()
	if len(ms) != 32 {
		t.Fatalf("%d marks, want the 32 annotations", len(ms))
	}
	starts := 0
	for i, m := range ms {
		if m.Op < 0 || m.Op > r.Report.Ops || (i > 0 && m.Op < ms[i-1].Op) {
			t.Fatalf("mark %d (%+v) out of order or outside the %d ops", i, m, r.Report.Ops)
		}
		if m.Name == "Optimizer.step#AdamW.step" && m.Stage == "START" {
			starts++
		}
	}
	if starts != 8 || ms[0].Op == 0 || ms[len(ms)-1].Op == ms[0].Op {
		t.Errorf("%d step starts, first at op %d, last at %d", starts, ms[0].Op, ms[len(ms)-1].Op)
	}
	// a trace without times has nothing to place its marks by
	snap.Annotations = nil
	if ms := replaySnap(t, path, snap).Marks(); ms != nil {
		t.Errorf("no annotations: %d marks", len(ms))
	}
}
