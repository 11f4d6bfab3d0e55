package budget

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
)

// gpt2 are the figures of testdata/pytorch/gpt2_varlen.pickle replayed
// under its recorded settings.
var gpt2 = Figures{
	PeakReserved:  19304284160,
	PeakAllocated: 17442141184,
	Fragmentation: figures.Fragmentation{End: 0.9965, AtPeak: 0.0965, Peaks: 0.0965, Holes: 0.9143},
}

func testCase(name string, l Limits) Case {
	return Case{Name: name, Trace: name + ".pickle", Limits: l}
}

func TestCheck(t *testing.T) {
	def := DefaultLimits()
	withFrag := func(peaks float64) Figures {
		f := gpt2
		f.Fragmentation.Peaks = peaks
		return f
	}
	for _, tc := range []struct {
		name    string
		limits  Limits
		fig     Figures
		strict  bool
		status  Status
		crossed []string
		msg     string
	}{
		{"pass", def, gpt2, false, Pass, nil, ""},
		{"at the limit passes", def, withFrag(0.30), false, Warn, []string{"warn_frag"}, "30.0% is above the warning level of 20.0%"},
		{"warn", def, withFrag(0.25), false, Warn, []string{"warn_frag"}, "fragmentation 25.0% is above the warning level of 20.0% (peaks: 1 − peak allocated / peak reserved)"},
		{"strict warn fails", def, withFrag(0.25), true, Fail, []string{"warn_frag"}, "(strict)"},
		{"fail", def, withFrag(0.39), false, Fail, []string{"max_frag"}, "fragmentation 39.0% is above the limit of 30.0%"},
		{"limits off", Limits{Metric: Peaks, WarnFrag: units.NoLimit, MaxFrag: units.NoLimit}, withFrag(0.9), false, Pass, nil, ""},
		{"other metric", Limits{Metric: Holes, WarnFrag: 0.2, MaxFrag: 0.95}, gpt2, false, Warn, []string{"warn_frag"}, "91.4% is above the warning level of 20.0% (holes: 1 − largest free block / cached free bytes at the end)"},
		{"max reserved", Limits{Metric: Peaks, WarnFrag: 0.2, MaxFrag: 0.3, MaxReserved: 17 << 30}, gpt2, false, Fail, []string{"max_reserved"}, "peak reserved 17.98 GiB is above the limit of 17.00 GiB"},
		{"max reserved met", Limits{Metric: Peaks, WarnFrag: 0.2, MaxFrag: 0.3, MaxReserved: 20 << 30}, gpt2, false, Pass, nil, ""},
		{"nothing reserved", def, Figures{Fragmentation: figures.Fragmentation{Peaks: math.NaN()}}, false, Pass, nil, "not measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &Checker{Strict: tc.strict}
			r := k.Check(testCase("gpt2", tc.limits), tc.fig)
			if r.Status() != tc.status || !reflect.DeepEqual(r.Crossed(), tc.crossed) {
				t.Errorf("status %v crossed %v, want %v %v; findings %+v", r.Status(), r.Crossed(), tc.status, tc.crossed, r.Findings)
			}
			if tc.msg != "" && !strings.Contains(messages(r), tc.msg) {
				t.Errorf("findings %q do not say %q", messages(r), tc.msg)
			}
		})
	}
}

func TestCheckOOM(t *testing.T) {
	f := gpt2
	f.OOM = &figures.OOM{OpIndex: 3041, AllocSize: 1654652928, Rounded: 1654652928, DeviceTotal: 16 << 30, DeviceFree: 0}
	l := DefaultLimits()
	l.MustFit = 16 << 30
	r := (&Checker{}).Check(testCase("gpt2", l), f)
	want := "out of memory (16.00 GiB card) at operation 3,041: tried to allocate 1.54 GiB, a real shortage"
	if r.Status() != Fail || !reflect.DeepEqual(r.Crossed(), []string{"must_fit"}) || messages(r) != want {
		t.Errorf("status %v crossed %v findings %q; want fail, must_fit, %q", r.Status(), r.Crossed(), messages(r), want)
	}
}

func TestFailed(t *testing.T) {
	r := (&Checker{}).Failed(testCase("bad", DefaultLimits()), errors.New("bad.pickle: byte 2: truncated"))
	if r.Status() != Error || !math.IsNaN(r.Fragmentation()) {
		t.Errorf("status %v fragmentation %v, want error and NaN", r.Status(), r.Fragmentation())
	}
}

func TestSummarize(t *testing.T) {
	k := &Checker{}
	warn := gpt2
	warn.Fragmentation.Peaks = 0.25
	rs := []Result{
		k.Check(testCase("a", DefaultLimits()), gpt2),
		k.Check(testCase("b", DefaultLimits()), warn),
		k.Failed(testCase("c", DefaultLimits()), errors.New("x")),
	}
	s := Summarize(rs)
	if want := (Summary{Cases: 3, Pass: 1, Warn: 1, Error: 1}); s != want || s.Status() != Error {
		t.Errorf("summary %+v status %v, want %+v and error", s, s.Status(), want)
	}
	if got, want := s.String(), "3 cases: 1 passed, 1 warned, 0 failed, 1 could not run"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if s := Summarize(rs[:2]); s.Status() != Warn {
		t.Errorf("status %v, want warn", s.Status())
	}
}

