package alloc

import (
	"slices"
	"testing"
)

// TestAppendBlocks checks the flat snapshot against Snapshot as blocks
// come and go, with one buffer reused and grown throughout.
func TestAppendBlocks(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		a := withConfig(t, conf)
		var buf SnapshotBuffer
		defer buf.Free()
		var flat []FlatBlock
		check := func(step string) {
			t.Helper()
			flat = a.AppendBlocks(flat[:0], &buf)
			var want []FlatBlock
			for _, s := range a.Snapshot() {
				for j, b := range s.Blocks {
					f := FlatBlock{Address: b.Address, Size: b.Size, SegBlocks: uint32(len(s.Blocks)), ID: b.ID, State: b.State}
					if j == 0 {
						f.SegSize = s.TotalSize
					}
					want = append(want, f)
				}
			}
			if len(flat) != len(want) {
				t.Fatalf("%q %s: %d blocks, Snapshot has %d", conf, step, len(flat), len(want))
			}
			for i := range want {
				if flat[i] != want[i] {
					t.Fatalf("%q %s: block %d is %+v, Snapshot says %+v", conf, step, i, flat[i], want[i])
				}
			}
		}
		check("empty")
		for id := uint32(1); id <= 200; id++ {
			mustAlloc(t, a, id, uint64(id)*4099, 0)
		}
		check("after 200 allocations")
		for id := uint32(1); id <= 200; id += 3 {
			if err := a.Free(id); err != nil {
				t.Fatal(err)
			}
		}
		check("after freeing a third")
		if err := a.EmptyCache(); err != nil {
			t.Fatal(err)
		}
		check("after empty_cache")
	}
}

// pickLive removes from live the id that the random x picks, and returns it.
func pickLive(live *[]uint32, x uint64) uint32 {
	k := int(x>>30) % len(*live)
	id := (*live)[k]
	*live = append((*live)[:k], (*live)[k+1:]...)
	return id
}

// TestBlockSteps runs ops through BlockSteps.Run in batches and checks
// each op's change, applied to the list before it, against the whole list
// another allocator shows after the same op (AppendBlocks), and each
// whole list Run gives, with segments made, split, released and, under
// expandable_segments, mapped and unmapped, and an out-of-memory. Blocks
// are compared as Step compares them: a block left in place may keep its
// segment's former block count.
func TestBlockSteps(t *testing.T) {
	for _, tc := range []struct {
		conf   string
		n, gap int
	}{{"", 3000, 64}, {"expandable_segments:True", 3000, 64}, {"", 0, 2}} {
		var ops []Op
		live := []uint32{}
		x := uint64(7)
		for id := uint32(1); len(ops) < tc.n; id++ {
			x = x*6364136223846793005 + 1442695040888963407
			switch r := x >> 58; {
			case r < 34 || len(live) == 0:
				ops = append(ops, Op{Kind: OpAlloc, ID: id, Size: (x>>20)%(24<<20) + 1})
				live = append(live, id)
			case r < 44:
				id := pickLive(&live, x)
				ops = append(ops, Op{Kind: OpFreeRequest, ID: id}, Op{Kind: OpFreeComplete, ID: id})
			case r < 63:
				ops = append(ops, Op{Kind: OpFree, ID: pickLive(&live, x)})
			default:
				ops = append(ops, Op{Kind: OpEmptyCache})
			}
		}
		oomAt := -1
		if tc.n == 0 { // a few ops, then out of memory
			ops = []Op{{Kind: OpAlloc, ID: 1, Size: 1 << 20}, {Kind: OpAlloc, ID: 2, Size: 3 << 20}, {Kind: OpFree, ID: 1},
				{Kind: OpAlloc, ID: 3, Size: 30 << 20}, {Kind: OpAlloc, ID: 4, Size: 16 << 30}}
			oomAt = len(ops) - 1
		}
		conf := mustParse(t, tc.conf)
		a := newChecked(t, Options{Config: conf, Device: Sim(8 << 30)})
		b := newChecked(t, Options{Config: conf, Device: Sim(8 << 30)})
		var steps BlockSteps
		defer steps.Free()
		steps.KeepPeaks()
		var buf SnapshotBuffer
		defer buf.Free()
		var list, want []FlatBlock
		keys, i := 0, 0
		for lo := 0; lo < len(ops); lo += 17 {
			batch := ops[lo:min(lo+17, len(ops))]
			res, err := steps.Run(a, batch, lo, tc.gap, nil)
			if err != nil {
				t.Fatal(err)
			}
			last := lo + res.Done - 1 // the last op with a change
			if res.OOM != nil {
				last++
			}
			if (res.OOM != nil) != (last == oomAt) {
				t.Fatalf("op %d: out of memory %v", last, res.OOM != nil)
			}
			lastPeak, peakLists, peakAt := -1, 0, -1 // of this batch
			steps.Changes(func(j int, c *BlockChange) bool {
				peak := b.Extra().PeakOp
				if _, err := b.Run(batch[j:j+1], i, nil); err != nil {
					t.Fatal(err)
				}
				if raised := b.Extra().PeakOp != peak; c.Peak != raised {
					t.Fatalf("%+v op %d: Peak %v, the op raised the peak %v", conf, i, c.Peak, raised)
				}
				if c.Peak {
					lastPeak = j
				}
				want = b.AppendBlocks(want[:0], &buf)
				if c.PeakList != nil {
					peakLists, peakAt = peakLists+1, j
					if !c.Peak || !slices.Equal(c.PeakList, want) {
						t.Fatalf("%+v op %d: PeakList %v (Peak %v), want %v", conf, i, c.PeakList, c.Peak, want)
					}
				}
				list = append(list[:c.Pos], append(append([]FlatBlock(nil), c.Ins...), list[c.Pos+c.Del:]...)...)
				if len(list) != c.N || len(list) != len(want) {
					t.Fatalf("%+v op %d: %d blocks, N %d, want %d", conf, i, len(list), c.N, len(want))
				}
				for k := range want {
					// a block left in place keeps its segment's former count
					if g := list[k]; g.Address != want[k].Address || g.Size != want[k].Size || g.SegSize != want[k].SegSize ||
						g.ID != want[k].ID || g.State != want[k].State {
						t.Fatalf("%+v op %d: block %d is %+v, want %+v", conf, i, k, list[k], want[k])
					}
				}
				if c.Whole != nil {
					keys++
					for k := range want {
						if c.Whole[k] != want[k] {
							t.Fatalf("%+v op %d: whole list block %d is %+v, want %+v", conf, i, k, c.Whole[k], want[k])
						}
					}
				}
				i++
				return true
			})
			if peakLists != min(1, lastPeak+1) || peakAt != lastPeak {
				t.Fatalf("%+v ops %d on: %d peak lists, at %d, the last op to raise the peak %d", conf, lo, peakLists, peakAt, lastPeak)
			}
		}
		if i != len(ops) || keys == 0 {
			t.Fatalf("%d ops stepped of %d, %d whole lists", i, len(ops), keys)
		}
		if got := steps.Blocks(nil); len(got) != len(want) {
			t.Fatalf("Blocks: %d blocks, want %d", len(got), len(want))
		}
	}
}

