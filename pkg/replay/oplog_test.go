package replay

import (
	"math"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// The packed log gives back every op as it was added, pool ids past 16
// bits and IDs of one to three bytes included (a varint each), over more
// than one Batch.
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
	back(t, ops, event, stack, l.each)
	// as run unpacks it: runBatch ops at a time
	back(t, ops, event, stack, func(f func([]alloc.Op, []int32, []int32) error) error {
		return l.into(make([]alloc.Op, 0, runBatch), make([]int32, 0, runBatch), make([]int32, 0, runBatch), f)
	})
}

// An allocation's size comes back whether the size cache held it (a size
// seen before, one whose slot another size took since, zero) or not (the
// largest sizes, which skip the cache), and repeated sizes take a byte.
func TestOpLogSizeCache(t *testing.T) {
	sizes := []uint64{512, 512, 1 << 20, 0, 0, 512, math.MaxUint64, math.MaxUint64 - sizeSlots,
		math.MaxUint64 - sizeSlots - 1, math.MaxUint64 - sizeSlots - 1, 3 << 30, 1 << 20}
	for i := range 5000 { // enough sizes that slots are taken over
		sizes = append(sizes, uint64(i%700)*512, uint64(i%3)<<40)
	}
	ops, event, stack := make([]alloc.Op, len(sizes)), make([]int32, len(sizes)), make([]int32, len(sizes))
	for i, n := range sizes {
		ops[i] = alloc.Op{Kind: alloc.OpAlloc, ID: uint32(i), Size: n}
		event[i], stack[i] = int32(i), -1
	}
	var l opLog
	l.add(ops, event, stack)
	back(t, ops, event, stack, l.each)
	var again opLog // one size over and over: a byte for it after the first
	same := make([]alloc.Op, 1000)
	for i := range same {
		same[i] = alloc.Op{Kind: alloc.OpAlloc, Size: 12345 << 9}
	}
	again.add(same, make([]int32, len(same)), make([]int32, len(same)))
	if n := len(again.bytes(0)); n > 3*len(same)+8 {
		t.Errorf("%d allocations of one size take %d bytes, want 3 each", len(same), n)
	}
}

// A pass over a big log unpacks it runBatch operations at a time, into
// slices that stay small (a replay holds them after its read).
func TestOpLogEachBatch(t *testing.T) {
	n := Batch + 1000
	ops := make([]alloc.Op, n)
	for i := range ops {
		ops[i] = alloc.Op{Kind: alloc.OpFree, ID: uint32(i % 100)}
	}
	var l opLog
	l.add(ops, make([]int32, n), make([]int32, n))
	most, sum := 0, 0
	_ = l.each(func(o []alloc.Op, _, _ []int32) error {
		most, sum = max(most, cap(o)), sum+len(o)
		return nil
	})
	if most > runBatch || sum != n {
		t.Errorf("passed %d ops in slices of up to %d, want %d in up to %d", sum, most, n, runBatch)
	}
}

