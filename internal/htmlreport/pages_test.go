package htmlreport

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
)

// sweepSample is a sweep of one trace on two cards: one setting runs out
// of memory on the smaller card, one on both, and one is not settable.
func sweepSample() SweepPage {
	fits := func(peak int64) CardOutcome { return CardOutcome{PeakReserved: peak} }
	return SweepPage{
		Source: "train<1>.pickle", Ops: 17923, Baseline: "defaults", Best: "expandable_segments:True",
		Cards: []uint64{20 * GiB, 24 * GiB},
		Rows: []SweepRow{
			{Label: "expandable_segments:True", PeakReserved: 17*GiB + 512*MiB, PeakAllocated: 17 * GiB, LowerBound: 17 * GiB,
				FragAtPeak: 0.04, DeviceAllocs: 310, Settable: true, Cards: []CardOutcome{fits(17*GiB + 512*MiB), fits(17*GiB + 512*MiB)}},
			{Label: "nocache", PeakReserved: 17*GiB + 768*MiB, PeakAllocated: 17 * GiB, LowerBound: 17 * GiB,
				FragAtPeak: 0.06, DeviceAllocs: 98765, Settable: false, Cards: []CardOutcome{fits(18 * GiB), fits(18 * GiB)}},
			{Label: "defaults", PeakReserved: 19304284160, PeakAllocated: 17 * GiB, LowerBound: 17 * GiB,
				FragAtPeak: 0.11, DeviceAllocs: 120, Retries: 2, Settable: true, Cards: []CardOutcome{fits(19304284160), fits(19304284160)}},
			{Label: "max_split_size_mb:128 & <very> long label that the chart has to shorten", PeakReserved: 22 * GiB, PeakAllocated: 17 * GiB, LowerBound: 17 * GiB,
				FragAtPeak: 0.2, DeviceAllocs: 140, Settable: true,
				Cards: []CardOutcome{{PeakReserved: 20 * GiB, OOM: "op 9000"}, fits(22 * GiB)}},
			{Label: "roundup_power2_divisions:1", PeakReserved: 23 * GiB, PeakAllocated: 17 * GiB, LowerBound: 17 * GiB,
				FragAtPeak: math.NaN(), DeviceAllocs: 141, Settable: true, OOM: "op 12000",
				Cards: []CardOutcome{{PeakReserved: 20 * GiB, OOM: "op 8000"}, {PeakReserved: 23 * GiB, OOM: "op 12000"}}},
		},
		Notes:          []string{"note: nocache reserves 18.50 GiB but is not advised"},
		Recommendation: "recommendation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: peak reserved 17.50 GiB, saves 490.00 MiB (2.7%) against the defaults",
	}
}

// fragcheckSample has a case of each status.
func fragcheckSample() FragcheckPage {
	def := "1 − peak allocated / peak reserved"
	return FragcheckPage{Cases: []FragcheckCase{
		{Name: "gpt2", Source: "testdata/gpt2.pickle", Status: "pass", Metric: "peaks", MetricDef: def,
			Frag: 0.052, WarnFrag: 0.2, MaxFrag: 0.3, PeakReserved: 19304284160, PeakAllocated: 18300000000,
			MaxReserved: 20 * GiB},
		{Name: "seed_frag", Source: "testdata/seed_frag.pickle", Status: "fail", Metric: "peaks", MetricDef: def,
			Frag: 0.45, WarnFrag: 0.2, MaxFrag: 0.3, PeakReserved: 6 * GiB, PeakAllocated: 3300 * MiB,
			Findings: []CaseFinding{{Status: "fail", Text: "fragmentation 45.0% is above the limit of 30.0%"}}},
		{Name: "toy<b>", Source: "workload transformer", Status: "warn", Metric: "peaks", MetricDef: def,
			Frag: 0.25, WarnFrag: 0.2, MaxFrag: math.Inf(1), PeakReserved: 900 * MiB, PeakAllocated: 675 * MiB,
			MustFit: 1 * GiB, Findings: []CaseFinding{{Status: "warn", Text: "fragmentation 25.0% is above the warning level of 20.0%"}}},
		{Name: "small card", Source: "workload frag-demo", Status: "fail", Metric: "peaks", MetricDef: def,
			Frag: 0.1, WarnFrag: 0.2, MaxFrag: 0.3, PeakReserved: 7 * GiB, PeakAllocated: 6 * GiB, MustFit: 8 * GiB, MaxReserved: 6 * GiB,
			OOM: "op 149", Findings: []CaseFinding{{Status: "fail", Text: "out of memory"}, {Status: "fail", Text: "peak reserved over"}}},
		{Name: "missing", Source: "nowhere.pickle", Status: "error", Err: "open nowhere.pickle: no such file or directory",
			Frag: math.NaN(), WarnFrag: 0.2, MaxFrag: 0.3},
	}}
}

