package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/report"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

const fixtures = "../../testdata/pytorch"

type truth struct {
	Replay        string           `json:"replay"`
	AllocConf     string           `json:"alloc_conf"`
	Fraction      float64          `json:"per_process_memory_fraction"`
	MemoryStats   map[string]int64 `json:"memory_stats"`
	MemorySummary string           `json:"memory_summary"`
	RecordedWith  struct {
		DeviceTotal uint64 `json:"device_total_bytes"`
	} `json:"recorded_with"`
}

func loadTruth(t testing.TB, name string) truth {
	t.Helper()
	var tr truth
	readJSON(t, filepath.Join(fixtures, name+".truth.json"), &tr)
	return tr
}

// recordings are the files of testdata/dir matching pattern; the test
// fails unless there are n, so that one lost does not go unnoticed.
func recordings(t *testing.T, dir, pattern string, n int) []string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join("testdata", dir, pattern))
	if len(names) != n {
		t.Fatalf("%d recordings in testdata/%s, want %d", len(names), dir, n)
	}
	return names
}

// readJSON decodes the JSON file at path into v.
func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func replayTruth(t testing.TB, tr truth, check bool) *Result {
	t.Helper()
	snap, err := trace.Open(filepath.Join(fixtures, tr.Replay))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := alloc.ParseConfig(tr.AllocConf)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Config: cfg, Check: check}
	if tr.Fraction > 0 {
		o.Device = alloc.Sim(tr.RecordedWith.DeviceTotal)
		o.DeviceTotal = tr.RecordedWith.DeviceTotal
		o.MemoryFraction = tr.Fraction
	}
	res, err := Run(FromSnapshot(snap, 0), o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Every fixture replays to PyTorch's own memory_stats, and the invariant
// checker holds after every operation.
func TestFixturesMatchPyTorch(t *testing.T) {
	names, _ := filepath.Glob(filepath.Join(fixtures, "*.truth.json"))
	if len(names) == 0 {
		t.Fatal("no fixtures")
	}
	// Keys a replay of the recorded alloc/free sequence must reproduce
	// exactly. The _stacks run made a slightly different sequence than the
	// pickle it is replayed from, so only its peaks are compared.
	exact := []string{
		"allocated_bytes.all.peak", "reserved_bytes.all.peak", "active_bytes.all.peak",
		"requested_bytes.all.peak", "inactive_split_bytes.all.peak", "segment.all.peak",
		"allocation.all.peak", "num_alloc_retries", "num_ooms", "allocated_bytes.all.current",
		"reserved_bytes.all.current", "segment.all.current", "num_device_alloc", "num_device_free",
		"reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.peak", "num_sync_all_streams",
		"max_split_size",
	}
	for _, path := range names {
		name := strings.TrimSuffix(filepath.Base(path), ".truth.json")
		t.Run(name, func(t *testing.T) {
			tr := loadTruth(t, name)
			res := replayTruth(t, tr, !testing.Short())
			got := res.Stats.Map()
			if len(got) != len(tr.MemoryStats) {
				t.Errorf("%d keys, PyTorch has %d", len(got), len(tr.MemoryStats))
			}
			// Graph capture and ~MemPool call empty_cache, which leaves no
			// event when it releases nothing: with private pools the
			// replay's sync count is a lower bound (docs/pytorch-allocator.md §19.3, §19.5).
			const syncs = "num_sync_all_streams"
			silent := len(res.Pools) > 0
			if silent && got[syncs] > tr.MemoryStats[syncs] {
				t.Errorf("%s = %d, more than PyTorch's %d", syncs, got[syncs], tr.MemoryStats[syncs])
			}
			for _, k := range exact {
				if got[k] != tr.MemoryStats[k] && !(silent && k == syncs) {
					t.Errorf("%s = %d, PyTorch reported %d", k, got[k], tr.MemoryStats[k])
				}
			}
			// a run replayed from its own recording matches every key
			if strings.TrimSuffix(tr.Replay, ".pickle") == name {
				for k, want := range tr.MemoryStats {
					if got[k] != want && !(silent && k == syncs) {
						t.Errorf("%s = %d, PyTorch reported %d", k, got[k], want)
					}
				}
				var buf bytes.Buffer
				if err := report.TorchSummary(&buf, got, 0, false); err != nil {
					t.Fatal(err)
				}
				if buf.String() != tr.MemorySummary {
					t.Errorf("memory_summary differs from PyTorch's:\n%s\nwant:\n%s", buf.String(), tr.MemorySummary)
				}
			}
		})
	}
}

func ev(a trace.Action, addr, size uint64) trace.Event {
	return trace.Event{Action: a, Addr: addr, Size: size, Stack: -1}
}

func TestBuild(t *testing.T) {
	events := []trace.Event{
		onStream(ev(trace.ActionSegmentAlloc, 0x2000000, 2<<20), 9), // released by the empty_cache below
		ev(trace.ActionSegmentAlloc, 0x1000000, 2<<20),
		ev(trace.ActionAlloc, 0x1000000, 100), // 0
		ev(trace.ActionAlloc, 0x1000200, 100), // 1
		ev(trace.ActionFreeRequested, 0x1000000, 100),
		ev(trace.ActionFreeCompleted, 0x1000000, 100), // 2: fused → OpFree
		ev(trace.ActionFreeRequested, 0x1000200, 100), // waits on a stream
		ev(trace.ActionAlloc, 0x1000000, 100),         // 3
		ev(trace.ActionFreeCompleted, 0x1000200, 100), // 4
		ev(trace.ActionFreeRequested, 0x9999, 1),      // unknown address
		ev(trace.ActionFreeCompleted, 0x9999, 1),      // 5
		ev(trace.ActionSegmentFree, 0x2000000, 2<<20), // followed by an alloc: empty_cache
		ev(trace.ActionAlloc, 0x3000000, 100),         // 6
		ev(trace.ActionSegmentFree, 0x1000000, 2<<20), // followed by a segment_alloc past the peak: part of a malloc
		ev(trace.ActionSegmentAlloc, 0x4000000, 20<<20),
		ev(trace.ActionAlloc, 0x4000000, 8<<20), // 7
		ev(trace.ActionOOM, 0, 1<<40),
	}
	p := Build(events)
	var kinds []string
	for _, op := range p.Ops {
		kinds = append(kinds, op.Kind.String())
	}
	want := "alloc alloc free free_requested alloc free_completed empty_cache alloc alloc alloc free"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("ops %q, want %q", got, want)
	}
	if p.Ops[0].Hint != 0x1000000 || p.Ops[1].Hint != 0 {
		t.Errorf("hints %#x %#x: the segment's address belongs to the first alloc only", p.Ops[0].Hint, p.Ops[1].Hint)
	}
	if p.Skipped[SkipUnknownFree] != 1 {
		t.Errorf("skipped %v", p.Skipped)
	}
	if p.Events != 8 || p.RecordedOOMs != 1 {
		t.Errorf("events %d, recorded ooms %d", p.Events, p.RecordedOOMs)
	}
	// the OOM request is reported at the count of events before it
	if got := p.Event[len(p.Ops)-2]; got != 8 {
		t.Errorf("oom event index %d, want 8", got)
	}
	res, err := Run(p, Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.NumSyncAllStreams != 1 {
		t.Errorf("num_sync_all_streams %d, want 1 (one empty_cache)", res.Stats.NumSyncAllStreams)
	}
	// a 1 TiB request does not fit a 24 GiB card: the recording failed
	// there too and went on, so the replay counts it at event 8 and goes on
	res, err = Run(p, Options{Device: alloc.Sim(24 << 30), Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.OOM != nil || len(res.OOMs) != 1 || res.OOMs[0].OpIndex != 8 || res.OOMs[0].Size != 1<<40 ||
		!res.OOMs[0].Recorded || res.Done != len(p.Ops) {
		t.Fatalf("stopping oom %+v, ooms %+v, done %d of %d: want one recorded OOM at event 8, gone past",
			res.OOM, res.OOMs, res.Done, len(p.Ops))
	}
	if res.Stats.NumOOMs != 1 {
		t.Errorf("num_ooms %d, want 1", res.Stats.NumOOMs)
	}
}

// A release run followed by a segment past the trace's peak was either the
// malloc's own retry or the program's empty_cache(). A batch-size finder
// that caught an out-of-memory frees, calls empty_cache() and asks again:
// the next request would have fitted a cached block, so its malloc could
// not have released, and the replay empties the cache first. Where no
// cached block fits, the malloc releases for itself as before.
func TestReleaseRunBeforeCachedFit(t *testing.T) {
	const mib = 1 << 20
	// a segment used whole, freed and given back, then a new one
	cached := func(size, next, request uint64) []trace.Event {
		return []trace.Event{
			ev(trace.ActionSegmentAlloc, 0x10000000, size), ev(trace.ActionAlloc, 0x10000000, size),
			ev(trace.ActionFreeRequested, 0x10000000, size), ev(trace.ActionFreeCompleted, 0x10000000, size),
			ev(trace.ActionSegmentFree, 0x10000000, size),
			ev(trace.ActionSegmentAlloc, 0x20000000, next), ev(trace.ActionAlloc, 0x20000000, request),
		}
	}
	// empty_cache(): 64 + 20 MiB passes the peak; 8 MiB fitted the cached
	// 64 MiB block
	events := cached(64*mib, 20*mib, 8*mib)
	p := Build(events)
	if f := p.Ops[len(p.Ops)-1].Flags; f&alloc.FlagReleasedBefore == 0 {
		t.Fatalf("the alloc after the run has flags %#x, want FlagReleasedBefore", f)
	}
	// under other settings the cache says nothing of the recording's: the
	// flag is left alone, and the malloc finds the cached block
	res, err := Run(p, Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.NumDeviceFree != 0 {
		t.Errorf("settings unknown: %d device frees, want the cached block reused", res.Stats.NumDeviceFree)
	}
	p.settings = &trace.Settings{} // recorded under the defaults, as replayed
	res, err = Run(p, Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Stats
	if s.NumDeviceFree != 1 || s.NumDeviceAlloc != 2 || s.ReservedBytes[0].Current != 20*mib || res.Divergence != nil {
		t.Errorf("device frees %d allocs %d, reserved %d, divergence %v: want the cache emptied before the 8 MiB request",
			s.NumDeviceFree, s.NumDeviceAlloc, s.ReservedBytes[0].Current, res.Divergence)
	}
	// a run before a request no cached block fits: under a 70 MiB cap the
	// malloc released for itself, and the replay's malloc does the same as
	// without the flag
	events = cached(40*mib, 50*mib, 50*mib)
	capped := Options{Device: alloc.Sim(140 * mib), DeviceTotal: 140 * mib, MemoryFraction: 0.5, Check: true}
	p = Build(events)
	p.settings, p.Cap = &trace.Settings{}, &Cap{Low: 60 * mib, High: 80 * mib, Retries: 1}
	with, err := Run(p, capped)
	if err != nil {
		t.Fatal(err)
	}
	p.Ops[len(p.Ops)-1].Flags &^= alloc.FlagReleasedBefore
	without, err := Run(p, capped)
	if err != nil {
		t.Fatal(err)
	}
	if with.OOM != nil || with.Stats.NumDeviceFree != 1 || with.Stats != without.Stats {
		t.Errorf("oom %v, device frees %d, stats differ %v: want the malloc's own release, as without the flag",
			with.OOM, with.Stats.NumDeviceFree, with.Stats != without.Stats)
	}
}

// Recordings of programs the rules were not written from
// (testdata/heldout/README.md) replay to PyTorch's memory_stats, under the
// truth's settings as the replay command runs them: with the cap or card
// the recording shows when the run set no memory fraction.
func TestHeldOutRecordings(t *testing.T) {
	for _, path := range recordings(t, "heldout", "*.truth.json", 9) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var tr truth
			readJSON(t, path, &tr)
			snap, err := trace.Open(filepath.Join("testdata", "heldout", tr.Replay))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := alloc.ParseConfig(tr.AllocConf)
			if err != nil {
				t.Fatal(err)
			}
			o := Options{Config: cfg, Check: true, RecordedCap: true}
			if tr.Fraction > 0 {
				o.Device, o.DeviceTotal, o.MemoryFraction = alloc.Sim(tr.RecordedWith.DeviceTotal), tr.RecordedWith.DeviceTotal, tr.Fraction
			}
			res, err := Run(FromSnapshot(snap, 0), o)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Stats.Map()
			for k, want := range tr.MemoryStats {
				// a key the replay says the trace cannot settle (a lower
				// bound) may differ, within its bound
				if why, ok := res.Inexact[k]; ok && strings.HasPrefix(why, "lower bound") && got[k] <= want {
					continue
				}
				if got[k] != want {
					t.Errorf("%s = %d, PyTorch %d", k, got[k], want)
				}
			}
			if res.Divergence != nil {
				t.Errorf("left the recording: %s", res.Divergence.Describe())
			}
		})
	}
}

// BenchmarkReplay measures replay throughput on the gpt2_varlen operation
// stream, parsed once.
func BenchmarkReplay(b *testing.B) {
	snap, err := trace.Open(filepath.Join(fixtures, "gpt2_varlen.pickle"))
	if err != nil {
		b.Fatal(err)
	}
	p := Build(snap.Traces[0])
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := RunOps(p.Ops, nil, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Ops))*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(p.Ops)*b.N), "ns/op-replayed")
}

