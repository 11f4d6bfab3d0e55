package workload

import (
	"container/heap"
	"fmt"

	"github.com/gpumem/gpumem/pkg/alloc"
)

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
	lim     Limits
	n       int   // operations made
	mem     int64 // bytes held for live names and phases, as counted against lim.Memory
	live    map[string]*buffer
	free    idHeap // released IDs, smallest first
	next    uint32 // next never-used ID
	pending []uint32
	// sink, when set, receives the operations in batches of cap(batch)
	// instead of their being kept in w.Ops, so that memory stays bounded.
	sink  func([]alloc.Op) error
	batch []alloc.Op
	// noPhases: the phases are already known (a second run of a script).
	noPhases bool
}

// Rough costs, in bytes, of a live buffer besides its name and of a phase
// marker besides its text, for the Memory limit.
const (
	liveCost  = 96
	phaseCost = 32
)

func newBuilder(name, desc string) *builder {
	return &builder{w: Workload{Name: name, Description: desc}, lim: DefaultLimits, live: map[string]*buffer{}}
}

func (b *builder) emit(op alloc.Op) error {
	if b.n >= b.lim.Ops {
		return &LimitError{What: "operations", Limit: int64(b.lim.Ops), Hint: b.lim.OpsHint}
	}
	b.n++
	if b.sink == nil {
		b.w.Ops = append(b.w.Ops, op)
		return nil
	}
	b.batch = append(b.batch, op)
	if len(b.batch) == cap(b.batch) {
		return b.drain()
	}
	return nil
}

// drain hands the batched operations to the sink.
func (b *builder) drain() error {
	if len(b.batch) == 0 {
		return nil
	}
	err := b.sink(b.batch)
	b.batch = b.batch[:0]
	return err
}

// hold counts n more bytes against the Memory limit.
func (b *builder) hold(n int64) error {
	b.mem += n
	if b.mem > b.lim.Memory {
		return &LimitError{What: "bytes of buffer names and phases", Limit: b.lim.Memory}
	}
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
		return fmt.Errorf("buffer %s is already allocated", short(name))
	}
	if size == 0 {
		return fmt.Errorf("buffer %s: size must be positive", short(name))
	}
	if len(b.live) >= b.lim.Live {
		return &LimitError{What: "live buffers", Limit: int64(b.lim.Live)}
	}
	if err := b.hold(int64(len(name)) + liveCost); err != nil {
		return err
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
		return fmt.Errorf("free of %s, which is not allocated", short(name))
	}
	delete(b.live, name)
	b.mem -= int64(len(name)) + liveCost
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
		return fmt.Errorf("record_stream of %s, which is not allocated", short(name))
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
	if !b.noPhases {
		b.w.Phases = append(b.w.Phases, Phase{Name: name, Op: b.n})
	}
}

// finish completes pending frees and returns the workload.
func (b *builder) finish() (*Workload, error) {
	if err := b.flush(); err != nil {
		return nil, err
	}
	if b.sink != nil {
		if err := b.drain(); err != nil {
			return nil, err
		}
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
