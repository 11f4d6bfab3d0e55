package alloc

import (
	"errors"
	"testing"
)

// Table tests of the rules in docs/pytorch-allocator.md that give memory
// back or run out of it (the memory-fraction cap, garbage collection,
// pending frees, empty_cache, out of memory, no caching), with the numbers
// measured on torch 2.11 in §16.

// fraction300 gives an allocator whose memory fraction allows exactly
// 300 MiB: 0.25 of a 1200 MiB card.
func fraction300(t *testing.T, conf string) *Allocator {
	t.Helper()
	const total = 1200 * mib
	a := newChecked(t, Options{Config: mustParse(t, conf), Device: Sim(total), DeviceTotal: total, MemoryFraction: 0.25})
	if a.Allowed() != 300*mib || a.DeviceTotal() != total {
		t.Fatalf("Allowed() = %d, DeviceTotal() = %d; want %d, %d", a.Allowed(), a.DeviceTotal(), 300*mib, total)
	}
	return a
}

// TestFraction is §16.2's fraction scenario: 3×60 MiB cached + 50 MiB
// live under a 300 MiB cap, then 150 MiB, then 100 MiB.
func TestFraction(t *testing.T) {
	tests := []struct {
		conf             string
		retries, syncs   int64
		reservedAfter100 int64
		splitAfter100    int64
	}{
		{"", 1, 1, 200 * mib, 50 * mib},
		{"max_split_size_mb:40", 0, 0, 300 * mib, 0},
	}
	for _, tt := range tests {
		t.Run(tt.conf, func(t *testing.T) {
			a := fraction300(t, tt.conf)
			mustRun(t, a,
				Op{Kind: OpAlloc, ID: 1, Size: 50 * mib},
				Op{Kind: OpAlloc, ID: 2, Size: 60 * mib},
				Op{Kind: OpAlloc, ID: 3, Size: 60 * mib},
				Op{Kind: OpAlloc, ID: 4, Size: 60 * mib},
				Op{Kind: OpFree, ID: 2}, Op{Kind: OpFree, ID: 3}, Op{Kind: OpFree, ID: 4},
			)
			expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 230 * mib})
			mustAlloc(t, a, 5, 150*mib, 0)
			expectStats(t, a, map[string]int64{
				"reserved_bytes.all.current": 200 * mib, "allocated_bytes.all.current": 200 * mib,
				"num_alloc_retries": tt.retries, "num_sync_all_streams": tt.syncs,
				"num_device_free": 3, "num_ooms": 0,
			})
			mustFree(t, a, 5)
			mustAlloc(t, a, 6, 100*mib, 0)
			expectStats(t, a, map[string]int64{
				"reserved_bytes.all.current":       tt.reservedAfter100,
				"inactive_split_bytes.all.current": tt.splitAfter100,
				"allocated_bytes.all.current":      150 * mib,
				"num_ooms":                         0,
			})
			// Nothing cached can be released for 300 MiB more: out of memory.
			_, err := a.Alloc(7, 300*mib, 0)
			if !isOOM(err) {
				t.Fatalf("300 MiB more under a 300 MiB cap: %v, want out of memory", err)
			}
			mustSnapshot(t, a)
		})
	}
}

// TestFractionEquality: total + alloc_size == allowed is allowed (§6.2).
func TestFractionEquality(t *testing.T) {
	a := fraction300(t, "")
	mustAlloc(t, a, 1, 300*mib, 0)
	if _, err := a.Alloc(2, 1, 0); !isOOM(err) {
		t.Fatalf("a 2 MiB segment over a full cap: %v, want out of memory", err)
	}
}

