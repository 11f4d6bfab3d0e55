package report

import (
	"fmt"
	"math"
)

// Replay is everything a report shows about one replay. The caller fills it
// in; the renderers only read it.
type Replay struct {
	Source   string // trace file or workload name
	Settings string // PYTORCH_CUDA_ALLOC_CONF in force; "" means the defaults
	Policy   string // allocator policy: "pytorch", "nocache", ...
	Device   int    // device index, as PyTorch's messages print it

	DeviceMemory uint64 // the card's memory in bytes
	Allowed      uint64 // the cap (per-process memory fraction × card); 0 = none

	Ops       int    // operations replayed
	Skipped   []Skip // anomalies of the trace stepped over, by reason
	Truncated bool   // the trace was cut short by its max_entries

	// Stats holds the torch.cuda.memory_stats() keys at the end of the
	// replay (or at the OOM), e.g. "allocated_bytes.all.current".
	Stats map[string]int64

	// PeakOp is the index of the operation after which reserved memory
	// first reached its peak.
	PeakOp int
	// PeakAllocatedAtPeakReserved is the allocated bytes at the moment
	// reserved memory peaked (the most seen while it stayed at the peak).
	PeakAllocatedAtPeakReserved int64
	// LargestFree is the size of the largest free cached block at the end.
	LargestFree uint64
	// LowerBound is the peak of live bytes, each request rounded up to
	// 512 B: no allocator with PyTorch's alignment can reserve less.
	LowerBound uint64

	// Timeline is memory over the replay, already downsampled to at most
	// a few thousand points, in operation order.
	Timeline []Point

	// OOM describes the out-of-memory error that ended the replay, or is
	// nil when it ran to completion.
	OOM *OOM
	// OOMs lists every out-of-memory in order: those the recording had too
	// (Recorded: counted, and the replay went on; their figures are those
	// of the moment, without the diagnosis), then OOM, if any.
	OOMs []*OOM
	// Pools describe the private memory pools the trace used (CUDA graphs,
	// torch.cuda.MemPool), one line each, as the replay inferred them.
	Pools []string
}

// Skip counts trace anomalies of one kind that the replay stepped over.
type Skip struct {
	Reason string // e.g. "free of an unknown block"
	Count  int
}

// Point is memory in use after operation Op.
type Point struct {
	Op                          int
	Allocated, Reserved, Active int64
}

// OOM describes an allocation that failed.
type OOM struct {
	OpIndex   int    // index of the failing operation
	Size      uint64 // the request as asked
	Rounded   uint64 // the request after PyTorch's size rounding
	AllocSize uint64 // the segment it needed (PyTorch's "Tried to allocate")
	Stream    uint64

	DeviceTotal, DeviceFree uint64 // the card, as cudaMemGetInfo reported it
	Allowed                 uint64 // the cap; 0 = none

	// Allocated and Reserved are allocated_bytes.all.current and
	// reserved_bytes.all.current after the allocator released what it
	// could, as PyTorch reports them.
	Allocated, Reserved int64
	CachedFree          uint64 // bytes of free cached blocks (reserved − active)
	LargestFree         uint64 // the largest free cached block

	// Segments are the few segments holding the largest holes, worst first.
	Segments []SegmentMap
	// Frames is the stack of the failing allocation, innermost first, if known.
	Frames []string
	// PinFrames are the stacks of the allocations pinning the largest
	// holes (keeping their segments from being released), if known.
	PinFrames [][]string
	// Recorded: the recording ran out of memory here too and went on.
	Recorded bool
	// PrivatePools is the free cached bytes in private pools (CUDA graphs),
	// which PyTorch's message counts as allocated in private pools.
	PrivatePools uint64
}

// SegmentMap is one segment and its blocks in address order.
type SegmentMap struct {
	Address, Size uint64
	Blocks        []Block
}

// Block is one block of a segment.
type Block struct {
	Size  uint64
	State BlockState
}

// BlockState says what a block is used for.
type BlockState string

// The states of a block.
const (
	Allocated BlockState = "allocated" // handed out to the program
	Pending   BlockState = "pending"   // freed, waiting for other streams
	Free      BlockState = "free"      // cached, ready for reuse
)

