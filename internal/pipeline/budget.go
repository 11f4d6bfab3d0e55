package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/units"
)

// CaseFlags are fragcheck's cases given on the command line (each trace
// and workload is one) and the limits and settings they share.
type CaseFlags struct {
	Traces, Workloads []string
	Params            []string // name=value workload parameters
	Device            int
	Metric            string
	WarnFrag, MaxFrag float64
	WarnFragGiven     bool // --max-frag alone below the default warning lowers it
	MaxReserved       uint64
	MustFit           uint64
	// Setup is the allocator settings, policy and fraction as parsed
	// from their flags; its card is MustFit.
	Setup setup.Setup
}

// CaseFlagNames are the flags of CaseFlags; with the cases from a budget
// file, none may be given.
var CaseFlagNames = []string{"workload", "param", "device", "metric", "warn-frag", "max-frag",
	"max-reserved", "must-fit", "alloc-conf", "policy", "memory-fraction"}

// Cases makes the cases: traces first, then workloads, each named by its
// base name, or by its path where two share one.
func (f CaseFlags) Cases() ([]budget.Case, error) {
	l := budget.Limits{WarnFrag: f.WarnFrag, MaxFrag: f.MaxFrag, MaxReserved: f.MaxReserved, MustFit: f.MustFit}
	m, err := budget.ParseMetric(f.Metric)
	if err != nil {
		return nil, usage("--metric: %w", err)
	}
	l.Metric = m
	if !f.WarnFragGiven && l.WarnFrag > l.MaxFrag {
		l.WarnFrag = l.MaxFrag // --max-frag alone below the default warning: fail above it
	}
	if l.WarnFrag > l.MaxFrag {
		return nil, usage("--warn-frag %s is above --max-frag %s", units.FormatRatio(l.WarnFrag), units.FormatRatio(l.MaxFrag))
	}
	s := f.Setup
	s.Card = f.MustFit
	if err := s.Check(); err != nil {
		if errors.Is(err, setup.ErrNoCard) {
			return nil, hint(Usage, errors.New("--memory-fraction needs --must-fit"), "give the card's size, e.g. --must-fit 24GiB")
		}
		return nil, setupErr(err)
	}
	if f.Device < 0 {
		return nil, usage("--device: %d is not a device index", f.Device)
	}
	if len(f.Params) > 0 && len(f.Workloads) == 0 {
		return nil, usage("--param sets workload parameters; give --workload")
	}
	params, err := ParseParams(f.Params)
	if err != nil {
		return nil, err
	}
	var cases []budget.Case
	for _, t := range f.Traces {
		cases = append(cases, budget.Case{Name: budget.DefaultName(t), Trace: t, Device: f.Device, Setup: s, Limits: l})
	}
	for _, w := range f.Workloads {
		cases = append(cases, budget.Case{Name: budget.DefaultName(w), Workload: w, Params: params, Setup: s, Limits: l})
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

// ParseParams parses --param name=value pairs.
func ParseParams(list []string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range list {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usage("--param %q: want name=value", p)
		}
		m[k] = v
	}
	return m, nil
}

// BudgetRequest is what fragcheck was asked to check.
type BudgetRequest struct {
	// Flags are the cases on the command line; nil: the cases come from
	// the budget file Config (""= gpumem.yaml or .gpumem.yaml found from
	// the working directory upward).
	Flags  *CaseFlags
	Config string
	// Given reports whether a flag was set on the command line.
	Given          func(flag string) bool
	Strict         bool
	Tolerance      float64 // how far a case may regress; a budget file's own wins unless given
	Baseline       string  // "": the budget file's
	UpdateBaseline bool
}

// Budget is a checking run, ready to go: the cases, the checker (with the
// baseline to compare with) and the baseline file.
type Budget struct {
	Cases   []budget.Case
	File    *budget.File // nil: cases from the command line
	Checker *budget.Checker
	// Baseline is the baseline file; "" = none.
	Baseline string
	// Keep are, when the baseline is rewritten, its old entries (for
	// cases that cannot run now); KeepErr says why they could not be read.
	Keep    *budget.Baseline
	KeepErr error
	// Unrecorded: the budget file names a baseline that does not exist
	// yet. The cases are checked against their limits alone; Note says
	// how to record it.
	Unrecorded bool
}

// Notes are what to tell the user about the baseline before the results,
// each "warning: ..." or "note: ...".
func (b *Budget) Notes() []string {
	var out []string
	if b.KeepErr != nil {
		out = append(out, fmt.Sprintf("warning: rewriting the unreadable baseline %s: %s", b.Baseline, b.KeepErr))
	}
	if b.Unrecorded {
		out = append(out, fmt.Sprintf("note: no baseline %s yet: the cases are checked against their limits only; "+
			"record it with: gpumem fragcheck --update-baseline", b.Baseline))
	}
	return out
}

// WriteBaseline replaces the baseline file with the figures of results
// (and the kept entries of cases that could not run), creating its
// directory if need be. It is replaced whole, so that an interrupted run
// never leaves half of one.
func (b *Budget) WriteBaseline(ctx context.Context, results []budget.Result) error {
	nb := budget.NewBaseline(results, b.Keep)
	if dir := filepath.Dir(b.Baseline); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("writing the baseline: %w", err)
		}
	}
	return fileout.Write(ctx, b.Baseline, b.Inputs(), func(w io.Writer) error { return budget.WriteBaseline(w, nb) })
}

