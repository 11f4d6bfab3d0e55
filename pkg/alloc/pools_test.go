package alloc

import (
	"errors"
	"testing"
)

// Private pools (gm_pools.c; docs/pytorch-allocator.md §19),
// each rule under the invariant checker.

func allocIn(id uint32, size uint64, pool uint32) Op {
	return Op{Kind: OpAlloc, ID: id, Size: size, Pool: pool}
}

func segmentsOf(a *Allocator) map[uint64]Segment {
	out := map[uint64]Segment{}
	for _, s := range a.Snapshot() {
		out[s.Address] = s
	}
	return out
}

func addrOf(t *testing.T, a *Allocator, id uint32) uint64 {
	t.Helper()
	for _, s := range a.Snapshot() {
		for _, b := range s.Blocks {
			if b.ID == id && b.State != BlockInactive {
				return b.Address
			}
		}
	}
	t.Fatalf("allocation %d is not live", id)
	return 0
}

func poolOf(t *testing.T, a *Allocator, id uint32) uint32 {
	t.Helper()
	at := addrOf(t, a, id)
	for _, s := range a.Snapshot() {
		if at >= s.Address && at < s.Address+s.TotalSize {
			return s.Pool
		}
	}
	return 0
}

// Routing: an allocation goes to the pool its op names; the pool is created
// by its first allocation, with a use count of 1, and owns its segments.
func TestPoolRouting(t *testing.T) {
	a := newChecked(t, Options{})
	mustRun(t, a, allocIn(1, 4*mib, 0), allocIn(2, 4*mib, 1), allocIn(3, 1000, 1), allocIn(4, 1000, 2))
	for id, want := range map[uint32]uint32{1: 0, 2: 1, 3: 1, 4: 2} {
		if got := poolOf(t, a, id); got != want {
			t.Errorf("allocation %d in pool %d, want %d", id, got, want)
		}
	}
	if p := a.Pool(1); !p.Exists || p.UseCount != 1 || p.Segments != 2 {
		t.Errorf("pool 1 %+v, want use count 1 and 2 segments (one large, one small)", p)
	}
	if p := a.Pool(3); p.Exists {
		t.Errorf("pool 3 exists before any allocation: %+v", p)
	}
	// private blocks count in the statistics by size class, as PyTorch's do
	expectStats(t, a, map[string]int64{
		"segment.large_pool.current":  2,
		"segment.small_pool.current":  2,
		"allocation.all.current":      4,
		"reserved_bytes.all.current":  2*20*mib + 2*2*mib,
		"allocated_bytes.all.current": 8*mib + 2*1024,
	})
}

// Isolation: a request never takes a free block of another pool, even an
// exact fit (mempool_single #33 and #42).
func TestPoolIsolation(t *testing.T) {
	a := newChecked(t, Options{})
	mustRun(t, a, allocIn(1, 6*mib, 1), allocIn(2, 3*mib, 0), allocIn(3, 20*mib, 0))
	pooled, def := addrOf(t, a, 1), addrOf(t, a, 2)
	mustRun(t, a, Op{Kind: OpFree, ID: 1}, Op{Kind: OpFree, ID: 2})
	// the default request makes a new segment although the pool's 6 MiB is free
	mustRun(t, a, allocIn(4, 6*mib, 0))
	if got := addrOf(t, a, 4); got == pooled || poolOf(t, a, 4) != 0 {
		t.Errorf("default 6 MiB request at %#x, pool 0 block was %#x: it took the private block", got, pooled)
	}
	// the pool's request splits its own 6 MiB block, not the default exact 3 MiB one
	mustRun(t, a, allocIn(5, 3*mib, 1))
	if got := addrOf(t, a, 5); got != pooled {
		t.Errorf("pool 3 MiB request at %#x, want the pool's own block %#x (default free block at %#x)", got, pooled, def)
	}
	expectStats(t, a, map[string]int64{"segment.all.current": 3, "num_device_alloc": 3})
}

