// Package model defines the data every trace reader produces: a
// [Snapshot] of segments, per-device event lists and settings. Package
// trace re-exports these types; the readers (package trace for text
// formats, package pickle for PyTorch snapshots) fill them in.
package model

import "fmt"

// Action is the kind of a trace event.
type Action uint8

// Event actions, as recorded by the CUDA caching allocator.
const (
	ActionAlloc         Action = iota + 1 // a block was handed to the program
	ActionFreeRequested                   // the program freed a block; stream uses may still be pending
	ActionFreeCompleted                   // the block became reusable
	ActionSegmentAlloc                    // cudaMalloc of a new segment
	ActionSegmentFree                     // cudaFree of a segment
	ActionSegmentMap                      // pages mapped into an expandable segment
	ActionSegmentUnmap                    // pages unmapped from an expandable segment
	ActionOOM                             // an allocation failed
	ActionSnapshot                        // a snapshot was taken
)

// String returns PyTorch's name for the action, such as "free_requested".
func (a Action) String() string {
	if a >= ActionAlloc && a <= ActionSnapshot {
		return actionNames[a-1]
	}
	return fmt.Sprintf("Action(%d)", a)
}

// Event is one entry of a device trace. Action and Stack share a word,
// so an Event takes 40 bytes.
type Event struct {
	Action Action
	Stack  int32  // index into Snapshot.Stacks; -1 when the event has no frames
	Addr   uint64 // for ActionOOM: the "device_free" value
	Size   uint64
	Stream uint64 // cudaStream_t as integer
	TimeUS int64  // microseconds since the epoch; 0 if not recorded
}

// BlockState is the state of a block in a snapshot segment.
type BlockState uint8

// Block states.
const (
	BlockInactive    BlockState = iota // free, cached by the allocator
	BlockAllocated                     // "active_allocated": in use by the program
	BlockPendingFree                   // "active_pending_free": freed, waiting on stream work
)

// String returns PyTorch's name for the state.
func (s BlockState) String() string {
	switch s {
	case BlockInactive:
		return "inactive"
	case BlockAllocated:
		return "active_allocated"
	case BlockPendingFree:
		return "active_pending_free"
	}
	return fmt.Sprintf("BlockState(%d)", s)
}

// Block is a piece of a segment. RequestedSize of an inactive block is
// stale (its last use) or 0.
type Block struct {
	Address, Size, RequestedSize uint64
	State                        BlockState
	Stack                        int32 // index into Snapshot.Stacks, -1 if none
}

// Segment is one cudaMalloc'd segment, or one mapped range of an
// expandable segment. Its blocks are contiguous and in address order.
type Segment struct {
	Device        int
	Address       uint64
	TotalSize     uint64 // reserved bytes: sum of block sizes
	AllocatedSize uint64 // bytes in active_allocated blocks
	ActiveSize    uint64 // allocated plus pending-free bytes
	RequestedSize uint64 // bytes the program asked for in active blocks
	Stream        uint64
	Small         bool     // segment_type == "small" (the small-block pool)
	PoolID        [2]int64 // segment_pool_id; (0, 0) is the default pool
	Expandable    bool
	Stack         int32 // index into Snapshot.Stacks, -1 if none
	Blocks        []Block
}

// Settings holds the snapshot's allocator_settings.
type Settings struct {
	Present                bool   // the snapshot had allocator_settings
	AllocConf              string // "PYTORCH_CUDA_ALLOC_CONF"
	MaxSplitSize           int64  // -1 unlimited (also when not recorded)
	GCThreshold            float64
	ExpandableSegments     bool
	RoundupPower2Divisions [16]int // index i = interval starting at 2^i MiB (keys "1","2",...,"32768")
}

// Frame is one Python or C++ stack frame, innermost first in a stack.
type Frame struct {
	Filename string
	Line     int
	Name     string
}

// Annotation is one external_annotations entry (a record_function
// marker). Fields holds its other keys, such as "name" and "stage".
type Annotation struct {
	Device int
	TimeUS int64
	Fields map[string]string
}

// Snapshot is a decoded memory snapshot.
type Snapshot struct {
	Segments    []Segment
	Traces      [][]Event // one list per device, in recorded order
	Settings    Settings
	Annotations []Annotation
	Stacks      [][]Frame // distinct frame lists, shared by events/blocks/segments (interned)
}

// actionNames are PyTorch's names of the actions, in Action order.
var actionNames = [...]string{
	"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
	"segment_map", "segment_unmap", "oom", "snapshot",
}

// ActionEmptyCache is a torch.cuda.empty_cache call. Only gpumem's text
// trace records it as such: PyTorch's own traces show empty_cache as the
// run of segment_free events it caused.
const ActionEmptyCache Action = 100