// Without recorded addresses (other trace formats, synthetic replays) the
// simulated device falls back to its address model from the first
// segment. How far that drifts from PyTorch: the peaks and counts the
// fidelity check compares stay exact on every fixture without private
// pools or recorded OOMs; what moves is which equal-size block best fit
// picks, so the non-releasable (inactive split) counters: at most 2.2%
// (gpt2_varlen's inactive_split.large_pool.peak), 0.06% for the runs under
// other settings, nothing on the others. The pool and OOM fixtures drift
// more (logged: graph_convnet's reserved peak +2.3%, oom_survive_resnet's
// retries 46 of 49) and need their addresses.
func TestAddressModelDrift(t *testing.T) {
	names, _ := filepath.Glob(filepath.Join(fixtures, "*.truth.json"))
	for _, path := range names {
		name := strings.TrimSuffix(filepath.Base(path), ".truth.json")
		tr := loadTruth(t, name)
		snap, err := trace.Open(filepath.Join(fixtures, tr.Replay))
		if err != nil {
			t.Fatal(err)
		}
		p := FromSnapshot(snap, 0)
		for i := range p.Ops {
			if p.Ops[i].Flags&alloc.FlagClaim == 0 { // a claim's hint is the block it restores
				p.Ops[i].Hint = 0
			}
		}
		cfg, _ := alloc.ParseConfig(tr.AllocConf)
		o := Options{Config: cfg}
		if tr.Fraction > 0 {
			o.Device, o.DeviceTotal, o.MemoryFraction = alloc.Sim(tr.RecordedWith.DeviceTotal), tr.RecordedWith.DeviceTotal, tr.Fraction
		}
		res, err := Run(p, o)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Stats.Map()
		worst, worstKey := 0.0, ""
		for k, want := range tr.MemoryStats {
			if want == 0 {
				continue
			}
			d := float64(got[k]-want) / float64(want)
			if d < 0 {
				d = -d
			}
			if d > worst {
				worst, worstKey = d, k
			}
		}
		t.Logf("%s without recorded addresses: largest drift %.4f%% (%s)", name, 100*worst, worstKey)
		if len(p.Pools) > 0 || p.RecordedOOMs > 0 {
			// where private pools and checkpoint restores are, and where a
			// cap makes the program fail and retry, which block best fit
			// takes among equals decides what is released later: these
			// traces need their recorded addresses (drift logged above)
			continue
		}
		for _, k := range []string{"reserved_bytes.all.peak", "allocated_bytes.all.peak", "segment.all.peak", "num_device_alloc", "num_alloc_retries"} {
			if got[k] != tr.MemoryStats[k] {
				t.Errorf("%s without addresses: %s = %d, PyTorch %d", name, k, got[k], tr.MemoryStats[k])
			}
		}
		if worst > 0.025 && name != "gpt2_varlen_stacks" { // _stacks' truth is another run of the workload
			t.Errorf("%s: %s drifts %.4f%%", name, worstKey, 100*worst)
		}
	}
}
