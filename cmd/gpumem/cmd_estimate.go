package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/estimate"
	"github.com/gpumem/gpumem/internal/output"
)

type estimateOpts struct {
	invocation
	gpu, deviceMemory, conf string
	fraction                float64
	nproc                   int
	file                    string
	output                  string
	vary                    string
	findMax                 string
}

func newEstimateCmd(a *app) *cobra.Command {
	o := &estimateOpts{}
	cmd := &cobra.Command{
		Use:                   "estimate [flags] -- python3 SCRIPT [ARGS...]",
		DisableFlagsInUseLine: true,
		Short:                 "Run a PyTorch script on a virtual GPU and report the memory it would take",
		Long:                  helpText("estimate"),
		Example:               helpText("estimate.examples"),
		Args:                  usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runEstimate(a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // the script's own flags are not ours
	fl.StringVar(&o.gpu, "gpu", "H200", "the card to emulate: "+estimate.CardNames())
	fl.StringVar(&o.deviceMemory, "device-memory", "", "the card's memory instead, bytes or with a unit (e.g. 24GiB)")
	fl.StringVar(&o.conf, "alloc-conf", "", "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: $PYTORCH_CUDA_ALLOC_CONF)")
	fl.Float64Var(&o.fraction, "memory-fraction", 0, "set_per_process_memory_fraction before the script starts")
	fl.StringVarP(&o.file, "file", "f", "estimate.trace", "write the run's allocation trace to `FILE` (a gpumem text trace)")
	outputFlag(cmd, &o.output, output.EstimateFormats)
	fl.StringVar(&o.vary, "vary", "", "run once per value of `NAME=v1,v2,...` with {NAME} in the command replaced, and tabulate")
	fl.StringVar(&o.findMax, "find-max", "", "find the largest integer {NAME} in `NAME=LO..HI` that fits on the card (bisection)")
	fl.IntVar(&o.nproc, "nproc", 0, "run a torchrun-style script as `N` ranks (fake process groups), a virtual card each; report the worst")
	return cmd
}

func runEstimate(a *app, o *estimateOpts, argv []string) error {
	conf := os.Getenv("PYTORCH_CUDA_ALLOC_CONF")
	if o.changed("alloc-conf") {
		conf = o.conf
	}
	set, err := estimate.NewSettings(o.gpu, o.deviceMemory, conf, o.fraction, o.nproc)
	if err != nil {
		return usageError{err}
	}
	if o.vary != "" || o.findMax != "" {
		return runEstimateVary(a, o, set, argv)
	}
	rep, res, err := estimate.RunWithTrace(o.ctx, set, argv, os.Environ(), o.file, estimate.Exec(a.stdin, a.stderr))
	if err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(a.stderr, "gpumem: %s\n", n)
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s\n", rep.Wrote())
	if err := output.EstimateFormats.Render(a.stdout, o.output, rep, output.Options{Color: a.color}); err != nil {
		return err
	}
	return scriptExit(res.Err)
}

// scriptExit passes on the script's exit status.
func scriptExit(err error) error {
	if code, ok := estimate.ExitCode(err); ok {
		return &exitError{code: code}
	}
	return err
}

func runEstimateVary(a *app, o *estimateOpts, set estimate.Settings, argv []string) error {
	if o.changed("file") {
		return usageError{errors.New("-f/--file: --vary and --find-max write no trace; run the value you want alone")}
	}
	v, err := estimate.ParseTrials(o.vary, o.findMax, argv)
	if err != nil {
		return usageError{err}
	}
	say := func(value string) { fmt.Fprintf(a.stderr, "gpumem: estimating %s=%s\n", v.Name, value) }
	trials, best, err := v.Run(set, argv, os.Environ(), estimate.Exec(a.stdin, a.stderr), say)
	if err != nil {
		return err
	}
	doc := &output.VaryResult{Name: v.Name, Card: set.Card, AllocConf: set.AllocConf, Command: argv,
		Trials: trials, FindMax: o.findMax != "", Max: best}
	return output.VaryFormats.Render(a.stdout, o.output, doc, output.Options{Color: a.color})
}
