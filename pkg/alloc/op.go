package alloc

// OpKind says what one operation of an operation stream does.
type OpKind uint8

// The operations a stream may hold. They mirror what a program does to a
// caching allocator: ask for memory, give it back (possibly in two steps when
// other streams still use it), mark cross-stream use, and empty the cache.
const (
	// OpAlloc allocates Size bytes on Stream and names the result ID.
	OpAlloc OpKind = iota + 1
	// OpFree frees allocation ID at once (free_requested and free_completed together).
	OpFree
	// OpFreeRequest frees allocation ID whose memory is still in use on
	// another stream: allocated bytes drop now, the block stays active
	// until OpFreeComplete.
	OpFreeRequest
	// OpFreeComplete completes an earlier OpFreeRequest of allocation ID.
	OpFreeComplete
	// OpRecordStream records that Stream uses allocation ID (record_stream).
	OpRecordStream
	// OpEmptyCache returns every whole free segment of the default pools,
	// then of the released private pools, to the device (empty_cache).
	OpEmptyCache
	// OpPoolRelease drops private pool Pool's use count by one
	// (releasePool: the CUDA graph or MemPool holding it is gone). At zero
	// the pool takes no new allocations, and the next OpEmptyCache or OOM
	// retry returns its whole free segments.
	OpPoolRelease
	// OpPoolEmpty is ~MemPool's emptyCache(Pool): if the pool is released,
	// sync and return its whole free segments, leaving the default pools
	// alone; otherwise nothing.
	OpPoolEmpty
)

// Op flags.
const (
	// FlagRecordedOOM on an OpAlloc: the recorded program ran out of memory
	// here and went on (it caught the error). If the allocation fails it is
	// counted as PyTorch counts it, holds nothing, and Run goes on; it is
	// listed in Result.Survived.
	FlagRecordedOOM uint8 = 1
	// FlagClaim on an OpAlloc: take the free block starting at Hint in the
	// routed pool by address, whatever its size class, as a CUDA graph
	// tree's checkpoint restore does; an ordinary allocation when no free
	// block starts there.
	FlagClaim uint8 = 2
	// FlagReleasedBefore on an OpAlloc: the recording released cached
	// segments just before it, either by empty_cache() or by this
	// allocation's own retry (a first attempt refused). If its malloc
	// would not release (a cached block serves it, or the cap and the
	// device admit a new segment), the program called empty_cache(): the
	// replay does so first. Otherwise the malloc releases as it must. Only
	// an allocator told that the replay follows its recording
	// (Allocator.SetFollowsRecording) honours it: the test reads its cache
	// and cap for the recording's.
	FlagReleasedBefore uint8 = 4
)

// Op is one operation of a stream handed to [Allocator.Run].
//
// IDs name allocations within one stream of operations; an ID may be reused
// once its allocation has been freed. Hint, on an OpAlloc, is the device
// address the recorded program got for the segment this allocation created,
// or 0; the simulated device uses it so that replays see the real addresses
// (best fit breaks ties by address). Pool routes an OpAlloc to private pool
// Pool (created on its first allocation, with a use count of 1) instead of
// the default pools (0); the pytorch policy alone has private pools. Pool
// ids index a table, so number pools densely (1, 2, ...), as the replay
// does, one for each lifetime.
type Op struct {
	Kind   OpKind
	Flags  uint8
	Pool   uint32
	ID     uint32
	Stream uint64
	Size   uint64
	Hint   uint64
}

func (k OpKind) String() string {
	switch k {
	case OpAlloc:
		return "alloc"
	case OpFree:
		return "free"
	case OpFreeRequest:
		return "free_requested"
	case OpFreeComplete:
		return "free_completed"
	case OpRecordStream:
		return "record_stream"
	case OpEmptyCache:
		return "empty_cache"
	case OpPoolRelease:
		return "pool_release"
	case OpPoolEmpty:
		return "pool_empty"
	}
	return "unknown"
}
