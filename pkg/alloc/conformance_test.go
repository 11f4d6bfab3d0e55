package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The rules every policy keeps, whatever it does with memory. The suite
// walks the policy table, so a new policy is held to them by its table row
// alone; what a policy does differently (keeps its cache, reads PyTorch's
// knobs) comes from its traits.

// forEachPolicy runs f as a subtest for every policy of the table.
func forEachPolicy(t *testing.T, f func(t *testing.T, p PolicyInfo)) {
	t.Helper()
	infos := PolicyInfos()
	if len(infos) == 0 {
		t.Fatal("the policy table is empty")
	}
	for _, p := range infos {
		t.Run(string(p.Name), func(t *testing.T) { f(t, p) })
	}
}

// conformStep applies one op under the checker (Options.Check runs gm_check
// after it) and holds the snapshot and the statistics to each other.
func conformStep(t *testing.T, a *Allocator, op Op) *OOM {
	t.Helper()
	res, err := a.Run([]Op{op}, 0, nil)
	if err != nil {
		t.Fatalf("%+v: %v", op, err)
	}
	if err := checkSnapshot(a); err != nil {
		t.Fatalf("after %+v: %v", op, err)
	}
	return res.OOM
}

// liveCounts holds allocation and active counts to what the test holds live.
func liveCounts(t *testing.T, a *Allocator, live, pending int64) {
	t.Helper()
	st := a.Stats()
	if st.Allocation[All].Current != live {
		t.Fatalf("allocation.all.current = %d, want %d", st.Allocation[All].Current, live)
	}
	if st.Active[All].Current < live || st.Active[All].Current > live+pending {
		t.Fatalf("active.all.current = %d, want %d..%d", st.Active[All].Current, live, live+pending)
	}
	for _, arr := range [][3]Stat{st.Allocation, st.Segment, st.Active, st.AllocatedBytes, st.ReservedBytes,
		st.ActiveBytes, st.RequestedBytes, st.InactiveSplit, st.InactiveSplitBytes} {
		if arr[All].Current != arr[Large].Current+arr[Small].Current {
			t.Fatalf("all %d != large %d + small %d", arr[All].Current, arr[Large].Current, arr[Small].Current)
		}
	}
}

func TestConformanceTable(t *testing.T) {
	settable := 0
	seen := map[Policy]bool{}
	for _, p := range PolicyInfos() {
		if p.Name == "" || p.Summary == "" || seen[p.Name] {
			t.Errorf("policy %+v: empty or repeated name, or no summary", p)
		}
		seen[p.Name] = true
		if got, err := ParsePolicy(string(p.Name)); err != nil || got != p.Name {
			t.Errorf("ParsePolicy(%q) = %q, %v", p.Name, got, err)
		}
		if p.Settable {
			settable++
			if p.Name != DefaultConfig().Policy || !p.PyTorchKnobs {
				t.Errorf("%s is settable through PYTORCH_CUDA_ALLOC_CONF but not the default PyTorch policy", p.Name)
			}
		}
	}
	if settable != 1 {
		t.Errorf("%d settable policies, want PyTorch's alone", settable)
	}
	if _, err := ParsePolicy("no-such-policy"); err == nil {
		t.Error("an unknown policy was accepted")
	}
}

