package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/workload"
)

type runOpts struct {
	invocation
	alloc   allocFlags
	output  string
	params  []string
	list    bool
	backend string
	html    string
	maxOps  int
}

func newRunCmd(a *app) *cobra.Command {
	o := &runOpts{}
	cmd := &cobra.Command{
		Use:     "run WORKLOAD",
		Short:   "Run a scripted allocate/free workload and report its memory",
		Long:    helpText("run"),
		Example: helpText("run.examples"),
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if o.list {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.list {
				return output.WorkloadList(a.stdout, workload.Builtins())
			}
			o.invocation = invoked(cmd)
			return runWorkload(a, o, args[0])
		},
	}
	o.alloc.register(cmd)
	outputFlag(cmd, &o.output, output.ReplayFormats)
	fl := cmd.Flags()
	fl.StringArrayVarP(&o.params, "param", "p", nil, "workload parameter name=value (repeatable)")
	fl.BoolVar(&o.list, "list", false, "list the built-in workloads")
	fl.StringVar(&o.backend, "backend", "sim", "where memory comes from: sim or cuda")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	fl.IntVar(&o.maxOps, "max-ops", workload.DefaultLimits.Ops, "most allocator operations a workload script may make")
	return cmd
}

func runWorkload(a *app, o *runOpts, name string) error {
	if err := fileout.NotAnInput(o.html, name); err != nil {
		return err
	}
	params, err := pipeline.ParseParams(o.params)
	if err != nil {
		return err
	}
	if o.maxOps <= 0 {
		return usageError{fmt.Errorf("--max-ops %d: want a positive number", o.maxOps)}
	}
	s, err := o.alloc.settings(o.invocation, o.backend, false)
	if err != nil {
		return err
	}
	s.Points = timelinePoints
	run, err := pipeline.Replay(o.ctx, pipeline.Source{Workload: name, Params: params, MaxOps: o.maxOps}, s)
	if err != nil {
		return err
	}
	return renderReplay(a, o.invocation, o.output, run, output.Options{Color: a.color}, o.html, []string{name})
}
