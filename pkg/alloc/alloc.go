package alloc

/*
#cgo CFLAGS: -std=gnu11 -O3 -Wall -Wextra -Werror=implicit-function-declaration -Werror=int-conversion
#cgo LDFLAGS: -ldl -lpthread
#cgo noescape gm_config_default
#cgo nocallback gm_config_default
#cgo noescape gm_round_size
#cgo nocallback gm_round_size
#include <stdlib.h>
#include "gm_alloc.h"
#include "gm_devlog.h"

// Go cannot call C function pointers; these do it for it.
static int gm_call_mem_info(gm_backend_t *b, uint64_t *f, uint64_t *t) { return b->mem_info(b->ctx, f, t); }
static void gm_call_destroy(gm_backend_t *b) { if (b->destroy) b->destroy(b->ctx); }
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Errors the allocator returns; match them with errors.Is.
var (
	ErrOutOfMemory = errors.New("out of memory")
	ErrInvalidOp   = errors.New("invalid operation")
	ErrBackend     = errors.New("device backend failed")
	ErrCorrupt     = errors.New("allocator invariant broken")
)

func statusErr(rc C.int) error {
	switch rc {
	case C.GM_OK:
		return nil
	case C.GM_ENOMEM:
		return ErrOutOfMemory
	case C.GM_EINVAL:
		return ErrInvalidOp
	case C.GM_ECORRUPT:
		return ErrCorrupt
	}
	return ErrBackend
}

// OpError says which operation of a stream failed and why.
type OpError struct {
	Index int
	Op    Op
	Err   error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("op %d (%s id %d): %v", e.Index, e.Op.Kind, e.Op.ID, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// Device is where segments come from: the simulated device or a GPU.
type Device interface {
	// open fills in the C backend. Unexported: only this package makes devices.
	open(b *C.gm_backend_t) error
}

type simDevice struct {
	capacity     uint64
	ignore       bool
	noKernels    bool
	kernelSignal bool
}

// Sim returns a simulated device of capacity bytes (0 = unlimited).
func Sim(capacity uint64) Device { return simDevice{capacity: capacity} }

// SimWithCapacity gives d, a simulated device of unlimited capacity (nil:
// the default one), the given capacity; ok is false for any other device
// (a real GPU, a simulated card of a given size), which it returns as it is.
func SimWithCapacity(d Device, capacity uint64) (Device, bool) {
	switch s := d.(type) {
	case nil:
		return simDevice{capacity: capacity}, true
	case simDevice:
		if s.capacity == 0 {
			s.capacity = capacity
			return s, true
		}
	}
	return d, false
}

// SimModelled is Sim that uses only the first segment's recorded address
// (an op's Hint) and models every later one, as for a run never recorded.
func SimModelled(capacity uint64) Device { return simDevice{capacity: capacity, ignore: true} }

// SimEmulated is Sim for an emulated run, which knows when the program's
// first kernel runs and says so (Allocator.KernelsStarted): the driver's
// start-up range opens then, not once the first chunk is carved, and is
// given back whole where no segment holds the start-up hole
// (docs/pytorch-allocator.md, "Where the driver places segments").
func SimEmulated(capacity uint64) Device { return simDevice{capacity: capacity, kernelSignal: true} }

// SimOtherPlacement is the simulated device d (nil: the default one) with
// the other placement the driver model knows: that of a process that
// launches no kernels, whose start-up range stays taken. A replay whose
// segments the model placed runs again on it to tell which figures depend
// on where the driver puts segments. ok is false for any other device.
func SimOtherPlacement(d Device) (Device, bool) {
	switch s := d.(type) {
	case nil:
		return simDevice{noKernels: true}, true
	case simDevice:
		s.noKernels = !s.noKernels
		return s, true
	}
	return d, false
}

func (d simDevice) open(b *C.gm_backend_t) error {
	flags := C.int(0)
	if d.ignore {
		flags |= C.GM_SIM_IGNORE_HINTS
	}
	if d.noKernels {
		flags |= C.GM_SIM_NO_KERNELS
	}
	if d.kernelSignal {
		flags |= C.GM_SIM_KERNEL_SIGNAL
	}
	return statusErr(C.gm_sim_backend_opts(C.uint64_t(d.capacity), flags, b))
}

// Options configure a new Allocator.
type Options struct {
	Config Config
	// Device supplies memory; nil means an unlimited simulated device.
	Device Device
	// DeviceTotal is the card's total memory, the base of the memory
	// fraction; 0 takes the device's own figure.
	DeviceTotal uint64
	// MemoryFraction is set_per_process_memory_fraction; 0 takes the
	// config's per_process_memory_fraction, and 1 means no cap.
	MemoryFraction float64
	// Allowed is a cap in bytes, in place of a fraction (0 = none): the cap
	// a replay infers from its recording.
	Allowed uint64
	// Check runs the invariant checker after every operation (slow; tests).
	Check bool
}

// Allocator is a caching allocator over one device. It is safe for
// concurrent use.
type Allocator struct {
	mu      sync.Mutex
	c       *C.gm_alloc_t
	cfg     Config
	total   uint64
	allowed uint64
	dev     Device     // the device it runs on
	one     *C.gm_op_t // scratch op for the single-operation methods, in C memory
}

// New makes an allocator.
func New(o Options) (*Allocator, error) {
	cfg := o.Config
	if cfg.Policy == "" {
		cfg.Policy = PolicyPyTorch
	}
	if cfg.LargeSegmentSize == 0 {
		d := DefaultConfig()
		cfg.LargeSegmentSize, cfg.MaxNonSplitRounding = d.LargeSegmentSize, d.MaxNonSplitRounding
	}
	dev := o.Device
	if dev == nil {
		dev = Sim(0)
	}
	var be C.gm_backend_t
	if err := dev.open(&be); err != nil {
		return nil, err
	}
	total := o.DeviceTotal
	if total == 0 {
		var free, t C.uint64_t
		if be.mem_info != nil && C.gm_call_mem_info(&be, &free, &t) == C.GM_OK {
			total = uint64(t)
		}
	}
	var cc C.gm_config_t
	C.gm_config_default(&cc)
	pol, ok := cfg.Policy.Info()
	if !ok {
		C.gm_call_destroy(&be)
		return nil, fmt.Errorf("unknown policy %q", cfg.Policy)
	}
	cc.policy = pol.id
	cc.max_split_size = ^C.uint64_t(0)
	if cfg.MaxSplitSize != 0 {
		cc.max_split_size = C.uint64_t(cfg.MaxSplitSize)
	}
	cc.max_non_split_rounding_size = C.uint64_t(cfg.MaxNonSplitRounding)
	cc.large_segment_size = C.uint64_t(cfg.LargeSegmentSize)
	for i, d := range cfg.RoundupPower2Divisions {
		cc.roundup_power2_divisions[i] = C.uint32_t(d)
	}
	cc.gc_threshold = C.double(cfg.GCThreshold)
	if cfg.ExpandableSegments {
		cc.expandable_segments = 1
	}
	frac := o.MemoryFraction
	if frac == 0 {
		frac = cfg.MemoryFraction
	}
	var allowed uint64
	if frac > 0 && frac < 1 {
		// PyTorch: allowed_memory_maximum = (size_t)(fraction * total)
		allowed = max(uint64(frac*float64(total)), 1)
	}
	if o.Allowed > 0 {
		allowed = o.Allowed
	}
	cc.allowed_memory_maximum = C.uint64_t(allowed)
	cc.device_total = C.uint64_t(o.DeviceTotal)
	if o.Check {
		cc.check = 1
	}
	a := &Allocator{cfg: cfg, total: total, allowed: allowed, dev: dev}
	if rc := C.gm_new(&cc, &be, &a.c); rc != C.GM_OK {
		C.gm_call_destroy(&be)
		return nil, statusErr(rc)
	}
	a.one = (*C.gm_op_t)(C.calloc(1, C.sizeof_gm_op_t))
	return a, nil
}

// Close returns every segment to the device and frees the allocator.
func (a *Allocator) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.c != nil {
		C.gm_free(a.c)
		C.free(unsafe.Pointer(a.one))
		a.c, a.one = nil, nil
	}
}

// MemInfo returns the device's free and total bytes (cudaMemGetInfo).
func (a *Allocator) MemInfo() (free, total uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var f, t C.uint64_t
	if rc := C.gm_mem_info(a.c, &f, &t); rc != C.GM_OK {
		return 0, 0, statusErr(rc)
	}
	return uint64(f), uint64(t), nil
}

// Config returns the settings the allocator runs with.
func (a *Allocator) Config() Config { return a.cfg }

// SetFollowsRecording says whether the replay runs under its recording's
// settings and cap (off in a new Allocator): only then does Run honour
// FlagReleasedBefore, whose test reads the cache and cap for the
// recording's.
func (a *Allocator) SetFollowsRecording(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := C.int(0)
	if on {
		v = 1
	}
	C.gm_set_follows_recording(a.c, v)
}

// Allowed returns the memory-fraction cap in bytes, 0 when there is none.
func (a *Allocator) Allowed() uint64 { return a.allowed }

// DeviceTotal returns the card size the allocator assumes.
func (a *Allocator) DeviceTotal() uint64 { return a.total }

// OOM describes an allocation that could not be met.
type OOM struct {
	OpIndex   int    // index in the op stream handed to Run
	Size      uint64 // as asked
	Rounded   uint64 // after rounding
	AllocSize uint64 // the segment it needed: PyTorch's "Tried to allocate"
	Stream    uint64
	// The device and the allocator when it failed, after the release steps.
	DeviceFree, DeviceTotal, Allowed uint64
	Allocated, Reserved              int64
	// PrivatePools is the free cached bytes in private pools, which
	// PyTorch's message counts as "allocated in private pools".
	PrivatePools uint64
	// Recorded: the op had FlagRecordedOOM (the recording ran out of memory
	// there too) and Run went on.
	Recorded bool
}

func oomOf(o *C.gm_oom_t) *OOM {
	return &OOM{Size: uint64(o.size), Rounded: uint64(o.rounded), AllocSize: uint64(o.alloc_size),
		Stream: uint64(o.stream), DeviceFree: uint64(o.device_free), DeviceTotal: uint64(o.device_total),
		Allowed: uint64(o.allowed), Allocated: int64(o.allocated), Reserved: int64(o.reserved),
		PrivatePools: uint64(o.private_free)}
}

// Result is what Run did.
type Result struct {
	Done int  // operations applied
	OOM  *OOM // non-nil when Run stopped at an out-of-memory
	// Survived are the out-of-memory errors of FlagRecordedOOM allocations
	// that Run went past, in order.
	Survived []*OOM
}

// Timeline collects, per bucket of Stride operations, the highest
// allocated, reserved and active bytes seen after its operations.
type Timeline struct {
	Stride                      int
	Allocated, Reserved, Active []int64
	// AllocatedOp is, per bucket, the first operation (its index in the
	// whole stream) after which Allocated was reached; -1 for a bucket no
	// operation reached. The first op after which allocated memory was
	// highest is the AllocatedOp of the first bucket holding the largest
	// Allocated (Timeline.PeakOp).
	AllocatedOp []int
}

// NewTimeline sizes a timeline for n operations in at most buckets points.
func NewTimeline(n, buckets int) *Timeline {
	stride := max((n+buckets-1)/max(buckets, 1), 1)
	k := (n + stride - 1) / stride
	at := make([]int, k)
	for i := range at {
		at[i] = -1
	}
	return &Timeline{Stride: stride, Allocated: make([]int64, k), Reserved: make([]int64, k), Active: make([]int64, k), AllocatedOp: at}
}

// PeakOp is the first operation after which allocated memory was at its
// highest over the timeline, -1 when no operation was sampled.
func (t *Timeline) PeakOp() int {
	best := -1
	for k, op := range t.AllocatedOp {
		if op >= 0 && (best < 0 || t.Allocated[k] > t.Allocated[best]) {
			best = k
		}
	}
	if best < 0 {
		return -1
	}
	return t.AllocatedOp[best]
}

// Truncate keeps the first k buckets.
func (t *Timeline) Truncate(k int) {
	t.Allocated, t.Reserved, t.Active = t.Allocated[:k], t.Reserved[:k], t.Active[:k]
	if len(t.AllocatedOp) > k {
		t.AllocatedOp = t.AllocatedOp[:k]
	}
}

// Run applies ops in order, in one crossing into C, and stops at the first
// out-of-memory (reported in Result.OOM, with a nil error) or invalid op
// (an *OpError); an allocation flagged FlagRecordedOOM that fails is listed
// in Result.Survived instead, and Run goes on. base is the index of ops[0]
// in the whole stream, used by tl and the OOMs' OpIndex; tl may be nil.
func (a *Allocator) Run(ops []Op, base int, tl *Timeline) (Result, error) {
	return a.RunSized(ops, base, tl, nil)
}

// RunSized is Run that also writes, when sizes is not nil, the size of
// the block each OpFree or OpFreeRequest of ops freed into sizes at the
// op's index (0 for the free of an allocation that held nothing: of 0
// bytes, or a recorded out-of-memory's); the entries of other ops are
// unspecified. What the freed blocks were serves a caller that goes back
// from the allocator's state to an earlier one. sizes must hold len(ops);
// only the ops applied (Result.Done) are written.
func (a *Allocator) RunSized(ops []Op, base int, tl *Timeline, sizes []uint64) (Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(ops) == 0 {
		return Result{}, nil
	}
	var out *C.uint64_t
	if sizes != nil {
		if len(sizes) < len(ops) {
			panic("alloc: RunSized: sizes shorter than ops")
		}
		out = (*C.uint64_t)(unsafe.Pointer(&sizes[0]))
	}
	return a.runLocked(ops, base, tl, func(ctl *C.gm_timeline_t, done *C.size_t, oom *C.gm_oom_t) C.int {
		// Op has no Go pointers and the layout of gm_op_t (checked by a
		// test), so C may read the slice in place.
		return C.gm_run(a.c, (*C.gm_op_t)(unsafe.Pointer(&ops[0])), C.size_t(len(ops)), done, oom, ctl, nil, out)
	})
}

// runLocked is Run's bookkeeping around run, which applies ops in C
// (gm_run, or gm_run_steps) with the timeline window ctl (nil when none)
// and sets done and, at an out-of-memory, oom: the window of tl the ops
// can reach, and the out-of-memory errors they went past or stopped at.
func (a *Allocator) runLocked(ops []Op, base int, tl *Timeline, run func(ctl *C.gm_timeline_t, done *C.size_t, oom *C.gm_oom_t) C.int) (Result, error) {
	res, rc := a.runWindowLocked(len(ops), base, tl, run)
	if rc == C.GM_OK || rc == C.GM_ENOMEM {
		return res, nil
	}
	return res, a.opErrorLocked(rc, ops, base, res.Done)
}

// runWindowLocked is runLocked of n ops but for the error of a status
// other than GM_OK and GM_ENOMEM, which it returns for the caller to make
// (opErrorLocked, from the ops it has).
func (a *Allocator) runWindowLocked(n, base int, tl *Timeline, run func(ctl *C.gm_timeline_t, done *C.size_t, oom *C.gm_oom_t) C.int) (Result, C.int) {
	var ctl *C.gm_timeline_t
	if tl != nil && len(tl.Allocated) > 0 && tl.Stride > 0 {
		// only the buckets the ops can reach cross into C: [k0, k1)
		k0 := min(base/tl.Stride, len(tl.Allocated))
		k1 := min((base+n-1)/tl.Stride+1, len(tl.Allocated))
		if k1 > k0 {
			n := k1 - k0
			ctl = (*C.gm_timeline_t)(C.calloc(1, C.sizeof_gm_timeline_t))
			defer C.free(unsafe.Pointer(ctl))
			withOp := len(tl.AllocatedOp) == len(tl.Allocated)
			arr := (*C.int64_t)(C.calloc(C.size_t(4*n), 8))
			defer C.free(unsafe.Pointer(arr))
			all := unsafe.Slice((*int64)(unsafe.Pointer(arr)), 4*n)
			copy(all[0:n], tl.Allocated[k0:k1])
			copy(all[n:2*n], tl.Reserved[k0:k1])
			copy(all[2*n:3*n], tl.Active[k0:k1])
			// C numbers ops from the window's first bucket: op base+i is
			// its op base-off+i, in bucket (base-off+i)/Stride = k - k0
			off := k0 * tl.Stride
			ctl.stride = C.uint64_t(tl.Stride)
			ctl.base = C.uint64_t(base - off)
			ctl.nbuckets = C.uint64_t(n)
			ctl.allocated = arr
			ctl.reserved = (*C.int64_t)(unsafe.Add(unsafe.Pointer(arr), 8*n))
			ctl.active = (*C.int64_t)(unsafe.Add(unsafe.Pointer(arr), 16*n))
			if withOp {
				for k, op := range tl.AllocatedOp[k0:k1] {
					if op >= 0 {
						op -= off
					}
					all[3*n+k] = int64(op)
				}
				ctl.allocated_op = (*C.int64_t)(unsafe.Add(unsafe.Pointer(arr), 24*n))
			}
			defer func() {
				copy(tl.Allocated[k0:k1], all[0:n])
				copy(tl.Reserved[k0:k1], all[n:2*n])
				copy(tl.Active[k0:k1], all[2*n:3*n])
				if withOp {
					for k := range n {
						op := int(all[3*n+k])
						if op >= 0 {
							op += off
						}
						tl.AllocatedOp[k0+k] = op
					}
				}
			}()
		}
	}
	C.gm_devlog_at(a.c, C.uint64_t(base)) // device log events carry stream indexes
	var done C.size_t
	var oom C.gm_oom_t
	var ex C.gm_extra_t
	C.gm_get_extra(a.c, &ex)
	before := C.gm_oom_events(a.c, 0, nil, 0)
	rc := run(ctl, &done, &oom)
	res := Result{Done: int(done)}
	if n := C.gm_oom_events(a.c, 0, nil, 0) - before; n > 0 {
		evs := make([]C.gm_oom_event_t, n)
		C.gm_oom_events(a.c, before, &evs[0], n)
		for _, e := range evs {
			o := oomOf(&e.oom)
			o.OpIndex = base + int(e.op-ex.ops)
			o.Recorded = true
			res.Survived = append(res.Survived, o)
		}
	}
	if rc == C.GM_ENOMEM {
		res.OOM = oomOf(&oom)
		res.OOM.OpIndex = base + int(done)
	}
	return res, rc
}

// opErrorLocked is the error of gm_run's status rc after done of ops.
func (a *Allocator) opErrorLocked(rc C.int, ops []Op, base, done int) error {
	err := statusErr(rc)
	idx := done
	if rc == C.GM_EBACKEND {
		if msg := C.GoString(C.gm_backend_error(a.c)); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
	}
	if rc == C.GM_ECORRUPT {
		idx--
		msg := a.checkLocked()
		if msg == "" { // BlockSteps.Run's own check (gm_flat_step)
			msg = "the stepped block list differs from a walk of every segment"
		}
		err = fmt.Errorf("%w: %s", ErrCorrupt, msg)
	}
	return &OpError{Index: base + idx, Op: ops[max(0, min(idx, len(ops)-1))], Err: err}
}

// applyOne applies a single operation. Its op lives in C memory so that the
// per-operation methods do not pin Go memory.
func (a *Allocator) applyOne(op Op) (uint64, *OOM, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.one.kind = C.uint8_t(op.Kind)
	a.one.flags = C.uint8_t(op.Flags)
	a.one.pool = C.uint32_t(op.Pool)
	a.one.id = C.uint32_t(op.ID)
	a.one.stream = C.uint64_t(op.Stream)
	a.one.size = C.uint64_t(op.Size)
	a.one.hint = C.uint64_t(op.Hint)
	var done C.size_t
	var oom C.gm_oom_t
	var addr C.uint64_t
	rc := C.gm_run(a.c, a.one, 1, &done, &oom, nil, &addr, nil)
	if rc == C.GM_ENOMEM {
		return 0, oomOf(&oom), ErrOutOfMemory
	}
	if err := statusErr(rc); err != nil {
		if msg := C.GoString(C.gm_backend_error(a.c)); rc == C.GM_EBACKEND && msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		if rc == C.GM_ECORRUPT {
			err = fmt.Errorf("%w: %s", ErrCorrupt, a.checkLocked())
		}
		return 0, nil, &OpError{Op: op, Err: err}
	}
	return uint64(addr), nil, nil
}

// Alloc allocates size bytes on stream under allocation id and returns the
// block's address. On out-of-memory the error is ErrOutOfMemory.
func (a *Allocator) Alloc(id uint32, size, stream uint64) (uint64, error) {
	addr, _, err := a.applyOne(Op{Kind: OpAlloc, ID: id, Size: size, Stream: stream})
	return addr, err
}

// AllocOrOOM is Alloc that also describes an out-of-memory: on
// ErrOutOfMemory the *OOM says what failed, as Run reports it.
func (a *Allocator) AllocOrOOM(id uint32, size, stream uint64) (uint64, *OOM, error) {
	return a.applyOne(Op{Kind: OpAlloc, ID: id, Size: size, Stream: stream})
}

// Free frees allocation id.
func (a *Allocator) Free(id uint32) error {
	_, _, err := a.applyOne(Op{Kind: OpFree, ID: id})
	return err
}

// RecordStream marks allocation id as used by stream.
func (a *Allocator) RecordStream(id uint32, stream uint64) error {
	_, _, err := a.applyOne(Op{Kind: OpRecordStream, ID: id, Stream: stream})
	return err
}

// EmptyCache returns every whole free segment to the device.
func (a *Allocator) EmptyCache() error {
	_, _, err := a.applyOne(Op{Kind: OpEmptyCache})
	return err
}

// PoolInfo describes a private pool as PyTorch's PrivatePool keeps it.
type PoolInfo struct {
	Exists   bool  // created and not yet erased
	UseCount int64 // 0 = released: its whole free segments go at the next empty_cache
	Segments int   // segments it owns (cudaMalloc_count)
}

// Pool describes private pool id (Op.Pool).
func (a *Allocator) Pool(id uint32) PoolInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	var p C.gm_pool_info_t
	C.gm_pool_get(a.c, C.uint32_t(id), &p)
	return PoolInfo{Exists: p.exists != 0, UseCount: int64(p.use_count), Segments: int(p.segments)}
}

// Check runs the invariant checker; nil when every invariant holds.
func (a *Allocator) Check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if msg := a.checkLocked(); msg != "" {
		return fmt.Errorf("%w: %s", ErrCorrupt, msg)
	}
	return nil
}

func (a *Allocator) checkLocked() string {
	var buf [256]C.char
	if C.gm_check(a.c, &buf[0], C.size_t(len(buf))) == C.GM_OK {
		return ""
	}
	return C.GoString(&buf[0])
}

// ResetPeak sets every peak to its current value.
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	C.gm_reset_peak(a.c)
}

// LargestFree returns the largest free cached block, in bytes.
func (a *Allocator) LargestFree() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return uint64(C.gm_largest_free(a.c))
}

// PlacementTies reports whether a decision so far could have gone
// otherwise had the segments sat at other addresses, with the same sizes
// and offsets: false means the run would make each decision alike on
// the simulated device's other placement (SimOtherPlacement). Only the
// pytorch policy watches; under any other it is always true.
func (a *Allocator) PlacementTies() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return C.gm_placement_ties(a.c) != 0
}

// WatchOtherPlacement runs the simulated device's other placement
// (SimOtherPlacement of the device a runs on) beside a's own device, call
// for call, so that OtherPlacementAgrees can tell whether a replay on it
// would have gone as a's: an allocator's decisions see addresses only
// through their order and the device's answers. Call it before a's first
// op or seed; an error for any other device than the simulated one (or
// an emulated run's, SimEmulated, whose signals reach only its own).
func (a *Allocator) WatchOtherPlacement() error {
	dev, ok := SimOtherPlacement(a.dev)
	if s, sim := a.dev.(simDevice); !ok || !sim || s.kernelSignal { // an emulated run signals its own device only
		return fmt.Errorf("%w: only the simulated device has another placement", ErrInvalidOp)
	}
	var be C.gm_backend_t
	if err := dev.open(&be); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if rc := C.gm_placement_watch(a.c, &be); rc != C.GM_OK {
		C.gm_call_destroy(&be)
		return statusErr(rc)
	}
	return nil
}

// OtherPlacementAgrees reports whether the other placement WatchOtherPlacement
// runs has so far answered every device call as a's own device did and
// kept a's segments in the same order: an allocator on it would have made
// a's every decision and would hold a's statistics. False without a watch,
// and for good once a call disagreed or an op claimed a block by address.
func (a *Allocator) OtherPlacementAgrees() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return C.gm_placement_agrees(a.c) == 1
}

// Extra holds figures beyond memory_stats that reports need.
type Extra struct {
	Ops             int   // operations applied
	PeakOp          int   // the op after which reserved first reached its peak
	AllocatedAtPeak int64 // most allocated bytes while reserved was at its peak
	LiveBytes       int64 // live requests, each rounded up to 512 B
	LiveBytesPeak   int64 // its peak: no allocator can reserve less
}

// Extra returns the report figures.
func (a *Allocator) Extra() Extra {
	a.mu.Lock()
	defer a.mu.Unlock()
	var e C.gm_extra_t
	C.gm_get_extra(a.c, &e)
	return Extra{Ops: int(e.ops), PeakOp: int(e.peak_op), AllocatedAtPeak: int64(e.allocated_at_peak),
		LiveBytes: int64(e.live_bytes), LiveBytesPeak: int64(e.live_bytes_peak)}
}

// Addressing says how the simulated device chose segment addresses.
type Addressing struct {
	Mallocs int // device allocations served
	Hinted  int // of them, those that came with a recorded address
	Matched int // of those, the ones placed at exactly that address
	// Predicted counts the recorded addresses followed, the first one
	// aside, that the model would have chosen itself from the layout so far.
	Predicted int
	// ModelledFrom is the index of the first device allocation whose
	// address the driver model chose (the replay had left its recording,
	// or recorded addresses were ignored); -1 = every one was recorded.
	ModelledFrom int
}

// Addressing reports how addresses were chosen; false when the device is
// not the simulated one.
func (a *Allocator) Addressing() (Addressing, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var st C.gm_sim_addressing_t
	if C.gm_sim_addressing(a.c, &st) != C.GM_OK {
		return Addressing{}, false
	}
	return Addressing{Mallocs: int(st.mallocs), Hinted: int(st.hinted), Matched: int(st.matched),
		Predicted: int(st.predicted), ModelledFrom: int(st.modelled_from)}, true
}

// KernelsStarted tells a device made by SimEmulated that the program's
// first kernel ran; a no-op after the first call and on other simulated
// devices. An error only when the device is not the simulated one.
func (a *Allocator) KernelsStarted() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return statusErr(C.gm_sim_kernels_started(a.c))
}

// DriverMapping tells the simulated device that the driver mapped size
// bytes of its own now (the modules a library loads at its first call):
// they take address space where a cudaMalloc of that size would go, for
// good, and none of the card's memory. An error only when the device is
// not the simulated one.
func (a *Allocator) DriverMapping(size uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return statusErr(C.gm_sim_tenant(a.c, C.uint64_t(size)))
}

// RoundSize is PyTorch's round_size under c.
func RoundSize(c Config, size uint64) uint64 {
	var cc C.gm_config_t
	C.gm_config_default(&cc)
	for i, d := range c.RoundupPower2Divisions {
		cc.roundup_power2_divisions[i] = C.uint32_t(d)
	}
	return uint64(C.gm_round_size(&cc, C.uint64_t(size)))
}

// SeedBlock is a block live when a truncated trace starts.
type SeedBlock struct {
	Offset    uint64 // from the segment's base
	Size      uint64 // 0 = the request rounded as the allocator would
	Requested uint64
	ID        uint32
	Pending   bool // freed, still used by another stream
}

// Seed creates a segment that existed before a truncated trace began, with
// its live blocks (sorted by offset); the gaps become free blocks. hint is
// the recorded address. Statistics move as if the blocks had been
// allocated; no device allocation is counted.
func (a *Allocator) Seed(hint, size, stream uint64, small bool, blocks []SeedBlock) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(blocks)
	cb := (*C.gm_seed_block_t)(C.calloc(C.size_t(max(n, 1)), C.sizeof_gm_seed_block_t))
	defer C.free(unsafe.Pointer(cb))
	cs := unsafe.Slice(cb, max(n, 1))
	for i, b := range blocks {
		cs[i] = C.gm_seed_block_t{offset: C.uint64_t(b.Offset), size: C.uint64_t(b.Size),
			requested: C.uint64_t(b.Requested), id: C.uint32_t(b.ID)}
		if b.Pending {
			cs[i].pending = 1
		}
	}
	var isSmall C.int
	if small {
		isSmall = 1
	}
	if rc := C.gm_seed_segment(a.c, C.uint64_t(hint), C.uint64_t(size), C.uint64_t(stream), isSmall, cb, C.size_t(n)); rc != C.GM_OK {
		return fmt.Errorf("seeding segment %#x: %w", hint, statusErr(rc))
	}
	return nil
}
