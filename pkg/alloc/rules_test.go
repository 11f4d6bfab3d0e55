package alloc

import (
	"fmt"
	"testing"
)

// Table tests of the rules in docs/pytorch-allocator.md that place memory
// (rounding, segment sizes, splits, streams, expandable segments, oversize
// blocks), with the numbers measured on torch 2.11 in §16. Those that give
// memory back or run out of it are in rules_release_test.go.

func TestRoundSize(t *testing.T) {
	div4 := mustParse(t, "roundup_power2_divisions:4")
	tests := []struct {
		conf       Config
		size, want uint64
	}{
		// §2 [verified 2.11] with roundup_power2_divisions:4
		{div4, 3000, 3072},
		{div4, 5000, 5120},
		{div4, 9000, 10240},
		{div4, 17000, 20480},
		{div4, 600000, 655360},
		{div4, mib + 1, 1310720},
		{div4, 5*mib + 1, 6 * mib},
		{div4, 70*mib + 1, 80 * mib},
		{div4, 1100 * mib, 1280 * mib},
		{div4, 2047, 2048}, // not above 512*div: plain rounding
		{div4, 2049, 2560},
		{div4, 64 * mib, 64 * mib}, // a power of two stays
		// default: 512-byte rounding, 512 minimum
		{DefaultConfig(), 0, 512},
		{DefaultConfig(), 1, 512},
		{DefaultConfig(), 511, 512},
		{DefaultConfig(), 512, 512},
		{DefaultConfig(), 513, 1024},
		{DefaultConfig(), mib + 1, 1049088},
		{DefaultConfig(), 5242887, 5243392},
		{DefaultConfig(), 1100*mib + 1, 1100*mib + 512},
		// per-interval settings (§13.3 example): [1:2,64:4,>:8]
		{mustParse(t, "roundup_power2_divisions:[1:2,64:4,>:8]"), 600000, 786432},         // index 0: 2 divisions
		{mustParse(t, "roundup_power2_divisions:[1:2,64:4,>:8]"), 3*mib + 1, 3*mib + 512}, // index 1: off
		{mustParse(t, "roundup_power2_divisions:[1:2,64:4,>:8]"), 65 * mib, 80 * mib},     // index 6: 4
		{mustParse(t, "roundup_power2_divisions:[1:2,64:4,>:8]"), 129 * mib, 144 * mib},   // index 7: 8
	}
	for _, tt := range tests {
		if got := RoundSize(tt.conf, tt.size); got != tt.want {
			t.Errorf("RoundSize(%q, %d) = %d, want %d", tt.conf.Text, tt.size, got, tt.want)
		}
	}
}

// TestRoundSizeAllocates checks that an allocation uses the rounded size:
// a small request rounded by divisions makes a block of that size.
func TestRoundSizeAllocates(t *testing.T) {
	a := withConfig(t, "roundup_power2_divisions:4")
	mustAlloc(t, a, 1, 600000, 0)
	expectStats(t, a, map[string]int64{
		"allocated_bytes.small_pool.current": 655360,
		"requested_bytes.all.current":        600000,
		"reserved_bytes.small_pool.current":  2 * mib,
	})
}

// singleRequest is one row of §16.1.
type singleRequest struct {
	size          uint64
	block         int64 // allocated_bytes, default config
	blockOversize int64 // allocated_bytes with max_split_size_mb:80
	segment       int64 // reserved_bytes
	small         bool
	split         bool // default config
	splitOversize bool // max_split_size_mb:80
}

var singleRequests = []singleRequest{
	{1, 512, 512, 2 * mib, true, true, true},
	{511, 512, 512, 2 * mib, true, true, true},
	{512, 512, 512, 2 * mib, true, true, true},
	{513, 1024, 1024, 2 * mib, true, true, true},
	{1000, 1024, 1024, 2 * mib, true, true, true},
	{1048575, mib, mib, 2 * mib, true, true, true},
	{1048576, mib, mib, 2 * mib, true, true, true},
	{1048577, 1049088, 1049088, 20 * mib, false, true, true},
	{5242887, 5243392, 5243392, 20 * mib, false, true, true},
	{10485759, 10485760, 10485760, 10 * mib, false, false, false},
	{10485760, 10485760, 10485760, 10 * mib, false, false, false},
	{10485761, 10486272, 10486272, 12 * mib, false, true, true},
	{12582915, 12583424, 12583424, 14 * mib, false, true, true},
	{20971521, 20972032, 20972032, 22 * mib, false, true, true},
	{26214400, 27262976, 27262976, 26 * mib, false, false, false},
	{104857605, 104858112, 106954752, 102 * mib, false, true, false},
	{314572801, 314573312, 316669952, 302 * mib, false, true, false},
}

