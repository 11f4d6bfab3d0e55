package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// pytorchFixture is a PyTorch snapshot kept with the repository.
func pytorchFixture(name string) string { return "../../testdata/pytorch/" + name }

func TestCaseOptions(t *testing.T) {
	recorded := alloc.DefaultConfig()
	recorded.GCThreshold = 0.6
	conf, err := alloc.ParseConfig("expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}

	c := budget.Case{Limits: budget.DefaultLimits()}
	o, _ := caseOptions(c, &recorded, 0)
	if o.Config.GCThreshold != 0.6 || o.Device != nil || o.DeviceTotal != 0 {
		t.Errorf("no settings: %+v, want the recorded config on an unlimited device", o)
	}
	o, _ = caseOptions(c, &recorded, 8<<30)
	if o.DeviceTotal != 8<<30 || o.Device == nil {
		t.Errorf("a workload's limit is its card: %+v", o)
	}

	c.Setup = setup.Setup{Config: &conf, Policy: alloc.PolicyNoCache, Fraction: 0.5, Card: 24 << 30}
	c.Limits.MustFit = 24 << 30
	o, _ = caseOptions(c, &recorded, 8<<30)
	if !o.Config.ExpandableSegments || o.Config.GCThreshold != 0 || o.Config.Policy != alloc.PolicyNoCache {
		t.Errorf("alloc_conf replaces the recorded settings: %+v", o.Config)
	}
	if o.DeviceTotal != 24<<30 || o.MemoryFraction != 0.5 {
		t.Errorf("must_fit is the card, over the workload's: %+v", o)
	}
}

// TestCheckParallel checks that results come back in the cases'
// order whatever the parallelism, with a broken case failing alone.
func TestCheckParallel(t *testing.T) {
	var cases []budget.Case
	for _, f := range []string{"gpt2_varlen.pickle", "seed_frag.pickle", "missing.pickle", "resnet50_fp32.pickle", "multistream.pickle"} {
		cases = append(cases, budget.Case{Name: f, Trace: pytorchFixture(f), Limits: budget.DefaultLimits()})
	}
	cases = append(cases, budget.Case{Name: "frag-demo", Workload: "frag-demo", Limits: budget.DefaultLimits()})
	var runs [][]budget.Result
	for _, jobs := range []int{1, 4} {
		runs = append(runs, Check(context.Background(), cases, &budget.Checker{}, jobs))
	}
	want := []budget.Status{budget.Pass, budget.Fail, budget.Error, budget.Pass, budget.Fail, budget.Fail}
	for j, rs := range runs {
		for i, r := range rs {
			if r.Case.Name != cases[i].Name || r.Status() != want[i] {
				t.Errorf("run %d, result %d: %s %v, want %s %v (%v)", j, i, r.Case.Name, r.Status(), cases[i].Name, want[i], r.Err)
			}
		}
	}
	for i := range runs[0] {
		if runs[0][i].Figures.PeakReserved != runs[1][i].Figures.PeakReserved {
			t.Errorf("%s: peak reserved %d serially, %d in parallel", cases[i].Name, runs[0][i].Figures.PeakReserved, runs[1][i].Figures.PeakReserved)
		}
	}
	if got := runs[0][0].Figures.PeakReserved; got != 19304284160 {
		t.Errorf("gpt2_varlen peak reserved %d, want 19304284160", got)
	}
}

func TestCheckCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rs := Check(ctx, []budget.Case{{Name: "a", Trace: pytorchFixture("seed_frag.pickle"), Limits: budget.DefaultLimits()}}, &budget.Checker{}, 2)
	if !errors.Is(rs[0].Err, context.Canceled) {
		t.Errorf("error %v, want canceled", rs[0].Err)
	}
}

// withBaseline adds the defaults to a grid only when it lacks them.
func TestWithBaseline(t *testing.T) {
	g, err := sweep.ParseGrid("nocache;expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}
	g = withBaseline(g)
	if len(g) != 3 || g[0].Label != "defaults" {
		t.Errorf("grid %v", g)
	}
	if got := withBaseline(g); len(got) != 3 {
		t.Errorf("defaults added twice: %d settings", len(got))
	}
	// nocache has the default knobs but is not the baseline
	if n, _ := sweep.ParseGrid("nocache"); len(withBaseline(n)) != 2 {
		t.Error("nocache taken for the defaults")
	}
	d, e := sweep.Defaults(), g[2]
	if !sameConfig(d.Config, g[0].Config) || sameConfig(d.Config, e.Config) {
		t.Error("sameConfig")
	}
}

// A trace without events is refused with one message, whichever command
// reads it.
func TestNoAllocationTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.trace")
	if err := os.WriteFile(path, []byte("# gpumem-trace v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := path + ": the snapshot holds no allocation trace (record it with torch.cuda.memory._record_memory_history)"
	_, err := Replay(context.Background(), Source{Trace: path}, Settings{})
	var pe *Error
	if !errors.As(err, &pe) || pe.Kind != Input || err.Error() != want {
		t.Errorf("Replay: %v, want an Input error %q", err, want)
	}
	if _, err := Sweep(context.Background(), SweepInput{Source: Source{Trace: path}, Workers: 1}); err == nil || err.Error() != want {
		t.Errorf("Sweep: %v", err)
	}
	rs := Check(context.Background(), []budget.Case{{Name: "e", Trace: path, Limits: budget.DefaultLimits()}}, &budget.Checker{}, 1)
	if rs[0].Err == nil || rs[0].Err.Error() != want {
		t.Errorf("Check: %v", rs[0].Err)
	}
}

// A setup's error is a Usage error with its hint; the recorded settings
// apply unless the setup has its own.
func TestSettingsOptions(t *testing.T) {
	_, err := Settings{Setup: setup.Setup{Fraction: 0.5}}.options(nil)
	var pe *Error
	if !errors.As(err, &pe) || pe.Kind != Usage || err.Error() != "--memory-fraction needs --device-memory" || len(pe.Hints) == 0 {
		t.Errorf("%v, want a Usage error with a hint", err)
	}
	rec := alloc.DefaultConfig()
	rec.ExpandableSegments = true
	o, err := Settings{Setup: setup.Setup{Policy: alloc.PolicyNoCache, Card: 8 << 30, Fraction: 0.5}}.options(&rec)
	if err != nil || !o.Config.ExpandableSegments || o.Config.Policy != alloc.PolicyNoCache || o.DeviceTotal != 8<<30 || o.MemoryFraction != 0.5 {
		t.Errorf("recorded settings: %+v, %v", o, err)
	}
	def := alloc.DefaultConfig()
	o, _ = Settings{Setup: setup.Setup{Config: &def}}.options(&rec)
	if o.Config.ExpandableSegments {
		t.Error("--alloc-conf '' kept the recorded settings")
	}
}
