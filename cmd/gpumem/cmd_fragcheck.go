package main

import (
	"errors"
	"fmt"
	"github.com/gpumem/gpumem/pkg/textsafe"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/output"
	"github.com/gpumem/gpumem/pkg/pipeline"
)

type fragcheckOpts struct {
	invocation
	config    string
	workloads []string
	params    []string
	device    int

	metric            string
	warnFrag, maxFrag ratioFlag
	maxReserved       sizeFlag
	mustFit           sizeFlag
	allocConf         string
	policy            string
	fraction          float64

	output         string
	format         string // deprecated spelling of output
	baseline       string
	updateBaseline bool
	tolerance      ratioFlag
	strict         bool
	jobs           int
	html           string
}

// caseFlags set the limits and settings of cases given on the command
// line; a budget file sets its own.
var caseFlags = []string{"workload", "param", "device", "metric", "warn-frag", "max-frag",
	"max-reserved", "must-fit", "alloc-conf", "policy", "memory-fraction"}

func newFragcheckCmd(a *app) *cobra.Command {
	o := &fragcheckOpts{
		warnFrag:  ratioFlag(budget.DefaultWarnFrag),
		maxFrag:   ratioFlag(budget.DefaultMaxFrag),
		tolerance: ratioFlag(budget.DefaultTolerance),
	}
	cmd := &cobra.Command{
		Use:   "fragcheck [TRACE...] [--workload W]",
		Short: "Check traces and workloads against memory budgets (for CI)",
		Long: `Replay traces and workloads and check each against its memory budget:
a fragmentation warning level and limit, a peak reserved memory limit, and a
card it must fit on. Made to gate CI.

Cases come from the command line (each TRACE and --workload is one case,
under the limit flags) or, with none given, from a budget file: --config
FILE, or gpumem.yaml or .gpumem.yaml in the working directory or above.
A budget file lists named cases, each with its own limits and settings:

  defaults:
    max_frag: 30%
  baseline: fragcheck-baseline.json
  cases:
    - name: gpt2
      trace: testdata/gpt2.pickle
      max_reserved: 20GiB
    - name: toy
      workload: transformer
      params: {layers: 4}
      must_fit: 8GiB

Fragmentation limits (0.3, 30% or none) use one ratio, --metric:
  peaks    1 − peak allocated / peak reserved (the default)
  at_peak  1 − allocated / reserved when reserved peaked
  end      1 − allocated / reserved at the end
  holes    1 − largest free block / cached free bytes at the end
A case warns above --warn-frag (20%) and fails above --max-frag (30%),
above --max-reserved, or when it runs out of memory on the --must-fit card.

With --baseline FILE, each case is also compared with its committed
figures: it fails when its peak reserved memory grew by more than
--tolerance of the baseline's, or its fragmentation by more than
--tolerance in absolute terms (5% = five points). --update-baseline
rewrites the file instead. Baselines hold no timestamps or machine paths.

Cases run in parallel. A case whose input cannot be read fails alone; the
others still run and report. With GITHUB_ACTIONS=true, warnings and
failures are also written to stderr as GitHub Actions annotations.

EXIT STATUS
  0  every case passed (warnings allowed, unless --strict)
  1  a budget exceeded: a limit crossed or a regression from the baseline
  2  usage error, unreadable budget or baseline file, or a case whose
     input could not be read or replayed (the other cases still report)`,
		Example: `  gpumem fragcheck testdata/gpt2.pickle --max-frag 25% --max-reserved 20GiB
  gpumem fragcheck --workload transformer --param layers=12 --must-fit 24GiB
  gpumem fragcheck -o junit > fragcheck.xml
  gpumem fragcheck --baseline fragcheck-baseline.json --update-baseline`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runFragcheck(a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.config, "config", "", "budget file (default: gpumem.yaml or .gpumem.yaml here or above)")
	fl.StringArrayVar(&o.workloads, "workload", nil, "a workload case: builtin name or script file (repeatable)")
	fl.StringArrayVarP(&o.params, "param", "p", nil, "workload parameter name=value (repeatable)")
	fl.IntVar(&o.device, "device", 0, "which device's trace to replay")
	fl.StringVar(&o.metric, "metric", string(budget.Peaks), "fragmentation ratio the limits use: peaks, at_peak, end or holes")
	fl.Var(&o.warnFrag, "warn-frag", "warn above this fragmentation: 0.2, 20% or none")
	fl.Var(&o.maxFrag, "max-frag", "fail above this fragmentation: 0.3, 30% or none")
	fl.Var(&o.maxReserved, "max-reserved", "fail above this peak reserved memory, e.g. 20GiB")
	fl.Var(&o.mustFit, "must-fit", "replay on a card of this size, e.g. 24GiB; an out-of-memory error fails")
	fl.StringVar(&o.allocConf, "alloc-conf", "", "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: the trace's own)")
	fl.StringVar(&o.policy, "policy", "", "allocation policy: pytorch or nocache (default pytorch)")
	fl.Float64Var(&o.fraction, "memory-fraction", 0, "set_per_process_memory_fraction of the --must-fit card")
	outputFlag(cmd, &o.output, output.FragcheckFormats)
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
	flag := "output"
	if o.changed("format") {
		flag = "format"
	}
	if err := useDeprecated(a, o.invocation, "format", o.format, "output", "-o/--output", &o.output); err != nil {
		return err
	}
	if err := checkFormat(output.FragcheckFormats, flag, o.output); err != nil {
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
	var cases []budget.Case
	var file *budget.File
	if len(args) > 0 || len(o.workloads) > 0 {
		if o.config != "" {
			return usageError{errors.New("--config and cases on the command line exclude each other")}
		}
		var err error
		if cases, err = flagCases(o, args); err != nil {
			return err
		}
	} else {
		var err error
		if file, err = loadBudget(o.config); err != nil {
			return err
		}
		for _, name := range caseFlags {
			if o.changed(name) {
				return withHint(usageError{fmt.Errorf("--%s is for cases on the command line, and the cases come from %s", name, file.Path)},
					"set limits and settings per case in the budget file")
			}
		}
		cases = file.Cases
	}

	k := &budget.Checker{Strict: o.strict, Tolerance: float64(o.tolerance)}
	baseline := o.baseline
	if file != nil {
		if !o.changed("tolerance") {
			k.Tolerance = file.Tolerance
		}
		if baseline == "" {
			baseline = file.BaselinePath()
		}
	}
	var old *budget.Baseline
	switch {
	case o.updateBaseline && baseline == "":
		return usageError{errors.New("--update-baseline needs a baseline file: --baseline FILE, or baseline: in the budget file")}
	case o.updateBaseline:
		// Keep the entries of cases that cannot run now.
		b, err := budget.ReadBaseline(baseline)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(a.stderr, "gpumem: warning: rewriting the unreadable baseline %s: %s\n", textsafe.Line(baseline), textsafe.Line(err.Error()))
		}
		old = b
	case baseline != "":
		b, err := budget.ReadBaseline(baseline)
		if err != nil {
			return withHint(inputError{fmt.Errorf("reading the baseline: %w", err)},
				"write it with --update-baseline")
		}
		k.Baseline = b
	}

	if err := checkOutput(o.html, append(caseInputs(cases), baseline)...); err != nil {
		return err
	}
	results := pipeline.Check(o.ctx, cases, k, o.jobs)
	if err := o.ctx.Err(); err != nil {
		return err
	}
	if o.updateBaseline {
		b := budget.NewBaseline(results, old)
		// replaced whole, so that an interrupted run never leaves half of one
		if err := writeFile(o.ctx, baseline, caseInputs(cases), func(w io.Writer) error { return budget.WriteBaseline(w, b) }); err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "gpumem: wrote the baseline %s\n", textsafe.Line(baseline))
	}

	if err := output.FragcheckFormats.Render(a.stdout, o.output, results, output.Options{Color: a.color}); err != nil {
		return err
	}
	if o.html != "" {
		inputs := append(caseInputs(cases), baseline)
		if err := writeHTML(a, o.invocation, o.html, inputs, func(w io.Writer) error { return output.FragcheckHTML(w, results) }); err != nil {
			return err
		}
	}
	if a.getenv("GITHUB_ACTIONS") == "true" {
		if err := output.GitHubAnnotations(a.stderr, inWorkspace(a, results)); err != nil {
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

// inWorkspace makes the budget file paths of rs relative to the GitHub
// workspace, as annotations need them.
func inWorkspace(a *app, rs []budget.Result) []budget.Result {
	ws := a.getenv("GITHUB_WORKSPACE")
	if ws == "" {
		return rs
	}
	out := slices.Clone(rs)
	for i := range out {
		if f := out[i].Case.File; f != "" {
			abs, err := filepath.Abs(f)
			if err != nil {
				continue
			}
			if rel, err := filepath.Rel(ws, abs); err == nil && !strings.HasPrefix(rel, "..") {
				out[i].Case.File = filepath.ToSlash(rel)
			}
		}
	}
	return out
}

// flagCases makes a case of each trace argument and --workload.
func flagCases(o *fragcheckOpts, traces []string) ([]budget.Case, error) {
	l := budget.Limits{
		WarnFrag: float64(o.warnFrag), MaxFrag: float64(o.maxFrag),
		MaxReserved: uint64(o.maxReserved), MustFit: uint64(o.mustFit),
	}
	m, err := budget.ParseMetric(o.metric)
	if err != nil {
		return nil, usageError{fmt.Errorf("--metric: %w", err)}
	}
	l.Metric = m
	if !o.changed("warn-frag") && l.WarnFrag > l.MaxFrag {
		l.WarnFrag = l.MaxFrag // --max-frag alone below the default warning: fail above it
	}
	if l.WarnFrag > l.MaxFrag {
		return nil, usageError{fmt.Errorf("--warn-frag %s is above --max-frag %s", budget.FormatRatio(l.WarnFrag), budget.FormatRatio(l.MaxFrag))}
	}
	var s budget.Settings
	if o.allocConf != "" {
		c, err := alloc.ParseConfig(o.allocConf)
		if err != nil {
			return nil, usageError{fmt.Errorf("--alloc-conf: %w", err)}
		}
		s.AllocConf = &c
	}
	if o.policy != "" {
		p, err := alloc.ParsePolicy(o.policy)
		if err != nil {
			return nil, usageError{fmt.Errorf("--policy: %w", err)}
		}
		s.Policy = p
	}
	if o.fraction != 0 {
		if o.fraction < 0 || o.fraction > 1 {
			return nil, usageError{fmt.Errorf("--memory-fraction: %v is not in (0, 1]", o.fraction)}
		}
		if o.mustFit == 0 {
			return nil, withHint(usageError{errors.New("--memory-fraction needs --must-fit")},
				"give the card's size, e.g. --must-fit 24GiB")
		}
		s.MemoryFraction = o.fraction
	}
	if o.device < 0 {
		return nil, usageError{fmt.Errorf("--device: %d is not a device index", o.device)}
	}
	if len(o.params) > 0 && len(o.workloads) == 0 {
		return nil, usageError{errors.New("--param sets workload parameters; give --workload")}
	}
	params, err := parseParams(o.params)
	if err != nil {
		return nil, err
	}
	var cases []budget.Case
	for _, t := range traces {
		cases = append(cases, budget.Case{Name: budget.DefaultName(t), Trace: t, Device: o.device, Settings: s, Limits: l})
	}
	for _, w := range o.workloads {
		cases = append(cases, budget.Case{Name: budget.DefaultName(w), Workload: w, Params: params, Settings: s, Limits: l})
	}
	// Two traces of one base name from different directories keep
	// their paths as names.
	count := map[string]int{}
	for _, c := range cases {
		count[c.Name]++
	}
	for i := range cases {
		if count[cases[i].Name] > 1 {
			cases[i].Name = cases[i].Trace + cases[i].Workload
		}
	}
	return cases, nil
}

// loadBudget reads the budget file given, or the one found from the
// working directory upward. Its path is shown relative to the working
// directory, so that output holds no machine paths.
func loadBudget(path string) (*budget.File, error) {
	if path == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		found, err := budget.Find(wd)
		if errors.Is(err, budget.ErrNotFound) {
			return nil, withHint(usageError{errors.New("no cases: give traces, --workload, or a budget file")},
				"write a gpumem.yaml (see 'gpumem fragcheck --help'), or pass --config FILE")
		}
		if err != nil {
			return nil, inputError{err}
		}
		path = found
		if rel, err := filepath.Rel(wd, found); err == nil {
			path = rel
		}
	}
	f, err := budget.ReadFile(path)
	if err != nil {
		return nil, inputError{err}
	}
	return f, nil
}

// ratioFlag is a fragmentation ratio flag: 0.3, 30% or none.
type ratioFlag float64

func (r *ratioFlag) String() string { return budget.FormatRatio(float64(*r)) }
func (r *ratioFlag) Type() string   { return "ratio" }
func (r *ratioFlag) Set(s string) error {
	v, err := budget.ParseRatio(s)
	if err != nil {
		return err
	}
	*r = ratioFlag(v)
	return nil
}

// sizeFlag is a byte count flag: bytes or a number with a unit.
type sizeFlag uint64

func (z *sizeFlag) String() string {
	if *z == 0 {
		return ""
	}
	return fmt.Sprint(uint64(*z))
}
func (z *sizeFlag) Type() string { return "size" }
func (z *sizeFlag) Set(s string) error {
	n, err := budget.ParseSize(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("invalid size %q: zero bytes", s)
	}
	*z = sizeFlag(n)
	return nil
}

// caseInputs lists the files the cases read, which no output may replace.
func caseInputs(cases []budget.Case) []string {
	var in []string
	for _, c := range cases {
		in = append(in, c.Path(c.Trace), c.Path(c.Workload))
	}
	return in
}
