package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/budget"
)

func pytorchFixture(name string) string {
	return filepath.Join("..", "..", "testdata", "pytorch", name)
}

// fragcheckCmd returns the fragcheck command, its options and flags
// parsed from args.
func fragcheckCmd(t *testing.T, args ...string) (*fragcheckOpts, []budget.Case, error) {
	t.Helper()
	a := &app{getenv: func(string) string { return "" }}
	cmd := newFragcheckCmd(a)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	o := &fragcheckOpts{}
	// The options live in the closure; read them back through the flags.
	fl := cmd.Flags()
	o.metric, _ = fl.GetString("metric")
	o.workloads, _ = fl.GetStringArray("workload")
	o.params, _ = fl.GetStringArray("param")
	o.device, _ = fl.GetInt("device")
	o.allocConf, _ = fl.GetString("alloc-conf")
	o.policy, _ = fl.GetString("policy")
	o.fraction, _ = fl.GetFloat64("memory-fraction")
	o.warnFrag = *fl.Lookup("warn-frag").Value.(*ratioFlag)
	o.maxFrag = *fl.Lookup("max-frag").Value.(*ratioFlag)
	o.maxReserved = *fl.Lookup("max-reserved").Value.(*sizeFlag)
	o.mustFit = *fl.Lookup("must-fit").Value.(*sizeFlag)
	o.invocation = invoked(cmd)
	cases, err := flagCases(o, fl.Args())
	return o, cases, err
}

func TestFlagCases(t *testing.T) {
	_, cases, err := fragcheckCmd(t, "a/x.pickle", "b/x.pickle", "y.pickle", "--workload", "transformer",
		"--param", "layers=2", "--max-frag", "10%", "--max-reserved", "20GiB", "--alloc-conf", "expandable_segments:True")
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
	if s := cases[0].Settings.AllocConf; s == nil || !s.ExpandableSegments {
		t.Errorf("alloc conf %+v, want expandable segments", s)
	}
}

func TestFlagCasesErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"x", "--warn-frag", "40%"}, "--warn-frag 40.0% is above --max-frag 30.0%"},
		{[]string{"x", "--metric", "worst"}, `--metric: unknown fragmentation metric "worst"`},
		{[]string{"x", "--policy", "greedy"}, `--policy: unknown policy "greedy"`},
		{[]string{"x", "--memory-fraction", "0.5"}, "--memory-fraction needs --must-fit"},
		{[]string{"x", "--memory-fraction", "2", "--must-fit", "8GiB"}, "--memory-fraction: 2 is not in (0, 1]"},
		{[]string{"x", "--param", "a=1"}, "--param sets workload parameters"},
		{[]string{"--workload", "w", "--param", "novalue"}, `--param "novalue": want name=value`},
		{[]string{"x", "--device", "-1"}, "--device: -1 is not a device index"},
	} {
		_, _, err := fragcheckCmd(t, tc.args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}

func TestFragcheckOutcome(t *testing.T) {
	k := &budget.Checker{}
	pass := k.Check(budget.Case{Name: "p", Limits: budget.DefaultLimits()}, budget.Figures{PeakReserved: 10, PeakAllocated: 9})
	fragmented := budget.Figures{PeakReserved: 10, PeakAllocated: 1}
	fragmented.Fragmentation.Peaks = 0.9
	fail := k.Check(budget.Case{Name: "f", Limits: budget.DefaultLimits()}, fragmented)
	broken := k.Failed(budget.Case{Name: "b", Trace: "b.pickle"}, errors.New("b.pickle: byte 0: not a pickle"))
	for _, tc := range []struct {
		rs     []budget.Result
		code   int
		stderr string
	}{
		{[]budget.Result{pass}, exitOK, ""},
		{[]budget.Result{pass, fail}, exitFailure, "gpumem: error: 1 of 2 cases over budget\n"},
		{[]budget.Result{fail, broken, pass}, exitUsage, "gpumem: error: case b: b.pickle: byte 0: not a pickle\n"},
	} {
		var stderr bytes.Buffer
		a := &app{stderr: &stderr}
		code := printError(&stderr, fragcheckOutcome(a, tc.rs))
		if code != tc.code || stderr.String() != tc.stderr {
			t.Errorf("code %d stderr %q, want %d %q", code, stderr.String(), tc.code, tc.stderr)
		}
	}
}

func TestFlagValues(t *testing.T) {
	var r ratioFlag
	if err := r.Set("25%"); err != nil || float64(r) != 0.25 || r.String() != "25.0%" || r.Type() != "ratio" {
		t.Errorf("ratio 25%%: %v %v %q", err, float64(r), r.String())
	}
	if err := r.Set("2.5"); err == nil {
		t.Error("ratio 2.5 accepted")
	}
	var z sizeFlag
	if err := z.Set("20GiB"); err != nil || uint64(z) != 20<<30 || z.String() != "21474836480" {
		t.Errorf("size 20GiB: %v %d %q", err, uint64(z), z.String())
	}
	if err := z.Set("0"); err == nil {
		t.Error("size 0 accepted")
	}
}
