package replay

import (
	"github.com/gpumem/gpumem/pkg/alloc"
)

// Options say how to replay.
type Options struct {
	Config alloc.Config
	// Device supplies memory; nil = an unlimited simulated device.
	Device alloc.Device
	// DeviceTotal is the card's size (the base of MemoryFraction); 0 = the
	// device's own.
	DeviceTotal    uint64
	MemoryFraction float64
	// Points is the most timeline points to keep; 0 = no timeline.
	Points int
	// Check runs the invariant checker after every operation.
	Check bool
}

// Result is what a replay ended with.
type Result struct {
	Stats alloc.Stats
	Extra alloc.Extra
	// OOM is the allocation that failed, nil if none; its OpIndex is the
	// failing op's Plan.Event (the index among alloc/free_completed events).
	OOM *alloc.OOM
	// OOMOp is the failing op's index in Plan.Ops, -1 if none.
	OOMOp       int
	Done        int // ops applied
	LargestFree uint64
	// Segments is the allocator's state at the end (after an OOM's release
	// steps, when one stopped the replay).
	Segments    []alloc.Segment
	Timeline    *alloc.Timeline
	Allowed     uint64
	DeviceTotal uint64
}

// Run replays a plan's operations through a new allocator. It stops at the
// first out-of-memory.
func Run(p *Plan, o Options) (*Result, error) {
	return run(p.Ops, p.Event, p.Seeds, o)
}

// RunOps replays ops; event maps op indexes to reported OOM indexes (nil =
// the op index itself).
func RunOps(ops []alloc.Op, event []int32, o Options) (*Result, error) {
	return run(ops, event, nil, o)
}

func run(ops []alloc.Op, event []int32, seeds []*Seed, o Options) (*Result, error) {
	a, err := alloc.New(alloc.Options{
		Config: o.Config, Device: o.Device, DeviceTotal: o.DeviceTotal,
		MemoryFraction: o.MemoryFraction, Check: o.Check,
	})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	for _, s := range seeds {
		if err := a.Seed(s.Address, s.Size, s.Stream, s.Small, s.Blocks); err != nil {
			return nil, err
		}
	}
	var tl *alloc.Timeline
	if o.Points > 0 && len(ops) > 0 {
		tl = alloc.NewTimeline(len(ops), o.Points)
	}
	res, err := a.Run(ops, 0, tl)
	if err != nil {
		return nil, err
	}
	r := &Result{
		Stats: a.Stats(), Extra: a.Extra(), OOM: res.OOM, OOMOp: -1, Done: res.Done,
		LargestFree: a.LargestFree(), Segments: a.Snapshot(), Timeline: tl,
		Allowed: a.Allowed(), DeviceTotal: a.DeviceTotal(),
	}
	if r.OOM != nil {
		r.OOMOp = r.OOM.OpIndex
		if event != nil {
			r.OOM.OpIndex = int(event[r.OOMOp])
		}
		if tl != nil { // the timeline ends at the OOM
			k := (r.OOMOp + tl.Stride - 1) / tl.Stride
			tl.Allocated, tl.Reserved, tl.Active = tl.Allocated[:k], tl.Reserved[:k], tl.Active[:k]
		}
	}
	return r, nil
}

// Step replays a plan one operation at a time, calling after(i, a) once
// op i has been applied, with a the allocator, to look at its state. It
// stops at the first out-of-memory (the failing op's after call sees the
// state after the release steps) or when after returns false.
func Step(p *Plan, o Options, after func(i int, a *alloc.Allocator) bool) error {
	a, err := alloc.New(alloc.Options{
		Config: o.Config, Device: o.Device, DeviceTotal: o.DeviceTotal,
		MemoryFraction: o.MemoryFraction, Check: o.Check,
	})
	if err != nil {
		return err
	}
	defer a.Close()
	for _, s := range p.Seeds {
		if err := a.Seed(s.Address, s.Size, s.Stream, s.Small, s.Blocks); err != nil {
			return err
		}
	}
	for i := range p.Ops {
		res, err := a.Run(p.Ops[i:i+1], i, nil)
		if err != nil {
			return err
		}
		if !after(i, a) || res.OOM != nil {
			return nil
		}
	}
	return nil
}
