package alloc

import "testing"

// RunSized tells the size of the block each free and free request freed,
// as the allocator rounded and placed it: 0 for an allocation of 0 bytes.
func TestRunSizedFreedBlocks(t *testing.T) {
	a := withConfig(t, "")
	ops := []Op{
		{Kind: OpAlloc, ID: 1, Size: 100},     // a small block of 512
		{Kind: OpAlloc, ID: 2, Size: 3 << 20}, // a large one of 3 MiB
		{Kind: OpAlloc, ID: 3, Size: 0},
		{Kind: OpFree, ID: 3},
		{Kind: OpFreeRequest, ID: 2},
		{Kind: OpFree, ID: 1},
		{Kind: OpFreeComplete, ID: 2},
	}
	sizes := make([]uint64, len(ops))
	res, err := a.RunSized(ops, 0, nil, sizes)
	if err != nil || res.Done != len(ops) {
		t.Fatalf("RunSized = %+v, %v", res, err)
	}
	want := map[int]uint64{3: 0, 4: 3 << 20, 5: 512}
	for k, w := range want {
		if sizes[k] != w {
			t.Errorf("op %d (%s of id %d) freed %d bytes, want %d", k, ops[k].Kind, ops[k].ID, sizes[k], w)
		}
	}
}