// TestGarbageCollection is §16.2's GC scenario.
func TestGarbageCollection(t *testing.T) {
	const total = 1144 * mib // 0.25 of it: 286 MiB allowed, threshold 143 MiB
	tests := []struct {
		conf     string
		freed    int64
		reserved int64
	}{
		{"garbage_collection_threshold:0.5", 4, 60 * mib},
		{"", 0, 220 * mib},
	}
	for _, tt := range tests {
		t.Run(tt.conf, func(t *testing.T) {
			a := newChecked(t, Options{Config: mustParse(t, tt.conf), Device: Sim(0), DeviceTotal: total, MemoryFraction: 0.25})
			if a.Allowed() != 286*mib {
				t.Fatalf("Allowed() = %d", a.Allowed())
			}
			var ops []Op
			for id := uint32(1); id <= 4; id++ {
				ops = append(ops, Op{Kind: OpAlloc, ID: id, Size: 40 * mib})
			}
			for id := uint32(1); id <= 4; id++ {
				ops = append(ops, Op{Kind: OpFree, ID: id})
			}
			mustRun(t, a, ops...)
			expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 160 * mib, "segment.all.current": 4})
			mustAlloc(t, a, 5, 60*mib, 0)
			expectStats(t, a, map[string]int64{
				"num_device_free": tt.freed, "reserved_bytes.all.current": tt.reserved,
				"num_alloc_retries": 0, "num_sync_all_streams": 0,
			})
		})
	}
}

// TestGarbageCollectionAge: GC frees the blocks at or above the average
// age and stops once that reaches its target, leaving younger ones (§10.2).
func TestGarbageCollectionAge(t *testing.T) {
	const total = 640 * mib // fraction 0.25: 160 MiB allowed; threshold 0.5: 80 MiB
	a := newChecked(t, Options{Config: mustParse(t, "garbage_collection_threshold:0.5"), DeviceTotal: total, MemoryFraction: 0.25})
	mustRun(t, a,
		Op{Kind: OpAlloc, ID: 1, Size: 40 * mib}, // large-pool clock 1
		Op{Kind: OpAlloc, ID: 2, Size: 40 * mib}, // 2
		Op{Kind: OpAlloc, ID: 3, Size: 10 * mib}, // 3; 80 MiB is not above the threshold
		Op{Kind: OpFree, ID: 1},                  // base 3
		Op{Kind: OpFree, ID: 3},
		Op{Kind: OpAlloc, ID: 3, Size: 10 * mib}, // 4: reuses its block
		Op{Kind: OpFree, ID: 3},                  // base 4
		Op{Kind: OpFree, ID: 2},                  // base 4
	)
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 90 * mib, "num_device_free": 0})
	// At the next lookup (clock 5) the ages are 2, 1, 1: average 4/3. Only
	// the first 40 MiB block is old enough, and it covers the 10 MiB over.
	mustAlloc(t, a, 4, 60*mib, 0)
	expectStats(t, a, map[string]int64{"num_device_free": 1, "reserved_bytes.all.current": 110 * mib})
	segs := mustSnapshot(t, a)
	if len(segs) != 3 {
		t.Errorf("%d segments left, want 3 (40, 10 and 60 MiB)", len(segs))
	}
}

// TestRecordStreamPending is §16.2's record_stream scenario and §7.3.
func TestRecordStreamPending(t *testing.T) {
	a := withConfig(t, "")
	p := mustAlloc(t, a, 1, 8*mib, 0)
	if err := a.RecordStream(1, 7); err != nil {
		t.Fatal(err)
	}
	mustFree(t, a, 1)
	expectStats(t, a, map[string]int64{
		"allocated_bytes.all.current": 0, "allocation.all.current": 0,
		"active_bytes.all.current": 8 * mib, "active.all.current": 1,
		"requested_bytes.all.current": 8 * mib,
	})
	segs := mustSnapshot(t, a)
	if len(segs) != 1 || segs[0].Blocks[0].State != BlockPendingFree || segs[0].Blocks[0].State.String() != "active_pending_free" {
		t.Fatalf("snapshot %+v, want a pending block first", segs)
	}
	// The pending block can be neither reused nor released.
	q := mustAlloc(t, a, 2, 8*mib, 0)
	if q == p {
		t.Fatalf("a same-size request got the pending block 0x%x", p)
	}
	mustRun(t, a, Op{Kind: OpFreeComplete, ID: 1})
	expectStats(t, a, map[string]int64{
		"active_bytes.all.current": 8 * mib, "allocated_bytes.all.current": 8 * mib,
		"inactive_split.all.current": 2, "inactive_split_bytes.all.current": 12 * mib,
	})
	// Its id is free again.
	mustAlloc(t, a, 1, 512, 0)

	// record_stream on the allocation stream itself is ignored.
	mustAlloc(t, a, 3, 3*mib, 0)
	if err := a.RecordStream(3, 0); err != nil {
		t.Fatal(err)
	}
	mustFree(t, a, 3)
	expectStats(t, a, map[string]int64{"active_bytes.large_pool.current": 8 * mib})
}

