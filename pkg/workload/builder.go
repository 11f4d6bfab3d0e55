package workload

import (
	"container/heap"
	"fmt"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// maxOps bounds the operations one workload may produce, so that a short
// script with nested repeats cannot exhaust memory.
const maxOps = 1 << 24

// buffer is one live allocation of a builder.
type buffer struct {
	id       uint32
	stream   uint64
	recorded bool // record_stream named a stream other than the allocating one
}

// builder turns named allocate/free actions into an operation stream.
// It hands out the smallest free ID, so IDs stay dense, and it defers the
// OpFreeComplete of buffers used on other streams to the next allocation.
type builder struct {
	w       Workload
	live    map[string]*buffer
	free    idHeap // released IDs, smallest first
	next    uint32 // next never-used ID
	pending []uint32
}

func newBuilder(name, desc string) *builder {
	return &builder{w: Workload{Name: name, Description: desc}, live: map[string]*buffer{}}
}

func (b *builder) emit(op alloc.Op) error {
	if len(b.w.Ops) >= maxOps {
		return fmt.Errorf("workload has more than %d operations", maxOps)
	}
	b.w.Ops = append(b.w.Ops, op)
	return nil
}

// flush completes the frees still waiting on other streams and releases
// their IDs.
func (b *builder) flush() error {
	for _, id := range b.pending {
		if err := b.emit(alloc.Op{Kind: alloc.OpFreeComplete, ID: id}); err != nil {
			return err
		}
		heap.Push(&b.free, id)
	}
	b.pending = b.pending[:0]
	return nil
}

func (b *builder) alloc(name string, size, stream uint64) error {
	if _, ok := b.live[name]; ok {
		return fmt.Errorf("buffer %s is already allocated", name)
	}
	if size == 0 {
		return fmt.Errorf("buffer %s: size must be positive", name)
	}
	if err := b.flush(); err != nil {
		return err
	}
	var id uint32
	if b.free.Len() > 0 {
		id = heap.Pop(&b.free).(uint32)
	} else {
		id = b.next
		b.next++
	}
	b.live[name] = &buffer{id: id, stream: stream}
	return b.emit(alloc.Op{Kind: alloc.OpAlloc, ID: id, Stream: stream, Size: size})
}

func (b *builder) release(name string) error {
	buf, ok := b.live[name]
	if !ok {
		return fmt.Errorf("free of %s, which is not allocated", name)
	}
	delete(b.live, name)
	if err := b.emit(alloc.Op{Kind: alloc.OpFree, ID: buf.id, Stream: buf.stream}); err != nil {
		return err
	}
	if buf.recorded {
		// The allocator keeps the block pending until OpFreeComplete; its
		// ID stays taken until then.
		b.pending = append(b.pending, buf.id)
		return nil
	}
	heap.Push(&b.free, buf.id)
	return nil
}

func (b *builder) recordStream(name string, stream uint64) error {
	buf, ok := b.live[name]
	if !ok {
		return fmt.Errorf("record_stream of %s, which is not allocated", name)
	}
	if stream != buf.stream {
		buf.recorded = true
	}
	return b.emit(alloc.Op{Kind: alloc.OpRecordStream, ID: buf.id, Stream: stream})
}

func (b *builder) emptyCache() error {
	// empty_cache synchronizes first, so outstanding events have completed.
	if err := b.flush(); err != nil {
		return err
	}
	return b.emit(alloc.Op{Kind: alloc.OpEmptyCache})
}

func (b *builder) phase(name string) {
	b.w.Phases = append(b.w.Phases, Phase{Name: name, Op: len(b.w.Ops)})
}

// finish completes pending frees and returns the workload.
func (b *builder) finish() (*Workload, error) {
	if err := b.flush(); err != nil {
		return nil, err
	}
	w := b.w
	return &w, nil
}

type idHeap []uint32

func (h idHeap) Len() int           { return len(h) }
func (h idHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h idHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(x any)        { *h = append(*h, x.(uint32)) }
func (h *idHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// rename gives a live buffer a new name, as when a Python variable is
// rebound to a tensor.
func (b *builder) rename(from, to string) {
	buf := b.live[from]
	delete(b.live, from)
	b.live[to] = buf
}
