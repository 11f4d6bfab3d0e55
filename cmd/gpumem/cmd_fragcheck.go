package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

type fragcheckOpts struct {
	invocation
	config string
	cases  pipeline.CaseFlags
	alloc  allocFlags // --alloc-conf, --policy, --memory-fraction (the card is --must-fit)

	output         string
	format         string // deprecated spelling of output
	baseline       string
	updateBaseline bool
	tolerance      units.Ratio
	strict         bool
	jobs           int
	html           string
}

func newFragcheckCmd(a *app) *cobra.Command {
	o := &fragcheckOpts{tolerance: units.Ratio(budget.DefaultTolerance)}
	c := &o.cases
	c.WarnFrag, c.MaxFrag = budget.DefaultWarnFrag, budget.DefaultMaxFrag
	cmd := &cobra.Command{
		Use:     "fragcheck [TRACE...] [--workload W]",
		Short:   "Check traces and workloads against memory budgets (for CI)",
		Long:    helpText("fragcheck", "$EXAMPLE", budget.Example, "$METRICS", budget.MetricList()),
		Example: helpText("fragcheck.examples"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runFragcheck(a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.config, "config", "", "budget file (default: gpumem.yaml or .gpumem.yaml here or above)")
	fl.StringArrayVar(&c.Workloads, "workload", nil, "a workload case: builtin name or script file (repeatable)")
	fl.StringArrayVarP(&c.Params, "param", "p", nil, "workload parameter name=value (repeatable)")
	fl.IntVar(&c.Device, "device", 0, "which device's trace to replay")
	fl.StringVar(&c.Metric, "metric", string(budget.Peaks), "fragmentation ratio the limits use: peaks, at_peak, end or holes")
	fl.Var((*units.Ratio)(&c.WarnFrag), "warn-frag", "warn above this fragmentation: 0.2, 20% or none")
	fl.Var((*units.Ratio)(&c.MaxFrag), "max-frag", "fail above this fragmentation: 0.3, 30% or none")
	fl.Var((*units.Size)(&c.MaxReserved), "max-reserved", "fail above this peak reserved memory, e.g. 20GiB")
	fl.Var((*units.Size)(&c.MustFit), "must-fit", "replay on a card of this size, e.g. 24GiB; an out-of-memory error fails")
	o.alloc.registerSettings(cmd, "the --must-fit card")
	outputFlag(cmd, &o.output, output.FragcheckFormats)
	registerReadFlags(cmd)
	deprecatedFlag(cmd, &o.format, "format", "", "output")
	fl.StringVar(&o.baseline, "baseline", "", "compare with the figures in this baseline file")
	fl.BoolVar(&o.updateBaseline, "update-baseline", false, "write the figures to the baseline file instead of comparing")
	fl.Var(&o.tolerance, "tolerance", "how far a case may regress from its baseline")
	fl.BoolVar(&o.strict, "strict", false, "treat warnings as failures")
	fl.IntVarP(&o.jobs, "jobs", "j", 0, "cases to run at once (default: one per CPU)")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	return cmd
}

func runFragcheck(a *app, o *fragcheckOpts, args []string) error {
	if err := useDeprecated(a, o.invocation, "format", o.format, "output", "-o/--output", &o.output); err != nil {
		return err
	}
	if err := checkFormat(output.FragcheckFormats, "format", o.output); o.changed("format") && err != nil {
		return err
	}
	if math.IsInf(float64(o.tolerance), 0) {
		return usageError{errors.New("--tolerance: want a fraction such as 0.05 or a percentage such as 5%")}
	}
	if o.jobs < 0 {
		return usageError{fmt.Errorf("--jobs: %d is not a positive number", o.jobs)}
	}
	if o.jobs == 0 {
		o.jobs = runtime.GOMAXPROCS(0)
	}
	req := pipeline.BudgetRequest{Config: o.config, Given: o.changed, Strict: o.strict,
		Tolerance: float64(o.tolerance), Baseline: o.baseline, UpdateBaseline: o.updateBaseline}
	if len(args) > 0 || len(o.cases.Workloads) > 0 {
		s, err := setup.Flags{AllocConf: o.alloc.conf, AllocConfGiven: o.changed("alloc-conf"), Policy: o.alloc.policy,
			Fraction: o.alloc.fraction}.Read()
		if err != nil {
			return setupError(err)
		}
		o.cases.Traces, o.cases.WarnFragGiven, o.cases.Setup = args, o.changed("warn-frag"), s
		req.Flags = &o.cases
	}
	b, err := pipeline.PlanBudget(req)
	if err != nil {
		return err
	}
	for _, n := range b.Notes() {
		fmt.Fprintf(a.stderr, "gpumem: %s\n", textsafe.Line(n))
	}
	baseline := b.Baseline

	if err := fileout.NotAnInput(o.html, append(b.Inputs(), baseline)...); err != nil {
		return err
	}
	results := pipeline.Check(o.ctx, b.Cases, b.Checker, o.jobs)
	if err := o.ctx.Err(); err != nil {
		return err
	}
	if o.updateBaseline {
		if err := b.WriteBaseline(o.ctx, results); err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "gpumem: wrote the baseline %s\n", textsafe.Line(baseline))
	}

	if err := output.FragcheckFormats.Render(a.stdout, o.output, results, output.Options{Color: a.color}); err != nil {
		return err
	}
	if o.html != "" {
		inputs := append(b.Inputs(), baseline)
		if err := writeHTML(a, o.invocation, o.html, inputs, func(w io.Writer) error { return output.FragcheckHTML(w, results) }); err != nil {
			return err
		}
	}
	if a.getenv("GITHUB_ACTIONS") == "true" {
		if err := output.GitHubAnnotations(a.stderr, pipeline.InWorkspace(results, a.getenv("GITHUB_WORKSPACE"))); err != nil {
			return err
		}
	}
	return fragcheckOutcome(a, results)
}

// fragcheckOutcome prints why cases could not run and maps the results
// to the exit status.
func fragcheckOutcome(a *app, results []budget.Result) error {
	s := budget.Summarize(results)
	for i := range results {
		if r := &results[i]; r.Err != nil {
			fmt.Fprintf(a.stderr, "gpumem: error: case %s: %s\n", textsafe.Line(r.Case.Name), textsafe.Line(r.Err.Error()))
		}
	}
	switch {
	case s.Error > 0:
		return &exitError{code: exitUsage}
	case s.Fail > 0:
		return &exitError{code: exitFailure, msg: fmt.Sprintf("%d of %d cases over budget", s.Fail, s.Cases)}
	}
	return nil
}