func TestSingleRequest(t *testing.T) {
	for _, conf := range []string{"", "max_split_size_mb:80"} {
		for _, r := range singleRequests {
			t.Run(fmt.Sprintf("%q/%d", conf, r.size), func(t *testing.T) {
				a := withConfig(t, conf)
				mustAlloc(t, a, 7, r.size, 0)
				block, split, oversize := r.block, r.split, int64(0)
				if conf != "" {
					block, split = r.blockOversize, r.splitOversize
					if block >= 80*mib {
						oversize = 1
					}
				}
				pool, other := "large_pool", "small_pool"
				if r.small {
					pool, other = other, pool
				}
				var rest, nsplit int64
				if split {
					rest, nsplit = r.segment-block, 1
				}
				expectStats(t, a, map[string]int64{
					"allocated_bytes.all.current":          block,
					"allocated_bytes." + pool + ".current": block,
					"active_bytes.all.current":             block,
					"requested_bytes.all.current":          int64(r.size),
					"reserved_bytes.all.current":           r.segment,
					"reserved_bytes." + pool + ".current":  r.segment,
					"reserved_bytes." + other + ".current": 0,
					"segment.all.current":                  1,
					"segment." + pool + ".current":         1,
					"allocation.all.current":               1,
					"inactive_split.all.current":           nsplit,
					"inactive_split_bytes.all.current":     rest,
					"oversize_allocations.current":         oversize,
					"oversize_segments.current":            oversize,
					"num_device_alloc":                     1,
				})
				segs := mustSnapshot(t, a)
				if len(segs) != 1 {
					t.Fatalf("snapshot has %d segments, want 1", len(segs))
				}
				s := segs[0]
				wantBlocks := 1
				if split {
					wantBlocks = 2
				}
				if len(s.Blocks) != wantBlocks || s.Small != r.small || s.Expandable ||
					int64(s.TotalSize) != r.segment || int64(s.Blocks[0].Size) != block ||
					s.Blocks[0].State != BlockAllocated || s.Blocks[0].ID != 7 || s.Blocks[0].RequestedSize != r.size {
					t.Errorf("snapshot segment %+v", s)
				}
				// Freeing it leaves one whole free segment that empty_cache returns.
				mustFree(t, a, 7)
				expectStats(t, a, map[string]int64{
					"allocated_bytes.all.current": 0, "inactive_split.all.current": 0,
					"inactive_split_bytes.all.current": 0, "reserved_bytes.all.current": r.segment,
				})
				if a.LargestFree() != uint64(r.segment) {
					t.Errorf("LargestFree() = %d after the free, want %d", a.LargestFree(), r.segment)
				}
				if err := a.EmptyCache(); err != nil {
					t.Fatal(err)
				}
				expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 0, "segment.all.current": 0, "num_device_free": 1})
			})
		}
	}
}

