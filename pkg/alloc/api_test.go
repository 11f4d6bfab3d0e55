package alloc

import (
	"errors"
	"slices"
	"testing"
)

// The Allocator's contract beyond PyTorch's rules: invalid and zero-size
// operations, the statistics' keys and peaks, the timeline, concurrent
// use, and the simulated device's address hints.

// TestInvalidOps: bad ids are *OpErrors wrapping ErrInvalidOp and leave
// the allocator as it was.
func TestInvalidOps(t *testing.T) {
	a := withConfig(t, "")
	mustAlloc(t, a, 1, 512, 0)
	bad := []Op{
		{Kind: OpAlloc, ID: 1, Size: 512}, // already live
		{Kind: OpFree, ID: 2},             // unknown
		{Kind: OpFree, ID: 1 << 30},       // far beyond any id seen
		{Kind: OpRecordStream, ID: 9, Stream: 1},
		{Kind: OpAlloc, ID: ^uint32(0), Size: 512}, // the reserved id
		{Kind: 0},
		{Kind: 99},
	}
	for _, op := range bad {
		res, err := a.Run([]Op{op}, 0, nil)
		if !errors.Is(err, ErrInvalidOp) || res.Done != 0 {
			t.Errorf("Run(%+v) = %+v, %v; want ErrInvalidOp", op, res, err)
		}
	}
	mustFree(t, a, 1)
	if err := a.Free(1); !errors.Is(err, ErrInvalidOp) {
		t.Errorf("double free: %v", err)
	}
	expectStats(t, a, map[string]int64{"allocation.all.allocated": 1, "allocation.all.freed": 1})
	if _, err := New(Options{Config: Config{Policy: "lru"}}); err == nil {
		t.Error("New with an unknown policy succeeded")
	}
}

// TestZeroSize: a zero-byte request gets no block and touches no
// statistic (§2); its id can be freed.
func TestZeroSize(t *testing.T) {
	a := withConfig(t, "")
	mustRun(t, a, Op{Kind: OpAlloc, ID: 1, Size: 0})
	expectStats(t, a, map[string]int64{"allocation.all.allocated": 0, "reserved_bytes.all.allocated": 0})
	mustRun(t, a, Op{Kind: OpFree, ID: 1}, Op{Kind: OpAlloc, ID: 1, Size: 0}, Op{Kind: OpFreeRequest, ID: 1}, Op{Kind: OpFreeComplete, ID: 1})
}

// TestZeroSizeRecordStream: PyTorch's recordStream returns at once for a
// null data pointer, so record_stream on a zero-byte allocation is no error.
func TestZeroSizeRecordStream(t *testing.T) {
	a := withConfig(t, "")
	mustRun(t, a, Op{Kind: OpAlloc, ID: 1, Size: 0})
	if err := a.RecordStream(1, 3); err != nil {
		t.Fatalf("record_stream on a zero-byte allocation: %v, want nil (PyTorch ignores a null pointer)", err)
	}
	mustFree(t, a, 1)
}

// TestStatsKeys: memory_stats has PyTorch's 122 keys, sorted.
func TestStatsKeys(t *testing.T) {
	a := withConfig(t, "")
	keys := a.Stats().Keys()
	if len(keys) != 122 {
		t.Fatalf("%d keys, want 122", len(keys))
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Fatalf("keys out of order: %q before %q", keys[i-1], keys[i])
		}
	}
	for _, k := range []string{"allocation.all.current", "inactive_split_bytes.small_pool.freed",
		"oversize_segments.peak", "num_device_free", "max_split_size", "requested_bytes.large_pool.allocated"} {
		if _, ok := a.Stats().Map()[k]; !ok {
			t.Errorf("no key %q", k)
		}
	}
}

// TestPeaks: peaks, ResetPeak, and the allocated/freed totals.
func TestPeaks(t *testing.T) {
	a := withConfig(t, "")
	mustAlloc(t, a, 1, 30*mib, 0)
	mustAlloc(t, a, 2, 30*mib, 0)
	mustFree(t, a, 1)
	expectStats(t, a, map[string]int64{
		"allocated_bytes.all.peak": 60 * mib, "allocated_bytes.all.current": 30 * mib,
		"allocated_bytes.all.allocated": 60 * mib, "allocated_bytes.all.freed": 30 * mib,
	})
	a.ResetPeak()
	expectStats(t, a, map[string]int64{"allocated_bytes.all.peak": 30 * mib, "reserved_bytes.all.peak": 60 * mib})
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	a.ResetPeak()
	expectStats(t, a, map[string]int64{"reserved_bytes.all.peak": 30 * mib, "allocated_bytes.all.allocated": 60 * mib})
	e := a.Extra()
	if e.Ops != 4 || e.LiveBytes != 30*mib || e.LiveBytesPeak != 60*mib || e.PeakOp != 1 || e.AllocatedAtPeak != 60*mib {
		t.Errorf("Extra() = %+v", e)
	}
}

