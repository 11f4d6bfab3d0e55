package replay

import (
	"github.com/gpumem/gpumem/pkg/alloc"

	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// withoutSegments is the fixture's snapshot with its segments and segment
// events left out: a trace a Planner plans as it streams.
func withoutSegments(t *testing.T, name string) *trace.Snapshot {
	t.Helper()
	snap, err := trace.Open(filepath.Join(fixtures, name+".pickle"))
	if err != nil {
		t.Fatal(err)
	}
	var evs []trace.Event
	for _, e := range snap.Traces[0] {
		switch e.Action {
		case trace.ActionSegmentAlloc, trace.ActionSegmentFree, trace.ActionSegmentMap, trace.ActionSegmentUnmap:
			continue
		}
		evs = append(evs, e)
	}
	snap.Traces = [][]trace.Event{evs}
	snap.Segments = nil
	return snap
}

func streamPlan(snap *trace.Snapshot, events []trace.Event) (*Plan, string) {
	pl := NewPlanner()
	for i := range events {
		pl.Add(&events[i])
	}
	p := pl.Plan(snap)
	return p, pl.Declined()
}

// streamPlanRuns is streamPlan with the events added in runs of n
// (AddAll), as a decoder's sink of runs hands them.
func streamPlanRuns(snap *trace.Snapshot, events []trace.Event, n int) (*Plan, string) {
	pl := NewPlanner()
	for len(events) > 0 {
		k := min(n, len(events))
		pl.AddAll(events[:k])
		events = events[k:]
	}
	p := pl.Plan(snap)
	return p, pl.Declined()
}

// A streamed plan is the plan FromSnapshot makes of the whole trace, and
// replays to the same result.
func TestPlannerMatchesFromSnapshot(t *testing.T) {
	for _, name := range []string{"gpt2_varlen", "gpt2_varlen_stacks", "oom_survive_resnet", "multistream"} {
		t.Run(name, func(t *testing.T) {
			snap := withoutSegments(t, name)
			want := FromSnapshot(snap, 0)
			got, why := streamPlan(snap, snap.Traces[0])
			if got == nil {
				t.Fatalf("declined: %s", why)
			}
			if got.Len() != len(want.Ops) {
				t.Fatalf("%d ops, want %d", got.Len(), len(want.Ops))
			}
			o := Options{Points: 2000, RecordedCap: true}
			wantRes, err := Run(want, o)
			if err != nil {
				t.Fatal(err)
			}
			gotRes, err := Run(got, o)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotRes, wantRes) {
				t.Errorf("streamed replay differs:\n got %+v\nwant %+v", gotRes, wantRes)
			}
			got.Materialize()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("streamed plan differs:\n got %+v\nwant %+v", got, want)
			}
			for _, n := range []int{1, 7, 1000, plannerWindow + 1} {
				runs, _ := streamPlanRuns(snap, snap.Traces[0], n)
				if runs == nil {
					t.Fatalf("runs of %d: declined", n)
				}
				if runs.Materialize(); !reflect.DeepEqual(runs, got) {
					t.Errorf("runs of %d: the plan differs from Add's", n)
				}
			}
		})
	}
}

