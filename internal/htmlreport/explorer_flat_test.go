package htmlreport

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// TestOpFlatPacksAsOp hands two packers the same ops, one as records
// (Op, each block figures.BlockRecOf) and one as the allocator's blocks
// (OpFlat): their columns must hold the same bytes, for used blocks of
// banded, aggregated and unknown allocations, ids dense and sparse.
func TestOpFlatPacksAsOp(t *testing.T) {
	const ops, allocs = 300, 40
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]uint64, allocs)
	for k := range sizes {
		sizes[k] = uint64(1+rng.IntN(64)) << 9
	}
	start := func(p *packer) {
		head := &figures.Explorer{Ops: ops, OOMOp: -1}
		p.Start(figures.ExplorerStart{Head: head, Allocs: allocs, Sizes: func(yield func(uint64)) error {
			for _, s := range sizes {
				yield(s)
			}
			return nil
		}})
		for k, s := range sizes {
			p.Alloc(int32(k), &figures.Lifetime{Start: 0, End: ops, Released: ops, Size: s, Stack: -1})
		}
	}
	byRec, byFlat := &packer{maxBands: allocs / 2}, &packer{maxBands: allocs / 2} // half aggregated
	start(byRec)
	start(byFlat)
	ix := &figures.AllocIndex{Dense: make([]int32, 64), Sparse: map[uint32]int32{}}
	for id := range uint32(48) { // ids 40 to 47 hold nothing
		if id < allocs {
			ix.Dense[id] = int32(id) + 1
		}
	}
	ix.Sparse[figures.DenseIDs+5] = 7
	ids := []uint32{0, 3, 17, 39, 41, 63, 100, figures.DenseIDs + 5, figures.DenseIDs + 9}
	states := []alloc.BlockState{alloc.BlockInactive, alloc.BlockAllocated, alloc.BlockPendingFree}
	addr := uint64(0x7f0000000000)
	for i := range ops {
		ins := make([]alloc.FlatBlock, rng.IntN(5))
		for j := range ins {
			b := &ins[j]
			b.Address, b.Size = addr, uint64(1+rng.IntN(32))<<9
			addr += b.Size
			if rng.IntN(3) == 0 {
				b.SegSize = b.Size << 2
			}
			b.SegBlocks = uint32(1 + rng.IntN(3))
			b.ID, b.State = ids[rng.IntN(len(ids))], states[rng.IntN(len(states))]
		}
		recs := make([]figures.BlockRec, len(ins))
		for j := range ins {
			recs[j] = figures.BlockRecOf(&ins[j], ix)
		}
		pos, del := int32(rng.IntN(50)), int32(rng.IntN(3))
		byRec.Op(i, int64(i), figures.Change{Pos: pos, Del: del, Ins: recs})
		byFlat.OpFlat(i, int64(i), pos, del, ins, ix)
	}
	a, b := byRec.columns(), byFlat.columns()
	for k := range a {
		if !bytes.Equal(a[k].c.b, b[k].c.b) || a[k].c.n != b[k].c.n {
			t.Errorf("column %s: %d values by Op, %d by OpFlat, or their bytes differ", a[k].name, a[k].c.n, b[k].c.n)
		}
	}
	if byRec.odd != byFlat.odd {
		t.Errorf("odd %v by Op, %v by OpFlat", byRec.odd, byFlat.odd)
	}
}