// TestTimeline: the per-bucket maxima.
func TestTimeline(t *testing.T) {
	a := withConfig(t, "")
	ops := []Op{
		{Kind: OpAlloc, ID: 1, Size: 30 * mib},
		{Kind: OpFree, ID: 1},
		{Kind: OpAlloc, ID: 2, Size: 512},
		{Kind: OpEmptyCache},
	}
	tl := NewTimeline(len(ops), 2)
	if tl.Stride != 2 || len(tl.Allocated) != 2 {
		t.Fatalf("NewTimeline(4, 2) = %+v", tl)
	}
	if _, err := a.Run(ops, 0, tl); err != nil {
		t.Fatal(err)
	}
	if tl.Allocated[0] != 30*mib || tl.Reserved[0] != 30*mib || tl.Active[0] != 30*mib ||
		tl.Allocated[1] != 512 || tl.Reserved[1] != 30*mib+2*mib {
		t.Errorf("timeline %+v", tl)
	}
	if tl.AllocatedOp[0] != 0 || tl.AllocatedOp[1] != 2 || tl.PeakOp() != 0 {
		t.Errorf("ops of the allocated maxima %v, peak op %d: want [0 2], 0", tl.AllocatedOp, tl.PeakOp())
	}
}

// TestTimelinePeakOp: the first op after which allocated memory was
// highest, with the ops handed over in batches (base) and a bucket
// straddling two of them, and a later bucket only equal to the peak.
func TestTimelinePeakOp(t *testing.T) {
	a := withConfig(t, "")
	ops := []Op{
		{Kind: OpAlloc, ID: 1, Size: mib}, // 0
		{Kind: OpAlloc, ID: 2, Size: mib}, // 1
		{Kind: OpFree, ID: 1},             // 2
		{Kind: OpAlloc, ID: 3, Size: mib}, // 3: 2 MiB again, after the peak op 1
		{Kind: OpAlloc, ID: 4, Size: mib}, // 4: 3 MiB, the peak
		{Kind: OpFree, ID: 4},             // 5
		{Kind: OpAlloc, ID: 5, Size: mib}, // 6: 3 MiB, equal: not the first
		{Kind: OpFree, ID: 5},             // 7
	}
	tl := NewTimeline(len(ops), 3) // stride 3: buckets [0,3) [3,6) [6,8)
	for _, cut := range [][2]int{{0, 2}, {2, 5}, {5, 8}} {
		if _, err := a.Run(ops[cut[0]:cut[1]], cut[0], tl); err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{1, 4, 6}; !slices.Equal(tl.AllocatedOp, want) || tl.PeakOp() != 4 {
		t.Errorf("ops of the allocated maxima %v, peak op %d: want %v, 4", tl.AllocatedOp, tl.PeakOp(), want)
	}
	if empty := NewTimeline(3, 3); empty.PeakOp() != -1 {
		t.Errorf("peak op of an empty timeline %d, want -1", empty.PeakOp())
	}
}

// TestConcurrentUse: the Allocator serialises calls from many goroutines
// (run with -race).
func TestConcurrentUse(t *testing.T) {
	a := withConfig(t, "")
	const workers, rounds = 4, 200
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range rounds {
				id := uint32(w*1000 + i%10)
				if _, err := a.Alloc(id, uint64(1+i)*4096, uint64(w)); err != nil {
					errs <- err
					return
				}
				if i%10 == 9 {
					for k := range 10 {
						if err := a.Free(uint32(w*1000 + k)); err != nil {
							errs <- err
							return
						}
					}
					_ = a.Stats()
					_ = a.Snapshot()
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	expectStats(t, a, map[string]int64{"allocation.all.current": 0, "allocation.all.allocated": workers * rounds})
	mustSnapshot(t, a)
}

// TestSimHints: the simulated device honours address hints until the first
// allocation without a usable one, then places segments top down.
func TestSimHints(t *testing.T) {
	a := withConfig(t, "")
	addr := func(id uint32, hint uint64) uint64 {
		t.Helper()
		mustRun(t, a, Op{Kind: OpAlloc, ID: id, Size: 30 * mib, Hint: hint})
		for _, s := range a.Snapshot() {
			for _, b := range s.Blocks {
				if b.ID == id && b.State == BlockAllocated {
					return b.Address
				}
			}
		}
		t.Fatalf("id %d not in the snapshot", id)
		return 0
	}
	if got := addr(1, 0x7f0000000000); got != 0x7f0000000000 {
		t.Errorf("hinted segment at 0x%x, want 0x7f0000000000", got)
	}
	if got := addr(2, 0x7e0000000000); got != 0x7e0000000000 {
		t.Errorf("second hinted segment at 0x%x, want 0x7e0000000000", got)
	}
	third := addr(3, 0x7f0000000000) // taken: the replay has diverged
	if third == 0x7f0000000000 || third%(2*mib) != 0 {
		t.Errorf("segment with a taken hint at 0x%x", third)
	}
	if got := addr(4, 0x7d0000000000); got == 0x7d0000000000 {
		t.Errorf("hint honoured after divergence")
	}
	mustSnapshot(t, a)
}