func writePage(t testing.TB, write func(*bytes.Buffer) error) string {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("report differs from %s (run go test -update and review the diff)", path)
	}
}

func selfContained(t *testing.T, page string) {
	t.Helper()
	if regexp.MustCompile(`<(script|img|iframe)[^>]* src=|<link |https?://[a-z]`).MatchString(
		strings.ReplaceAll(page, `"http://www.w3.org/2000/svg"`, "")) {
		t.Error("the report refers to something outside itself")
	}
}

func TestSweepGolden(t *testing.T) {
	p := sweepSample()
	got := writePage(t, func(b *bytes.Buffer) error { return WriteSweep(b, p) })
	if again := writePage(t, func(b *bytes.Buffer) error { return WriteSweep(b, p) }); again != got {
		t.Fatal("two writes of the same sweep differ")
	}
	checkGolden(t, "sweep.golden.html", got)
	selfContained(t, got)
}

// bars returns each bar's data-* attributes, in document order.
func bars(page string) []map[string]string {
	var out []map[string]string
	for _, m := range regexp.MustCompile(`<rect class="bar [^>]*>`).FindAllString(page, -1) {
		a := map[string]string{}
		for _, kv := range regexp.MustCompile(`(data-[a-z-]+)="([^"]*)"`).FindAllStringSubmatch(m, -1) {
			a[kv[1]] = kv[2]
		}
		out = append(out, a)
	}
	return out
}

func TestSweepFigures(t *testing.T) {
	p := sweepSample()
	got := writePage(t, func(b *bytes.Buffer) error { return WriteSweep(b, p) })
	bs := bars(got)
	if len(bs) != len(p.Rows) {
		t.Fatalf("%d bars for %d rows", len(bs), len(p.Rows))
	}
	for i, r := range p.Rows {
		b := bs[i]
		// the label is escaped once in the attribute
		label := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(r.Label)
		if b["data-label"] != label || b["data-peak-reserved"] != strconv.FormatInt(r.PeakReserved, 10) ||
			b["data-oom"] != strconv.FormatBool(r.OOM != "") {
			t.Errorf("bar %d: %v, want label %q, peak %d, oom %v (the table's order)", i, b, label, r.PeakReserved, r.OOM != "")
		}
	}
	if bs[0]["data-recommended"] != "true" || bs[2]["data-recommended"] != "" {
		t.Error("the recommended bar is not the one marked")
	}
	// bars are to scale: defaults' width / best's = their peaks' ratio
	w := regexp.MustCompile(`<rect class="bar [a-z]+" x="\d+" y="\d+" width="([\d.]+)"`).FindAllStringSubmatch(got, -1)
	w0, _ := strconv.ParseFloat(w[0][1], 64)
	w2, _ := strconv.ParseFloat(w[2][1], 64)
	if want := float64(19304284160) / (17*GiB + 512*MiB); math.Abs(w2/w0-want) > 0.01 {
		t.Errorf("bar widths %v and %v: ratio %.3f, want %.3f", w0, w2, w2/w0, want)
	}
	for _, want := range []string{
		`data-lower-bound="18253611008"`, // one line for the common bound
		`data-card-line="21474836480"`,   // the 20 GiB card, within the scale
		`data-card-line="25769803776"`,
		`train&lt;1&gt;.pickle`,
		"expandable_segments:True: peak reserved 17.50 GiB, saves",
		"note: nocache reserves",
		"max_split_size_mb:128 &amp; &lt;very&gt; long label t…", // shortened in the chart
		`data-fits="false" data-oom-at="op 9000"`,
		`<td class="n">-2.7%</td>`,         // vs the defaults, in the table
		`17.50 GiB · −2.7% · recommended<`, // and by the bar
		"figures from the largest, 24.00 GiB",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("sweep report lacks %q", want)
		}
	}
	if n := strings.Count(got, `data-fits="true"`); n != 7 {
		t.Errorf("%d fits marks, want 7", n)
	}
	if n := strings.Count(got, `data-fits="false"`); n != 3 {
		t.Errorf("%d OOM marks, want 3", n)
	}
}