// TestBlockStepsPolicies steps random ops of every policy, with and
// without expandable segments, on two streams (recorded stream uses,
// pending frees, empty_cache, a small card that runs out, a private
// pool released and emptied, a seeded segment freed) under the
// checker, which compares every step's list and change, made from the
// segments the op touched, with a walk of every segment: a change the
// allocator did not mark fails the run.
func TestBlockStepsPolicies(t *testing.T) {
	for _, p := range Policies() {
		for _, conf := range []string{"", "expandable_segments:True"} {
			// a seeded segment's blocks (ids 1 and 2) are freed among the ops
			ops := []Op{{Kind: OpAlloc, ID: 3, Size: 5 << 20, Pool: 1}, {Kind: OpFree, ID: 1}}
			live := []uint32{2, 3}
			pending := map[uint32]bool{}
			x := uint64(11)
			for id := uint32(4); len(ops) < 4000; id++ {
				x = x*6364136223846793005 + 1442695040888963407
				r := x >> 58
				switch {
				case r < 30 || len(live) == 0:
					size := (x>>20)%(3<<20) + 1
					if r < 6 {
						size = (x>>20)%(40<<20) + 1
					}
					ops = append(ops, Op{Kind: OpAlloc, ID: id, Size: size, Stream: (x >> 40) % 2, Flags: FlagRecordedOOM,
						Pool: uint32(r % 2)})
					live = append(live, id)
				case r < 36:
					k := int(x>>30) % len(live)
					ops = append(ops, Op{Kind: OpRecordStream, ID: live[k], Stream: 1 - (x>>40)%2})
				case r < 46:
					id := pickLive(&live, x)
					ops = append(ops, Op{Kind: OpFreeRequest, ID: id})
					pending[id] = true
				case r < 50 && len(pending) > 0:
					for id := range pending {
						ops = append(ops, Op{Kind: OpFreeComplete, ID: id})
						delete(pending, id)
						break
					}
				case r < 63:
					ops = append(ops, Op{Kind: OpFree, ID: pickLive(&live, x)})
				default:
					ops = append(ops, Op{Kind: OpEmptyCache})
				}
			}
			ops = append(ops, Op{Kind: OpPoolRelease, Pool: 1}, Op{Kind: OpPoolEmpty, Pool: 1})
			for _, id := range live {
				ops = append(ops, Op{Kind: OpFree, ID: id})
			}
			ops = append(ops, Op{Kind: OpEmptyCache})
			cfg := mustParse(t, conf)
			cfg.Policy = p
			a := newChecked(t, Options{Config: cfg, Device: Sim(160 << 20)})
			if err := a.Seed(0x7f0000000000, 4<<20, 0, false, []SeedBlock{{Offset: 0, Requested: 1 << 20, ID: 1},
				{Offset: 2 << 20, Requested: 1 << 20, ID: 2}}); err != nil {
				t.Fatal(err)
			}
			var steps BlockSteps
			for lo := 0; lo < len(ops); {
				res, err := steps.Run(a, ops[lo:min(lo+64, len(ops))], lo, 32, nil)
				if err != nil {
					t.Fatalf("%s %q: %v", p, conf, err)
				}
				lo += res.Done
				if res.OOM != nil {
					lo++
				}
			}
			steps.Free()
		}
	}
}
