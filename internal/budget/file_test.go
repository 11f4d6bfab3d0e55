package budget

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

const goodFile = `# budgets for CI
version: 1
defaults:
  metric: at_peak
  warn_frag: 10%
  max_frag: 0.25
baseline: base/fragcheck.json
tolerance: 2%
cases:
  - name: gpt2
    trace: traces/gpt2.pickle
    max_reserved: 20GiB
    alloc_conf: expandable_segments:True
  - trace: /abs/resnet.pickle
    device: 1
    max_frag: 5%
    metric: peaks
  - name: toy
    workload: transformer
    params: {layers: 4, hidden: 256}
    must_fit: 21.5 GB
    memory_fraction: 50%
    policy: nocache
    max_frag: none
`

func TestParse(t *testing.T) {
	f, err := Parse("ci/gpumem.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if f.Tolerance != 0.02 {
		t.Errorf("tolerance = %v, want 0.02", f.Tolerance)
	}
	if got, want := f.BaselinePath(), filepath.Join("ci", "base", "fragcheck.json"); got != want {
		t.Errorf("baseline path = %q, want %q", got, want)
	}
	if len(f.Cases) != 3 {
		t.Fatalf("%d cases, want 3", len(f.Cases))
	}

	gpt2 := f.Cases[0]
	if gpt2.Name != "gpt2" || gpt2.Line != 10 || gpt2.File != "ci/gpumem.yaml" {
		t.Errorf("gpt2: name %q line %d file %q", gpt2.Name, gpt2.Line, gpt2.File)
	}
	if got, want := gpt2.Path(gpt2.Trace), filepath.Join("ci", "traces", "gpt2.pickle"); got != want {
		t.Errorf("gpt2 trace path = %q, want %q", got, want)
	}
	if want := (Limits{Metric: AtPeak, WarnFrag: 0.10, MaxFrag: 0.25, MaxReserved: 20 << 30}); gpt2.Limits != want {
		t.Errorf("gpt2 limits = %+v, want %+v", gpt2.Limits, want)
	}
	if c := gpt2.Setup.Config; c == nil || !c.ExpandableSegments {
		t.Errorf("gpt2 alloc_conf = %+v, want expandable segments", c)
	}

	// No name: the trace's base name. Its own max_frag below the
	// defaults' warning level lowers the warning with it.
	res := f.Cases[1]
	if res.Name != "resnet" || res.Device != 1 || res.Path(res.Trace) != "/abs/resnet.pickle" {
		t.Errorf("resnet: name %q device %d path %q", res.Name, res.Device, res.Path(res.Trace))
	}
	if want := (Limits{Metric: Peaks, WarnFrag: 0.05, MaxFrag: 0.05}); res.Limits != want {
		t.Errorf("resnet limits = %+v, want %+v", res.Limits, want)
	}
	if res.Setup.Config != nil {
		t.Errorf("resnet has alloc_conf %+v, want none (the trace's own)", res.Setup.Config)
	}

	toy := f.Cases[2]
	if toy.Source() != "workload transformer" || toy.Params["layers"] != "4" || toy.Params["hidden"] != "256" {
		t.Errorf("toy: source %q params %v", toy.Source(), toy.Params)
	}
	if toy.Limits.MustFit != 21_500_000_000 || !math.IsInf(toy.Limits.MaxFrag, 1) || toy.Limits.WarnFrag != 0.10 {
		t.Errorf("toy limits = %+v", toy.Limits)
	}
	if toy.Setup.Policy != alloc.PolicyNoCache || toy.Setup.Fraction != 0.5 {
		t.Errorf("toy setup = %+v", toy.Setup)
	}
}

