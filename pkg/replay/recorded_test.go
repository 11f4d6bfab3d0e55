package replay

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// The packed events read back as they were added, in order and by index,
// a retag included.
func TestRecordedRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	actions := []trace.Action{trace.ActionSegmentAlloc, trace.ActionSegmentFree, trace.ActionOOM, trace.ActionAlloc, trace.ActionEmptyCache}
	var want []DeviceEvent
	var r recorded
	op := int32(0)
	for i := range 1000 {
		op += int32(rng.IntN(3)) // several events share an op
		e := DeviceEvent{Op: op, Event: int32(3 * i), Action: actions[rng.IntN(len(actions))], after: rng.IntN(2) == 0,
			stream: uint32(rng.IntN(2)), Addr: rng.Uint64(), Size: rng.Uint64N(1 << 40)}
		r.add(e)
		want = append(want, e)
		if i%97 == 0 { // the plan moves the last op's events to a later op
			r.retag(int(op), int(op)+1)
			for k := len(want) - 1; k >= 0 && want[k].Op == op; k-- {
				want[k].Op = op + 1
			}
			op++
		}
	}
	if got := r.all(); !reflect.DeepEqual(got, want) {
		t.Fatalf("in order: %d events differ", len(got))
	}
	if r.len() != len(want) || len(r.starts) == 0 || len(r.chunks) < 2 {
		t.Fatalf("%d events, %d packed blocks in %d chunks", r.len(), len(r.starts), len(r.chunks))
	}
	for range 3000 {
		k := rng.IntN(len(want))
		if got := *r.get(k); got != want[k] {
			t.Fatalf("event %d: %+v, want %+v", k, got, want[k])
		}
	}
	if again := newRecorded(want); !reflect.DeepEqual(again.all(), want) {
		t.Fatal("newRecorded")
	}
}

// A divergence late in a long trace is found, and told, as one early:
// the replay compares batch by batch, and its batches do not change the
// answer.
func TestDivergenceLate(t *testing.T) {
	const mib = 1 << 20
	const a = 0x7f0000000000
	events := []trace.Event{ev(trace.ActionSegmentAlloc, a, 20*mib)}
	for range 3 * Batch / 2 { // three batches of ops
		events = append(events, ev(trace.ActionAlloc, a, 2*mib),
			ev(trace.ActionFreeRequested, a, 2*mib), ev(trace.ActionFreeCompleted, a, 2*mib))
	}
	late := len(events)
	// a second segment, recorded at the first one's address: the
	// simulated device cannot give it there
	events = append(events, ev(trace.ActionSegmentAlloc, a, 30*mib), ev(trace.ActionAlloc, a, 30*mib))
	p := Build(events)
	var first *Divergence
	for _, ctx := range []context.Context{nil, context.Background()} { // one batch, then Batch ops at a time
		res, err := Run(p, Options{Context: ctx})
		if err != nil {
			t.Fatal(err)
		}
		d := res.Divergence
		if d == nil || d.Op != len(p.Ops)-1 || d.Event != late || !strings.Contains(d.Cause, "addresses left the recording") {
			t.Fatalf("context %v: %+v", ctx, d)
		}
		if first == nil {
			first = d
		} else if *d != *first {
			t.Errorf("batched: %+v, in one batch: %+v", d, first)
		}
	}
}
