package replay

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

func readFixture(t testing.TB, name string) *trace.Snapshot {
	t.Helper()
	snap, err := trace.Open(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// replayRecorded replays a snapshot under its recorded settings, the cap
// it shows included.
func replayRecorded(t testing.TB, snap *trace.Snapshot) (*Plan, *Result) {
	t.Helper()
	p := FromSnapshot(snap, 0)
	res, err := Run(p, Options{Config: settingsConfig(snap.Settings), RecordedCap: true, Check: true})
	if err != nil {
		t.Fatal(err)
	}
	return p, res
}

// Every fixture replayed under its recorded settings does on the device
// what its recording did, and ends with its snapshot's segments.
func TestFixturesFollowTheirRecording(t *testing.T) {
	names, _ := filepath.Glob(filepath.Join(fixtures, "*.pickle"))
	if len(names) == 0 {
		t.Fatal("no fixtures")
	}
	for _, name := range names {
		t.Run(filepath.Base(name), func(t *testing.T) {
			p, res := replayRecorded(t, readFixture(t, filepath.Base(name)))
			if !p.comparable() {
				t.Fatalf("nothing to compare: %d device events, final segments %v", len(p.Recorded()), p.HasFinal)
			}
			if d := res.Divergence; d != nil {
				t.Errorf("diverged: %s", d.Describe())
			}
		})
	}
}

// firstRun is the trace index of the first event of the first release run
// of an action, and the run's length.
func firstRun(events []trace.Event, a trace.Action) (int, int) {
	for i := range events {
		if events[i].Action == a {
			j := i
			for j < len(events) && events[j].Action == a {
				j++
			}
			return i, j - i
		}
	}
	return -1, 0
}

// opOf is the op a plan puts a trace event at.
func opOf(t *testing.T, p *Plan, event int) int {
	t.Helper()
	for _, e := range p.Recorded() {
		if int(e.Event) == event {
			return int(e.Op)
		}
	}
	t.Fatalf("event #%d is not a device event of the plan", event)
	return -1
}

// A recording that lost a segment_free of an empty_cache run: the replay
// releases one segment more there, and says so at that op.
func TestDivergenceDroppedSegmentFree(t *testing.T) {
	snap := readFixture(t, "multistream.pickle")
	events := snap.Traces[0]
	at, n := firstRun(events, trace.ActionSegmentFree)
	if at < 0 || n < 2 {
		t.Fatalf("multistream has no release run of two segments or more (at %d, %d)", at, n)
	}
	want := opOf(t, FromSnapshot(snap, 0), at)
	cut := *snap
	cut.Traces = [][]trace.Event{slices.Delete(slices.Clone(events), at+1, at+2)}
	p, res := replayRecorded(t, &cut)
	d := res.Divergence
	if d == nil {
		t.Fatal("no divergence")
	}
	if d.Op != want || d.Event != at {
		t.Errorf("divergence at op %d event %d, want op %d event %d: %s", d.Op, d.Event, want, at, d.Describe())
	}
	if !strings.Contains(d.Recorded, released(n-1)) || !strings.Contains(d.Replayed, released(n)) {
		t.Errorf("recorded %q, replayed %q: want %d and %d segments released", d.Recorded, d.Replayed, n-1, n)
	}
	if len(p.Recorded()) == 0 {
		t.Fatal("no device events")
	}
}

// released is how describeCalls starts for n released segments.
func released(n int) string { return fmt.Sprintf("released %d cached segment", n) }

// The capped recording replayed without its cap keeps its cached segments
// where the recording released them and retried; the uncapped recording
// replayed under that cap releases where the recording did not, and the
// cause names the settings.
func TestDivergenceCap(t *testing.T) {
	snap := readFixture(t, "gpt2_varlen_capped95.pickle")
	p := FromSnapshot(snap, 0)
	at, n := firstRun(snap.Traces[0], trace.ActionSegmentFree)
	res, err := Run(p, Options{Config: settingsConfig(snap.Settings)})
	if err != nil {
		t.Fatal(err)
	}
	d := res.Divergence
	if d == nil || d.Op != opOf(t, p, at) || d.Event != at {
		t.Fatalf("uncapped: want a divergence at event #%d, got %+v", at, d)
	}
	if !strings.Contains(d.Recorded, released(n)) || strings.Contains(d.Replayed, "released") ||
		!strings.Contains(d.Cause, "set_per_process_memory_fraction") || !strings.Contains(d.Cause, "the memory cap differ") {
		t.Errorf("uncapped: %s", d.Describe())
	}

	tr := loadTruth(t, "gpt2_varlen_capped95")
	plain := readFixture(t, "gpt2_varlen.pickle")
	p = FromSnapshot(plain, 0)
	res, err = Run(p, Options{Device: alloc.Sim(tr.RecordedWith.DeviceTotal), DeviceTotal: tr.RecordedWith.DeviceTotal,
		MemoryFraction: tr.Fraction, RecordedCap: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cap != nil {
		t.Errorf("a cap was inferred although the fraction was given")
	}
	d = res.Divergence
	if d == nil || !strings.HasPrefix(d.Replayed, "released") || strings.Contains(d.Recorded, "released") ||
		!strings.Contains(d.Cause, "tighter cap") || !strings.HasPrefix(d.Cause, "recorded under other settings") {
		t.Fatalf("capped replay of the uncapped recording: %+v", d)
	}
}

// Hand-made traces: an address the replay cannot have, an out-of-memory
// the replay does not hit, a final state the events do not explain, and a
// trace with nothing to compare.
func TestDivergenceCauses(t *testing.T) {
	const mib = 1 << 20
	const a = 0x7f0000000000
	seg := func(act trace.Action, addr, size uint64) trace.Event { return ev(act, addr, size) }
	t.Run("address", func(t *testing.T) {
		// the second segment claims the first one's address: the simulated
		// device cannot give it, and the replay leaves its recording
		p := Build([]trace.Event{
			seg(trace.ActionSegmentAlloc, a, 12*mib), ev(trace.ActionAlloc, a, 12*mib),
			seg(trace.ActionSegmentAlloc, a+12*mib, 12*mib), ev(trace.ActionAlloc, a+12*mib, 12*mib),
		})
		rec := p.Recorded()
		for k := range rec {
			if rec[k].Event == 2 {
				rec[k].Addr = a // as if recorded there
			}
		}
		p.recorded = newRecorded(rec)
		res, err := Run(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		d := res.Divergence
		if d == nil || d.Op != 1 || d.Event != 2 || !strings.Contains(d.Cause, "addresses left the recording") {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("oom", func(t *testing.T) {
		p := Build([]trace.Event{
			seg(trace.ActionSegmentAlloc, a, 12*mib), ev(trace.ActionAlloc, a, 12*mib),
			ev(trace.ActionOOM, 1<<30, 64*mib),
			ev(trace.ActionFreeRequested, a, 12*mib), ev(trace.ActionFreeCompleted, a, 12*mib),
		})
		res, err := Run(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		d := res.Divergence
		if d == nil || d.Op != 1 || d.Event != 2 || !strings.Contains(d.Recorded, "ran out of memory") ||
			!strings.Contains(d.Cause, "the recording ran out of memory here and the replay did not") {
			t.Fatalf("%+v", d)
		}
		// under a cap that refuses it, the replay runs out of memory where
		// the recording did, and goes on past it as the program did
		res, err = Run(p, Options{Device: alloc.Sim(64 * mib), DeviceTotal: 64 * mib, MemoryFraction: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		if res.OOMOp != -1 || len(res.OOMs) != 1 || !res.OOMs[0].Recorded || res.Divergence != nil {
			t.Fatalf("capped: oom at op %d, ooms %+v, divergence %+v", res.OOMOp, res.OOMs, res.Divergence)
		}
	})
	t.Run("final segments", func(t *testing.T) {
		snap := readFixture(t, "seed_frag.pickle")
		snap.Segments = snap.Segments[1:]
		p, res := replayRecorded(t, snap)
		d := res.Divergence
		if d == nil || d.Op != len(p.Ops) || d.Event != -1 || !strings.Contains(d.Cause, "is not in the snapshot") {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("nothing to compare", func(t *testing.T) {
		// an RMM log: allocations and frees only
		p := Build([]trace.Event{ev(trace.ActionAlloc, a, 12*mib), ev(trace.ActionFreeRequested, a, 12*mib),
			ev(trace.ActionFreeCompleted, a, 12*mib)})
		res, err := Run(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Divergence != nil || p.comparable() {
			t.Fatalf("%+v", res.Divergence)
		}
	})
}

// Under garbage collection the cap decides how much a collection releases:
// a replay under a lower cap than the recording's releases more.
func TestDivergenceCollection(t *testing.T) {
	snap, err := trace.Open(filepath.Join("testdata", "recorded", "conv_gc.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	p := FromSnapshot(snap, 0)
	if p.Cap == nil {
		t.Fatal("no cap inferred")
	}
	const card = 1 << 40
	res, err := Run(p, Options{Config: settingsConfig(snap.Settings), Device: alloc.Sim(card), DeviceTotal: card,
		MemoryFraction: float64(p.Cap.Low-(40<<20)) / card}) // 40 MiB less: collections, not new ones
	if err != nil {
		t.Fatal(err)
	}
	d := res.Divergence
	if d == nil || !strings.Contains(d.Cause, "not the same ones") || !strings.Contains(d.Cause, "the memory cap differ") ||
		!strings.HasPrefix(d.Recorded, "released") || !strings.HasPrefix(d.Replayed, "released") {
		t.Fatalf("%+v", d)
	}
}

// A what-if replay leaves its recording and says where, unless the caller
// asked for statistics alone (NoDivergence, as the sweep does): then the
// statistics are the same and no divergence is reported.
func TestNoDivergence(t *testing.T) {
	snap := readFixture(t, "gpt2_varlen.pickle")
	p := FromSnapshot(snap, 0)
	cfg, err := alloc.ParseConfig("roundup_power2_divisions:4")
	if err != nil {
		t.Fatal(err)
	}
	with, err := Run(p, Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	without, err := Run(p, Options{Config: cfg, NoDivergence: true})
	if err != nil {
		t.Fatal(err)
	}
	if with.Divergence == nil {
		t.Fatal("the what-if replay reports no divergence")
	}
	if without.Divergence != nil {
		t.Errorf("NoDivergence: divergence reported: %s", without.Divergence.Describe())
	}
	if with.Stats != without.Stats {
		t.Errorf("NoDivergence changed the statistics:\n%+v\n%+v", with.Stats, without.Stats)
	}
}
