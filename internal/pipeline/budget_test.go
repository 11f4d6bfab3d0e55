package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/pkg/alloc"
)

func TestCaseFlags(t *testing.T) {
	conf, err := alloc.ParseConfig("expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}
	f := CaseFlags{Traces: []string{"a/x.pickle", "b/x.pickle", "y.pickle"}, Workloads: []string{"transformer"},
		Params: []string{"layers=2"}, Metric: "peaks", WarnFrag: budget.DefaultWarnFrag, MaxFrag: 0.10,
		MaxReserved: 20 << 30, Setup: setup.Setup{Config: &conf}}
	cases, err := f.Cases()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
	}
	// Equal base names keep their paths, so names stay unique.
	if want := []string{"a/x.pickle", "b/x.pickle", "y", "transformer"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	c := cases[3]
	if c.Workload != "transformer" || c.Params["layers"] != "2" || c.Trace != "" {
		t.Errorf("workload case %+v", c)
	}
	// --max-frag below the default warning level lowers the warning too.
	if want := (budget.Limits{Metric: budget.Peaks, WarnFrag: 0.10, MaxFrag: 0.10, MaxReserved: 20 << 30}); c.Limits != want {
		t.Errorf("limits %+v, want %+v", c.Limits, want)
	}
	if s := cases[0].Setup.Config; s == nil || !s.ExpandableSegments {
		t.Errorf("alloc conf %+v, want expandable segments", s)
	}
}

func TestCaseFlagsErrors(t *testing.T) {
	base := CaseFlags{Traces: []string{"x"}, Metric: "peaks", WarnFrag: budget.DefaultWarnFrag, MaxFrag: budget.DefaultMaxFrag}
	for _, tc := range []struct {
		edit func(*CaseFlags)
		want string
	}{
		{func(f *CaseFlags) { f.WarnFrag, f.WarnFragGiven = 0.4, true }, "--warn-frag 40.0% is above --max-frag 30.0%"},
		{func(f *CaseFlags) { f.Metric = "worst" }, `--metric: unknown fragmentation metric "worst"`},
		{func(f *CaseFlags) { f.Setup.Fraction = 0.5 }, "--memory-fraction needs --must-fit"},
		{func(f *CaseFlags) { f.Setup.Fraction, f.MustFit = 2, 8<<30 }, "--memory-fraction: 2 is not in (0, 1]"},
		{func(f *CaseFlags) { f.Params = []string{"a=1"} }, "--param sets workload parameters"},
		{func(f *CaseFlags) { f.Traces, f.Workloads, f.Params = nil, []string{"w"}, []string{"novalue"} }, `--param "novalue": want name=value`},
		{func(f *CaseFlags) { f.Device = -1 }, "--device: -1 is not a device index"},
	} {
		f := base
		tc.edit(&f)
		_, err := f.Cases()
		var pe *Error
		if !errors.As(err, &pe) || pe.Kind != Usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want a usage error saying %q", f, err, tc.want)
		}
	}
}

// The cases come from the command line or a budget file, never both; with
// a file, the flags of command-line cases are refused, its tolerance and
// baseline apply, and --update-baseline needs a baseline to write.
func TestPlanBudget(t *testing.T) {
	none := func(string) bool { return false }
	flags := &CaseFlags{Traces: []string{"x"}, Metric: "peaks", MaxFrag: 0.3}
	if _, err := PlanBudget(BudgetRequest{Flags: flags, Config: "g.yaml", Given: none}); err == nil ||
		err.Error() != "--config and cases on the command line exclude each other" {
		t.Errorf("flags and --config: %v", err)
	}
	if _, err := PlanBudget(BudgetRequest{Flags: flags, Given: none, UpdateBaseline: true}); err == nil ||
		!strings.HasPrefix(err.Error(), "--update-baseline needs a baseline file") {
		t.Errorf("--update-baseline alone: %v", err)
	}
	b, err := PlanBudget(BudgetRequest{Flags: flags, Given: none, Baseline: "testdata/none.json", UpdateBaseline: true, Tolerance: 0.1})
	if err != nil || len(b.Cases) != 1 || b.Keep != nil || b.KeepErr != nil || b.Checker.Tolerance != 0.1 {
		t.Errorf("a baseline to write anew: %+v, %v", b, err)
	}
	var pe *Error
	if _, err := PlanBudget(BudgetRequest{Flags: flags, Given: none, Baseline: "testdata/none.json"}); !errors.As(err, &pe) || pe.Kind != Input {
		t.Errorf("a missing baseline to compare with: %v", err)
	}
}

// A budget file's tolerance and baseline apply unless given; a flag of
// command-line cases is refused.
func TestPlanBudgetFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpumem.yaml")
	yaml := "tolerance: 10%\nbaseline: base.json\ncases:\n  - trace: x.pickle\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := PlanBudget(BudgetRequest{Config: path, Given: func(string) bool { return false }, Tolerance: 0.05, UpdateBaseline: true})
	if err != nil || len(b.Cases) != 1 || b.File == nil || b.Checker.Tolerance != 0.1 || b.Baseline != filepath.Join(dir, "base.json") {
		t.Fatalf("%+v, %v", b, err)
	}
	if in := b.Inputs(); len(in) != 2 || in[0] != filepath.Join(dir, "x.pickle") {
		t.Errorf("inputs %q", in)
	}
	_, err = PlanBudget(BudgetRequest{Config: path, Given: func(f string) bool { return f == "must-fit" }})
	if err == nil || err.Error() != "--must-fit is for cases on the command line, and the cases come from "+path {
		t.Errorf("--must-fit with a budget file: %v", err)
	}
}