// back checks that pass gives back ops, event and stack.
func back(t *testing.T, ops []alloc.Op, event, stack []int32, pass func(func([]alloc.Op, []int32, []int32) error) error) {
	t.Helper()
	var got []alloc.Op
	var gotEvent, gotStack []int32
	err := pass(func(o []alloc.Op, e, s []int32) error {
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

// BenchmarkOpLogEach unpacks a log shaped like a training trace's: an
// allocation (size, a stack, the next event) then, later, its free.
func BenchmarkOpLogEach(b *testing.B) {
	const n = 1 << 20
	ops, event, stack := make([]alloc.Op, n), make([]int32, n), make([]int32, n)
	for i := range ops {
		id := uint32(i / 2 % 5000)
		if i%2 == 0 {
			ops[i] = alloc.Op{Kind: alloc.OpAlloc, ID: id, Size: uint64(i%97+1) << 12}
			stack[i] = int32(i % 300)
		} else {
			ops[i] = alloc.Op{Kind: alloc.OpFree, ID: id}
			stack[i] = -1
		}
		event[i] = int32(i)
	}
	var l opLog
	l.add(ops, event, stack)
	for b.Loop() {
		sum := 0
		_ = l.each(func(o []alloc.Op, _, _ []int32) error {
			sum += len(o)
			return nil
		})
		if sum != n {
			b.Fatalf("%d ops back of %d", sum, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/op")
}

// add puts ops, with their events and stacks, at the end of the log.
func (l *opLog) add(ops []alloc.Op, event, stack []int32) {
	for i := range ops {
		l.put(&ops[i], event[i], stack[i])
	}
}

// putFree and putAlloc pack an OpFree and an OpAlloc of a size alone as
// put does, byte for byte, whatever the ID, the size (in the size cache
// or not, or too large for it) and the Event and Stack beside the
// previous op's.
func TestOpLogPutFreeAlloc(t *testing.T) {
	var a, b opLog
	var ops []alloc.Op
	var events, stacks []int32
	event := int32(0)
	sizes := []uint64{512, 512, 1 << 20, 0, math.MaxUint64, math.MaxUint64 - sizeSlots, 512, 3 << 30}
	for i := range 3000 {
		id := uint32(i*i) * 131
		event += []int32{0, 1, 1, -5, 100000}[i%5] // the same, the next, back, far on
		stack := int32(i%7/2) - 1                  // none, the same, new
		if i%3 == 0 {
			size := sizes[i%len(sizes)] + uint64(i%11/10)*uint64(i)<<9 // now and then a new one
			ops = append(ops, alloc.Op{Kind: alloc.OpAlloc, ID: id, Size: size})
			a.put(&ops[len(ops)-1], event, stack)
			b.putAlloc(id, size, event, stack)
		} else {
			ops = append(ops, alloc.Op{Kind: alloc.OpFree, ID: id})
			a.put(&ops[len(ops)-1], event, stack)
			b.putFree(id, event, stack)
		}
		events, stacks = append(events, event), append(stacks, stack)
	}
	back(t, ops, events, stacks, b.each) // the Events' jumps back and far on too
	if a.n != b.n || a.allocs != b.allocs || len(a.chunks) != len(b.chunks) {
		t.Fatalf("%d ops (%d allocs) in %d chunks, want %d (%d) in %d", b.n, b.allocs, len(b.chunks), a.n, a.allocs, len(a.chunks))
	}
	for k := range a.chunks {
		if !slices.Equal(a.bytes(k), b.bytes(k)) {
			t.Fatalf("chunk %d differs", k)
		}
	}
}

// A log cut inside an op is no log: the reader says so rather than give
// back an op made of what lies past it.
func TestOpLogCut(t *testing.T) {
	var l opLog
	l.putAlloc(300, 1<<40, 1, -1) // 1<<40 is not in the size cache: a uvarint of 6 bytes
	c := l.bytes(0)
	ops, ev, st := make([]alloc.Op, 1), make([]int32, 1), make([]int32, 1)
	if n, used := new(alloc.Unpacker).Unpack(c, ops, ev, st); n != 1 || used != len(c) || ops[0].Size != 1<<40 {
		t.Fatalf("whole log: %d ops, %d bytes of %d, %+v", n, used, len(c), ops[0])
	}
	defer func() {
		if recover() == nil {
			t.Error("a cut log unpacked without a panic")
		}
	}()
	new(alloc.Unpacker).Unpack(c[:len(c)-2], ops, ev, st)
}

// The usual ops, which the reader unpacks by a shorter way (an ID of one
// byte, the next Event, the same Stack or none, no other field; for an
// allocation a size in the cache), come back as put packed them, among
// ops just off them: an ID of two bytes, a new size or Stack, an Event
// that is not the next, another kind, another field.
func TestOpLogUsual(t *testing.T) {
	var l opLog
	var ops []alloc.Op
	var events, stacks []int32
	event, stack := int32(0), int32(-1)
	kinds := []alloc.OpKind{alloc.OpAlloc, alloc.OpFree, alloc.OpAlloc, alloc.OpFree, alloc.OpFreeRequest, alloc.OpFreeComplete}
	for i := range 20000 {
		op := alloc.Op{Kind: kinds[i%len(kinds)], ID: uint32(i*13) % 140}
		if op.Kind == alloc.OpAlloc {
			op.Size = uint64(i%9) << 9
		}
		switch i % 97 {
		case 5:
			op.Stream = 7
		case 11:
			op.Size = uint64(i) << 20 // new
		}
		switch i % 31 {
		case 3:
			stack = int32(i % 5) // new, or -1 again
		case 4:
			stack = -1
		}
		if i%43 == 0 {
			event += 3
		} else {
			event++
		}
		ops = append(ops, op)
		l.put(&ops[len(ops)-1], event, stack)
		events, stacks = append(events, event), append(stacks, stack)
	}
	back(t, ops, events, stacks, l.each)
}
