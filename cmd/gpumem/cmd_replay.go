package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
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
	noAddrs bool
	bands   int
	stopAt  int
	failOOM bool
}

func newReplayCmd(a *app) *cobra.Command {
	o := &replayOpts{}
	cmd := &cobra.Command{
		Use:     "replay TRACE...",
		Short:   "Replay an allocation trace and report peak memory, fragmentation and OOMs",
		Long:    helpText("replay"),
		Example: helpText("replay.examples"),
		Args:    usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runReplay(a, o, args...)
		},
	}
	o.alloc.register(cmd)
	outputFlag(cmd, &o.output, output.ReplayFormats)
	registerReadFlags(cmd)
	fl := cmd.Flags()
	fl.IntVar(&o.device, "device", 0, "which device's trace to replay")
	fl.Float64Var(&o.warn, "warn", 0.20, "fragmentation ratio shown as a warning")
	fl.Float64Var(&o.alarm, "alarm", 0.30, "fragmentation ratio shown as an alarm")
	fl.BoolVar(&o.noAddrs, "ignore-addresses", false, "use only the first segment's recorded address; model the driver's placement of the others")
	fl.BoolVar(&o.check, "check", false, "check the allocator's invariants after every operation (slow)")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	fl.StringVar(&o.backend, "backend", "sim", "where memory comes from: sim (simulated card) or cuda (the first GPU)")
	fl.IntVar(&o.bands, "html-max-bands", 0, "the most allocations the HTML explorer draws as bands of their own, the largest; the rest as one aggregate (0 = 2,000,000)")
	fl.IntVar(&o.stopAt, "stop-at", 0, "replay only the first `N` operations (for checks of the HTML explorer's segment map)")
	_ = fl.MarkHidden("stop-at")
	fl.BoolVar(&o.failOOM, "fail-on-oom", false, "exit 1 when the replay runs out of memory where the recording did not")
	return cmd
}

func runReplay(a *app, o *replayOpts, args ...string) error {
	paths, err := pipeline.ExpandTraces(args)
	if err != nil {
		return err
	}
	if err := fileout.NotAnInput(o.html, paths...); err != nil {
		return err
	}
	s, err := o.alloc.settings(o.invocation, o.backend, o.noAddrs)
	if err != nil {
		return err
	}
	s.Points, s.Check = timelinePoints, o.check
	opts := output.Options{Color: a.color, Warn: o.warn, Alarm: o.alarm, MaxBands: o.bands}
	deviceGiven := o.changed != nil && o.changed("device")
	keep := pipeline.KeepReport
	var pack figures.ExplorerPacker // the explorer's, stepped through by the replay itself
	if o.html != "" {
		keep, pack = pipeline.KeepDetail, output.ExplorerPacker(opts.MaxBands)
	}
	if len(paths) == 1 && (deviceGiven || o.stopAt > 0) {
		run, err := pipeline.Replay(o.ctx, pipeline.Source{Trace: paths[0], Device: o.device, StopAt: o.stopAt, Progress: a.progress(), Keep: keep, Pack: pack}, s)
		if err != nil {
			return err
		}
		printNotes(a, run)
		if o.html == "" {
			pipeline.ReportOnly(run)
		}
		if err := renderReplay(a, o.invocation, o.output, run, opts, o.html, paths); err != nil {
			return err
		}
		return o.oomStatus(run)
	}
	// without --device a snapshot gives every device with events: a set
	set, err := pipeline.ReplaySet(o.ctx, pipeline.SetSource{Paths: paths, Device: o.device, DeviceGiven: deviceGiven, Progress: a.progress(), Keep: keep, Pack: pack}, s)
	if err != nil {
		return err
	}
	printNotes(a, set.Runs...)
	if o.html == "" {
		pipeline.ReportOnly(set.Runs...)
	}
	if len(set.Runs) == 1 {
		err = renderReplay(a, o.invocation, o.output, set.Runs[0], opts, o.html, paths)
	} else {
		err = renderRanks(a, o.invocation, o.output, set, opts, o.html, paths)
	}
	if err != nil {
		return err
	}
	return o.oomStatus(set.Runs...)
}

// oomStatus is, with --fail-on-oom, exit status 1 for a replay that ran
// out of memory where the recording did not; the report is already out.
func (o *replayOpts) oomStatus(runs ...*pipeline.Run) error {
	if !o.failOOM {
		return nil
	}
	for _, r := range runs {
		if oom := r.Report.OOM; oom != nil && !oom.Recorded {
			return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: out of memory at operation %s (--fail-on-oom)", r.Report.Source, units.FormatCount(int64(oom.OpIndex)))}
		}
	}
	return nil
}

func printNotes(a *app, runs ...*pipeline.Run) {
	for _, r := range runs {
		for _, n := range r.Notes {
			fmt.Fprintf(a.stderr, "gpumem: note: %s\n", textsafe.Line(n))
		}
	}
}

// renderRanks writes the report of a set of ranks in format; its HTML
// report is the worst rank's page.
func renderRanks(a *app, in invocation, format string, set *pipeline.Set, opts output.Options, path string, inputs []string) error {
	if _, err := output.RanksFormats.Lookup(format); err != nil {
		return usageError{fmt.Errorf("--output: %s is for one rank; a set of ranks prints %s (or pick a rank with --device or one file)",
			format, strings.Join(output.RanksFormats.Names(), ", "))}
	}
	if err := output.RanksFormats.Render(a.stdout, format, set.Figures(), opts); err != nil || path == "" {
		return err
	}
	worst := set.Runs[set.Worst]
	fmt.Fprintf(a.stderr, "gpumem: note: --html shows the worst rank, %s device %d\n", textsafe.Line(worst.Report.Source), worst.Report.Device)
	return renderReplay(a, in, "", worst, opts, path, inputs)
}

// renderReplay writes the report of a replay or run in format, and its
// HTML report to path when one is given; inputs are the traces or script,
// which path may not be.
func renderReplay(a *app, in invocation, format string, run *pipeline.Run, opts output.Options, path string, inputs []string) error {
	if format != "" {
		if err := output.ReplayFormats.Render(a.stdout, format, run.Report, opts); err != nil || path == "" {
			return err
		}
	}
	return writeHTML(a, in, path, inputs, func(w io.Writer) error { // the detail takes more replays: under the spinner
		d, err := run.Detail(output.ExplorerPacker(opts.MaxBands))
		if err != nil {
			return err
		}
		return output.ReplayHTML(w, run.Report, d, opts.MaxBands)
	})
}
