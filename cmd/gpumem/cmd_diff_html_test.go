package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// diffData is the page's hover data: each run's points on the common axis.
type diffData struct {
	X0, X1 int
	A, B   struct {
		X  []float64
		Op []int
		Re []int64
	}
}

func diffDataOf(t *testing.T, page string) diffData {
	t.Helper()
	m := regexp.MustCompile(`<script>const DATA = (.*);</script>`).FindStringSubmatch(page)
	var d diffData
	if m == nil {
		t.Fatal("the page has no timeline data")
	}
	if err := json.Unmarshal([]byte(m[1]), &d); err != nil {
		t.Fatalf("timeline data: %v", err)
	}
	return d
}

// TestDiffHTML compares two programs that share optimizer steps (SGD,
// five in a, six in b): the page overlays both timelines aligned on them,
// says so, and shows the table output's figures.
func TestDiffHTML(t *testing.T) {
	a, b := sweepFixture("resnet50_fp32.pickle"), sweepFixture("oom_survive_resnet.pickle")
	table, _, _ := gm(t, "diff", a, b)
	path := filepath.Join(t.TempDir(), "diff.html")
	out, errs, code := gm(t, "diff", a, b, "--html", path)
	if code != 0 || out != table || errs != "gpumem: wrote "+path+"\n" {
		t.Fatalf("exit %d, stderr %q; stdout the same as without --html: %v", code, errs, out == table)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	for _, want := range []string{
		`id="side-a"><b>a</b>` + a + ` (device 0, settings defaults)`,
		`id="side-b"><b>b</b>` + b + ` (device 0, settings defaults)`,
		`data-align="annotations" data-pairs="10">aligned on the annotations both runs recorded: 5× Optimizer.zero_grad#SGD.zero_grad, 3× Optimizer.step#SGD.step (15 marks)`,
		// the table's cells, as the terminal shows them
		`<tr data-key="peak-reserved"><td>peak reserved</td><td class="n">6.55 GiB</td><td class="n">3.00 GiB</td><td class="n">-3.55 GiB</td><td class="n">-54.2%</td></tr>`,
		`<tr data-key="frag-at-peak"><td>frag at peak</td><td class="n">16.7%</td><td class="n">4.6%</td><td class="n">-12.1 pt</td>`,
		`<code>Optimizer.step#SGD.step</code>`,
		`no allocation sites to compare: a and b recorded no stacks`,
		`class="mark peak peak-a"`, `class="mark peak peak-b"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, cell := range []string{"6.55 GiB", "-3.55 GiB", "-12.1 pt"} {
		if !strings.Contains(table, cell) {
			t.Errorf("the table output lacks %q, which the page shows", cell)
		}
	}
	d := diffDataOf(t, page)
	if len(d.A.X) < 100 || len(d.B.X) < 100 || len(d.A.Op) != len(d.A.X) || len(d.B.Re) != len(d.B.X) {
		t.Fatalf("points: a %d, b %d", len(d.A.X), len(d.B.X))
	}
	// a is the axis; b is stretched onto it, in order, within it
	for i, x := range d.A.X {
		if x != float64(d.A.Op[i]) {
			t.Fatalf("a's point %d at x %v, op %d", i, x, d.A.Op[i])
		}
	}
	for i := 1; i < len(d.B.X); i++ {
		if d.B.X[i] < d.B.X[i-1] || d.B.X[i] > float64(d.X1) {
			t.Fatalf("b's points out of order or past the axis (%d): %v, %v", d.X1, d.B.X[i-1], d.B.X[i])
		}
	}
	if last := d.B.X[len(d.B.X)-1]; last == float64(d.B.Op[len(d.B.Op)-1]) {
		t.Errorf("b's last point at its own op %v: not stretched", last)
	}
}

// TestDiffHTMLSides: one trace under two settings aligns with itself and
// compares its sites; two programs with no annotation in common, and two
// sets of ranks, say how they were aligned and compared.
func TestDiffHTMLSides(t *testing.T) {
	stacks := sweepFixture("gpt2_varlen_stacks.pickle")
	page, code := htmlOf(t, "diff", stacks, "--alloc-conf-b", "expandable_segments:True")
	d := diffDataOf(t, page)
	if code != 0 || !strings.Contains(page, "settings expandable_segments:True)</div>") || strings.Count(page, `<tr class="site"`) < 5 ||
		!strings.Contains(page, `data-align="annotations"`) {
		t.Errorf("--alloc-conf-b: exit %d, settings, sites or alignment missing", code)
	}
	for i := range d.B.X {
		if d.B.X[i] != float64(d.B.Op[i]) {
			t.Fatalf("one trace against itself: b's op %d at x %v", d.B.Op[i], d.B.X[i])
		}
	}

	page, _ = htmlOf(t, "diff", sweepFixture("gpt2_varlen.pickle"), sweepFixture("graph_convnet.pickle"))
	if !strings.Contains(page, `data-align="operations" data-pairs="0">no shared annotations (the runs&#39; marks have different names): aligned on operation index`) {
		t.Error("AdamW against SGD steps: no note of the alignment on operation index")
	}
	page, _ = htmlOf(t, "diff", sweepFixture("multistream.pickle"), sweepFixture("graph_convnet.pickle"))
	if !strings.Contains(page, "a recorded no annotations: aligned on operation index") {
		t.Error("a without annotations: no note")
	}

	ranks := filepath.Join(sweepFixture("ddp"), "*.pickle")
	page, _ = htmlOf(t, "diff", ranks, ranks, "--alloc-conf-b", "expandable_segments:True")
	if strings.Count(page, "the worst of 2 ranks: ") != 2 {
		t.Error("sets of ranks: the page does not say each side is its worst rank")
	}
}

func TestDiffHTMLBadPath(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "seed_frag.pickle")
	orig, err := os.ReadFile(sweepFixture("seed_frag.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(trace, orig, 0o644)
	missing := filepath.Join(dir, "no", "such", "diff.html")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"diff", trace, sweepFixture("multistream.pickle"), "--html", trace}, exitUsage, "is also an input: refusing to overwrite it"},
		{[]string{"diff", sweepFixture("multistream.pickle"), trace, "--html", trace}, exitUsage, "is also an input: refusing to overwrite it"},
		{[]string{"diff", trace, "--alloc-conf-b", "expandable_segments:True", "--html", missing}, exitFailure,
			"gpumem: error: writing " + missing + ": no such file or directory"},
	} {
		_, errs, code := gm(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, %s; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	if now, _ := os.ReadFile(trace); string(now) != string(orig) {
		t.Error("the trace changed")
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("files left: %v", es)
	}
}
