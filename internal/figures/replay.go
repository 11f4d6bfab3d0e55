package figures

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// Replay is everything a report shows about one replay. The pipeline fills
// it in; the renderers only read it.
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

	// Stats are the allocator's torch.cuda.memory_stats() at the end of
	// the replay (or at the OOM); Stats.Map() gives PyTorch's key names.
	Stats alloc.Stats

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

	// Categories is what allocated memory was made of at its peak; nil
	// for a workload, or a trace the classification could not read.
	Categories *Categories
	// Pools describe the private memory pools the trace used (CUDA graphs,
	// torch.cuda.MemPool), one line each, as the replay inferred them.
	Pools []string

	// Addresses says how segment addresses were chosen; nil = not known
	// (a real device).
	Addresses *Addresses

	// InferredCap is the cap the replay ran under because the recording
	// shows one, nil when none was inferred or the user gave a card or
	// fraction.
	InferredCap *InferredCap
	// Divergence is where the replay first did on the device something
	// its recording did not, nil when it followed the recording (or the
	// trace records nothing to compare with).
	Divergence *Divergence
	// Inexact names the Stats keys (PyTorch's names) the trace cannot
	// settle, each with why; a renderer never shows them as exact.
	Inexact map[string]string
}

// Addresses says how the simulated device placed segments: at the
// recorded addresses, then, from the point where the replay left its
// recording (or everywhere after the first segment, when recorded
// addresses were ignored), by the model of the CUDA driver.
type Addresses struct {
	Segments int // device allocations
	// ModelledFrom is the index of the first segment the model placed;
	// -1 = every one was at its recorded address.
	ModelledFrom int
	Recorded     int // segments that came with a recorded address
	Matched      int // of those, the ones placed at exactly that address
	// Predicted counts the recorded addresses followed (the first aside)
	// that the model would have chosen itself from the layout so far.
	Predicted int
}

// InferredCap is a per-process memory cap read from a recording.
type InferredCap struct {
	Low, High uint64 // the cap lies in [Low, High]; the replay uses Low
	From      string // what it was inferred from
}

// Divergence is the first place a replay left its recording.
type Divergence struct {
	Op    int // index of the operation; the op count when only the final segments differ
	Event int // index of the recorded event in the device's trace, -1 if none
	// What the recording and the replay did there, and the likely cause.
	Recorded, Replayed, Cause string
	// WhatIf: the replay left the recording only because it was asked
	// another question (other settings, a cap, a smaller card); the
	// human reports say nothing of it, the JSON keeps it.
	WhatIf bool `json:"-"`
}

// Text is the divergence in a sentence.
func (d *Divergence) Text() string {
	return fmt.Sprintf("the recording %s, the replay %s; %s", d.Recorded, d.Replayed, d.Cause)
}

// Where says where it happened.
func (d *Divergence) Where() string {
	if d.Event < 0 {
		return "at operation " + units.FormatCount(int64(d.Op))
	}
	return fmt.Sprintf("at operation %s (trace event %s)", units.FormatCount(int64(d.Op)), units.FormatCount(int64(d.Event)))
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

// Detail is what the HTML report shows beyond a Replay.
type Detail struct {
	// Explorers hold the explorer's data, one per device of the trace, the
	// replayed device first.
	Explorers []*Explorer
	// Packed holds them instead, packed as they were made by the sinks
	// of the ExplorerPacker given to the pipeline (bounded memory for a
	// big trace); the renderer that made the sinks reads them.
	Packed []ExplorerSink
	// PeakSegments is the allocator's segments, in address order, just
	// after the operation at which reserved memory peaked.
	PeakSegments []SegmentMap
	// Sites are the allocation sites holding the most bytes at the peak,
	// most first; nil when the trace recorded no stacks.
	Sites []Site
	// Phases mark where named parts of a workload start, in operation
	// order; nil for traces, which record none.
	Phases []Phase
}

// Phase is a named part of a workload that starts at operation Op and
// lasts until the next one starts.
type Phase struct {
	Name string
	Op   int
}

// PhaseAt names the phase operation op falls in ("" before the first).
func PhaseAt(phases []Phase, op int) string {
	name := ""
	for _, p := range phases {
		if p.Op > op {
			break
		}
		name = p.Name
	}
	return name
}

// Site is one allocation site and what it held at the peak.
type Site struct {
	Frames string // the stack, innermost frame first, one per line
	Bytes  uint64 // bytes requested by its allocations live at the peak
	Count  int    // how many of its allocations were live
}
