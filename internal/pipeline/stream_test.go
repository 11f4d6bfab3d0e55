package pipeline

import (
	"context"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/gpumem/gpumem/internal/setup"
)

// synthetic is a snapshot as scripts/gen_trace.py writes it (3,000 events,
// every third with a stack), made into a pickle by CPython: no segments,
// a trace from the program's start, which a lean replay plans as it reads.
const synthetic = "testdata/synthetic_stacks.pickle"

// A lean replay of a trace it streams reports what the usual one does,
// out-of-memory stacks included.
func TestLeanReplayStreams(t *testing.T) {
	ctx := context.Background()
	for _, card := range []uint64{0, 1500 << 20} {
		s := Settings{Setup: setup.Setup{Card: card}, Points: 2000}
		u, l := replayBoth(t, synthetic, s)
		if l.plan.Len() != len(u.plan.Ops) || len(u.plan.Ops) == 0 {
			t.Fatalf("card %d: %d ops streamed, %d read", card, l.plan.Len(), len(u.plan.Ops))
		}
		oom := u.Report.OOM != nil
		if streamed := l.plan.Ops == nil; streamed == oom { // an OOM unpacks the plan for its stacks
			t.Errorf("card %d: streamed %v with out-of-memory %v", card, streamed, oom)
		}
		if oom && len(u.Report.OOM.Frames)+len(u.Report.OOM.PinFrames) == 0 {
			t.Errorf("card %d: the out-of-memory shows no stack", card)
		}
		if !reflect.DeepEqual(l.Report, u.Report) || !reflect.DeepEqual(l.Notes, u.Notes) {
			t.Errorf("card %d: lean report differs:\n got %+v\nwant %+v", card, l.Report, u.Report)
		}
		single, err := Replay(ctx, Source{Trace: synthetic, Keep: KeepReport}, s)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(single.Report, u.Report) {
			t.Errorf("card %d: lean Replay differs", card)
		}
	}
}

// A streamed read on a big heap leaves no garbage of the decoder behind:
// what the heap holds when it returns is what a collection keeps, less
// what the categories made after it. (A small heap's garbage is left to
// the pacer: membudget.Collect.) The fixture is small: a ballast of live
// memory makes the heap big.
func TestStreamReadCollected(t *testing.T) {
	ballast := make([][]byte, 512)
	for i := range ballast {
		ballast[i] = make([]byte, 64<<10) // 32 MiB
	}
	runtime.GC()
	var before, after, kept runtime.MemStats
	runtime.ReadMemStats(&before)
	snap, plans, cls, _, ok := streamPlans(context.Background(), pytorchFixture("gpt2_varlen_stacks.pickle"), nil, false)
	if !ok || snap == nil || len(plans) == 0 || len(cls) == 0 {
		t.Fatal("not streamed")
	}
	runtime.ReadMemStats(&after)
	runtime.GC()
	runtime.ReadMemStats(&kept)
	runtime.KeepAlive(plans)
	runtime.KeepAlive(cls)
	runtime.KeepAlive(ballast)
	garbage := int64(after.HeapAlloc) - int64(kept.HeapAlloc)
	read := int64(after.TotalAlloc - before.TotalAlloc)
	if garbage > read/4 {
		t.Errorf("%d bytes of garbage left of the %d the read allocated", garbage, read)
	}
}

// A lean replay of a real snapshot (segment events, final segments, a
// trace cut short or not) reads the file twice and keeps no event, and
// reports what the usual one does; one that used private pools is read
// four times, and keeps 9 bytes an event while its pools are inferred.
func TestLeanReplayStreamsSnapshots(t *testing.T) {
	files, _ := filepath.Glob(pytorchFixture("*.pickle"))
	streamed := map[string]bool{}
	for _, file := range files {
		for _, fl := range []setup.Flags{
			{},
			{DeviceMemory: "600MiB"},
			{Policy: "gpumem"}, // leaves the recording: a divergence
			// what-ifs under other settings
			{AllocConf: "expandable_segments:True", AllocConfGiven: true},
			{AllocConf: "max_split_size_mb:64,roundup_power2_divisions:4", AllocConfGiven: true},
			{AllocConf: "garbage_collection_threshold:0.6", AllocConfGiven: true, DeviceMemory: "8GiB", Fraction: 0.5},
			{Policy: "nocache", IgnoreAddresses: true},
		} {
			st, err := fl.Parse()
			if err != nil {
				t.Fatal(err)
			}
			s := Settings{Setup: st, Points: 2000}
			u, l := replayBoth(t, file, s)
			if !reflect.DeepEqual(l.Report, u.Report) || !reflect.DeepEqual(l.Notes, u.Notes) {
				t.Errorf("%s, %+v: lean report differs:\n got %+v\nwant %+v", file, fl, l.Report, u.Report)
			}
			if l.plan.Ops == nil && u.Report.OOM == nil {
				streamed[filepath.Base(file)] = true
			}
		}
	}
	for name, want := range map[string]bool{"gpt2_varlen.pickle": true, "seed_frag.pickle": true,
		"oom_survive_resnet.pickle": true, "graph_convnet.pickle": true, "compile_reduce_overhead.pickle": true,
		"mempool_single.pickle": true} {
		if streamed[name] != want {
			t.Errorf("%s: streamed %v, want %v", name, streamed[name], want)
		}
	}
}

// replayBoth replays path under s the usual way and lean.
func replayBoth(t *testing.T, path string, s Settings) (usual, lean *Run) {
	t.Helper()
	var runs [2]*Run
	for i, isLean := range []bool{false, true} {
		set, err := ReplaySet(context.Background(), SetSource{Paths: []string{path}, Keep: keepOf(isLean)}, s)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = set.Runs[0]
	}
	return runs[0], runs[1]
}

// keepOf is how much a test's replay keeps: the report alone (lean, a
// trace planned as it is read) or the plan too (read whole).
func keepOf(lean bool) Keep {
	if lean {
		return KeepReport
	}
	return KeepPlan
}
