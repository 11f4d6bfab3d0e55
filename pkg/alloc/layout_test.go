package alloc

import (
	"testing"
	"unsafe"
)

// TestOpLayout: Run hands C the []Op in place as gm_op_t[], so the Go
// struct must have gm_op_t's layout (gm_alloc.h): uint8 kind at 0, uint8
// flags at 1, uint32 pool at 4, uint32 id at 8, uint64 stream, size, hint at
// 16, 24, 32; 40 bytes in all.
func TestOpLayout(t *testing.T) {
	var op Op
	got := []uintptr{
		unsafe.Sizeof(op),
		unsafe.Offsetof(op.Kind), unsafe.Offsetof(op.Flags), unsafe.Offsetof(op.Pool), unsafe.Offsetof(op.ID),
		unsafe.Offsetof(op.Stream), unsafe.Offsetof(op.Size), unsafe.Offsetof(op.Hint),
	}
	want := []uintptr{40, 0, 1, 4, 8, 16, 24, 32}
	names := []string{"size", "Kind", "Flags", "Pool", "ID", "Stream", "Size", "Hint"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Op %s at %d, gm_op_t has it at %d", names[i], got[i], want[i])
		}
	}
	if unsafe.Sizeof(op.Kind) != 1 || unsafe.Sizeof(op.Flags) != 1 || unsafe.Sizeof(op.Pool) != 4 || unsafe.Sizeof(op.ID) != 4 || unsafe.Alignof(op) != 8 {
		t.Errorf("Op field sizes or alignment differ from gm_op_t")
	}
}

// TestFlatBlockLayout: BlockSteps hands Go the blocks C wrote in place,
// as FlatBlocks, so the Go struct must have gm_flat_block_t's layout
// (gm_alloc.h, asserted there too): uint64 address, size, seg_size at 0,
// 8, 16, uint32 seg_blocks, id at 24, 28, uint8 state at 32; 40 bytes.
func TestFlatBlockLayout(t *testing.T) {
	var b FlatBlock
	got := []uintptr{unsafe.Sizeof(b), unsafe.Offsetof(b.Address), unsafe.Offsetof(b.Size), unsafe.Offsetof(b.SegSize),
		unsafe.Offsetof(b.SegBlocks), unsafe.Offsetof(b.ID), unsafe.Offsetof(b.State)}
	want := []uintptr{40, 0, 8, 16, 24, 28, 32}
	names := []string{"size", "Address", "Size", "SegSize", "SegBlocks", "ID", "State"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("FlatBlock %s at %d, gm_flat_block_t has it at %d", names[i], got[i], want[i])
		}
	}
	if unsafe.Sizeof(b.SegBlocks) != 4 || unsafe.Sizeof(b.ID) != 4 || unsafe.Sizeof(b.State) != 1 || unsafe.Alignof(b) != 8 {
		t.Errorf("FlatBlock field sizes or alignment differ from gm_flat_block_t")
	}
}