// TestSingleRequestExpandable is §16.1's expandable column: reserved is
// what is mapped, segment and inactive_split stay 0.
func TestSingleRequestExpandable(t *testing.T) {
	tests := []struct {
		size   uint64
		mapped int64
		small  bool
	}{
		{1, 2 * mib, true},
		{512, 2 * mib, true},
		{1000, 2 * mib, true},
		{mib, 2 * mib, true},
		{mib + 1, 20 * mib, false},
		{5242887, 20 * mib, false},
		{10 * mib, 20 * mib, false},
		{10*mib + 1, 20 * mib, false},
		{12582915, 20 * mib, false},
		{20*mib + 1, 40 * mib, false},
		{25 * mib, 40 * mib, false},
		{100*mib + 5, 120 * mib, false},
		{300*mib + 1, 320 * mib, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.size), func(t *testing.T) {
			a := newChecked(t, Options{Config: mustParse(t, "expandable_segments:True"), DeviceTotal: 150109880320})
			mustAlloc(t, a, 1, tt.size, 0)
			block := int64(RoundSize(DefaultConfig(), tt.size))
			expectStats(t, a, map[string]int64{
				"reserved_bytes.all.current":       tt.mapped,
				"allocated_bytes.all.current":      block,
				"segment.all.current":              0,
				"segment.all.allocated":            0,
				"inactive_split_bytes.all.current": 0,
				"inactive_split.all.current":       0,
				"oversize_segments.allocated":      0,
				"num_device_alloc":                 1,
			})
			segs := mustSnapshot(t, a)
			if len(segs) != 1 || !segs[0].Expandable || segs[0].Small != tt.small || int64(segs[0].TotalSize) != tt.mapped {
				t.Fatalf("snapshot %+v, want one expandable segment of %d bytes", segs, tt.mapped)
			}
			// The remainder of the page is split off however small (>= 512).
			if want := 1 + btoi(block < tt.mapped); len(segs[0].Blocks) != want {
				t.Errorf("%d blocks, want %d", len(segs[0].Blocks), want)
			}
			mustFree(t, a, 1)
			if err := a.EmptyCache(); err != nil {
				t.Fatal(err)
			}
			expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 0, "num_device_free": 1})
			if segs := mustSnapshot(t, a); len(segs) != 0 {
				t.Errorf("after empty_cache the snapshot shows %+v", segs)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestExpandableDefaultDevice: expandable segments on the default
// (unlimited) simulated device, whose VA reservations are sized from its
// reported total; they must not overlap.
func TestExpandableDefaultDevice(t *testing.T) {
	a := withConfig(t, "expandable_segments:True")
	mustAlloc(t, a, 1, 100, 0)
	mustAlloc(t, a, 2, 30*mib, 0)
	mustAlloc(t, a, 3, 30*mib, 1)
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 2*mib + 80*mib})
	if err := checkSnapshot(a); err != nil {
		t.Fatalf("expandable segments on Sim(0): %v", err)
	}
}

// TestSimAddressSpace: when the simulated device runs out of address
// space it must fail the allocation, not hand out overlapping ranges.
func TestSimAddressSpace(t *testing.T) {
	a := withConfig(t, "")
	for id := uint32(1); id <= 4; id++ {
		if _, err := a.Alloc(id, 50<<40, 0); err != nil {
			if !isOOM(err) {
				t.Fatalf("Alloc %d of 50 TiB: %v", id, err)
			}
			break
		}
	}
	if err := checkSnapshot(a); err != nil {
		t.Fatalf("the simulator's address space: %v", err)
	}
}

// TestSegmentSizes: §3 boundaries, and large_segment_size_mb.
func TestSegmentSizes(t *testing.T) {
	tests := []struct {
		conf    string
		size    uint64
		segment int64
	}{
		{"", mib, 2 * mib},
		{"", mib + 1, 20 * mib},
		{"", 10*mib - 1, 10 * mib},
		{"", 10*mib + 1, 12 * mib},
		{"large_segment_size_mb:40", mib + 1, 40 * mib},
		{"large_segment_size_mb:40", 9 * mib, 40 * mib},
		{"large_segment_size_mb:40", 10 * mib, 10 * mib},
		{"large_segment_size_mb:40", mib, 2 * mib},
	}
	for _, tt := range tests {
		a := withConfig(t, tt.conf)
		mustAlloc(t, a, 1, tt.size, 0)
		if got := a.Stats().ReservedBytes[All].Current; got != tt.segment {
			t.Errorf("%q: %d bytes reserved %d, want %d", tt.conf, tt.size, got, tt.segment)
		}
	}
	// Expandable large pages follow large_segment_size too.
	a := newChecked(t, Options{Config: mustParse(t, "expandable_segments:True,large_segment_size_mb:40"), DeviceTotal: 8 << 30})
	mustAlloc(t, a, 1, 5*mib, 0)
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 40 * mib})
}

