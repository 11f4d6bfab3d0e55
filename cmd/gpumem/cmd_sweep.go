package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/fileout"
	"github.com/gpumem/gpumem/pkg/output"
	"github.com/gpumem/gpumem/pkg/pipeline"
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
		Use:   "sweep TRACE... | --workload W | --strategies",
		Short: "Replay under a grid of allocator settings and recommend the one that reserves least",
		Long: `Replay a trace (or a workload) under many allocator settings at once, in
parallel on every core, one allocator per replay, and print one table sorted
by peak reserved memory: fragmentation at the peak, device allocations (each a
slow cudaMalloc on a real GPU), allocation retries and out-of-memory errors.

The default grid holds PyTorch's defaults, expandable_segments:True, several
max_split_size_mb and roundup_power2_divisions values, the trace's recorded
settings when they differ, and every other allocation policy gpumem offers
(nocache). garbage_collection_threshold acts only under a cap, so its values
join the grid when --memory-fraction is given. --grid replaces the grid:
PYTORCH_CUDA_ALLOC_CONF values separated by ';' (or given one per --grid),
"defaults", or a policy name; the defaults are always added as the baseline.

--device-memory takes one or more card sizes: each setting is replayed on each
card, and a column per card says "fits" or the operation where it runs out of
memory. The table's figures are then those of the largest card. Without it,
the device is unlimited.

The last line recommends the PYTORCH_CUDA_ALLOC_CONF that reserves least while
fitting every card (ties go to fewer device allocations) and what it saves
against the defaults. Policies PyTorch cannot be switched to through
PYTORCH_CUDA_ALLOC_CONF are never recommended; a line above says when one
would reserve less.

Several traces (files, globs, a folder) or a snapshot with several
devices' traces are the ranks of one job: each setting's row is its worst
rank on each card, so the recommendation is the setting whose worst rank
reserves least and that fits every rank on every card.

--strategies compares the strategy-* built-in workloads (the same toy training
loop written five ways) in one table, one row per strategy, under the defaults
or each --grid setting; --param sets their shared parameters.`,
		Example: `  gpumem sweep snapshot.pickle
  gpumem sweep snapshot.pickle --device-memory 24GiB,40GiB,80GiB
  gpumem sweep snapshot.pickle --device-memory 80GiB --memory-fraction 0.9
  gpumem sweep snapshot.pickle --grid 'expandable_segments:True;max_split_size_mb:256' -o json
  gpumem sweep --workload transformer --param batch=16
  gpumem sweep --strategies --device-memory 24GiB`,
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
