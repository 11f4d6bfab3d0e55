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

func evs(s ...trace.Event) []trace.Event { return s }

func onStream(e trace.Event, stream uint64) trace.Event {
	e.Stream = stream
	return e
}

func kinds(p *Plan) string {
	var k []string
	for _, op := range p.Ops {
		k = append(k, op.Kind.String())
	}
	return strings.Join(k, " ")
}

// A release run followed by a new segment is an OOM retry only if the
// first attempt must have failed: reserved bytes before the run plus the
// new segment pass the trace's peak. Otherwise it is an empty_cache call,
// as at the start of a CUDA graph capture, whose first allocation follows
// at once (graph_convnet #509–519).
func TestEmptyCacheVersusRetry(t *testing.T) {
	events := evs(
		ev(trace.ActionSegmentAlloc, 0x10000000, 20*mib),
		ev(trace.ActionAlloc, 0x10000000, 12*mib),
		ev(trace.ActionFreeRequested, 0x10000000, 12*mib),
		ev(trace.ActionFreeCompleted, 0x10000000, 12*mib),
		// empty_cache at capture start: 20 MiB − 20 MiB + 2 MiB stays under the peak
		ev(trace.ActionSegmentFree, 0x10000000, 20*mib),
		onStream(ev(trace.ActionSegmentAlloc, 0x20000000, 2*mib), 5),
		onStream(ev(trace.ActionAlloc, 0x20000000, 8), 5),
		ev(trace.ActionSegmentAlloc, 0x30000000, 100*mib),
		ev(trace.ActionAlloc, 0x30000000, 100*mib),
		ev(trace.ActionSegmentAlloc, 0x40000000, 20*mib), // the peak: 122 MiB
		ev(trace.ActionAlloc, 0x40000000, 12*mib),
		ev(trace.ActionFreeRequested, 0x30000000, 100*mib),
		ev(trace.ActionFreeCompleted, 0x30000000, 100*mib),
		// retry: 122 MiB reserved + 120 MiB would pass the peak the cap allowed
		ev(trace.ActionSegmentFree, 0x30000000, 100*mib),
		ev(trace.ActionSegmentAlloc, 0x30000000, 120*mib),
		ev(trace.ActionAlloc, 0x30000000, 120*mib),
	)
	p := Build(events)
	if got, want := kinds(p), "alloc free empty_cache alloc alloc alloc free alloc"; got != want {
		t.Fatalf("ops %q, want %q", got, want)
	}
	// replayed under a cap between the peak and what the retry needed
	res, err := Run(p, Options{Check: true, Device: alloc.Sim(1 << 30), DeviceTotal: 1 << 30,
		MemoryFraction: float64(150*mib) / float64(1<<30)})
	if err != nil {
		t.Fatal(err)
	}
	if res.OOM != nil || res.Stats.NumAllocRetries != 1 || res.Stats.NumSyncAllStreams != 2 ||
		res.Stats.NumDeviceFree != 2 {
		t.Errorf("oom %+v, retries %d, syncs %d, device frees %d: want no OOM, 1 retry, 2 syncs (empty_cache, retry), 2 frees",
			res.OOM, res.Stats.NumAllocRetries, res.Stats.NumSyncAllStreams, res.Stats.NumDeviceFree)
	}
}