// Mixed sizes on two streams, record_stream, free requests, zero-size
// allocations and empty_cache: the checker and the snapshot agree with
// the statistics after every op, and the counts with what is live.
func TestConformanceChecker(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, p PolicyInfo) {
		a := newChecked(t, Options{Config: Config{Policy: p.Name}, DeviceTotal: 4 << 30})
		sizes := []uint64{100, 512, 4000, 700 << 10, 1 << 20, 1<<20 + 1, 3 << 20, 12 << 20, 25 << 20, 0, 64 << 20}
		for i, s := range sizes {
			conformStep(t, a, Op{Kind: OpAlloc, ID: uint32(i), Size: s, Stream: uint64(i % 2)})
		}
		liveCounts(t, a, int64(len(sizes)-1), 0) // the zero-size one holds no block
		conformStep(t, a, Op{Kind: OpRecordStream, ID: 2, Stream: 1})
		conformStep(t, a, Op{Kind: OpFree, ID: 2})        // pending: recorded on another stream
		conformStep(t, a, Op{Kind: OpFreeRequest, ID: 4}) // pending until completed
		conformStep(t, a, Op{Kind: OpFree, ID: 9})        // zero-size
		liveCounts(t, a, int64(len(sizes)-1-2), 2)        // 2 and 4 pending, 9 had no block
		for _, id := range []uint32{1, 3, 5, 7} {
			conformStep(t, a, Op{Kind: OpFree, ID: id})
		}
		conformStep(t, a, Op{Kind: OpFreeComplete, ID: 4})
		conformStep(t, a, Op{Kind: OpEmptyCache})
		for i, s := range sizes[:5] { // reuse after frees and empty_cache
			conformStep(t, a, Op{Kind: OpAlloc, ID: uint32(20 + i), Size: s * 3, Stream: uint64(i % 2)})
		}
		conformStep(t, a, Op{Kind: OpFreeComplete, ID: 2})
		liveCounts(t, a, 4+5, 0)
		if n := len(a.Stats().Map()); n != 122 {
			t.Errorf("memory_stats has %d keys, want 122", n)
		}
	})
}

// Seeding: several live and pending blocks in one segment, in each pool,
// then every block freed, each free checked.
func TestConformanceSeeding(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, p PolicyInfo) {
		a := newChecked(t, Options{Config: Config{Policy: p.Name}, DeviceTotal: 4 << 30})
		large := []SeedBlock{
			{Offset: 0, Size: 2 << 20, Requested: 2<<20 - 100, ID: 1},
			{Offset: 4 << 20, Size: 3 << 20, Requested: 3 << 20, ID: 2},
			{Offset: 8 << 20, Requested: 1 << 20, ID: 3, Pending: true},
			{Offset: 12 << 20, Size: 6 << 20, Requested: 6 << 20, ID: 4},
		}
		if err := a.Seed(0x7f0000000000, 20<<20, 0, false, large); err != nil {
			t.Fatal(err)
		}
		small := []SeedBlock{
			{Offset: 0, Size: 512, Requested: 300, ID: 5},
			{Offset: 1 << 20, Requested: 4096, ID: 6},
		}
		if err := a.Seed(0x7f0010000000, 2<<20, 1, true, small); err != nil {
			t.Fatal(err)
		}
		if err := checkSnapshot(a); err != nil {
			t.Fatalf("after seeding: %v", err)
		}
		liveCounts(t, a, 5, 1)
		if e := a.Extra(); e.LiveBytes <= 0 || e.LiveBytesPeak < e.LiveBytes {
			t.Errorf("seeded live bytes %d, peak %d", e.LiveBytes, e.LiveBytesPeak)
		}
		if err := a.Seed(0x7f0020000000, 2<<20, 0, false, []SeedBlock{{Offset: 0, Requested: 512, ID: 1}}); err == nil {
			t.Error("seeding an id already live was accepted")
		}
		for _, id := range []uint32{2, 1, 4} { // middle, first, last of one segment
			conformStep(t, a, Op{Kind: OpFree, ID: id})
		}
		conformStep(t, a, Op{Kind: OpAlloc, ID: 7, Size: 5 << 20})
		conformStep(t, a, Op{Kind: OpFreeComplete, ID: 3})
		for _, id := range []uint32{6, 5, 7} {
			conformStep(t, a, Op{Kind: OpFree, ID: id})
		}
		liveCounts(t, a, 0, 0)
		if err := a.Free(1); err == nil {
			t.Error("a seeded block freed twice")
		}
		conformStep(t, a, Op{Kind: OpEmptyCache})
		if st := a.Stats(); st.ActiveBytes[All].Current != 0 || st.RequestedBytes[All].Current != 0 {
			t.Errorf("after freeing every seeded block: active %d, requested %d", st.ActiveBytes[All].Current,
				st.RequestedBytes[All].Current)
		}
	})
}

