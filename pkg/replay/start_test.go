package replay

import (
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// streamSnapshot plans device's trace of snap as the streamed path does:
// one read for its start state, a second for its plan, window events at a
// time. nil and the reason when the planner declines.
func streamSnapshot(snap *trace.Snapshot, device, window int) (*Plan, string) {
	return streamReads(snap, device, window, false)
}

// streamReads is streamSnapshot, and with pools, when the planner
// declines a trace for its private pools, two more reads: one walks it for
// its pools (PoolWalk), one plans it with them (NewPoolPlanner).
func streamReads(snap *trace.Snapshot, device, window int, pools bool) (*Plan, string) {
	events := snap.Traces[device]
	st := NewStartState()
	for i := range events {
		st.Add(&events[i])
	}
	pl := NewSnapshotPlanner(snap, device, st)
	pl.win = make([]trace.Event, 0, window)
	for i := range events {
		pl.Add(&events[i])
	}
	p := pl.Plan(snap)
	if p == nil && pools && pl.Declined() == privatePools {
		w := NewPoolWalk(snap, device, st, func(see func([]trace.Event)) {
			// in runs of 3, as a tape hands them in runs
			for i := 0; i < len(events); i += 3 {
				see(events[i:min(i+3, len(events))])
			}
		})
		pl = NewPoolPlanner(snap, device, st, w)
		pl.win = make([]trace.Event, 0, window)
		for i := range events {
			pl.Add(&events[i])
		}
		p = pl.Plan(snap)
	}
	if p == nil {
		return nil, pl.Declined()
	}
	p.Materialize()
	return p, ""
}

// checkSame fails unless the streamed plan of device's trace is the plan
// FromSnapshot makes; it returns whether the planner planned it.
func checkSame(t *testing.T, name string, snap *trace.Snapshot, device, window int) bool {
	t.Helper()
	got, why := streamReads(snap, device, window, true)
	if got == nil {
		t.Logf("%s: declined: %s", name, why)
		return false
	}
	want := FromSnapshot(snap, device)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: streamed plan differs: got %v (seeded %d, skipped %v, cap %+v), want %v (seeded %d, skipped %v, cap %+v)",
			name, got, got.Seeded, got.Skipped, got.Cap, want, want.Seeded, want.Skipped, want.Cap)
		for i := range min(len(got.Ops), len(want.Ops)) {
			if got.Ops[i] != want.Ops[i] || got.Event[i] != want.Event[i] || got.Stack[i] != want.Stack[i] {
				t.Logf("first op that differs: %d: %+v %d %d, want %+v %d %d", i, got.Ops[i], got.Event[i], got.Stack[i],
					want.Ops[i], want.Event[i], want.Stack[i])
				break
			}
		}
	}
	return true
}

// The streamed plan of a snapshot is FromSnapshot's, on the real snapshots
// (segment events, final segments) and on each cut short at several points,
// as max_entries cuts a trace: its start state then comes from the walk
// back from the end.
func TestSnapshotPlannerMatchesFromSnapshot(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "*.pickle"))
	more, _ := filepath.Glob("testdata/recorded/*.pickle")
	files = append(files, more...)
	if len(files) < 10 {
		t.Fatalf("found %d fixtures", len(files))
	}
	planned, cut := 0, 0
	for _, f := range files {
		snap, err := trace.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		for d, events := range snap.Traces {
			if len(events) == 0 {
				continue
			}
			// windows cut the release runs and the pairs of frees
			for _, w := range []int{plannerWindow, 2, 3, 17} {
				if checkSame(t, name, snap, d, w) && w == 2 {
					planned++
				}
			}
			for _, frac := range []int{1, 3, 5, 7} {
				k := len(events) * frac / 8
				c := *snap
				c.Traces = append([][]trace.Event(nil), snap.Traces...)
				c.Traces[d] = events[k:]
				if checkSame(t, name+" cut", &c, d, 5) {
					cut++
				}
			}
		}
	}
	if planned < 5 || cut < 20 {
		t.Errorf("planned %d traces and %d cut ones: too few to compare", planned, cut)
	}
}

