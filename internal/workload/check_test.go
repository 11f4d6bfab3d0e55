package workload

import (
	"fmt"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// opsState is what checkOps learns from a well-formed stream.
type opsState struct {
	live     map[uint32]uint64 // allocated, not freed: ID → size
	peak     uint64            // most bytes allocated at once
	maxID    uint32
	maxLive  int // most IDs taken at once (live or pending)
	finalLen int
}

// checkOps checks that ops is a stream an allocator can run: IDs are
// allocated before they are freed or recorded, never allocated while
// taken, pending frees complete once, and IDs stay dense.
func checkOps(ops []alloc.Op) (opsState, error) {
	s := opsState{live: map[uint32]uint64{}}
	pending := map[uint32]bool{}
	recorded := map[uint32]bool{}
	stream := map[uint32]uint64{}
	var cur uint64
	for i, op := range ops {
		switch op.Kind {
		case alloc.OpAlloc:
			if _, ok := s.live[op.ID]; ok || pending[op.ID] {
				return s, fmt.Errorf("op %d: ID %d allocated while taken", i, op.ID)
			}
			if op.Size == 0 {
				return s, fmt.Errorf("op %d: zero size", i)
			}
			s.live[op.ID] = op.Size
			stream[op.ID] = op.Stream
			recorded[op.ID] = false
			cur += op.Size
			s.peak = max(s.peak, cur)
			s.maxID = max(s.maxID, op.ID)
			s.maxLive = max(s.maxLive, len(s.live)+len(pending))
		case alloc.OpFree:
			size, ok := s.live[op.ID]
			if !ok {
				return s, fmt.Errorf("op %d: free of ID %d, which is not allocated", i, op.ID)
			}
			if op.Stream != stream[op.ID] {
				return s, fmt.Errorf("op %d: free of ID %d on stream %d, allocated on %d", i, op.ID, op.Stream, stream[op.ID])
			}
			delete(s.live, op.ID)
			cur -= size
			if recorded[op.ID] {
				pending[op.ID] = true
			}
		case alloc.OpFreeComplete:
			if !pending[op.ID] {
				return s, fmt.Errorf("op %d: free_completed of ID %d, which is not pending", i, op.ID)
			}
			delete(pending, op.ID)
		case alloc.OpRecordStream:
			if _, ok := s.live[op.ID]; !ok {
				return s, fmt.Errorf("op %d: record_stream of ID %d, which is not allocated", i, op.ID)
			}
			if op.Stream != stream[op.ID] {
				recorded[op.ID] = true
			}
		case alloc.OpEmptyCache:
			if len(pending) > 0 {
				return s, fmt.Errorf("op %d: empty_cache with %d frees pending", i, len(pending))
			}
		default:
			return s, fmt.Errorf("op %d: kind %d", i, op.Kind)
		}
	}
	if len(pending) > 0 {
		return s, fmt.Errorf("%d frees never completed", len(pending))
	}
	if len(ops) > 0 && int(s.maxID) >= s.maxLive {
		return s, fmt.Errorf("IDs not dense: ID %d with at most %d taken at once", s.maxID, s.maxLive)
	}
	s.finalLen = len(s.live)
	return s, nil
}