func TestParseDefaults(t *testing.T) {
	f, err := Parse("gpumem.yaml", []byte("cases:\n  - workload: frag-demo\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Cases[0]
	if c.Name != "frag-demo" || c.Limits != DefaultLimits() || f.Tolerance != DefaultTolerance || f.Baseline != "" {
		t.Errorf("case %+v, tolerance %v, baseline %q", c, f.Tolerance, f.Baseline)
	}
	if c.Dir != "." {
		t.Errorf("dir = %q, want .", c.Dir)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line       int
		want       string
	}{
		{"empty", "", 0, "empty budget file"},
		{"comment only", "# nothing\n", 0, "empty budget file"},
		{"syntax", "cases: [\n", 1, "did not find expected node content"},
		{"not a mapping", "- a\n- b\n", 1, "want a mapping"},
		{"unknown top key", "case:\n  - trace: a\n", 1, `unknown key "case"`},
		{"no cases", "tolerance: 5%\n", 1, "no cases"},
		{"cases not a list", "cases: {a: 1}\n", 1, "cases: want a list"},
		{"empty list", "cases: []\n", 1, "the list is empty"},
		{"version", "version: 2\ncases:\n  - trace: a\n", 1, "only version 1"},
		{"unknown case key", "cases:\n  - name: a\n    trace: a\n    max_fragg: 3\n", 4, `case "a": unknown key "max_fragg"`},
		{"both", "cases:\n  - trace: a\n    workload: b\n", 2, "not both"},
		{"neither", "cases:\n  - name: a\n", 2, "give a trace or a workload"},
		{"case not a mapping", "cases:\n  - a.pickle\n", 2, "want a mapping"},
		{"duplicate name", "cases:\n  - trace: a/x.pickle\n  - trace: b/x.pickle\n", 3, `"x": the name is already used by the case at line 2`},
		{"duplicate key", "cases:\n  - trace: a\n    trace: b\n", 3, `key "trace" given twice`},
		{"bad ratio", "cases:\n  - trace: a\n    max_frag: 3o%\n", 3, `max_frag: invalid ratio "3o%"`},
		{"percent needed", "cases:\n  - trace: a\n    max_frag: 30\n", 3, "write 30%"},
		{"warn above max", "cases:\n  - trace: a\n    max_frag: 10%\n    warn_frag: 20%\n", 2, "warn_frag 20.0% is above max_frag 10.0%"},
		{"bad size", "cases:\n  - trace: a\n    max_reserved: 20 GiBs\n", 3, `invalid size "20 GiBs"`},
		{"zero size", "cases:\n  - trace: a\n    must_fit: 0\n", 3, "zero bytes"},
		{"bad metric", "defaults:\n  metric: peak\n", 2, `unknown fragmentation metric "peak"`},
		{"bad policy", "cases:\n  - trace: a\n    policy: greedy\n", 3, `unknown policy "greedy"`},
		{"bad alloc_conf", "cases:\n  - trace: a\n    alloc_conf: 'bogus:1'\n", 3, "alloc_conf"},
		{"null value", "cases:\n  - trace: a\n    max_frag:\n", 3, "max_frag: no value"},
		{"list value", "cases:\n  - trace: [a, b]\n", 2, "want a single value"},
		{"params on trace", "cases:\n  - trace: a\n    params: {x: 1}\n", 3, "params are for workloads"},
		{"device on workload", "cases:\n  - workload: w\n    device: 1\n", 3, "device is for traces"},
		{"bad device", "cases:\n  - trace: a\n    device: -1\n", 3, "not a device index"},
		{"fraction without card", "cases:\n  - trace: a\n    memory_fraction: 0.5\n", 2, "memory_fraction needs must_fit"},
		{"bad tolerance", "tolerance: none\ncases:\n  - trace: a\n", 1, "tolerance: invalid value"},
		{"merge key", "d: &d {max_frag: 10%}\ncases:\n  - <<: *d\n    trace: a\n", 1, `unknown key "d"`},
		{"empty name", "cases:\n  - trace: a\n    name: ''\n", 3, "name is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("b.yaml", []byte(tc.text))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want a *FileError", err, err)
			}
			if fe.File != "b.yaml" || fe.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (line %d), want line %d and %q", err, fe.Line, tc.line, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "b.yaml") {
				t.Errorf("error %q does not start with the file name", err)
			}
		})
	}
}