// empty_cache leaves a live pool's whole free segments, and releases those
// of a released pool after the default ones.
func TestPoolEmptyCacheKeepsLivePool(t *testing.T) {
	a := newChecked(t, Options{})
	mustRun(t, a, allocIn(1, 30*mib, 1), allocIn(2, 50*mib, 0), allocIn(3, 1000, 1),
		Op{Kind: OpFree, ID: 1}, Op{Kind: OpFree, ID: 2}, Op{Kind: OpFree, ID: 3},
		Op{Kind: OpEmptyCache})
	if p := a.Pool(1); p.Segments != 2 {
		t.Fatalf("after empty_cache the live pool has %d segments, want its 2", p.Segments)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 30*mib + 2*mib, "num_sync_all_streams": 1})
	// a released pool takes no new allocation
	mustRun(t, a, Op{Kind: OpPoolRelease, Pool: 1})
	if _, err := a.Run([]Op{allocIn(4, 1000, 1)}, 0, nil); !errors.Is(err, ErrInvalidOp) {
		t.Errorf("allocating in a released pool: %v, want ErrInvalidOp", err)
	}
	if _, err := a.Run([]Op{{Kind: OpPoolRelease, Pool: 1}}, 0, nil); !errors.Is(err, ErrInvalidOp) {
		t.Errorf("releasing a released pool: %v, want ErrInvalidOp", err)
	}
	mustRun(t, a, Op{Kind: OpEmptyCache})
	if p := a.Pool(1); p.Exists {
		t.Errorf("pool 1 still exists after its last segment went: %+v", p)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 0, "num_device_free": 3, "num_sync_all_streams": 2})
}

// A released pool that still holds live blocks keeps their segments; its
// blocks return to it when freed, and a later release frees the segments.
func TestPoolReleasedWithLiveBlocks(t *testing.T) {
	a := newChecked(t, Options{})
	mustRun(t, a, allocIn(1, 32*mib, 1), allocIn(2, 64*mib, 1), Op{Kind: OpFree, ID: 2},
		Op{Kind: OpPoolRelease, Pool: 1}, Op{Kind: OpEmptyCache})
	if p := a.Pool(1); !p.Exists || p.UseCount != 0 || p.Segments != 1 {
		t.Fatalf("released pool with a live block: %+v, want it kept with 1 segment", p)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 32 * mib, "num_device_free": 1})
	mustRun(t, a, Op{Kind: OpFree, ID: 1})
	if p := a.Pool(1); p.Segments != 1 {
		t.Errorf("freeing the block released its segment at once: %+v", p)
	}
	mustRun(t, a, Op{Kind: OpEmptyCache})
	if p := a.Pool(1); p.Exists {
		t.Errorf("pool still there after its last segment: %+v", p)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 0, "num_device_free": 2})
}

// ~MemPool: emptyCache(id) syncs and frees only that released pool's whole
// free segments, not the default pool's (probe E2 of the addendum); on a
// live pool it does nothing, not even the sync.
func TestPoolEmpty(t *testing.T) {
	a := newChecked(t, Options{})
	mustRun(t, a, allocIn(1, 30*mib, 1), allocIn(2, 50*mib, 0), allocIn(3, 20*mib, 1),
		Op{Kind: OpFree, ID: 1}, Op{Kind: OpFree, ID: 2},
		Op{Kind: OpPoolEmpty, Pool: 1})
	expectStats(t, a, map[string]int64{"num_sync_all_streams": 0, "num_device_free": 0})
	mustRun(t, a, Op{Kind: OpPoolRelease, Pool: 1}, Op{Kind: OpPoolEmpty, Pool: 1})
	expectStats(t, a, map[string]int64{"num_sync_all_streams": 1, "num_device_free": 1,
		"reserved_bytes.all.current": 50*mib + 20*mib})
	segs := segmentsOf(a)
	if len(segs) != 2 {
		t.Errorf("%d segments left, want the default 50 MiB one and the pool's live one", len(segs))
	}
}

// Segments of a pool serve only their stream, as default ones do.
func TestPoolStreams(t *testing.T) {
	a := newChecked(t, Options{})
	mustRun(t, a, Op{Kind: OpAlloc, ID: 1, Size: 8 * mib, Stream: 7, Pool: 1}, Op{Kind: OpFree, ID: 1},
		Op{Kind: OpAlloc, ID: 2, Size: 8 * mib, Stream: 0, Pool: 1})
	expectStats(t, a, map[string]int64{"segment.all.current": 2})
}