// TestFreeRequestComplete: OpFreeRequest frees at request time, the block
// stays active until OpFreeComplete, and empty_cache completes it.
func TestFreeRequestComplete(t *testing.T) {
	a := withConfig(t, "")
	mustRun(t, a, Op{Kind: OpAlloc, ID: 1, Size: 30 * mib}, Op{Kind: OpFreeRequest, ID: 1})
	expectStats(t, a, map[string]int64{"allocated_bytes.all.current": 0, "active_bytes.all.current": 30 * mib})
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	// The sync completed the free, so the segment was released.
	expectStats(t, a, map[string]int64{
		"active_bytes.all.current": 0, "reserved_bytes.all.current": 0,
		"num_sync_all_streams": 1, "num_device_free": 1,
	})
	// The late completion is accepted, and the id can be used again.
	mustRun(t, a, Op{Kind: OpFreeComplete, ID: 1}, Op{Kind: OpAlloc, ID: 1, Size: 512})

	// Completing a live allocation is an error.
	res, err := a.Run([]Op{{Kind: OpFreeComplete, ID: 1}}, 10, nil)
	var oe *OpError
	if !errors.As(err, &oe) || !errors.Is(err, ErrInvalidOp) || oe.Index != 10 || res.Done != 0 {
		t.Errorf("free_completed of a live id: %v (done %d)", err, res.Done)
	}
}

// TestEmptyCacheKeepsSplitSegment is §16.2's empty_cache scenario.
func TestEmptyCacheKeepsSplitSegment(t *testing.T) {
	a := withConfig(t, "")
	mustAlloc(t, a, 1, 5*mib, 0)
	mustAlloc(t, a, 2, 5*mib, 0)
	mustAlloc(t, a, 3, 30*mib, 0)
	mustFree(t, a, 1) // [free 5][live 5][free 10]
	mustFree(t, a, 3) // a whole free 30 MiB segment
	expectStats(t, a, map[string]int64{"inactive_split.all.current": 2, "reserved_bytes.all.current": 50 * mib})
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	expectStats(t, a, map[string]int64{
		"reserved_bytes.all.current": 20 * mib, "segment.all.current": 1,
		"inactive_split.all.current": 2, "inactive_split_bytes.all.current": 15 * mib,
		"allocated_bytes.all.current": 5 * mib,
		"num_sync_all_streams":        1, "num_device_free": 1,
	})
	// empty_cache counts a sync even when nothing is pending.
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	expectStats(t, a, map[string]int64{"num_sync_all_streams": 2, "num_device_free": 1})
}

