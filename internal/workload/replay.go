package workload

import (
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// Replay runs the workload through a new allocator and returns what
// [replay.RunOps] would for its operations. A script workload from [Open]
// makes its operations a batch at a time while the allocator consumes
// them (replay.Stream), so they are never all held in memory.
func (w *Workload) Replay(o replay.Options) (*replay.Result, error) {
	if w.prog == nil {
		return replay.RunOps(w.Ops, nil, o)
	}
	return replay.Stream(o, w.n, func(emit func([]alloc.Op) error) error {
		b := w.prog.builder(emit)
		b.noPhases = true
		return w.prog.run(b)
	})
}
