package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/output"
	"github.com/gpumem/gpumem/pkg/pipeline"
)

type replayOpts struct {
	invocation
	alloc   allocFlags
	output  string
	device  int
	warn    float64
	alarm   float64
	check   bool
	backend string
	html    string
	bands   int
	stopAt  int
}

func newReplayCmd(a *app) *cobra.Command {
	o := &replayOpts{}
	cmd := &cobra.Command{
		Use:   "replay TRACE",
		Short: "Replay an allocation trace and report peak memory, fragmentation and OOMs",
		Long: `Replay a recorded allocation trace through the allocator, under its
recorded settings or any other, on a card of any size, and report what
happened. TRACE is a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot,
or gpumem record), an RMM logging_resource_adaptor CSV, or a gpumem text trace
(docs/trace-format.md); the format is recognised from the content. A snapshot
whose history was cut short by max_entries is rebuilt from its final state.

The replay stops at the first out-of-memory.`,
		Example: `  gpumem replay snapshot.pickle
  gpumem replay snapshot.pickle --alloc-conf expandable_segments:True
  gpumem replay snapshot.pickle --device-memory 24GiB --output json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runReplay(a, o, args[0])
		},
	}
	o.alloc.register(cmd)
	outputFlag(cmd, &o.output, output.ReplayFormats)
	fl := cmd.Flags()
	fl.IntVar(&o.device, "device", 0, "which device's trace to replay")
	fl.Float64Var(&o.warn, "warn", 0.20, "fragmentation ratio shown as a warning")
	fl.Float64Var(&o.alarm, "alarm", 0.30, "fragmentation ratio shown as an alarm")
	fl.BoolVar(&o.check, "check", false, "check the allocator's invariants after every operation (slow)")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	fl.StringVar(&o.backend, "backend", "sim", "where memory comes from: sim (simulated card) or cuda (the first GPU)")
	fl.IntVar(&o.bands, "html-max-bands", 0, "the most allocations the HTML explorer draws as bands of their own, the largest; the rest as one aggregate (0 = 2,000,000)")
	fl.IntVar(&o.stopAt, "stop-at", 0, "replay only the first `N` operations (for checks of the HTML explorer's segment map)")
	_ = fl.MarkHidden("stop-at")
	return cmd
}

func runReplay(a *app, o *replayOpts, path string) error {
	if err := checkFormat(output.ReplayFormats, "output", o.output); err != nil {
		return err
	}
	s := o.alloc.settings(o.invocation, o.backend)
	s.Points, s.Check = 2000, o.check
	run, err := pipeline.Replay(pipeline.Source{Trace: path, Device: o.device, StopAt: o.stopAt, Progress: a.progress()}, s)
	if err != nil {
		return err
	}
	for _, n := range run.Notes {
		fmt.Fprintf(a.stderr, "gpumem: note: %s\n", n)
	}
	return renderReplay(a, o.output, run, output.Options{Color: a.color, Warn: o.warn, Alarm: o.alarm}, o.html, o.bands)
}

// renderReplay writes the report of a replay or run in format, and its
// HTML report to path when one is given.
func renderReplay(a *app, format string, run *pipeline.Run, opts output.Options, path string, maxBands int) error {
	if err := output.ReplayFormats.Render(a.stdout, format, run.Report, opts); err != nil || path == "" {
		return err
	}
	d, err := run.Detail()
	if err != nil {
		return err
	}
	return writeHTML(a, path, func(w io.Writer) error { return output.ReplayHTML(w, run.Report, d, maxBands) })
}
