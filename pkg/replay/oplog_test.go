package replay

import (
	"math"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// The packed log gives back every op as it was added, pool ids past 16
// bits included (a varint each), over more than one Batch.
func TestOpLogRoundTrip(t *testing.T) {
	pools := []uint32{0, 1, math.MaxUint16, math.MaxUint16 + 1, 1 << 31, math.MaxUint32}
	kinds := []alloc.OpKind{alloc.OpAlloc, alloc.OpFree, alloc.OpPoolRelease, alloc.OpPoolEmpty}
	n := Batch + 1000
	ops, event, stack := make([]alloc.Op, n), make([]int32, n), make([]int32, n)
	for i := range ops {
		ops[i] = alloc.Op{Kind: kinds[i%len(kinds)], Pool: pools[i%len(pools)], ID: uint32(i * 7),
			Size: uint64(i) << 9, Stream: uint64(i % 3), Hint: uint64(i%5) << 40, Flags: uint8(i % 3)}
		event[i], stack[i] = int32(i/2), int32(i%11)-1
	}
	var l opLog
	l.add(ops[:100], event[:100], stack[:100])
	l.add(ops[100:], event[100:], stack[100:])
	var got []alloc.Op
	var gotEvent, gotStack []int32
	err := l.each(func(o []alloc.Op, e, s []int32) error {
		got, gotEvent, gotStack = append(got, o...), append(gotEvent, e...), append(gotStack, s...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ops) || !slices.Equal(gotEvent, event) || !slices.Equal(gotStack, stack) {
		for i := range min(len(got), len(ops)) {
			if got[i] != ops[i] {
				t.Fatalf("op %d: %+v, added %+v", i, got[i], ops[i])
			}
		}
		t.Fatalf("%d ops back of %d added, or their events or stacks differ", len(got), len(ops))
	}
}
