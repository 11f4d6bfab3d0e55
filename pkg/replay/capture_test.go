package replay

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// kvCacheCapture is a serving program's trace: a KV cache preallocated
// (1 GiB, alive to the end), a warm-up whose 512 MiB stays cached, then
// torch.cuda.graph's capture: its empty_cache() gives the warm-up's
// segment back, the CUDA generator's seed and offset come (a 2 MiB default
// segment on the capture stream), then the capture's 600 MiB in the
// graph's pool. Reserved bytes before the run plus the capture's segment
// pass the trace's peak, which alone would read the run as a capped
// malloc's retry.
func kvCacheCapture() *trace.Snapshot {
	const capture = 7
	events := evs(
		ev(trace.ActionSegmentAlloc, 0x100000000, 1<<30),
		ev(trace.ActionAlloc, 0x100000000, 1<<30),
		ev(trace.ActionSegmentAlloc, 0x200000000, 512*mib),
		ev(trace.ActionAlloc, 0x200000000, 512*mib),
		ev(trace.ActionFreeRequested, 0x200000000, 512*mib),
		ev(trace.ActionFreeCompleted, 0x200000000, 512*mib),
		ev(trace.ActionSegmentFree, 0x200000000, 512*mib), // torch.cuda.graph.__enter__'s empty_cache()
		onStream(ev(trace.ActionSegmentAlloc, 0x300000000, 2*mib), capture),
		onStream(ev(trace.ActionAlloc, 0x300000000, 8), capture),
		onStream(ev(trace.ActionAlloc, 0x300000200, 8), capture),
		onStream(ev(trace.ActionSegmentAlloc, 0x400000000, 600*mib), capture),
		onStream(ev(trace.ActionAlloc, 0x400000000, 600*mib), capture),
	)
	seg := func(addr, size, stream uint64, pool [2]int64, blocks ...trace.Block) trace.Segment {
		var used uint64
		for _, b := range blocks {
			used += b.Size
		}
		return trace.Segment{Address: addr, TotalSize: size, AllocatedSize: used, ActiveSize: used, Stream: stream,
			Small: size == 2*mib, PoolID: pool, Stack: -1, Blocks: blocks}
	}
	live := func(addr, size uint64) trace.Block {
		return trace.Block{Address: addr, Size: size, RequestedSize: size, State: trace.BlockAllocated, Stack: -1}
	}
	free := func(addr, size uint64) trace.Block {
		return trace.Block{Address: addr, Size: size, State: trace.BlockInactive, Stack: -1}
	}
	return &trace.Snapshot{
		Traces: [][]trace.Event{events},
		Segments: []trace.Segment{
			seg(0x100000000, 1<<30, 0, [2]int64{}, live(0x100000000, 1<<30)),
			seg(0x300000000, 2*mib, capture, [2]int64{}, live(0x300000000, 512), live(0x300000200, 512), free(0x300000400, 2*mib-1024)),
			seg(0x400000000, 600*mib, capture, [2]int64{1, 0}, live(0x400000000, 600*mib)),
		},
	}
}

// withoutGenerator drops the CUDA generator's seed and offset from
// kvCacheCapture: a later capture into the same shared pool makes none,
// and its first allocation follows the empty_cache() at once.
func withoutGenerator(snap *trace.Snapshot) *trace.Snapshot {
	ev := snap.Traces[0]
	snap.Traces[0] = append(ev[:7:7], ev[10:]...)
	snap.Segments = []trace.Segment{snap.Segments[0], snap.Segments[2]}
	return snap
}