func TestParseAlias(t *testing.T) {
	// An anchored case may be repeated by alias; both get the same name.
	text := "cases:\n  - &a {trace: x.pickle}\n  - *a\n"
	_, err := Parse("b.yaml", []byte(text))
	if err == nil || !strings.Contains(err.Error(), "already used") {
		t.Errorf("error %v, want the repeated name reported", err)
	}
	text = "lim: &l 10%\ncases:\n  - {trace: x.pickle, max_frag: *l}\n"
	if _, err := Parse("b.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), `unknown key "lim"`) {
		t.Errorf("error %v, want the unknown key", err)
	}
	text = "cases:\n  - {trace: x.pickle, max_frag: &l 10%, warn_frag: *l}\n"
	f, err := Parse("b.yaml", []byte(text))
	if err != nil || f.Cases[0].Limits.WarnFrag != 0.1 {
		t.Errorf("alias value: %v, %+v", err, f)
	}
}

func TestFind(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p string) {
		t.Helper()
		if err := os.WriteFile(p, []byte("cases:\n  - trace: x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A parent of a fresh temp dir may hold a budget file on some
	// machine; only answers inside root are checked.
	if p, err := Find(deep); err == nil && strings.HasPrefix(p, root) {
		t.Fatalf("found %s in an empty tree", p)
	}
	write(filepath.Join(root, "a", ".gpumem.yaml"))
	if p, err := Find(deep); err != nil || p != filepath.Join(root, "a", ".gpumem.yaml") {
		t.Errorf("Find = %q, %v; want a/.gpumem.yaml", p, err)
	}
	write(filepath.Join(root, "a", "b", "gpumem.yaml"))
	if p, err := Find(deep); err != nil || p != filepath.Join(root, "a", "b", "gpumem.yaml") {
		t.Errorf("Find = %q, %v; want the nearest, a/b/gpumem.yaml", p, err)
	}
	write(filepath.Join(root, "a", "b", ".gpumem.yaml"))
	if _, err := Find(deep); err == nil || !strings.Contains(err.Error(), "keep one") {
		t.Errorf("Find with both names in one directory: %v, want an error", err)
	}
}

func TestReadFileTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gpumem.yaml")
	if err := os.WriteFile(p, make([]byte, maxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("error %v, want too large", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"0": 0, "1024": 1024, "20GiB": 20 << 30, "20 GiB": 20 << 30, "1.5MiB": 3 << 19,
		"21.5GB": 21_500_000_000, "512B": 512, "2TiB": 2 << 40, " 8KiB ": 8192,
	} {
		if got, err := units.ParseSize(in); err != nil || got != want {
			t.Errorf("units.ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "+1", "20Gb", "1e30", "NaN", "inf", "20 GiBs", "0x10"} {
		if got, err := units.ParseSize(in); err == nil {
			t.Errorf("units.ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseRatio(t *testing.T) {
	for in, want := range map[string]float64{"0.3": 0.3, "30%": 0.3, "30 %": 0.3, "0": 0, "1": 1, "100%": 1, "none": units.NoLimit, "2.5%": 0.025} {
		if got, err := units.ParseRatio(in); err != nil || math.Abs(got-want) > 1e-12 && !(math.IsInf(got, 1) && math.IsInf(want, 1)) {
			t.Errorf("units.ParseRatio(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "-0.1", "1.1", "101%", "30", "NaN", "inf", "thirty"} {
		if got, err := units.ParseRatio(in); err == nil {
			t.Errorf("units.ParseRatio(%q) = %v, want an error", in, got)
		}
	}
}

func TestFormatRatio(t *testing.T) {
	for in, want := range map[float64]string{0.0964626795: "9.6%", 0.3: "30.0%", units.NoLimit: "none", math.NaN(): "n/a", 0: "0.0%"} {
		if got := units.FormatRatio(in); got != want {
			t.Errorf("units.FormatRatio(%v) = %q, want %q", in, got, want)
		}
	}
}

// The example the help text shows is a valid budget file.
func TestExampleParses(t *testing.T) {
	f, err := Parse("example", []byte(Example))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) != 2 || f.Cases[0].Name != "gpt2" || f.Cases[1].Limits.MustFit != 8<<30 {
		t.Errorf("example parsed as %+v", f)
	}
	if !strings.Contains(MetricList(), "holes    1 − largest free block") {
		t.Errorf("metric list:\n%s", MetricList())
	}
}