// PlanBudget gathers the cases, the budget file, the checker and the
// baseline of a fragcheck run.
func PlanBudget(r BudgetRequest) (*Budget, error) {
	given := r.Given
	b := &Budget{Checker: &budget.Checker{Strict: r.Strict, Tolerance: r.Tolerance}, Baseline: r.Baseline}
	if r.Flags != nil {
		if r.Config != "" {
			return nil, usage("--config and cases on the command line exclude each other")
		}
		var err error
		if b.Cases, err = r.Flags.Cases(); err != nil {
			return nil, err
		}
	} else {
		f, err := LoadBudget(r.Config)
		if err != nil {
			return nil, err
		}
		for _, name := range CaseFlagNames {
			if given(name) {
				return nil, hint(Usage, fmt.Errorf("--%s is for cases on the command line, and the cases come from %s", name, f.Path),
					"set limits and settings per case in the budget file")
			}
		}
		b.File, b.Cases = f, f.Cases
		if !given("tolerance") {
			b.Checker.Tolerance = f.Tolerance
		}
		if b.Baseline == "" {
			b.Baseline = f.BaselinePath()
		}
	}
	switch {
	case r.UpdateBaseline && b.Baseline == "":
		return nil, usage("--update-baseline needs a baseline file: --baseline FILE, or baseline: in the budget file")
	case r.UpdateBaseline:
		old, err := budget.ReadBaseline(b.Baseline)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			b.KeepErr = err
		}
		b.Keep = old
	case b.Baseline != "":
		old, err := budget.ReadBaseline(b.Baseline)
		if errors.Is(err, os.ErrNotExist) && r.Baseline == "" {
			// the budget file's, before its first --update-baseline; one
			// named on the command line must exist
			b.Unrecorded = true
			break
		}
		if err != nil {
			return nil, hint(Input, fmt.Errorf("reading the baseline: %w", err), "write it with --update-baseline")
		}
		b.Checker.Baseline = old
	}
	return b, nil
}

// Inputs lists the files the run reads, which no output may replace.
func (b *Budget) Inputs() []string {
	var in []string
	for _, c := range b.Cases {
		in = append(in, c.Path(c.Trace), c.Path(c.Workload))
	}
	return in
}

// LoadBudget reads the budget file given, or the one found from the
// working directory upward. Its path is shown relative to the working
// directory, so that output holds no machine paths.
func LoadBudget(path string) (*budget.File, error) {
	if path == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		found, err := budget.Find(wd)
		if errors.Is(err, budget.ErrNotFound) {
			return nil, hint(Usage, errors.New("no cases: give traces, --workload, or a budget file"),
				"write a gpumem.yaml (see 'gpumem fragcheck --help'), or pass --config FILE")
		}
		if err != nil {
			return nil, &Error{Kind: Input, Err: err}
		}
		path = found
		if rel, err := filepath.Rel(wd, found); err == nil {
			path = rel
		}
	}
	f, err := budget.ReadFile(path)
	if err != nil {
		return nil, &Error{Kind: Input, Err: err}
	}
	return f, nil
}

// InWorkspace makes the budget file paths of rs relative to the folder ws
// (GitHub's workspace, as annotations need them); "" leaves them.
func InWorkspace(rs []budget.Result, ws string) []budget.Result {
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
