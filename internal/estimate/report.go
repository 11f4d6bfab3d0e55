package estimate

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/pkg/alloc"
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
	// Ranks are the ranks of --nproc, in order (none without it); the
	// report above them is the worst rank's, Rank.
	Ranks []RankRow
	Rank  int
}

// Wrote says which trace files the estimate wrote and how to replay them.
func (r *Report) Wrote() string {
	if len(r.Ranks) == 0 {
		return fmt.Sprintf("%s (gpumem replay %s)", r.Trace, r.Trace)
	}
	names := make([]string, len(r.Ranks))
	for i, k := range r.Ranks {
		names[i] = k.Trace
	}
	return fmt.Sprintf("%s, one a rank (gpumem replay %s)", strings.Join(names, ", "), strings.Join(names, " "))
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
	run, err := pipeline.Replay(ctx, pipeline.Source{Trace: tracePath, Keep: pipeline.KeepReport}, pipeline.Settings{
		Setup: setup.Setup{Card: s.Card.Total, Usable: s.Card.Capacity(), Fraction: res.Fraction}, Points: 2000,
	})
	if err != nil {
		return nil, err
	}
	r.Replay, r.Notes = run.Report, run.Notes
	r.Replay.Categories = tracked(res, r.Replay.Categories)
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

// RunWithTrace runs an estimate of argv with run, writes its trace to
// path (safely: the file appears once complete), and builds the report;
// res.Err is how the script ended. With set.NProc it runs the ranks, a
// trace each (RankTracePath). An error is returned when the script could
// not start or a trace could not be written.
func RunWithTrace(ctx context.Context, set Settings, argv, env []string, path string, run Runner) (*Report, *Result, error) {
	paths := []string{path}
	if set.NProc > 0 { // a trace a rank
		paths = make([]string, set.NProc)
		for r := range paths {
			paths[r] = RankTracePath(path, r)
		}
	}
	files := make([]*fileout.File, len(paths))
	traces := make([]io.Writer, len(paths))
	for r, p := range paths {
		f, err := fileout.Create(p)
		if err != nil {
			return nil, nil, err
		}
		defer f.Abort()
		files[r], traces[r] = f, f
	}
	rs, err := runAll(set.Options, argv, env, traces, run)
	if err != nil {
		return nil, nil, err
	}
	if err := notStarted(rs); err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		if err := f.Commit(); err != nil {
			return nil, nil, err
		}
	}
	w := Worst(rs)
	rep, err := Build(ctx, set, argv, paths[w], rs[w])
	if err != nil || set.NProc == 0 {
		return rep, rs[w], err
	}
	// --nproc: the report is the worst rank's, with every rank's row; the
	// Result is the worst rank's with the first failed rank's error, the
	// exit status of the whole, as torchrun's
	rep.Rank = w
	for r, res := range rs {
		rep.Ranks = append(rep.Ranks, rankRow(r, paths[r], res))
		if res.Info == nil && r != w {
			rep.Notes = append(rep.Notes, fmt.Sprintf("warning: rank %d: the CUDA emulator did not report at exit", r))
		}
	}
	out := *rs[w]
	out.Err = firstFailure(rs)
	return rep, &out, nil
}

// tracked is what the memory held at the allocated peak as the run
// tracked it (module and optimizer hooks, each tensor labelled as it was
// made and relabelled when it became a gradient or optimizer state), in
// the place of what the replay would infer from the trace's lifetimes: a
// text trace has no optimizer step marks, so the inference would leave
// most of it unknown. The activations' sites are their top modules. No
// remedies: --vary answers those exactly. inferred gives the peak's op.
func tracked(res *Result, inferred *figures.Categories) *figures.Categories {
	if res.Info == nil || len(res.Info.Composition) == 0 {
		return inferred
	}
	in := res.Info
	c := &figures.Categories{Method: "tracked as the script ran"}
	if inferred != nil {
		c.Op = inferred.Op
	}
	for k := categories.Category(0); k < categories.NumCategories; k++ {
		s := figures.CategoryShare{Name: k.String(), Bytes: uint64(max(in.Composition[k.String()], 0))}
		if k == categories.Activation {
			for _, m := range in.TopActivations {
				s.Sites = append(s.Sites, figures.Site{Frames: "module " + m.Module, Bytes: uint64(max(m.Bytes, 0))})
			}
		}
		c.Total += s.Bytes
		c.Shares = append(c.Shares, s)
	}
	return c
}