// TestSplitRules: §5's examples.
func TestSplitRules(t *testing.T) {
	t.Run("small pool packs", func(t *testing.T) {
		a := withConfig(t, "")
		mustAlloc(t, a, 1, mib, 0)
		mustAlloc(t, a, 2, mib-512, 0)
		mustAlloc(t, a, 3, 512, 0)
		expectStats(t, a, map[string]int64{
			"segment.small_pool.current": 1, "allocated_bytes.small_pool.current": 2 * mib,
			"inactive_split.all.current": 0, "inactive_split_bytes.all.current": 0,
		})
		segs := mustSnapshot(t, a)
		if len(segs) != 1 || len(segs[0].Blocks) != 3 {
			t.Fatalf("snapshot %+v, want one segment of three blocks", segs)
		}
		// The allocated part is always the low-address part.
		if segs[0].Blocks[0].ID != 1 || segs[0].Blocks[1].ID != 2 || segs[0].Blocks[2].ID != 3 {
			t.Errorf("blocks in address order hold ids %d %d %d, want 1 2 3",
				segs[0].Blocks[0].ID, segs[0].Blocks[1].ID, segs[0].Blocks[2].ID)
		}
	})
	t.Run("19.5 MiB in a cached 20 MiB block", func(t *testing.T) {
		a := withConfig(t, "")
		mustAlloc(t, a, 1, 5*mib, 0)
		mustFree(t, a, 1) // a whole free 20 MiB segment
		mustAlloc(t, a, 2, 19*mib+mib/2, 0)
		expectStats(t, a, map[string]int64{
			"allocated_bytes.all.current": 20 * mib, "requested_bytes.all.current": 19*mib + mib/2,
			"reserved_bytes.all.current": 20 * mib, "inactive_split.all.current": 0,
		})
	})
	t.Run("merge on free", func(t *testing.T) {
		a := withConfig(t, "")
		mustAlloc(t, a, 1, 4*mib, 0)
		mustAlloc(t, a, 2, 4*mib, 0)
		mustAlloc(t, a, 3, 4*mib, 0)
		expectStats(t, a, map[string]int64{"inactive_split.all.current": 1, "inactive_split_bytes.all.current": 8 * mib})
		mustFree(t, a, 2)
		expectStats(t, a, map[string]int64{"inactive_split.all.current": 2, "inactive_split_bytes.all.current": 12 * mib})
		mustFree(t, a, 3) // merges with both neighbours
		expectStats(t, a, map[string]int64{"inactive_split.all.current": 1, "inactive_split_bytes.all.current": 16 * mib})
		mustFree(t, a, 1) // the segment is whole again
		expectStats(t, a, map[string]int64{"inactive_split.all.current": 0, "inactive_split_bytes.all.current": 0,
			"inactive_split.all.allocated": 2, "inactive_split.all.freed": 2})
		if segs := mustSnapshot(t, a); len(segs) != 1 || len(segs[0].Blocks) != 1 {
			t.Errorf("snapshot %+v, want one whole free segment", segs)
		}
	})
	t.Run("best fit ties break by address", func(t *testing.T) {
		a := withConfig(t, "")
		lo := mustAlloc(t, a, 1, 30*mib, 0)
		hi := mustAlloc(t, a, 2, 30*mib, 0)
		if lo > hi {
			lo, hi = hi, lo
		}
		mustFree(t, a, 1)
		mustFree(t, a, 2)
		if got := mustAlloc(t, a, 3, 30*mib, 0); got != lo {
			t.Errorf("30 MiB request got 0x%x, want the lower of two equal free blocks 0x%x (other 0x%x)", got, lo, hi)
		}
	})
	t.Run("expandable packs into the last page", func(t *testing.T) {
		// §9.2: 3 MiB then 30 MiB+1: page 0 holds 3 MiB, the 30 MiB block starts at offset 3 MiB.
		a := newChecked(t, Options{Config: mustParse(t, "expandable_segments:True"), DeviceTotal: 8 << 30})
		p := mustAlloc(t, a, 1, 3*mib, 0)
		q := mustAlloc(t, a, 2, 30*mib+1, 0)
		if q != p+3*mib {
			t.Errorf("30 MiB+1 block at 0x%x, want 0x%x (3 MiB after the first)", q, p+3*mib)
		}
		expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 40 * mib, "num_device_alloc": 2})
	})
}

// TestStreams: free blocks are reused only on their own stream (§1.4).
func TestStreams(t *testing.T) {
	a := withConfig(t, "")
	mustAlloc(t, a, 1, 3*mib, 5)
	mustFree(t, a, 1)
	mustAlloc(t, a, 2, 3*mib, 0)
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 40 * mib, "segment.all.current": 2})
	for _, s := range mustSnapshot(t, a) {
		if s.Stream != 0 && s.Stream != 5 {
			t.Errorf("segment on stream %d", s.Stream)
		}
	}
	mustAlloc(t, a, 3, 3*mib, 5) // back on stream 5: reuses its cached segment
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 40 * mib})
}