func TestPlannerDeclines(t *testing.T) {
	snap, err := trace.Open(filepath.Join(fixtures, "multistream.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	if p, why := streamPlan(snap, snap.Traces[0]); p != nil || why != "the trace has segment events" {
		t.Errorf("a trace with segment events: plan %v, declined %q", p != nil, why)
	}
	if p, why := streamPlanRuns(snap, snap.Traces[0], 1000); p != nil || why != "the trace has segment events" {
		t.Errorf("a trace with segment events, in runs: plan %v, declined %q", p != nil, why)
	}
	bare := withoutSegments(t, "gpt2_varlen")
	events := bare.Traces[0]
	if p, why := streamPlan(bare, events[len(events)/2:]); p != nil || why != "the trace starts after the program had allocated" {
		t.Errorf("a trace cut in the middle: plan %v, declined %q", p != nil, why)
	}
	if p, why := streamPlanRuns(bare, events[len(events)/2:], 1000); p != nil || why != "the trace starts after the program had allocated" {
		t.Errorf("a trace cut in the middle, in runs: plan %v, declined %q", p != nil, why)
	}
	full, err := trace.Open(filepath.Join(fixtures, "gpt2_varlen.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	if p, why := streamPlan(full, nil); p != nil || why != "the snapshot has segments" {
		t.Errorf("no events but segments: plan %v, declined %q", p != nil, why)
	}
}

// Options.Stop replays a plan's first operations alone, packed or not,
// to the state a plan cut there reaches; Each hands over a packed plan's
// operations as Materialize unpacks them, batch by batch.
func TestStopAndEach(t *testing.T) {
	snap := withoutSegments(t, "gpt2_varlen")
	want := FromSnapshot(snap, 0)
	packed, why := streamPlan(snap, snap.Traces[0])
	if packed == nil || packed.log == nil {
		t.Fatalf("not planned packed: %s", why)
	}
	n := len(want.Ops)
	for _, stop := range []int{1, n / 3, Batch + 7, n - 1} {
		if stop >= n {
			continue
		}
		cut := *want
		cut.Ops, cut.Event, cut.Stack = want.Ops[:stop], want.Event[:stop], want.Stack[:stop]
		o := Options{RecordedCap: true, NoDivergence: true}
		ref, err := Run(&cut, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Stop = stop
		for name, p := range map[string]*Plan{"ops": want, "packed": packed} {
			got, err := Run(p, o)
			if err != nil {
				t.Fatal(err)
			}
			if got.Done != stop || !reflect.DeepEqual(got.Stats, ref.Stats) || !reflect.DeepEqual(got.Segments, ref.Segments) {
				t.Errorf("%s, Stop %d: done %d, stats or segments differ from the plan cut there", name, stop, got.Done)
			}
		}
	}
	for name, p := range map[string]*Plan{"ops": want, "packed": packed} {
		var ops []alloc.Op
		var event, stack []int32
		err := p.Each(func(base int, o []alloc.Op, e, s []int32) error {
			if base != len(ops) || len(o) > Batch {
				t.Errorf("%s: a batch of %d at %d after %d ops", name, len(o), base, len(ops))
			}
			ops, event, stack = append(ops, o...), append(event, e...), append(stack, s...)
			return nil
		})
		if err != nil || !reflect.DeepEqual(ops, want.Ops) || !reflect.DeepEqual(event, want.Event) || !reflect.DeepEqual(stack, want.Stack) {
			t.Errorf("%s: Each handed over other ops than the plan's (%d of %d): %v", name, len(ops), len(want.Ops), err)
		}
		allocs := 0
		for _, op := range ops {
			if op.Kind == alloc.OpAlloc {
				allocs++
			}
		}
		if allocs == 0 || p.Allocs() != allocs {
			t.Errorf("%s: Allocs %d, Each handed over %d allocations", name, p.Allocs(), allocs)
		}
	}
}

// A planner's watch gets each alloc and free_requested event's open
// block before it, and the addresses open at the end, as Watch says: an
// address reused, allocated twice while live, freed in two halves, freed
// by a free_completed alone.
func TestPlannerWatchOpen(t *testing.T) {
	ev := func(a trace.Action, addr uint64) trace.Event {
		return trace.Event{Action: a, Addr: addr, Size: 1 << 20, Stack: -1}
	}
	A, B, C := uint64(1<<20), uint64(2<<20), uint64(3<<20)
	events := []trace.Event{
		ev(trace.ActionAlloc, A), ev(trace.ActionAlloc, B),
		ev(trace.ActionFreeRequested, A), ev(trace.ActionFreeCompleted, A),
		ev(trace.ActionAlloc, A), ev(trace.ActionAlloc, A),
		ev(trace.ActionFreeRequested, B), ev(trace.ActionAlloc, C), ev(trace.ActionFreeCompleted, B),
		ev(trace.ActionFreeCompleted, C), ev(trace.ActionAlloc, B),
	}
	// the open blocks by Watch's words: 1 + the alloc's index, 0 once freed
	want := map[int]int32{0: 0, 1: 0, 2: 1, 4: 0, 5: 3, 6: 2, 7: 0, 10: 0}
	wantEnd := []uint64{A, B, C}
	// one at a time (Add), and in runs of n (AddAll, which plans them
	// where they lie)
	for _, n := range []int{0, 1, 2, 3, len(events)} {
		got := map[int]int32{}
		var gotEnd []uint64
		seen := 0
		pl := NewPlanner()
		pl.watched(Watch{
			Events: func(list int, evs []trace.Event, open []int32) {
				for k := range evs {
					if a := evs[k].Action; a == trace.ActionAlloc || a == trace.ActionFreeRequested {
						got[seen+k] = open[k]
					}
				}
				seen += len(evs)
			},
			End: func(list int, open []uint64) { gotEnd = open },
		}, 0)
		for i := 0; i < len(events); {
			if n == 0 {
				pl.Add(&events[i])
				i++
				continue
			}
			k := min(len(events), i+n)
			pl.AddAll(events[i:k])
			i = k
		}
		if pl.Plan(&trace.Snapshot{}) == nil {
			t.Fatalf("runs of %d: declined: %s", n, pl.Declined())
		}
		if seen != len(events) || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotEnd, wantEnd) {
			t.Errorf("runs of %d: saw %d events, open %v, at the end %x; want %d, %v, %x", n, seen, got, gotEnd, len(events), want, wantEnd)
		}
	}
}

// TestAddCopiesEveryField fails when trace.Event gains a field that
// Planner.Add, which copies an event field by field, leaves behind.
func TestAddCopiesEveryField(t *testing.T) {
	var e trace.Event
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
			f.SetInt(int64(i + 1))
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
			f.SetUint(uint64(i+1) * 512)
		default:
			t.Fatalf("trace.Event.%s is a %v: teach this test (and Planner.Add) to copy it", v.Type().Field(i).Name, f.Kind())
		}
	}
	e.Action = trace.ActionAlloc
	pl := NewPlanner()
	pl.Add(&e)
	if len(pl.win) != 1 || pl.win[0] != e {
		t.Fatalf("Add kept %+v, want %+v", pl.win, e)
	}
}