// Out of memory: a failing request holds nothing, is counted, leaves its id
// free and the allocator usable; a request over 1 EB moves no statistic.
func TestConformanceOOM(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, p PolicyInfo) {
		a := newChecked(t, Options{Config: Config{Policy: p.Name}, Device: Sim(64 * mib)})
		conformStep(t, a, Op{Kind: OpAlloc, ID: 1, Size: 30 * mib})
		conformStep(t, a, Op{Kind: OpAlloc, ID: 2, Size: 4 * mib})
		conformStep(t, a, Op{Kind: OpFree, ID: 2})
		before := a.Stats()
		oom := conformStep(t, a, Op{Kind: OpAlloc, ID: 3, Size: 48 * mib})
		if oom == nil {
			t.Fatal("48 MiB on a 64 MiB device with 30 MiB live did not fail")
		}
		after := a.Stats()
		if oom.Size != 48*mib || oom.Rounded < oom.Size || oom.Allocated != after.AllocatedBytes[All].Current {
			t.Errorf("OOM record %+v", *oom)
		}
		if after.NumOOMs != before.NumOOMs+1 {
			t.Errorf("num_ooms %d -> %d, want one more", before.NumOOMs, after.NumOOMs)
		}
		if after.AllocatedBytes[All] != before.AllocatedBytes[All] || after.Allocation[All] != before.Allocation[All] ||
			after.ActiveBytes[All].Current != before.ActiveBytes[All].Current {
			t.Errorf("the failed request moved allocation statistics: %+v -> %+v", before.AllocatedBytes[All], after.AllocatedBytes[All])
		}
		if after.ReservedBytes[All].Current > before.ReservedBytes[All].Current {
			t.Errorf("the failed request kept memory: reserved %d -> %d", before.ReservedBytes[All].Current,
				after.ReservedBytes[All].Current)
		}
		conformStep(t, a, Op{Kind: OpAlloc, ID: 3, Size: 8 * mib}) // the id stayed free
		liveCounts(t, a, 2, 0)
		mid := a.Stats()
		if conformStep(t, a, Op{Kind: OpAlloc, ID: 4, Size: 1 << 61}) == nil {
			t.Fatal("a request over 1 EB did not fail")
		}
		if st := a.Stats(); st != mid {
			t.Errorf("a request over 1 EB moved statistics")
		}
	})
}

// A request no card holds fails cleanly on an unlimited device too (which
// reports 1 TiB), with and without expandable segments, and the allocator
// goes on.
func TestConformanceHugeRequest(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, p PolicyInfo) {
		for _, conf := range []string{"", "expandable_segments:True"} {
			c := mustParse(t, conf)
			c.Policy = p.Name
			a := newChecked(t, Options{Config: c, Device: Sim(0)})
			conformStep(t, a, Op{Kind: OpAlloc, ID: 1, Size: 3 * mib})
			before := a.Stats()
			for _, size := range []uint64{1101099999990000, 1 << 61} {
				if conformStep(t, a, Op{Kind: OpAlloc, ID: 2, Size: size}) == nil {
					t.Fatalf("%q: %d bytes on an unlimited device did not fail", conf, size)
				}
			}
			if st := a.Stats(); st.AllocatedBytes[All] != before.AllocatedBytes[All] ||
				st.ReservedBytes[All].Current > before.ReservedBytes[All].Current {
				t.Errorf("%q: the failed requests moved statistics", conf)
			}
			conformStep(t, a, Op{Kind: OpAlloc, ID: 2, Size: 30 * mib})
			liveCounts(t, a, 2, 0)
		}
	})
}

