package alloc

import "testing"

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
