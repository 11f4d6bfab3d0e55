package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/pipeline"
)

type sweepOpts struct {
	invocation
	workload     string
	params       []string
	strategies   bool
	grid         []string
	deviceMemory string
	fraction     float64
	output       string
	workers      int
	device       int
	html         string
}

func newSweepCmd(a *app) *cobra.Command {
	o := &sweepOpts{}
	cmd := &cobra.Command{
		Use:     "sweep TRACE... | --workload W | --strategies",
		Short:   "Replay under a grid of allocator settings and recommend the one that reserves least",
		Long:    helpText("sweep"),
		Example: helpText("sweep.examples"),
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if o.workload != "" || o.strategies {
				if len(args) > 0 {
					return errors.New("give a TRACE, --workload or --strategies, not several")
				}
				if o.workload != "" && o.strategies {
					return errors.New("--workload and --strategies exclude each other")
				}
				return nil
			}
			if len(args) == 0 {
				return errors.New("want a TRACE (or several: the ranks of one job), or --workload W, or --strategies")
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runSweep(a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.workload, "workload", "", "sweep a built-in workload or workload script instead of a trace")
	fl.StringArrayVarP(&o.params, "param", "p", nil, "workload parameter name=value (repeatable)")
	fl.BoolVar(&o.strategies, "strategies", false, "compare the strategy-* built-in workloads in one table")
	fl.StringArrayVar(&o.grid, "grid", nil, "settings to sweep instead of the default grid, separated by ';' (repeatable)")
	fl.StringVar(&o.deviceMemory, "device-memory", "", "card sizes, comma-separated (e.g. 24GiB,40GiB,80GiB); unlimited without it")
	fl.Float64Var(&o.fraction, "memory-fraction", 0, "set_per_process_memory_fraction of each card, for every setting")
	outputFlag(cmd, &o.output, output.SweepFormats)
	registerReadFlags(cmd)
	fl.IntVarP(&o.workers, "jobs", "j", runtime.GOMAXPROCS(0), "replays to run at once")
	fl.IntVar(&o.device, "device", 0, "which device's trace to replay")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	return cmd
}

func runSweep(a *app, o *sweepOpts, args []string) error {
	cards, err := pipeline.ParseCards(o.deviceMemory)
	if err != nil {
		return err
	}
	grid, err := pipeline.ParseGrids(o.grid)
	if err != nil {
		return err
	}
	trace := o.workload == "" && !o.strategies
	if trace && len(o.params) > 0 {
		return usageError{errors.New("--param is for --workload and --strategies")}
	}
	params, err := pipeline.ParseParams(o.params)
	if err != nil {
		return err
	}
	in := pipeline.SweepInput{
		Source:     pipeline.Source{Workload: o.workload, Params: params, Device: o.device, Progress: a.progress()},
		Strategies: o.strategies, Grid: grid, Cards: cards, Fraction: o.fraction, Workers: o.workers,
	}
	if trace {
		if in.Traces, err = pipeline.ExpandTraces(args); err != nil {
			return err
		}
		in.DeviceGiven = o.changed != nil && o.changed("device")
	}
	inputs := append([]string{in.Trace, in.Workload}, in.Traces...)
	if err := fileout.NotAnInput(o.html, inputs...); err != nil {
		return err
	}
	if a.getenv("GOGC") == "" { // replays on every core: collect less while the heap is small
		defer membudget.MinHeap(64 << 20)()
	}
	start := time.Now()
	rep, err := pipeline.Sweep(o.ctx, in)
	if err != nil {
		return err
	}
	if o.output != output.JSON {
		n := len(rep.Rows) * max(len(rep.Cards), 1)
		fmt.Fprintf(a.stderr, "gpumem: %d replays on %d workers in %v\n", n, min(o.workers, n), time.Since(start).Round(time.Millisecond))
	}
	if err := output.SweepFormats.Render(a.stdout, o.output, rep, output.Options{}); err != nil || o.html == "" {
		return err
	}
	return writeHTML(a, o.invocation, o.html, inputs, func(w io.Writer) error { return output.SweepHTML(w, rep) })
}
