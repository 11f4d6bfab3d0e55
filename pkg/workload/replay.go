package workload

import (
	"errors"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// errStop ends a streaming run at an out-of-memory.
var errStop = errors.New("stop")

// Replay runs the workload through a new allocator and returns what
// [replay.RunOps] would for its operations. A script workload from [Open]
// makes its operations a batch at a time while the allocator consumes
// them, so they are never all held in memory.
func (w *Workload) Replay(o replay.Options) (*replay.Result, error) {
	if w.prog == nil {
		return replay.RunOps(w.Ops, nil, o)
	}
	a, err := alloc.New(alloc.Options{
		Config: o.Config, Device: o.Device, DeviceTotal: o.DeviceTotal,
		MemoryFraction: o.MemoryFraction, Check: o.Check,
	})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	var tl *alloc.Timeline
	if o.Points > 0 && w.n > 0 {
		tl = alloc.NewTimeline(w.n, o.Points)
	}
	var (
		done   int
		oom    *alloc.OOM
		runErr error // the allocator's, kept apart from the script's
	)
	b := w.prog.builder(func(ops []alloc.Op) error {
		if o.Context != nil && o.Context.Err() != nil {
			runErr = o.Context.Err()
			return errStop
		}
		res, err := a.Run(ops, done, tl)
		done += res.Done
		if err != nil {
			runErr = err
			return errStop
		}
		if res.OOM != nil {
			oom = res.OOM
			return errStop
		}
		return nil
	})
	b.noPhases = true
	if err := w.prog.run(b); runErr != nil {
		return nil, runErr
	} else if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	// What replay.RunOps reports, for a stream of w.n operations.
	r := &replay.Result{
		Stats: a.Stats(), Extra: a.Extra(), OOM: oom, OOMOp: -1, Done: done,
		LargestFree: a.LargestFree(), Segments: a.Snapshot(), Timeline: tl,
		Allowed: a.Allowed(), DeviceTotal: a.DeviceTotal(),
	}
	if ad, ok := a.Addressing(); ok {
		r.Addressing = &ad
	}
	if oom != nil {
		r.OOMs = []*alloc.OOM{oom}
		r.OOMOp = oom.OpIndex
		if tl != nil { // the timeline ends at the OOM
			k := (r.OOMOp + tl.Stride - 1) / tl.Stride
			tl.Allocated, tl.Reserved, tl.Active = tl.Allocated[:k], tl.Reserved[:k], tl.Active[:k]
		}
	}
	return r, nil
}