// The start state read forward is the walk back's, on traces of any order
// of events (frees before allocations, a segment freed twice...), such as
// a cut can leave.
func TestStartStateMatchesWalkBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	actions := []trace.Action{trace.ActionAlloc, trace.ActionFreeRequested, trace.ActionFreeCompleted,
		trace.ActionSegmentAlloc, trace.ActionSegmentFree}
	const base = 1 << 30
	compared := 0
	for round := 0; round < 400; round++ {
		snap := &trace.Snapshot{Traces: [][]trace.Event{nil}}
		for i := 0; i < 4+rng.IntN(40); i++ {
			a := actions[rng.IntN(len(actions))]
			addr := base + uint64(rng.IntN(4))*512
			size := uint64(1+rng.IntN(3)) * 512
			if a == trace.ActionSegmentAlloc || a == trace.ActionSegmentFree {
				addr, size = base+uint64(rng.IntN(2))*(4<<20), 2<<20
			}
			snap.Traces[0] = append(snap.Traces[0], trace.Event{Action: a, Addr: addr, Size: size, Stack: -1})
		}
		for s := 0; s < rng.IntN(3); s++ {
			seg := trace.Segment{Address: base + uint64(s)*(4<<20), TotalSize: 2 << 20, Small: true}
			for b := 0; b < 4; b++ {
				seg.Blocks = append(seg.Blocks, trace.Block{Address: seg.Address + uint64(b)*512, Size: 512,
					RequestedSize: uint64(b + 1), State: trace.BlockState(rng.IntN(3))})
			}
			snap.Segments = append(snap.Segments, seg)
		}
		if checkSame(t, "random", snap, 0, 3) {
			compared++
		}
	}
	if compared < 200 {
		t.Errorf("compared %d random traces of 400", compared)
	}
}

// A trace whose final segments name a private pool is declined before
// the file's second read; one whose pools only its events show, when
// they show them.
func TestSnapshotPlannerDeclinesPools(t *testing.T) {
	for name, early := range map[string]bool{"graph_convnet.pickle": true, "compile_reduce_overhead.pickle": true,
		"mempool_single.pickle": false} {
		snap, err := trace.Open(filepath.Join(fixtures, name))
		if err != nil {
			t.Fatal(err)
		}
		st := NewStartState()
		for i := range snap.Traces[0] {
			st.Add(&snap.Traces[0][i])
		}
		if why := NewSnapshotPlanner(snap, 0, st).Declined(); (why == privatePools) != early {
			t.Errorf("%s: declined %q before the second read", name, why)
		}
		if _, why := streamSnapshot(snap, 0, plannerWindow); why != privatePools {
			t.Errorf("%s: declined %q, want %q", name, why, privatePools)
		}
	}
}

// A trace that used private pools is planned in four reads (start state,
// the plan that declines it, the pool walk, the plan with its pools) as
// FromSnapshot plans it whole, pools and claims included, however the
// windows cut it and wherever a ring buffer cut it.
func TestPoolWalkMatchesFromSnapshot(t *testing.T) {
	for _, name := range []string{"graph_convnet.pickle", "compile_reduce_overhead.pickle", "mempool_single.pickle"} {
		snap, err := trace.Open(filepath.Join(fixtures, name))
		if err != nil {
			t.Fatal(err)
		}
		if want := FromSnapshot(snap, 0); len(want.Pools) == 0 {
			t.Fatalf("%s: FromSnapshot found no private pool", name)
		}
		if _, why := streamSnapshot(snap, 0, plannerWindow); why != privatePools {
			t.Fatalf("%s: the snapshot planner declined %q, want %q", name, why, privatePools)
		}
		for _, w := range []int{plannerWindow, 2, 3, 17} {
			if !checkSame(t, name, snap, 0, w) {
				t.Errorf("%s: not planned in windows of %d", name, w)
			}
		}
		events := snap.Traces[0]
		for _, frac := range []int{1, 3, 5, 7} {
			c := *snap
			c.Traces = [][]trace.Event{events[len(events)*frac/8:]}
			checkSame(t, name+" cut", &c, 0, 5)
		}
	}
}