func TestSweepOffScale(t *testing.T) {
	p := sweepSample()
	p.Cards = append(p.Cards, 80*GiB)
	for i := range p.Rows {
		p.Rows[i].Cards = append(p.Rows[i].Cards, CardOutcome{PeakReserved: p.Rows[i].PeakReserved})
	}
	got := writePage(t, func(b *bytes.Buffer) error { return WriteSweep(b, p) })
	if strings.Contains(got, `data-card-line="85899345920"`) || !strings.Contains(got, "off the scale, not drawn as lines: 80.00 GiB") {
		t.Error("an 80 GiB card squashes 18 GiB bars instead of being noted off the scale")
	}
	// rows that replay different plans: a bound per bar, no common line
	p = sweepSample()
	p.Compare, p.Rows[1].LowerBound = true, 3*GiB
	got = writePage(t, func(b *bytes.Buffer) error { return WriteSweep(b, p) })
	if strings.Contains(got, `<g class="vl bound"`) || strings.Count(got, `class="rowbound"`) != len(p.Rows) {
		t.Error("rows with their own bounds: want one bound mark per bar and no common line")
	}
}

func TestSweepErrors(t *testing.T) {
	p := sweepSample()
	p.Rows[1].Cards = nil
	if err := WriteSweep(new(bytes.Buffer), p); err == nil || !strings.Contains(err.Error(), `"nocache"`) {
		t.Errorf("row without card outcomes: error %v", err)
	}
	if err := WriteSweep(new(bytes.Buffer), SweepPage{Source: "x"}); err == nil {
		t.Error("a sweep without rows: no error")
	}
	// an unlimited device: no card columns, no card lines
	p = sweepSample()
	p.Cards = nil
	for i := range p.Rows {
		p.Rows[i].Cards, p.Rows[i].OOM = nil, ""
	}
	got := writePage(t, func(b *bytes.Buffer) error { return WriteSweep(b, p) })
	if strings.Contains(got, "data-fits") || strings.Contains(got, "data-card-line") || !strings.Contains(got, ">unlimited<") {
		t.Error("an unlimited sweep shows cards")
	}
}

func TestFragcheckGolden(t *testing.T) {
	p := fragcheckSample()
	got := writePage(t, func(b *bytes.Buffer) error { return WriteFragcheck(b, p) })
	if again := writePage(t, func(b *bytes.Buffer) error { return WriteFragcheck(b, p) }); again != got {
		t.Fatal("two writes of the same fragcheck run differ")
	}
	checkGolden(t, "fragcheck.golden.html", got)
	selfContained(t, got)
}