func TestBaselineCompare(t *testing.T) {
	base := &Baseline{Cases: map[string]Entry{"gpt2": EntryOf(&Result{Case: testCase("gpt2", DefaultLimits()), Figures: gpt2})}}
	grown := func(reserved float64, frag float64) Figures {
		f := gpt2
		f.PeakReserved = int64(float64(f.PeakReserved) * reserved)
		f.Fragmentation.Peaks += frag
		return f
	}
	for _, tc := range []struct {
		name   string
		fig    Figures
		status Status
		msg    string
	}{
		{"same", gpt2, Pass, ""},
		{"within tolerance", grown(1.049, 0.049), Pass, ""},
		{"reserved grew", grown(1.06, 0), Fail, "peak reserved 19.06 GiB is 6.0% above the baseline 17.98 GiB (tolerance 5.0%)"},
		{"fragmentation grew", grown(1, 0.06), Fail, "is 6.0 points above the baseline 9.7% (tolerance 5.0 points, peaks: 1 − peak allocated / peak reserved)"},
		{"gain", grown(0.8, -0.06), Pass, "peak reserved 14.38 GiB is 20.0% below the baseline 17.98 GiB: update the baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &Checker{Baseline: base, Tolerance: 0.05}
			r := k.Check(testCase("gpt2", DefaultLimits()), tc.fig)
			if r.Status() != tc.status || !strings.Contains(messages(r), tc.msg) {
				t.Errorf("status %v findings %q, want %v and %q", r.Status(), messages(r), tc.status, tc.msg)
			}
			if r.Baseline == nil || r.Baseline.PeakReserved != gpt2.PeakReserved {
				t.Errorf("result's baseline entry = %+v", r.Baseline)
			}
			if tc.status == Fail && !reflect.DeepEqual(r.Crossed(), []string{"baseline"}) {
				t.Errorf("crossed %v, want baseline", r.Crossed())
			}
		})
	}
	r := (&Checker{Baseline: base, Tolerance: 0.05}).Check(testCase("new", DefaultLimits()), gpt2)
	if r.Status() != Pass || !strings.Contains(messages(r), "not in the baseline") {
		t.Errorf("a case missing from the baseline: %v %q", r.Status(), messages(r))
	}
}

func TestBaselineRoundTrip(t *testing.T) {
	k := &Checker{}
	f := gpt2
	f.Fragmentation = figures.Fragmentation{End: 0.996469310157523, AtPeak: 0.0964626795050244, Peaks: 0.0964626795050244, Holes: math.NaN()}
	rs := []Result{k.Check(testCase("gpt2", DefaultLimits()), f), k.Check(testCase("seed", DefaultLimits()), gpt2)}
	var buf bytes.Buffer
	if err := WriteBaseline(&buf, NewBaseline(rs, nil)); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{`"version": 1`, `"peaks": 0.0965`, `"source": "gpt2.pickle"`} {
		if !strings.Contains(text, want) {
			t.Errorf("baseline lacks %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, "holes\": null") || strings.Index(text, `"gpt2"`) > strings.Index(text, `"seed"`) {
		t.Errorf("NaN written, or cases not sorted:\n%s", text)
	}
	b, err := ParseBaseline("base.json", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	// Checked against itself with no tolerance, nothing regresses.
	k = &Checker{Baseline: b}
	for _, c := range []Case{testCase("gpt2", DefaultLimits()), testCase("seed", DefaultLimits())} {
		fig := f
		if c.Name == "seed" {
			fig = gpt2
		}
		if r := k.Check(c, fig); r.Status() != Pass || len(r.Findings) != 0 {
			t.Errorf("%s against its own baseline: %v %q", c.Name, r.Status(), messages(r))
		}
	}
	var again bytes.Buffer
	if err := WriteBaseline(&again, b); err != nil || again.String() != text {
		t.Errorf("rewriting changed the baseline (%v):\n%s\nwant:\n%s", err, again.String(), text)
	}
}

func TestNewBaselineKeepsBrokenCases(t *testing.T) {
	old := &Baseline{Cases: map[string]Entry{"broken": {Source: "broken.pickle", PeakReserved: 5}, "gone": {PeakReserved: 7}}}
	k := &Checker{}
	rs := []Result{k.Check(testCase("gpt2", DefaultLimits()), gpt2), k.Failed(testCase("broken", DefaultLimits()), errors.New("x"))}
	b := NewBaseline(rs, old)
	if len(b.Cases) != 3 || b.Cases["broken"].PeakReserved != 5 || b.Cases["gone"].PeakReserved != 7 || b.Cases["gpt2"].PeakReserved != gpt2.PeakReserved {
		t.Errorf("baseline %+v: want gpt2 new, broken and gone (not run) kept", b.Cases)
	}
}

func TestParseBaselineErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"", "empty"},
		{"{", "truncated"},
		{"{]", "invalid JSON at byte 2"},
		{"[]", "not a baseline"},
		{`{"cases": {}}`, "version 1"},
		{`{"version": 2, "cases": {}}`, "version 1"},
		{`{"version": 1} {}`, "data after"},
		{`{"version": 1, "cases": {"a": null}}`, `case "a": no figures`},
		{`{"version": 1, "cases": {"a": {"peak_reserved": "x"}}}`, `case "a": peak_reserved: want int64`},
		{`{"version": 1, "cases": {"a": {"peak_reserved": -1}}}`, "negative"},
		{`{"version": 1, "cases": {"a": {"fragmentation": {"peak": 0.1}}}}`, "unknown fragmentation metric"},
		{`{"version": 1, "cases": {"a": {"fragmentation": {"peaks": 7}}}}`, "not a ratio"},
	} {
		_, err := ParseBaseline("base.json", []byte(tc.text))
		if err == nil || !strings.HasPrefix(err.Error(), "base.json: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseBaseline(%q) error %v, want %q", tc.text, err, tc.want)
		}
	}
}

func messages(r Result) string {
	var m []string
	for _, f := range r.Findings {
		m = append(m, f.Message)
	}
	return strings.Join(m, "; ")
}
