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
	// OpEmptyCache returns every whole free segment to the device (empty_cache).
	OpEmptyCache
)

// Op is one operation of a stream handed to [Allocator.Run].
//
// IDs name allocations within one stream of operations; an ID may be reused
// once its allocation has been freed. Hint, on an OpAlloc, is the device
// address the recorded program got for the segment this allocation created,
// or 0; the simulated device uses it so that replays see the real addresses
// (best fit breaks ties by address).
type Op struct {
	Kind   OpKind
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
	}
	return "unknown"
}
