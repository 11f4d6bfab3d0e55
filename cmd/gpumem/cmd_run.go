package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/report"
	"github.com/gpumem/gpumem/pkg/workload"
)

type runOpts struct {
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
		Use:   "run WORKLOAD",
		Short: "Run a scripted allocate/free workload and report its memory",
		Long: `Run a built-in workload (see --list) or a workload script file through the
allocator and print the same report as replay. Parameters of a workload are
set with --param name=value.`,
		Example: `  gpumem run --list
  gpumem run frag-demo
  gpumem run transformer --param layers=12 --param hidden=768 --param batch=8
  gpumem run my_workload.gpumem --alloc-conf expandable_segments:True`,
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if o.list {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.list {
				return listWorkloads(a)
			}
			return runWorkload(cmd, a, o, args[0])
		},
	}
	o.alloc.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&o.output, "output", "o", "table", "output format: table, json, markdown or torch-summary")
	fl.StringArrayVarP(&o.params, "param", "p", nil, "workload parameter name=value (repeatable)")
	fl.BoolVar(&o.list, "list", false, "list the built-in workloads")
	fl.StringVar(&o.backend, "backend", "sim", "where memory comes from: sim or cuda")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	fl.IntVar(&o.maxOps, "max-ops", workload.DefaultLimits.Ops, "most allocator operations a workload script may make")
	return cmd
}

func listWorkloads(a *app) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	for _, b := range workload.Builtins() {
		fmt.Fprintf(tw, "%s\t%s\n", b.Name, b.Description)
	}
	return tw.Flush()
}

func parseParams(list []string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range list {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--param %q: want name=value", p)}
		}
		m[k] = v
	}
	return m, nil
}

// loadWorkload finds a builtin or parses a script file.
func loadWorkload(name string, params map[string]string) (*workload.Workload, error) {
	w, err := workload.Lookup(name, params)
	return w, workloadErr(err)
}

// workloadErr marks a workload's error as bad input; past a limit the list
// of builtins is no help.
func workloadErr(err error) error {
	var le *workload.LimitError
	if err == nil {
		return nil
	} else if errors.As(err, &le) {
		return inputError{err}
	}
	return withHint(inputError{err}, "run 'gpumem run --list' for the built-in workloads")
}

func runWorkload(cmd *cobra.Command, a *app, o *runOpts, name string) error {
	if err := checkOutput(o.output, "table", "json", "markdown", "torch-summary"); err != nil {
		return err
	}
	params, err := parseParams(o.params)
	if err != nil {
		return err
	}
	if o.maxOps <= 0 {
		return usageError{fmt.Errorf("--max-ops %d: want a positive number", o.maxOps)}
	}
	lim := workload.DefaultLimits
	lim.Ops, lim.OpsHint = o.maxOps, "raise it with --max-ops"
	// Open does not make a script's operations: Replay streams them.
	w, err := workload.Open(name, params, lim)
	if err == nil && o.html != "" {
		err = w.Materialize() // the HTML report replays a prefix of Ops
	}
	if err != nil {
		return workloadErr(err)
	}
	ro, err := o.alloc.options(cmd, nil)
	if err != nil {
		return err
	}
	if err := applyBackend(cmd, o.backend, &ro); err != nil {
		return err
	}
	ro.Points = 2000
	res, err := w.Replay(ro)
	if err != nil {
		return backendErr(fmt.Errorf("running %s: %w", w.Name, err))
	}
	rep := buildReport(w.Name, ro, res, nil, nil)
	if err := writeReport(a, a.stdout, o.output, rep, report.Options{Color: a.color}); err != nil || o.html == "" {
		return err
	}
	return writeRunHTML(a, o.html, w, rep, ro, res)
}