func TestFragcheckFigures(t *testing.T) {
	p := fragcheckSample()
	got := writePage(t, func(b *bytes.Buffer) error { return WriteFragcheck(b, p) })
	rows := regexp.MustCompile(`<tr class="case ([a-z]+)" data-case="([^"]*)" data-status="([a-z]+)" data-frag="([^"]*)" data-warn-frag="([^"]*)" data-max-frag="([^"]*)"`).FindAllStringSubmatch(got, -1)
	want := [][]string{
		{"pass", "gpt2", "pass", "0.0520", "0.2000", "0.3000"},
		{"fail", "seed_frag", "fail", "0.4500", "0.2000", "0.3000"},
		{"warn", "toy&lt;b&gt;", "warn", "0.2500", "0.2000", "none"},
		{"fail", "small card", "fail", "0.1000", "0.2000", "0.3000"},
		{"error", "missing", "error", "NaN", "0.2000", "0.3000"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d case rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		if !slices.Equal(rows[i][1:], w) {
			t.Errorf("row %d: %q, want %q", i, rows[i][1:], w)
		}
	}
	for _, s := range []string{
		`id="verdict" data-status="error"`, // the worst status
		"5 cases: 1 passed, 1 warned, 2 failed, 1 could not run",
		`data-key="fail" data-value="2"`,
		"0 to 50.0%", // the shared scale: 45% × 1.1 rounds up to 50%
		`out of memory at op 149`,
		"open nowhere.pickle: no such file or directory",
		"fragmentation (peaks) = 1 − peak allocated / peak reserved",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("fragcheck report lacks %q", s)
		}
	}
	// seed_frag's bar: 45% of a 50% scale, red, with the warn and max marks at 20% and 30%
	seed := got[strings.Index(got, `data-case="seed_frag"`):]
	seed = seed[:strings.Index(seed, "</tr>")]
	for _, s := range []string{
		`<rect class="fill fail" x="0" y="8" width="198"`,
		`<line class="lm warn" x1="88" x2="88"`,
		`<line class="lm fail" x1="132" x2="132"`,
	} {
		if !strings.Contains(seed, s) {
			t.Errorf("seed_frag's gauge lacks %q", s)
		}
	}
	// no limit drawn where there is none, none past the end
	toy := got[strings.Index(got, `data-case="toy&lt;b&gt;"`):]
	toy = toy[:strings.Index(toy, "</tr>")]
	if strings.Count(toy, `class="lm fail"`) != 0 || strings.Count(toy, `class="lm card"`) != 1 {
		t.Error("toy: want no max_frag mark (none) and one must_fit mark")
	}
	// a peak reserved bar only where there is a limit to hold it against
	if n := strings.Count(seed, `<svg class="gauge"`); n != 1 {
		t.Errorf("seed_frag, without max_reserved or must_fit: %d gauges, want the fragmentation one only", n)
	}
	if n := strings.Count(toy, `<svg class="gauge"`); n != 2 {
		t.Errorf("toy, with must_fit: %d gauges, want 2", n)
	}
	if strings.Contains(got, "toy<b>") {
		t.Error("a case name is not escaped")
	}
}

func TestFragcheckErrors(t *testing.T) {
	if err := WriteFragcheck(new(bytes.Buffer), FragcheckPage{}); err == nil {
		t.Error("no cases: no error")
	}
	p := fragcheckSample()
	p.Cases[2].Status = "maybe"
	if err := WriteFragcheck(new(bytes.Buffer), p); err == nil || !strings.Contains(err.Error(), `"maybe"`) {
		t.Errorf("unknown status: error %v", err)
	}
}

// TestPhases checks that a workload's phases are marked on the timeline,
// labelled only where there is room, and named in the hover data.
func TestPhases(t *testing.T) {
	r, e := sample()
	e.Phases = []figures.Phase{{Name: "warm up", Op: 0}, {Name: "step 1", Op: 60}, {Name: "step 1 backward", Op: 63}, {Name: "</script>", Op: 120}, {Name: "beyond", Op: 1000}}
	got := write(t, r, e)
	marks := regexp.MustCompile(`<g class="mark phase" data-op="(\d+)"[^>]*>.*?<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(got, -1)
	var ops, labels []string
	for _, m := range marks {
		ops, labels = append(ops, m[1]), append(labels, m[2])
	}
	if strings.Join(ops, " ") != "0 60 63 120" {
		t.Errorf("phase marks at ops %v, want 0 60 63 120 (none past the end)", ops)
	}
	if labels[0] != "warm up" || labels[1] != "step 1" || labels[2] != "" || labels[3] != "&lt;/script&gt;" {
		t.Errorf("phase labels %q: want the third, crowded by the second's label, unlabelled", labels)
	}
	if !strings.Contains(got, `data-phases="4"`) || !strings.Contains(got, `"ph":[[0,"warm up"],[60,"step 1"],[63,"step 1 backward"],[120,"\u003c/script\u003e"],[1000,"beyond"]]`) {
		t.Error("the hover data lacks the phases, or does not escape them")
	}
	if strings.Count(got, "</script>") != 3 { // the data, the charts' script, the page's
		t.Error("a phase name closed a script element")
	}
	// without phases, nothing of them
	plain := write(t, r, Extra{})
	if strings.Contains(plain, `mark phase`) || strings.Contains(plain, `"ph":`) {
		t.Error("a trace without phases shows some")
	}
}