// TestOOM: §6.5's counters and the OOM record.
func TestOOM(t *testing.T) {
	const capacity = 512 * mib
	a := newChecked(t, Options{Device: Sim(capacity)})
	mustAlloc(t, a, 1, 40*mib, 0)
	mustFree(t, a, 1) // cached, releasable
	mustAlloc(t, a, 2, 100*mib, 0)
	before := a.Stats()
	res, err := a.Run([]Op{
		{Kind: OpAlloc, ID: 3, Size: 512},
		{Kind: OpAlloc, ID: 4, Size: 500*mib + 3},
		{Kind: OpAlloc, ID: 5, Size: 512},
	}, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != 1 || res.OOM == nil {
		t.Fatalf("Run = %+v, want an OOM at the second op", res)
	}
	want := OOM{
		OpIndex: 101, Size: 500*mib + 3, Rounded: 500*mib + 512, AllocSize: 502 * mib,
		DeviceFree: capacity - 100*mib - 2*mib, DeviceTotal: capacity,
		Allocated: 100*mib + 512, Reserved: 100*mib + 2*mib,
	}
	if *res.OOM != want {
		t.Errorf("OOM = %+v\nwant  %+v", *res.OOM, want)
	}
	after := a.Stats()
	if after.NumOOMs != before.NumOOMs+1 || after.NumAllocRetries != before.NumAllocRetries+1 ||
		after.NumSyncAllStreams != before.NumSyncAllStreams+1 {
		t.Errorf("counters moved by ooms %d, retries %d, syncs %d; want 1 each",
			after.NumOOMs-before.NumOOMs, after.NumAllocRetries-before.NumAllocRetries,
			after.NumSyncAllStreams-before.NumSyncAllStreams)
	}
	if after.ReservedBytes[All].Current != 102*mib || after.NumDeviceFree != 1 {
		t.Errorf("reserved %d, device frees %d after the OOM; want the cached 40 MiB released",
			after.ReservedBytes[All].Current, after.NumDeviceFree)
	}
	// The allocator stays usable and the failed id is not live.
	mustAlloc(t, a, 4, 512, 0)
	if _, err := a.Alloc(6, 1<<40, 0); !isOOM(err) {
		t.Errorf("Alloc of 1 TiB on a 512 MiB device: %v", err)
	}
	mustSnapshot(t, a)
}

// TestOOMWithFraction: the OOM record carries the cap.
func TestOOMWithFraction(t *testing.T) {
	a := fraction300(t, "")
	res, err := a.Run([]Op{{Kind: OpAlloc, ID: 1, Size: 301 * mib}}, 0, nil)
	if err != nil || res.OOM == nil {
		t.Fatalf("Run = %+v, %v; want an OOM", res, err)
	}
	if res.OOM.Allowed != 300*mib || res.OOM.AllocSize != 302*mib || res.OOM.DeviceTotal != 1200*mib {
		t.Errorf("OOM = %+v", *res.OOM)
	}
	expectStats(t, a, map[string]int64{"num_ooms": 1, "num_alloc_retries": 1, "num_sync_all_streams": 1})
}

// TestHugeRequest: requests of 1 EiB or more fail without touching any
// statistic but the OOM record (§2).
func TestHugeRequest(t *testing.T) {
	a := withConfig(t, "")
	_, err := a.Alloc(1, 1<<60, 0)
	if !isOOM(err) {
		t.Fatalf("Alloc(1 EiB) = %v, want out of memory", err)
	}
	expectStats(t, a, map[string]int64{"num_device_alloc": 0, "reserved_bytes.all.allocated": 0})
	mustAlloc(t, a, 1, 512, 0)
}

// TestExpandableFractionGC is §16.2's expandable + fraction + GC scenario.
func TestExpandableFractionGC(t *testing.T) {
	const total = 1144 * mib // 286 MiB allowed
	a := newChecked(t, Options{Config: mustParse(t, "expandable_segments:True,garbage_collection_threshold:0.5"),
		DeviceTotal: total, MemoryFraction: 0.25})
	for id := uint32(1); id <= 4; id++ {
		mustAlloc(t, a, id, 40*mib, 0)
	}
	segs := mustSnapshot(t, a)
	if len(segs) != 1 || segs[0].TotalSize != 160*mib || len(segs[0].Blocks) != 4 {
		t.Fatalf("snapshot %+v, want one 160 MiB mapped range of four blocks", segs)
	}
	for id := uint32(1); id <= 4; id++ {
		mustFree(t, a, id)
	}
	mustAlloc(t, a, 5, 60*mib, 0)
	segs = mustSnapshot(t, a)
	if len(segs) != 1 || len(segs[0].Blocks) != 2 || segs[0].Blocks[0].Size != 60*mib {
		t.Fatalf("snapshot %+v, want the 160 MiB range split 60 + 100", segs)
	}
	res, err := a.Run([]Op{{Kind: OpAlloc, ID: 6, Size: 300 * mib}}, 0, nil)
	if err != nil || res.OOM == nil {
		t.Fatalf("300 MiB: %+v, %v; want an OOM", res, err)
	}
	expectStats(t, a, map[string]int64{
		"reserved_bytes.all.current": 60 * mib, "num_device_free": 1, "num_device_alloc": 4,
		"segment.all.allocated": 0, "num_ooms": 1,
	})
	if res.OOM.Reserved != 60*mib || res.OOM.Allocated != 60*mib {
		t.Errorf("OOM = %+v", *res.OOM)
	}
}

// TestNoCache: every request is its own device allocation, freed at once.
func TestNoCache(t *testing.T) {
	a := newChecked(t, Options{Config: Config{Policy: PolicyNoCache}})
	mustAlloc(t, a, 1, 1000, 0)
	mustAlloc(t, a, 2, 25*mib, 0)
	expectStats(t, a, map[string]int64{
		"reserved_bytes.all.current": 1024 + 25*mib, "allocated_bytes.all.current": 1024 + 25*mib,
		"segment.all.current": 2, "inactive_split.all.current": 0,
	})
	mustFree(t, a, 2)
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 1024, "num_device_free": 1})
	mustRun(t, a, Op{Kind: OpRecordStream, ID: 1, Stream: 3}, Op{Kind: OpFree, ID: 1})
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 1024, "active_bytes.all.current": 1024})
	mustRun(t, a, Op{Kind: OpFreeComplete, ID: 1})
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 0, "active_bytes.all.current": 0})
	mustSnapshot(t, a)
}