// A release run followed at once by a private pool's allocations is the
// empty_cache() a graph capture starts with, not a retry: it bounds no
// cap, and the replay neither retries nor runs under a cap the program
// never had.
func TestCaptureStartIsNotARetry(t *testing.T) {
	for name, snap := range map[string]*trace.Snapshot{
		"first capture":          kvCacheCapture(),
		"capture in shared pool": withoutGenerator(kvCacheCapture()),
	} {
		t.Run(name, func(t *testing.T) {
			p := FromSnapshot(snap, 0)
			if len(p.Pools) != 1 {
				t.Fatalf("pools %v, want the graph's", p.Pools)
			}
			if p.Cap != nil {
				t.Fatalf("inferred %s from a capture's empty_cache()", p.Cap.Describe())
			}
			res, err := Run(p, Options{Check: true, RecordedCap: true})
			if err != nil {
				t.Fatal(err)
			}
			if s := res.Stats; s.NumAllocRetries != 0 || s.NumSyncAllStreams != 1 || s.NumDeviceFree != 1 || res.Divergence != nil {
				t.Errorf("retries %d, syncs %d, device frees %d, divergence %v: want 0, 1 (the capture's empty_cache), 1, none",
					s.NumAllocRetries, s.NumSyncAllStreams, s.NumDeviceFree, res.Divergence)
			}
		})
	}

	// the same run followed by a default allocation is still read by the
	// peak test: a retry under a cap between the peak and what it needed
	snap := withoutGenerator(kvCacheCapture())
	snap.Segments[1].PoolID = [2]int64{}
	q := FromSnapshot(snap, 0)
	if len(q.Pools) != 0 || !q.Cap.Capped() {
		t.Fatalf("pools %v, cap %+v: want none and a cap", q.Pools, q.Cap)
	}
	res, err := Run(q, Options{Check: true, RecordedCap: true, Config: alloc.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Stats; s.NumAllocRetries != 1 {
		t.Errorf("retries %d, want the retry the cap made", s.NumAllocRetries)
	}
}

// batchFinder is a batch-size finder's trace (MiB): a model of 200 stays;
// batch 1's 300 is cached, batch 2's 600 makes a capped malloc retry;
// batch 3's 1,200 fails after its malloc released the cached 600; the
// program catches the error, its activations (100) are freed, it calls
// empty_cache() (one segment given back) and goes on with 700.
func batchFinder() []trace.Event {
	return evs(
		ev(trace.ActionSegmentAlloc, 0x10000000, 200*mib),
		ev(trace.ActionAlloc, 0x10000000, 200*mib),
		ev(trace.ActionSegmentAlloc, 0x30000000, 300*mib),
		ev(trace.ActionAlloc, 0x30000000, 300*mib),
		ev(trace.ActionFreeRequested, 0x30000000, 300*mib),
		ev(trace.ActionFreeCompleted, 0x30000000, 300*mib),
		ev(trace.ActionSegmentFree, 0x30000000, 300*mib), // the retry: 500 + 600 passes the peak
		ev(trace.ActionSegmentAlloc, 0x60000000, 600*mib),
		ev(trace.ActionAlloc, 0x60000000, 600*mib),
		ev(trace.ActionSegmentAlloc, 0xa0000000, 100*mib), // the peak: 900
		ev(trace.ActionAlloc, 0xa0000000, 100*mib),
		ev(trace.ActionFreeRequested, 0x60000000, 600*mib),
		ev(trace.ActionFreeCompleted, 0x60000000, 600*mib),
		ev(trace.ActionSegmentFree, 0x60000000, 600*mib), // the failing malloc's release
		trace.Event{Action: trace.ActionOOM, Size: 1200 * mib, Addr: 100 << 30, Stack: -1},
		ev(trace.ActionFreeRequested, 0xa0000000, 100*mib),
		ev(trace.ActionFreeCompleted, 0xa0000000, 100*mib),
		ev(trace.ActionSegmentFree, 0xa0000000, 100*mib),  // the program's empty_cache()
		ev(trace.ActionSegmentAlloc, 0xc0000000, 700*mib), // 300 + 700 passes the peak too
		ev(trace.ActionAlloc, 0xc0000000, 700*mib),
	)
}

// A release run after a caught out-of-memory is the program's
// empty_cache(): the failing malloc gave back all it could before its oom
// entry. It bounds no cap, and the replay makes it an empty_cache, not a
// retry of the next malloc (which passing the peak alone would say).
func TestEmptyCacheAfterCaughtOOM(t *testing.T) {
	for _, gc := range []float64{0, 0.8} {
		snap := &trace.Snapshot{Traces: [][]trace.Event{batchFinder()},
			Settings: trace.Settings{Present: true, MaxSplitSize: -1, GCThreshold: gc}}
		p := FromSnapshot(snap, 0)
		if !p.Cap.Capped() || p.Cap.Retries != 1 || p.Cap.Low != 900*mib {
			t.Fatalf("gc %v: cap %+v, want [900 MiB, ...) from one retry", gc, p.Cap)
		}
		if k := kinds(p); !strings.HasSuffix(k, "alloc free free empty_cache alloc") {
			t.Errorf("gc %v: ops %q, want the oom's alloc and free, the activations' free, then empty_cache", gc, k)
		}
		res, err := Run(p, Options{Check: true, RecordedCap: true, Config: settingsConfig(snap.Settings)})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Stats
		if s.NumAllocRetries != 2 || s.NumOOMs != 1 || s.NumSyncAllStreams != 3 || s.NumDeviceFree != 3 || res.Divergence != nil {
			t.Errorf("gc %v: retries %d, ooms %d, syncs %d, device frees %d, divergence %v: want 2, 1, 3, 3, none",
				gc, s.NumAllocRetries, s.NumOOMs, s.NumSyncAllStreams, s.NumDeviceFree, res.Divergence)
		}
	}
}

// A replay names the keys its trace cannot settle, and only those: the
// sync count where a silent empty_cache() may hide (private pools, a
// caught out-of-memory error, empty_cache calls), the peaks and totals of
// a truncated trace; none for a trace that shows everything.
func TestInexactKeys(t *testing.T) {
	plain := evs(
		ev(trace.ActionSegmentAlloc, 0x10000000, 20*mib),
		ev(trace.ActionAlloc, 0x10000000, 12*mib),
		ev(trace.ActionFreeRequested, 0x10000000, 12*mib),
		ev(trace.ActionFreeCompleted, 0x10000000, 12*mib),
	)
	emptied := append(slices.Clone(plain), ev(trace.ActionSegmentFree, 0x10000000, 20*mib))
	truncated := evs(ev(trace.ActionFreeRequested, 0x10000000, 12*mib), ev(trace.ActionFreeCompleted, 0x10000000, 12*mib))
	for _, tc := range []struct {
		name string
		snap *trace.Snapshot
		keys []string
	}{
		{"everything shown", &trace.Snapshot{Traces: [][]trace.Event{plain}}, nil},
		{"empty_cache", &trace.Snapshot{Traces: [][]trace.Event{emptied}}, []string{"num_sync_all_streams"}},
		{"graph capture", kvCacheCapture(), []string{"num_sync_all_streams"}},
		{"caught OOM", &trace.Snapshot{Traces: [][]trace.Event{batchFinder()}}, []string{"num_sync_all_streams"}},
		{"truncated", &trace.Snapshot{Traces: [][]trace.Event{truncated}, Segments: []trace.Segment{{Address: 0x10000000,
			TotalSize: 20 * mib, Stack: -1, Blocks: []trace.Block{{Address: 0x10000000, Size: 20 * mib, State: trace.BlockInactive, Stack: -1}}}}},
			[]string{"allocated_bytes.all.peak", "num_alloc_retries", "num_sync_all_streams", "segment.large_pool.allocated", "reserved_bytes.all.freed"}},
	} {
		res, err := Run(FromSnapshot(tc.snap, 0), Options{RecordedCap: true})
		if err != nil {
			t.Fatal(err)
		}
		if tc.keys == nil && res.Inexact != nil {
			t.Errorf("%s: %v, want every key settled", tc.name, res.Inexact)
		}
		for _, k := range tc.keys {
			if res.Inexact[k] == "" {
				t.Errorf("%s: %s not named (%v)", tc.name, k, res.Inexact)
			}
		}
		for _, k := range []string{"allocated_bytes.all.current", "reserved_bytes.all.current", "segment.all.current"} {
			if why, ok := res.Inexact[k]; ok {
				t.Errorf("%s: %s named (%s): current values are settled", tc.name, k, why)
			}
		}
	}
}

// A replay whose device calls all agree with its recording but whose
// final blocks do not (an allocation placed in another pool or split
// otherwise) reports a divergence instead of differing in silence.
func TestFinalBlocksDiverge(t *testing.T) {
	snap := readFixture(t, "graph_convnet.pickle")
	p := FromSnapshot(snap, 0)
	res, err := Run(p, Options{Config: settingsConfig(snap.Settings), RecordedCap: true})
	if err != nil || res.Divergence != nil {
		t.Fatalf("the recording itself: %v, %+v", err, res.Divergence)
	}
	// the snapshot as a program that split its last free block in two
	moved := false
	for i := range snap.Segments {
		s := &snap.Segments[i]
		for k, b := range s.Blocks {
			if b.State == trace.BlockInactive && b.Size >= 2*512 && !moved {
				half := b.Size / 2 / 512 * 512
				s.Blocks = slices.Insert(s.Blocks, k+1, trace.Block{Address: b.Address + half, Size: b.Size - half, State: trace.BlockInactive, Stack: -1})
				s.Blocks[k].Size = half
				moved = true
			}
		}
	}
	if !moved {
		t.Fatal("no free block in the final snapshot")
	}
	res, err = Run(FromSnapshot(snap, 0), Options{Config: settingsConfig(snap.Settings), RecordedCap: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Divergence; d == nil || !strings.Contains(d.Cause, "placed elsewhere") {
		t.Errorf("divergence %+v, want the final blocks named", d)
	}
}

// A replay whose segments the driver model placed (recorded addresses
// hidden) names the keys another placement moves; one that follows its
// recorded addresses names none of them.
func TestPlacementDependentKeys(t *testing.T) {
	snap := readFixture(t, "oom_survive_resnet.pickle")
	p := FromSnapshot(snap, 0)
	o := Options{Config: settingsConfig(snap.Settings), RecordedCap: true}
	res, err := Run(p, o)
	if err != nil {
		t.Fatal(err)
	}
	for k, why := range res.Inexact {
		if strings.Contains(why, "CUDA driver") {
			t.Errorf("following the recording: %s named: %s", k, why)
		}
	}
	o.Device = alloc.SimModelled(0)
	if res, err = Run(p, o); err != nil {
		t.Fatal(err)
	}
	if why := res.Inexact["num_alloc_retries"]; !strings.Contains(why, "CUDA driver places segments") {
		t.Errorf("addresses hidden: num_alloc_retries %q, want it named (retries depend on which segments are whole free)", why)
	}
}