// A claim takes the free block at its hint by address, whatever its size
// class: a CUDA graph tree's checkpoint restore puts a 2 MiB block back into
// a small segment (compile_reduce_overhead #670).
func TestPoolClaim(t *testing.T) {
	a := newChecked(t, Options{})
	mustRun(t, a, allocIn(1, 1000, 1), allocIn(2, 12*mib, 1))
	small := addrOf(t, a, 1)
	mustRun(t, a, Op{Kind: OpFree, ID: 1}, Op{Kind: OpFree, ID: 2},
		Op{Kind: OpAlloc, ID: 3, Size: 2 * mib, Pool: 1, Flags: FlagClaim, Hint: small})
	if got := addrOf(t, a, 3); got != small {
		t.Fatalf("claim at %#x, want %#x", got, small)
	}
	expectStats(t, a, map[string]int64{"allocated_bytes.small_pool.current": 2 * mib, "segment.all.current": 2})
	// no free block at the hint: an ordinary allocation
	mustRun(t, a, Op{Kind: OpAlloc, ID: 4, Size: 4 * mib, Pool: 1, Flags: FlagClaim, Hint: small})
	if got := addrOf(t, a, 4); got == small {
		t.Errorf("claim of a busy block succeeded")
	}
	expectStats(t, a, map[string]int64{"allocated_bytes.large_pool.current": 4 * mib, "segment.all.current": 2})
	// a claim splits its block to exactly its size, even where best fit
	// would leave a remainder of 1 MiB or less in the block
	large := addrOf(t, a, 4) + 4*mib
	mustRun(t, a, Op{Kind: OpAlloc, ID: 5, Size: 7*mib + 512*1024, Pool: 1, Flags: FlagClaim, Hint: large})
	if got := addrOf(t, a, 5); got != large {
		t.Fatalf("claim at %#x, want %#x", got, large)
	}
	expectStats(t, a, map[string]int64{"allocated_bytes.large_pool.current": 11*mib + 512*1024,
		"inactive_split_bytes.large_pool.current": 512 * 1024})
}

// An out-of-memory the recording had is counted as PyTorch counts it (one
// OOM, one retry, one sync), holds nothing, and the run goes on; one it did
// not have stops the run.
func TestRecordedOOMSurvives(t *testing.T) {
	a := newChecked(t, Options{Device: Sim(100 * mib)})
	res, err := a.Run([]Op{
		allocIn(1, 60*mib, 0),
		{Kind: OpAlloc, ID: 2, Size: 60 * mib, Flags: FlagRecordedOOM},
		{Kind: OpFree, ID: 2},
		allocIn(3, 30*mib, 0),
		allocIn(4, 60*mib, 0),
		allocIn(5, 1*mib, 0),
	}, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Survived) != 1 || res.Survived[0].OpIndex != 11 || !res.Survived[0].Recorded || res.Survived[0].Size != 60*mib {
		t.Fatalf("survived %+v, want one recorded OOM at op 11", res.Survived)
	}
	if res.OOM == nil || res.OOM.OpIndex != 14 || res.OOM.Recorded || res.Done != 4 {
		t.Fatalf("stopping OOM %+v after %d ops, want op 14", res.OOM, res.Done)
	}
	expectStats(t, a, map[string]int64{"num_ooms": 2, "num_alloc_retries": 2, "num_sync_all_streams": 2,
		"allocated_bytes.all.current": 90 * mib})
}

// An out-of-memory reports the free cached bytes of private pools, which
// the retry cannot release while the pool lives and PyTorch's message
// counts as "allocated in private pools".
func TestPoolOOMPrivateBytes(t *testing.T) {
	a := newChecked(t, Options{Device: Sim(100 * mib)})
	mustRun(t, a, allocIn(1, 30*mib, 1), Op{Kind: OpFree, ID: 1})
	res, err := a.Run([]Op{allocIn(2, 80*mib, 0)}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OOM == nil || res.OOM.PrivatePools != 30*mib {
		t.Fatalf("oom %+v, want 30 MiB free in private pools", res.OOM)
	}
}

// Pool ids past 16 bits: 2^16+3 MemPool lifetimes, each a pool of its own
// made, used, released and emptied; the last stays alive. Its id is not
// taken for another's (65,539 mod 2^16 = 3), and the checker holds.
func TestPoolIDsPast16Bits(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const n = 1<<16 + 3
	ops := make([]Op, 0, 4*n)
	for k := uint32(1); k <= n; k++ {
		ops = append(ops, allocIn(1, 4*mib, k))
		if k < n {
			ops = append(ops, Op{Kind: OpFree, ID: 1}, Op{Kind: OpPoolRelease, Pool: k}, Op{Kind: OpPoolEmpty, Pool: k})
		}
	}
	mustRun(t, a, ops...)
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	if got := poolOf(t, a, 1); got != n {
		t.Errorf("the last allocation is in pool %d, want %d", got, n)
	}
	if p := a.Pool(n); !p.Exists || p.UseCount != 1 || p.Segments != 1 {
		t.Errorf("pool %d %+v, want alive with one segment", n, p)
	}
	if p := a.Pool(n % (1 << 16)); p.Exists {
		t.Errorf("pool %d %+v, want erased", n%(1<<16), p)
	}
	st := a.Stats()
	if st.NumDeviceAlloc != n || st.NumDeviceFree != n-1 || st.ReservedBytes[All].Current != 20*mib {
		t.Errorf("device allocations %d, frees %d, reserved %d; want %d, %d, %d",
			st.NumDeviceAlloc, st.NumDeviceFree, st.ReservedBytes[All].Current, n, n-1, 20*mib)
	}
}