// TestSplitOversizeNotReleased: under max_split_size PyTorch never splits an
// oversize block, so its release steps free oversize blocks as whole
// segments. A what-if replay can still hold a split one — a segment seeded
// from a truncated trace, or one a checkpoint restore claimed, as recorded
// under a larger max_split_size. Running out of memory must then pass over
// it, not give the segment back under its live block.
func TestSplitOversizeNotReleased(t *testing.T) {
	const card = 176 * mib
	for _, route := range []string{"seeded", "claimed"} {
		t.Run(route, func(t *testing.T) {
			a := newChecked(t, Options{Config: mustParse(t, "max_split_size_mb:88"), Device: Sim(card), DeviceTotal: card})
			const base = 0x7f0000000000
			switch route {
			case "seeded":
				if err := a.Seed(base, 110*mib, 0, false, []SeedBlock{{Offset: 0, Size: mib, Requested: mib, ID: 1}}); err != nil {
					t.Fatal(err)
				}
			case "claimed":
				mustRun(t, a, Op{Kind: OpAlloc, Pool: 1, ID: 9, Size: 110 * mib, Hint: base})
				mustRun(t, a, Op{Kind: OpFree, ID: 9})
				addr := mustSnapshot(t, a)[0].Address
				mustRun(t, a, Op{Kind: OpAlloc, Flags: FlagClaim, Pool: 1, ID: 1, Size: mib, Hint: addr})
				if segs := mustSnapshot(t, a); len(segs) != 1 || len(segs[0].Blocks) != 2 {
					t.Fatalf("the claim did not split the oversize block: %+v", segs)
				}
			}
			// 110 MiB are reserved; 80 MiB more (in the same pool) do not
			// fit on the card, and the only free oversize block is the
			// split one.
			pool := uint32(0)
			if route == "claimed" {
				pool = 1
			}
			res, err := a.Run([]Op{{Kind: OpAlloc, Pool: pool, ID: 2, Size: 80 * mib}}, 0, nil)
			if err != nil || res.OOM == nil {
				t.Fatalf("80 MiB more: %+v, %v; want out of memory", res, err)
			}
			if got := a.Stats().AllocatedBytes[All].Current; got != mib {
				t.Errorf("allocated %d after the OOM, want the live block's %d", got, mib)
			}
			if segs := mustSnapshot(t, a); len(segs) != 1 || segs[0].TotalSize != 110*mib {
				t.Errorf("segments after the OOM: %+v, want the one 110 MiB segment", segs)
			}
		})
	}
}

// TestHugeRequestExpandable: with expandable segments, a request larger
// than a whole segment's address range (more than any card holds; a
// hostile trace asked for 1 PB) is out of memory with nothing mapped,
// on a card of any size and on an unlimited device, whose 1 TiB mapping
// would succeed.
func TestHugeRequestExpandable(t *testing.T) {
	for _, dev := range []Device{Sim(0), Sim(1 << 30)} {
		a := newChecked(t, Options{Config: mustParse(t, "expandable_segments:True"), Device: dev})
		res, err := a.Run([]Op{{Kind: OpAlloc, ID: 0, Size: 1101099999990000}}, 0, nil)
		if err != nil || res.OOM == nil {
			t.Fatalf("1 PB: %+v, %v; want out of memory", res, err)
		}
		if st := a.Stats(); st.ReservedBytes[All].Current != 0 {
			t.Errorf("%d bytes reserved after the OOM", st.ReservedBytes[All].Current)
		}
		mustAlloc(t, a, 1, 20*mib, 0) // and it goes on
	}
}
