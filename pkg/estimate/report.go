package estimate

import (
	"context"
	"fmt"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/pipeline"
)

// Report is an estimate's result as the renderers read it.
type Report struct {
	Command   []string
	Card      Card
	AllocConf string
	Trace     string          // the trace file written
	Replay    *figures.Replay // the replay report of the trace
	Result    *Result
	Notes     []string
}

// Build replays the trace an estimate wrote, under the card and settings
// it ran on, for the usual report. The replay runs the same requests
// through the same allocator, so its figures are the run's own; Build
// checks that they are.
func Build(ctx context.Context, s Settings, argv []string, tracePath string, res *Result) (*Report, error) {
	r := &Report{Command: argv, Card: s.Card, AllocConf: s.AllocConf, Trace: tracePath, Result: res}
	if res.Info == nil {
		r.Notes = append(r.Notes, "warning: the CUDA emulator did not report at exit: the command started no Python "+
			"process with torch, or it was killed (the figures cover what it did until then)")
	}
	if res.Ops == 0 {
		return r, nil
	}
	run, err := pipeline.Replay(ctx, pipeline.Source{Trace: tracePath, Lean: true}, pipeline.Settings{
		Policy: string(alloc.PolicyPyTorch), DeviceMemory: s.DeviceMemory, MemoryFraction: res.Fraction, Points: 2000,
	})
	if err != nil {
		return nil, err
	}
	r.Replay, r.Notes = run.Report, run.Notes
	live, rep := res.Stats, run.Report.Stats
	// reset_peak_memory_stats in the script changed the run's peaks, not
	// the replay's: compare what no reset touches
	if live.ReservedBytes[alloc.All].Allocated != rep.ReservedBytes[alloc.All].Allocated ||
		live.AllocatedBytes[alloc.All].Allocated != rep.AllocatedBytes[alloc.All].Allocated ||
		live.ReservedBytes[alloc.All].Current != rep.ReservedBytes[alloc.All].Current {
		return nil, fmt.Errorf("internal error: the replay of %s does not match the run (reserved %d bytes in all against %d)",
			tracePath, rep.ReservedBytes[alloc.All].Allocated, live.ReservedBytes[alloc.All].Allocated)
	}
	return r, nil
}