// A run of events planned where it lies (AddAll) packs its usual ops in
// line, in room made for them: ops that take more bytes (a new Stack, an
// ID past a byte, a new size) before them, in the same run, do not take
// it, however many bytes they took. The plan is the one Add makes, one
// event at a time.
func TestPlannerRunsOfUnusualOps(t *testing.T) {
	for u := 50; u < 1200; u += 23 {
		var events []trace.Event
		ev := func(a trace.Action, addr, size uint64, stack int32) {
			events = append(events, trace.Event{Action: a, Addr: addr, Size: size, Stack: stack})
		}
		// unusual: u live blocks (IDs past a byte), each of a new stack
		// and size, of as many bytes as they take
		for i := range u {
			ev(trace.ActionAlloc, uint64(i+1)<<20, 1<<60+uint64(i+1)<<9, 1<<30+int32(i))
		}
		for i := u - 1; i >= 0; i-- { // the last freed ID 0, the next one
			ev(trace.ActionFreeRequested, uint64(i+1)<<20, 0, 1<<29+int32(i))
			ev(trace.ActionFreeCompleted, uint64(i+1)<<20, 0, 1<<29+int32(i))
		}
		for range 1500 { // usual: one block at a time, of one size, no stack
			ev(trace.ActionAlloc, 1<<30, 1<<20, -1)
			ev(trace.ActionFreeRequested, 1<<30, 0, -1)
			ev(trace.ActionFreeCompleted, 1<<30, 0, -1)
		}
		snap := &trace.Snapshot{Traces: [][]trace.Event{events}}
		want, why := streamPlan(snap, events)
		if want == nil {
			t.Fatalf("declined: %s", why)
		}
		want.Materialize()
		got, why := streamPlanRuns(snap, events, len(events))
		if got == nil {
			t.Fatalf("declined: %s", why)
		}
		if got.Materialize(); !reflect.DeepEqual(got, want) {
			t.Errorf("%d unusual allocations: the plan differs from Add's", u)
		}
	}
}