// A program that caught an out-of-memory and went on: the replay counts it
// as PyTorch did (one OOM and one retry each) and replays what followed. An
// out-of-memory the recording did not have still ends the replay.
func TestRecordedOOMGoesOn(t *testing.T) {
	events := evs(
		ev(trace.ActionSegmentAlloc, 0x10000000, 60*mib),
		ev(trace.ActionAlloc, 0x10000000, 60*mib), // 0
		trace.Event{Action: trace.ActionOOM, Addr: 1 << 30, Size: 60 * mib, Stack: -1},
		trace.Event{Action: trace.ActionOOM, Addr: 1 << 30, Size: 50 * mib, Stack: -1},
		ev(trace.ActionFreeRequested, 0x10000000, 60*mib),
		ev(trace.ActionFreeCompleted, 0x10000000, 60*mib), // 1
		ev(trace.ActionAlloc, 0x10000000, 30*mib),         // 2
		ev(trace.ActionSegmentAlloc, 0x20000000, 40*mib),
		ev(trace.ActionAlloc, 0x20000000, 40*mib), // 3
	)
	p := Build(events)
	res, err := Run(p, Options{Check: true, Device: alloc.Sim(100 * mib)})
	if err != nil {
		t.Fatal(err)
	}
	if res.OOM != nil || res.Done != len(p.Ops) || len(res.OOMs) != 2 {
		t.Fatalf("oom %+v, %d of %d ops, ooms %d: want both recorded OOMs gone past", res.OOM, res.Done, len(p.Ops), len(res.OOMs))
	}
	for i, o := range res.OOMs {
		if !o.Recorded || o.OpIndex != 1 {
			t.Errorf("oom %d: %+v, want recorded, at event 1", i, o)
		}
	}
	st := res.Stats
	if st.NumOOMs != 2 || st.NumAllocRetries != 2 || st.AllocatedBytes[alloc.All].Current != 70*mib ||
		st.ReservedBytes[alloc.All].Peak != 100*mib {
		t.Errorf("ooms %d retries %d allocated %d reserved peak %d", st.NumOOMs, st.NumAllocRetries,
			st.AllocatedBytes[alloc.All].Current, st.ReservedBytes[alloc.All].Peak)
	}
	// on a 70 MiB card the last allocation, which the recording made, fails
	res, err = Run(p, Options{Check: true, Device: alloc.Sim(70 * mib)})
	if err != nil {
		t.Fatal(err)
	}
	if res.OOM == nil || res.OOM.Recorded || res.OOM.OpIndex != 3 || len(res.OOMs) != 3 || res.OOMs[2] != res.OOM {
		t.Fatalf("oom %+v, ooms %d: want the replay stopped at event 3 after two recorded OOMs", res.OOM, len(res.OOMs))
	}
}