// TestOversizeMaxSplit80 is §16.2's first scenario.
func TestOversizeMaxSplit80(t *testing.T) {
	a := withConfig(t, "max_split_size_mb:80")
	mustAlloc(t, a, 1, 100*mib, 0)
	mustFree(t, a, 1)
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 100 * mib, "max_split_size": 83886080})

	// 90 MiB reuses the cached 100 MiB block, unsplit.
	mustAlloc(t, a, 2, 90*mib, 0)
	expectStats(t, a, map[string]int64{
		"allocated_bytes.all.current": 100 * mib, "requested_bytes.all.current": 90 * mib,
		"reserved_bytes.all.current": 100 * mib, "inactive_split.all.current": 0,
	})
	mustFree(t, a, 2)

	// 79 MiB is below max_split: it may not take the oversize block; a new
	// 80 MiB segment, not split (the remainder is exactly 1 MiB).
	mustAlloc(t, a, 3, 79*mib, 0)
	expectStats(t, a, map[string]int64{
		"allocated_bytes.all.current": 80 * mib, "reserved_bytes.all.current": 180 * mib,
		"segment.all.current": 2, "inactive_split.all.current": 0,
	})
	mustFree(t, a, 3)

	for id, size := range map[uint32]uint64{4: 80*mib + 512, 5: 81 * mib} {
		mustAlloc(t, a, id, size, 0)
		expectStats(t, a, map[string]int64{"allocated_bytes.all.current": 100 * mib, "reserved_bytes.all.current": 180 * mib})
		mustFree(t, a, id)
	}

	mustAlloc(t, a, 6, 40*mib, 0)
	expectStats(t, a, map[string]int64{
		"allocated_bytes.all.current":    40 * mib,
		"reserved_bytes.all.current":     220 * mib,
		"oversize_allocations.allocated": 5,
		"oversize_allocations.current":   0,
		"oversize_segments.current":      2,
		"oversize_segments.allocated":    2,
		"max_split_size":                 83886080,
	})
	mustSnapshot(t, a)

	// Default config: the cached 100 MiB is split instead.
	d := withConfig(t, "")
	mustAlloc(t, d, 1, 100*mib, 0)
	mustFree(t, d, 1)
	mustAlloc(t, d, 2, 90*mib, 0)
	expectStats(t, d, map[string]int64{
		"allocated_bytes.all.current": 90 * mib, "inactive_split_bytes.all.current": 10 * mib,
		"reserved_bytes.all.current": 100 * mib, "max_split_size": -1, "oversize_allocations.allocated": 0,
	})
	mustFree(t, d, 2)
	mustAlloc(t, d, 3, 79*mib, 0)
	expectStats(t, d, map[string]int64{"allocated_bytes.all.current": 79 * mib, "reserved_bytes.all.current": 100 * mib})
}

// TestOversizeMaxSplit40 is §16.2's second scenario, with and without
// max_non_split_rounding_mb:30.
func TestOversizeMaxSplit40(t *testing.T) {
	type step struct {
		size     uint64
		block    int64 // the block it gets
		reserved int64 // after it
	}
	tests := []struct {
		conf  string
		steps []step
	}{
		{"max_split_size_mb:40", []step{
			{80 * mib, 80 * mib, 180 * mib},       // 100 >= 80+20: not reused
			{80*mib + 512, 100 * mib, 180 * mib},  // 100 < 80 MiB+512+20
			{70*mib + mib/2, 80 * mib, 180 * mib}, // the cached 80 MiB
			{70 * mib, 80 * mib, 180 * mib},       // likewise
		}},
		{"max_split_size_mb:40,max_non_split_rounding_mb:30", []step{
			{80 * mib, 100 * mib, 100 * mib},
			{70*mib + mib/2, 100 * mib, 100 * mib},
			{70 * mib, 70 * mib, 170 * mib}, // 100 >= 70+30: a new segment
		}},
	}
	for _, tt := range tests {
		t.Run(tt.conf, func(t *testing.T) {
			a := withConfig(t, tt.conf)
			mustAlloc(t, a, 1, 100*mib, 0)
			mustFree(t, a, 1)
			for i, s := range tt.steps {
				id := uint32(10 + i)
				mustAlloc(t, a, id, s.size, 0)
				st := a.Stats()
				if st.AllocatedBytes[All].Current != s.block || st.ReservedBytes[All].Current != s.reserved {
					t.Errorf("request %d: block %d, reserved %d; want %d, %d", s.size,
						st.AllocatedBytes[All].Current, st.ReservedBytes[All].Current, s.block, s.reserved)
				}
				if st.InactiveSplit[All].Current != 0 {
					t.Errorf("request %d split an oversize block", s.size)
				}
				mustFree(t, a, id)
			}
		})
	}
}
