package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/exporter"
	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/probe"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// demoWorkload is what summary drives the allocator with by default: the
// classic fragmentation example.
const demoWorkload = "frag-demo"

type summaryOpts struct {
	invocation
	alloc      allocFlags
	traceFile  []string
	workload   string
	backend    string
	output     string
	requireGPU bool
	watch      time.Duration
	spool      string
}

func newSummaryCmd(a *app) *cobra.Command {
	o := &summaryOpts{}
	cmd := &cobra.Command{
		Use:     "summary",
		Short:   "Show the GPUs and the allocator's memory summary after a workload",
		Long:    helpText("summary", "$DEMO", demoWorkload),
		Example: helpText("summary.examples"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runSummary(a, o)
		},
	}
	o.alloc.register(cmd)
	outputFlag(cmd, &o.output, output.SummaryFormats)
	registerReadFlags(cmd)
	fl := cmd.Flags()
	fl.StringArrayVar(&o.traceFile, "trace", nil, "drive the allocator with this trace (any format replay reads); several, a glob or a folder: the ranks of one job")
	fl.StringVar(&o.workload, "workload", demoWorkload, "drive the allocator with this workload (name or script file)")
	fl.StringVar(&o.backend, "backend", "", "sim or cuda (default: cuda when a GPU is usable, else sim)")
	fl.BoolVar(&o.requireGPU, "require-gpu", false, "exit with code 3 when no GPU is usable")
	fl.DurationVar(&o.watch, "watch", 0, "refresh the device table every interval until interrupted")
	fl.Lookup("watch").NoOptDefVal = "1s"
	fl.StringVar(&o.spool, "spool", "", "the spool folder `DIR` of <pid>-<token>.json allocator stats training processes write (default: the exporter's)")
	return cmd
}

func runSummary(a *app, o *summaryOpts) error {
	lib := a.nvml
	if lib == nil {
		lib = probe.Default()
	}
	sys, err := probe.Probe(lib)
	why := probe.NoGPU(sys, err)
	gpu := why == ""
	switch {
	case !gpu && o.watch > 0: // it shows live GPUs: without one it has nothing to show
		return &exitError{code: exitNoGPU, msg: "--watch: " + why + "; it shows live GPUs (run without --watch for the simulated device)"}
	case !gpu && o.requireGPU:
		return &exitError{code: exitNoGPU, msg: why + " (--require-gpu)"}
	case !gpu:
		fmt.Fprintf(a.stderr, "gpumem: %s: showing the simulated device\n", why)
	}
	if o.watch > 0 {
		return output.WatchDevices(o.ctx, a.stdout, func() (*probe.System, error) { return probe.Probe(lib) }, o.watch,
			output.Options{Color: a.color}, isTerminal(a.stdout))
	}
	backend := o.backend
	if backend == "" {
		backend = "sim"
		if gpu && !o.changed("device-memory") {
			backend = "cuda"
		}
	}
	sum := &output.Summary{System: sys, Backend: backend}
	if gpu {
		sum.Processes, sum.Spool = processMemory(a, o, sys)
	}
	if len(o.traceFile) > 0 {
		if err := summaryTraces(a, o, sum); err != nil {
			return err
		}
	} else {
		s, err := o.alloc.settings(o.invocation, backend, false)
		if err != nil {
			return err
		}
		run, err := pipeline.Replay(o.ctx, pipeline.Source{Workload: o.workload}, s)
		if err != nil {
			return err
		}
		sum.Allocator = run.Report
	}
	return output.SummaryFormats.Render(a.stdout, o.output, sum, output.Options{Color: a.color})
}

// processMemory sets the processes on the GPUs beside their allocators'
// stats from the spool; what it cannot read is a warning.
func processMemory(a *app, o *summaryOpts, sys *probe.System) ([]exporter.ProcessMemory, string) {
	dir := o.spool
	if dir == "" {
		dir = exporter.DefaultSpool(a.getenv, os.Getuid())
	}
	procs, warnings := exporter.SpoolMemory(sys, dir)
	for _, w := range warnings {
		fmt.Fprintf(a.stderr, "gpumem: warning: spool: %s\n", textsafe.Line(w))
	}
	return procs, dir
}

// summaryTraces replays --trace: one trace, or the ranks of a job, each
// on its own simulated device; the allocator shown is the worst rank's.
func summaryTraces(a *app, o *summaryOpts, sum *output.Summary) error {
	paths, err := pipeline.ExpandTraces(o.traceFile)
	if err != nil {
		return err
	}
	if len(paths) == 1 && sum.Backend == "cuda" {
		s, err := o.alloc.settings(o.invocation, "cuda", false)
		if err != nil {
			return err
		}
		run, err := pipeline.Replay(o.ctx, pipeline.Source{Trace: paths[0], Progress: a.progress()}, s)
		if err == nil {
			sum.Allocator = run.Report
		}
		return err
	}
	if sum.Backend == "cuda" {
		if o.changed("backend") {
			return usageError{errors.New("--backend cuda replays one trace; a set of ranks replays on the simulated device")}
		}
		sum.Backend = "sim" // ranks replay side by side: not on one real card
	}
	s, err := o.alloc.settings(o.invocation, sum.Backend, false)
	if err != nil {
		return err
	}
	set, err := pipeline.ReplaySet(o.ctx, pipeline.SetSource{Paths: paths, Progress: a.progress()}, s)
	if err != nil {
		return err
	}
	printNotes(a, set.Runs...)
	sum.Allocator = set.Runs[set.Worst].Report
	if len(set.Runs) > 1 {
		sum.Ranks = set.Figures()
	}
	return nil
}