// Pools from a trace: a request that made a new segment while another
// segment of its stream had a free block that fits was routed to another
// pool (exclusion); the final snapshot names the default one; the private
// pool is released before the run that frees its segment.
func TestPoolInference(t *testing.T) {
	const d, p = 0x10000000, 0x20000000
	events := evs(
		ev(trace.ActionSegmentAlloc, d, 20*mib),
		ev(trace.ActionAlloc, d, 3*mib),
		ev(trace.ActionFreeRequested, d, 3*mib),
		ev(trace.ActionFreeCompleted, d, 3*mib),
		ev(trace.ActionSegmentAlloc, p, 20*mib), // a MemPool window: the free 20 MiB is not its
		ev(trace.ActionAlloc, p, 3*mib),
		ev(trace.ActionAlloc, d, 3*mib), // back outside: best fit would take the pool's 17 MiB
		ev(trace.ActionFreeRequested, p, 3*mib),
		ev(trace.ActionFreeCompleted, p, 3*mib),
		ev(trace.ActionSegmentFree, p, 20*mib), // the MemPool deleted, then empty_cache
	)
	snap := &trace.Snapshot{Traces: [][]trace.Event{events}, Segments: []trace.Segment{{
		Address: d, TotalSize: 20 * mib, AllocatedSize: 3 * mib, Stack: -1,
		Blocks: []trace.Block{{Address: d, Size: 3 * mib, RequestedSize: 3 * mib, State: trace.BlockAllocated},
			{Address: d + 3*mib, Size: 17 * mib, State: trace.BlockInactive}},
	}}}
	plan := FromSnapshot(snap, 0)
	if plan.Truncated {
		t.Fatal("plan seeded: the trace holds every segment")
	}
	if got, want := kinds(plan), "alloc free alloc alloc free pool_release empty_cache"; got != want {
		t.Fatalf("ops %q, want %q", got, want)
	}
	var pools []uint32
	for _, op := range plan.Ops {
		if op.Kind == alloc.OpAlloc {
			pools = append(pools, op.Pool)
		}
	}
	if !slices.Equal(pools, []uint32{0, 1, 0}) {
		t.Errorf("allocations routed to pools %v, want [0 1 0]", pools)
	}
	if len(plan.Pools) != 1 || plan.Pools[0].Segments != 1 || plan.Pools[0].Released != 5 ||
		!slices.Contains(plan.Pools[0].How, howExclusion) {
		t.Errorf("pools %+v, want one of 1 segment, released before event 5, found by exclusion", plan.Pools)
	}
	res, err := Run(plan, Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Stats
	if st.ReservedBytes[alloc.All].Peak != 40*mib || st.ReservedBytes[alloc.All].Current != 20*mib || st.NumDeviceFree != 1 {
		t.Errorf("reserved peak %d current %d, device frees %d: want 40 MiB, 20 MiB, 1",
			st.ReservedBytes[alloc.All].Peak, st.ReservedBytes[alloc.All].Current, st.NumDeviceFree)
	}
	// with no evidence of a private pool every allocation stays in the default pool
	for _, op := range Build(events[:4]).Ops {
		if op.Pool != 0 {
			t.Errorf("op %+v routed to a private pool without evidence", op)
		}
	}
}

// Without the final snapshot's pool ids (a program that freed everything,
// or one dumped without segments), the pool fixtures still replay to every
// key PyTorch reported: release order, exclusion, checkpoint restores and
// continuity find the same pools.
func TestPoolsWithoutSnapshotLabels(t *testing.T) {
	for _, name := range []string{"graph_convnet", "compile_reduce_overhead", "mempool_single"} {
		tr := loadTruth(t, name)
		snap, err := trace.Open(filepath.Join(fixtures, tr.Replay))
		if err != nil {
			t.Fatal(err)
		}
		snap.Segments = nil
		p := FromSnapshot(snap, 0)
		if len(p.Pools) != 1 || slices.Contains(p.Pools[0].How, howSnapshot) {
			t.Errorf("%s: pools %v, want one found without the snapshot", name, p.Pools)
		}
		res, err := Run(p, Options{Check: !testing.Short()})
		if err != nil {
			t.Fatal(err)
		}
		got := res.Stats.Map()
		for k, want := range tr.MemoryStats {
			if got[k] != want && k != "num_sync_all_streams" { // a lower bound, see TestFixturesMatchPyTorch
				t.Errorf("%s: %s = %d, PyTorch reported %d", name, k, got[k], want)
			}
		}
	}
}

// A graph tree's checkpoint restore claims blocks by address and splits each
// off exactly: a claim that leaves 512 KiB in a large block (best fit would
// not split) is seen from the claim that follows inside it.
func TestCheckpointRestoreClaims(t *testing.T) {
	const p, s = 0x30000000, 7
	events := evs(
		onStream(ev(trace.ActionSegmentAlloc, p, 20*mib), s),
		onStream(ev(trace.ActionAlloc, p, 20*mib), s),
		onStream(ev(trace.ActionFreeRequested, p, 20*mib), s),
		onStream(ev(trace.ActionFreeCompleted, p, 20*mib), s),
		onStream(ev(trace.ActionAlloc, p, 19*mib+512*1024), s), // restore: two blocks
		onStream(ev(trace.ActionAlloc, p+19*mib+512*1024, 512*1024), s),
		onStream(ev(trace.ActionFreeRequested, p+19*mib+512*1024, 512*1024), s),
		onStream(ev(trace.ActionFreeCompleted, p+19*mib+512*1024, 512*1024), s),
	)
	snap := &trace.Snapshot{Traces: [][]trace.Event{events}, Segments: []trace.Segment{{
		Address: p, TotalSize: 20 * mib, AllocatedSize: 19*mib + 512*1024, Stream: s, PoolID: [2]int64{0, 1}, Stack: -1,
		Blocks: []trace.Block{{Address: p, Size: 19*mib + 512*1024, RequestedSize: 19*mib + 512*1024, State: trace.BlockAllocated},
			{Address: p + 19*mib + 512*1024, Size: 512 * 1024, State: trace.BlockInactive}},
	}}}
	plan := FromSnapshot(snap, 0)
	var claims []bool
	for _, op := range plan.Ops {
		if op.Kind == alloc.OpAlloc {
			claims = append(claims, op.Flags&alloc.FlagClaim != 0)
		}
	}
	if !slices.Equal(claims, []bool{false, true, true}) {
		t.Fatalf("claims %v, want the two restored blocks claimed", claims)
	}
	res, err := Run(plan, Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Stats
	if st.Segment[alloc.All].Peak != 1 || st.AllocatedBytes[alloc.All].Current != 19*mib+512*1024 ||
		st.InactiveSplitBytes[alloc.All].Current != 512*1024 {
		t.Errorf("segments %d, allocated %d, inactive split %d: want the restore inside the one segment",
			st.Segment[alloc.All].Peak, st.AllocatedBytes[alloc.All].Current, st.InactiveSplitBytes[alloc.All].Current)
	}
}

// Deleting a MemPool empties that pool alone (~MemPool's emptyCache(id)):
// a run that frees only its segments while a default segment stays whole
// free is replayed as that, not as empty_cache.
func TestMemPoolDeletion(t *testing.T) {
	const d, p = 0x10000000, 0x20000000
	events := evs(
		ev(trace.ActionSegmentAlloc, d, 20*mib),
		ev(trace.ActionAlloc, d, 3*mib),
		ev(trace.ActionFreeRequested, d, 3*mib),
		ev(trace.ActionFreeCompleted, d, 3*mib),
		ev(trace.ActionSegmentAlloc, p, 20*mib),
		ev(trace.ActionAlloc, p, 3*mib),
		ev(trace.ActionFreeRequested, p, 3*mib),
		ev(trace.ActionFreeCompleted, p, 3*mib),
		ev(trace.ActionSegmentFree, p, 20*mib),
	)
	snap := &trace.Snapshot{Traces: [][]trace.Event{events}, Segments: []trace.Segment{{
		Address: d, TotalSize: 20 * mib, Stack: -1, Blocks: []trace.Block{{Address: d, Size: 20 * mib, State: trace.BlockInactive}},
	}}}
	plan := FromSnapshot(snap, 0)
	if got, want := kinds(plan), "alloc free alloc free pool_release pool_empty"; got != want {
		t.Fatalf("ops %q, want %q", got, want)
	}
	res, err := Run(plan, Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Stats; st.ReservedBytes[alloc.All].Current != 20*mib || st.NumDeviceFree != 1 || st.NumSyncAllStreams != 1 {
		t.Errorf("reserved %d, device frees %d, syncs %d: want the default segment kept, one free, one sync",
			st.ReservedBytes[alloc.All].Current, st.NumDeviceFree, st.NumSyncAllStreams)
	}
}

// A broken trace whose segments' pools contradict each other is planned
// the same way every time: the labels' first-set-wins order does not
// follow a map's. (Here one segment_alloc of oom_survive_resnet is moved
// 32 MiB, into another segment, as a fuzzer once did.)
func TestBrokenPoolsPlanned(t *testing.T) {
	snap, err := trace.Open(filepath.Join(fixtures, "oom_survive_resnet.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	tr := snap.Traces[0]
	k := slices.IndexFunc(tr, func(e trace.Event) bool { return e.Action == trace.ActionSegmentAlloc && e.Size == 27262976 })
	if k < 0 {
		t.Fatal("no 26 MiB segment_alloc to move")
	}
	tr[k].Addr += 32 << 20
	want := FromSnapshot(snap, 0)
	for range 20 {
		got := FromSnapshot(snap, 0)
		if !slices.Equal(got.Ops, want.Ops) || !slices.Equal(got.Event, want.Event) {
			t.Fatalf("two plans of one trace differ (%s, %s)", got, want)
		}
	}
}

// ~MemPool releases its pool's segments (emptyCache(id)) and the program's
// empty_cache() releases the default pools' at once after: one run of
// segment_free events, the pool's in order, then the default large and
// small ones. It is read so, not as a global release followed by pools
// (which would free a pool's small segments before its large ones).
func TestMemPoolReleaseThenEmptyCache(t *testing.T) {
	events := evs(
		ev(trace.ActionSegmentAlloc, 0x10000000, 20*mib), // default
		ev(trace.ActionAlloc, 0x10000000, 4*mib),
		ev(trace.ActionSegmentAlloc, 0x20000000, 20*mib), // the pool: passed over the default's 16 MiB
		ev(trace.ActionAlloc, 0x20000000, 4*mib),
		ev(trace.ActionSegmentAlloc, 0x30000000, 64*mib),
		ev(trace.ActionAlloc, 0x30000000, 60*mib),
		ev(trace.ActionSegmentAlloc, 0x40000000, 2*mib), // default small
		ev(trace.ActionAlloc, 0x40000000, 512),
	)
	for _, a := range []uint64{0x10000000, 0x20000000, 0x30000000, 0x40000000} {
		events = append(events, ev(trace.ActionFreeRequested, a, 0), ev(trace.ActionFreeCompleted, a, 0))
	}
	events = append(events,
		ev(trace.ActionSegmentFree, 0x20000000, 20*mib), // ~MemPool
		ev(trace.ActionSegmentFree, 0x30000000, 64*mib),
		ev(trace.ActionSegmentFree, 0x10000000, 20*mib), // empty_cache()
		ev(trace.ActionSegmentFree, 0x40000000, 2*mib),
	)
	pp := inferPools(events, nil, alloc.DefaultConfig())
	if pp == nil || len(pp.pools) != 1 || pp.pools[0].Segments != 2 {
		t.Fatalf("pools %+v, want one of 2 segments", pp)
	}
	route := pp.allocPool // the four allocs, in order
	if route[0] != 0 || route[3] != 0 || route[1] == 0 || route[1] != route[2] {
		t.Errorf("allocations routed to pools %v, want 0, p, p, 0", route)
	}
	res, err := Run(Build(events), Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Stats; s.NumDeviceFree != 4 || s.ReservedBytes[0].Current != 0 {
		t.Errorf("device frees %d, reserved %d: want every segment given back", s.NumDeviceFree, s.ReservedBytes[0].Current)
	}
}

// A program that makes a MemPool, uses it, deletes it and empties the
// cache, again and again, gets each new pool's segments at the old one's
// addresses: each lifetime is a pool of its own, released at its own
// release run, and the replay follows the recording to its end.
func TestPoolLifetimesRepeat(t *testing.T) {
	snap := readFixture(t, "mempool_single.pickle")
	one := snap.Traces[0]
	single, err := Run(FromSnapshot(snap, 0), Options{Config: settingsConfig(snap.Settings), RecordedCap: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	for range n - 1 {
		snap.Traces[0] = append(snap.Traces[0], one...)
	}
	p := FromSnapshot(snap, 0)
	if len(p.Pools) != n {
		t.Fatalf("%d pools, want %d lifetimes: %v", len(p.Pools), n, p.Pools)
	}
	res, err := Run(p, Options{Config: settingsConfig(snap.Settings), RecordedCap: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Divergence != nil {
		t.Errorf("left the recording: %s", res.Divergence.Describe())
	}
	if got, want := res.Stats.NumDeviceAlloc, n*single.Stats.NumDeviceAlloc; got != want {
		t.Errorf("%d device allocations, want %d", got, want)
	}
}

// More pool lifetimes than a 16-bit pool id names: mempool_single repeated
// 2^16+2 times (a long MemPool program) replays as n lifetimes, every
// count n times the single trace's, to the recording's end (pool ids were
// 16 bits, and lifetime 65,536 was released as pool 0: "invalid
// operation").
func TestPoolLifetimesPast16Bits(t *testing.T) {
	if testing.Short() {
		t.Skip("5.8M events")
	}
	snap := readFixture(t, "mempool_single.pickle")
	one := slices.Clone(snap.Traces[0])
	cfg := settingsConfig(snap.Settings)
	single, err := Run(FromSnapshot(snap, 0), Options{Config: cfg, RecordedCap: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1<<16 + 2
	tr := make([]trace.Event, 0, n*len(one))
	for range n {
		tr = append(tr, one...)
	}
	snap.Traces[0] = tr
	p := FromSnapshot(snap, 0)
	if len(p.Pools) != n {
		t.Fatalf("%d pools, want %d lifetimes", len(p.Pools), n)
	}
	if last := p.Pools[n-1]; int(last.Pool) != n {
		t.Errorf("the last lifetime is pool %d, want %d", last.Pool, n)
	}
	res, err := Run(p, Options{Config: cfg, RecordedCap: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Divergence != nil {
		t.Errorf("left the recording: %s", res.Divergence.Describe())
	}
	s1, sn := single.Stats, res.Stats
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"device allocations", sn.NumDeviceAlloc, n * s1.NumDeviceAlloc},
		{"device frees", sn.NumDeviceFree, n * s1.NumDeviceFree},
		{"allocations", sn.Allocation[alloc.All].Allocated, n * s1.Allocation[alloc.All].Allocated},
		{"reserved peak", sn.ReservedBytes[alloc.All].Peak, s1.ReservedBytes[alloc.All].Peak},
		{"reserved at the end", sn.ReservedBytes[alloc.All].Current, s1.ReservedBytes[alloc.All].Current},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
}

// The walk for claims takes a free block back as the first walk did,
// the block of its size at its address added last to the stream, when
// two live segments overlap (a trace that missed a segment_free): it
// then finds the claims the first walk saw passed over. Here S1 and S2
// overlap and both hold a free 50 MiB block at S2's base, S1's added
// last; the allocation there (S2's, by address) takes S1's node, and
// S2's stays behind as a free block of S2's pool. S3, of S2's pool,
// then serves 40 MiB from its 200 MiB block: best fit would have taken
// that 50 MiB one, so the first walk finds S3 passed over its own pool
// and the allocation is a claim. Each segment finding its free blocks
// among its own would take S2's node instead and see no claim.
func TestClaimsWalkOverlap(t *testing.T) {
	const a, b = 0x100000000, 0x200000000
	var (
		q = [2]int64{1, 1} // S1's pool
		p = [2]int64{1, 2} // S2's and S3's
	)
	events := evs(
		ev(trace.ActionSegmentAlloc, a, 100*mib), // S1: [a, a+100M)
		ev(trace.ActionAlloc, a, 100*mib),
		ev(trace.ActionSegmentAlloc, a+50*mib, 100*mib), // S2: [a+50M, a+150M), over S1
		ev(trace.ActionAlloc, a+100*mib, 50*mib),        // a restore: S2 keeps (a+50M, 50M) free
		ev(trace.ActionFreeRequested, a, 100*mib),
		ev(trace.ActionFreeCompleted, a, 100*mib),
		ev(trace.ActionAlloc, a, 50*mib),         // S1 keeps (a+50M, 50M) free, added last
		ev(trace.ActionAlloc, a+50*mib, 50*mib),  // S2's: takes S1's node
		ev(trace.ActionSegmentAlloc, b, 200*mib), // S3
		ev(trace.ActionAlloc, b, 200*mib),
		ev(trace.ActionFreeRequested, b, 200*mib),
		ev(trace.ActionFreeCompleted, b, 200*mib),
		ev(trace.ActionAlloc, b, 40*mib), // passed over S2's 50 MiB
	)
	seg := func(addr, size uint64, pool [2]int64, blocks ...trace.Block) trace.Segment {
		var used uint64
		for _, bl := range blocks {
			if bl.State == trace.BlockAllocated {
				used += bl.Size
			}
		}
		return trace.Segment{Address: addr, TotalSize: size, AllocatedSize: used, PoolID: pool, Stack: -1, Blocks: blocks}
	}
	used := func(addr, size uint64) trace.Block {
		return trace.Block{Address: addr, Size: size, RequestedSize: size, State: trace.BlockAllocated}
	}
	free := func(addr, size uint64) trace.Block {
		return trace.Block{Address: addr, Size: size, State: trace.BlockInactive}
	}
	snap := &trace.Snapshot{Traces: [][]trace.Event{events}, Segments: []trace.Segment{
		seg(a, 100*mib, q, used(a, 50*mib), free(a+50*mib, 50*mib)),
		seg(a+50*mib, 100*mib, p, used(a+50*mib, 50*mib), used(a+100*mib, 50*mib)),
		seg(b, 200*mib, p, used(b, 40*mib), free(b+40*mib, 160*mib)),
	}}
	plan := FromSnapshot(snap, 0)
	var claims []bool
	for _, op := range plan.Ops {
		if op.Kind == alloc.OpAlloc {
			claims = append(claims, op.Flags&alloc.FlagClaim != 0)
		}
	}
	if want := []bool{false, true, false, false, false, true}; !slices.Equal(claims, want) {
		t.Fatalf("claims %v, want %v: the restore in S2 and S3's allocation that passed over S2's block", claims, want)
	}
}

// TestPoolString holds Pool.String, appended piece by piece, to the line
// fmt made of it.
func TestPoolString(t *testing.T) {
	for _, p := range []Pool{
		{Pool: 1, Released: -1},
		{Pool: 7, ID: [2]int64{3, -2}, Segments: 12, Allocs: 3400, Released: 1234567, How: []string{howContinuity, howSnapshot}},
		{Pool: 4294967295, ID: [2]int64{0, 1}, Segments: 1, Allocs: 0, Released: 0, How: []string{howExclusion}},
		{Pool: 2, ID: [2]int64{-9223372036854775808, 9223372036854775807}, Released: -1, How: []string{}},
	} {
		id := "id unknown"
		if p.ID != [2]int64{} {
			id = fmt.Sprintf("id (%d,%d)", p.ID[0], p.ID[1])
		}
		rel := "alive at the end"
		if p.Released >= 0 {
			rel = fmt.Sprintf("released before event %d", p.Released)
		}
		want := fmt.Sprintf("private pool %d (%s): %d segments, %d allocations, %s; inferred from %s",
			p.Pool, id, p.Segments, p.Allocs, rel, strings.Join(p.How, ", "))
		if got := p.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