// Fragmentation holds the fragmentation ratios of a replay; each is NaN
// when its denominator is zero.
type Fragmentation struct {
	End    float64 // 1 − allocated/reserved at the end
	AtPeak float64 // 1 − allocated/reserved when reserved peaked
	Peaks  float64 // 1 − peak allocated/peak reserved
	Holes  float64 // 1 − largest free block/cached free bytes, at the end
}

// Fragmentation computes the ratios from r's figures (missing stats read as
// zero).
func (r *Replay) Fragmentation() Fragmentation {
	return Fragmentation{
		End:    oneMinus(r.stat("allocated_bytes.all.current"), r.stat("reserved_bytes.all.current")),
		AtPeak: oneMinus(r.PeakAllocatedAtPeakReserved, r.stat("reserved_bytes.all.peak")),
		Peaks:  oneMinus(r.stat("allocated_bytes.all.peak"), r.stat("reserved_bytes.all.peak")),
		Holes:  oneMinus(int64(min(r.LargestFree, math.MaxInt64)), r.CachedFree()),
	}
}

// CachedFree is the bytes of free cached blocks at the end: reserved minus
// active memory. Blocks freed but still pending on other streams are
// active, not free, because they cannot be reused yet.
func (r *Replay) CachedFree() int64 {
	return r.stat("reserved_bytes.all.current") - r.stat("active_bytes.all.current")
}

// OverLowerBound is peak reserved memory divided by the lower bound, or NaN
// without a lower bound.
func (r *Replay) OverLowerBound() float64 {
	if r.LowerBound == 0 {
		return math.NaN()
	}
	return float64(r.stat("reserved_bytes.all.peak")) / float64(r.LowerBound)
}

func (r *Replay) stat(key string) int64 { return r.Stats[key] }

func oneMinus(num, den int64) float64 {
	if den == 0 {
		return math.NaN()
	}
	return 1 - float64(num)/float64(den)
}

// Headroom is what the device would still hand out: the smaller of the
// card's free bytes and what the cap leaves above reserved memory.
func (o *OOM) Headroom() uint64 {
	h := o.DeviceFree
	if o.Allowed > 0 {
		var left uint64
		if o.Reserved >= 0 && uint64(o.Reserved) < o.Allowed {
			left = o.Allowed - uint64(o.Reserved)
		}
		h = min(h, left)
	}
	return h
}

// Fragmented reports whether this is a fragmentation OOM: the free cached
// bytes and the headroom together would hold the rounded request, yet the
// allocation failed, so no free block (usable on its stream) and no new
// segment was big enough. Otherwise the memory really is short.
func (o *OOM) Fragmented() bool {
	return sat(o.CachedFree, o.Headroom()) >= o.Rounded
}

// Verdict is "fragmentation OOM" or "real shortage".
func (o *OOM) Verdict() string {
	if o.Fragmented() {
		return "fragmentation OOM"
	}
	return "real shortage"
}

// sat adds without wrapping around.
func sat(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// TorchOOMMessage is the message of the torch.OutOfMemoryError PyTorch
// raises for o on the given device (spec §6.5). The per-process part, which
// needs NVML, is left out, and gpumem has no private pools.
func TorchOOMMessage(device int, o *OOM) string {
	allowed := ""
	if o.Allowed > 0 {
		allowed = FormatSizeTorch(o.Allowed) + " allowed; "
	}
	priv := int64(o.PrivatePools)
	privMsg := ""
	if priv > 0 {
		privMsg = "with " + FormatSizeTorch(uint64(priv)) + " allocated in private pools (e.g., CUDA Graphs), "
	}
	unallocated := uint64(0)
	if o.Reserved > o.Allocated+priv {
		unallocated = uint64(o.Reserved - o.Allocated - priv)
	}
	return fmt.Sprintf("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "+
		"%sOf the allocated memory %s is allocated by PyTorch, %sand %s is reserved by PyTorch but unallocated. "+
		"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "+
		"See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
		FormatSizeTorch(o.AllocSize), device, FormatSizeTorch(o.DeviceTotal), FormatSizeTorch(o.DeviceFree),
		allowed, FormatSizeTorch(uint64(max(o.Allocated+priv, 0))), privMsg, FormatSizeTorch(unallocated))
}