// empty_cache after everything is freed: nothing stays active; a policy
// that does not keep its cache returns every byte and segment.
func TestConformanceEmptyCache(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, p PolicyInfo) {
		a := newChecked(t, Options{Config: Config{Policy: p.Name}, DeviceTotal: 4 << 30})
		for i, s := range []uint64{1000, 600 << 10, 5 << 20, 30 << 20} {
			conformStep(t, a, Op{Kind: OpAlloc, ID: uint32(i), Size: s, Stream: uint64(i % 2)})
		}
		for i := range 4 {
			conformStep(t, a, Op{Kind: OpFree, ID: uint32(i)})
		}
		held := a.Stats().ReservedBytes[All].Current
		syncs := a.Stats().NumSyncAllStreams
		conformStep(t, a, Op{Kind: OpEmptyCache})
		st := a.Stats()
		if st.ActiveBytes[All].Current != 0 {
			t.Errorf("active %d after freeing everything", st.ActiveBytes[All].Current)
		}
		switch {
		case p.KeepsCache && st.ReservedBytes[All].Current != held:
			t.Errorf("keeps its cache, but empty_cache took reserved from %d to %d", held, st.ReservedBytes[All].Current)
		case !p.KeepsCache && (st.ReservedBytes[All].Current != 0 || len(a.Snapshot()) != 0):
			t.Errorf("empty_cache left %d bytes reserved in %d segments", st.ReservedBytes[All].Current, len(a.Snapshot()))
		}
		if held == 0 && !p.KeepsCache && p.Name != PolicyNoCache {
			t.Errorf("a caching policy held nothing after the frees")
		}
		if st.NumSyncAllStreams < syncs {
			t.Errorf("num_sync_all_streams went down")
		}
	})
}

// PyTorch's knobs change nothing for a policy that does not read them.
func TestConformanceKnobs(t *testing.T) {
	ops := []Op{
		{Kind: OpAlloc, ID: 0, Size: 70 << 20}, {Kind: OpAlloc, ID: 1, Size: 3 << 20},
		{Kind: OpAlloc, ID: 2, Size: 130 << 20, Stream: 1}, {Kind: OpFree, ID: 0},
		{Kind: OpAlloc, ID: 3, Size: 50 << 20}, {Kind: OpFree, ID: 2}, {Kind: OpEmptyCache},
		{Kind: OpAlloc, ID: 4, Size: 100 << 20},
	}
	forEachPolicy(t, func(t *testing.T, p PolicyInfo) {
		if p.PyTorchKnobs {
			t.Skip("reads PyTorch's knobs")
		}
		var stats []Stats
		for _, conf := range []string{"", "expandable_segments:True,max_split_size_mb:64"} {
			c := mustParse(t, conf)
			c.Policy = p.Name
			a := newChecked(t, Options{Config: c, DeviceTotal: 4 << 30})
			for _, op := range ops {
				conformStep(t, a, op)
			}
			stats = append(stats, a.Stats())
		}
		if stats[0] != stats[1] {
			t.Errorf("expandable_segments and max_split_size changed the decisions:\n%+v\n%+v", stats[0], stats[1])
		}
	})
}

// The fuzzer's operations, seeded and not, under the checker, for every
// policy: deterministic inputs here, random ones under go test -fuzz.
func TestConformanceFuzz(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, p PolicyInfo) {
		r := rand.New(rand.NewPCG(1, uint64(len(p.Name))))
		for i := range 40 {
			data := make([]byte, 64+r.IntN(400))
			for j := range data {
				data[j] = byte(r.Uint32())
			}
			data[0] &^= 0x01 // the policy is forced below, not decoded
			t.Run(fmt.Sprint(i), func(t *testing.T) { runFuzzPolicy(t, data, i%2 == 1, p.Name) })
		}
	})
}
