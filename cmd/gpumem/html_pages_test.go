package main

import (
	"bytes"
	"encoding/json"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// htmlOf runs gpumem with --html and returns the report and the exit code.
func htmlOf(t *testing.T, args ...string) (string, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	_, errs, code := gm(t, append(args, "--html", path)...)
	if !strings.Contains(errs, "gpumem: wrote "+path+"\n") {
		t.Fatalf("gpumem %v: exit %d, no 'wrote' line: %s", args, code, errs)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), code
}

// dataAttrs returns the data-* attributes of each tag that opens with
// prefix, in document order.
func dataAttrs(page, prefix string) []map[string]string {
	var out []map[string]string
	for _, tag := range regexp.MustCompile(regexp.QuoteMeta(prefix)+`[^>]*>`).FindAllString(page, -1) {
		a := map[string]string{}
		for _, kv := range regexp.MustCompile(`(data-[a-z-]+)="([^"]*)"`).FindAllStringSubmatch(tag, -1) {
			a[kv[1]] = kv[2]
		}
		out = append(out, a)
	}
	return out
}

func TestRunHTML(t *testing.T) {
	page, code := htmlOf(t, "run", "frag-demo")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	again, _ := htmlOf(t, "run", "frag-demo")
	if again != page {
		t.Error("two reports of one workload differ")
	}
	out, _, _ := gm(t, "run", "frag-demo", "-o", "json")
	var doc struct {
		Stats map[string]int64 `json:"memory_stats"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("run -o json: %v", err)
	}
	peak := doc.Stats["reserved_bytes.all.peak"]
	if peak == 0 || !strings.Contains(page, `data-peak-reserved="`+strconv.FormatInt(peak, 10)+`"`) {
		t.Errorf("the report lacks the run's peak reserved %d", peak)
	}
	// frag-demo's three phases, marked and named for the hover read-out
	for _, want := range []string{`data-phases="3"`, `"ph":[[0,"tensors"],`, `,"teardown"]]`, `id="segmap-live"`, "gpumem replay of frag-demo"} {
		if !strings.Contains(page, want) {
			t.Errorf("run report lacks %q", want)
		}
	}
	// the peak's segments once: in the explorer, which opens there
	if strings.Contains(page, `id="segmap-peak"`) {
		t.Error("the run report shows the peak's segment map twice")
	}
}

func TestSweepHTML(t *testing.T) {
	args := []string{"sweep", sweepFixture("gpt2_varlen.pickle"), "--device-memory", "16GiB,24GiB"}
	page, code := htmlOf(t, args...)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	doc := sweepJSONOf(t, args...)
	bars := dataAttrs(page, `<rect class="bar `)
	if len(bars) != len(doc.Rows) {
		t.Fatalf("%d bars for %d rows", len(bars), len(doc.Rows))
	}
	fits := 0
	for i, r := range doc.Rows {
		b := bars[i]
		if b["data-label"] != r.Label || b["data-peak-reserved"] != strconv.FormatInt(r.PeakReserved, 10) ||
			b["data-oom"] != strconv.FormatBool(r.OOMOpIndex != nil) {
			t.Errorf("bar %d: %v, want row %q with peak %d (the table's order)", i, b, r.Label, r.PeakReserved)
		}
		for _, c := range r.Cards {
			if c.Fits {
				fits++
			}
		}
	}
	if n := strings.Count(page, `data-fits="true"`); n != fits {
		t.Errorf("%d fits marks, want %d", n, fits)
	}
	// the defaults on the 24 GiB card reserve what PyTorch itself did
	truth := readTruth(t, "gpt2_varlen").MemoryStats["reserved_bytes.all.peak"]
	if !strings.Contains(page, `data-label="defaults" data-peak-reserved="`+strconv.FormatInt(truth, 10)+`"`) {
		t.Errorf("the defaults bar does not carry PyTorch's peak %d", truth)
	}
	if doc.Recommendation == nil || !strings.Contains(page, `data-label="`+doc.Recommendation.Label+`" data-peak-reserved="`+
		strconv.FormatInt(doc.Recommendation.PeakReserved, 10)+`" data-oom="false" data-recommended="true"`) {
		t.Error("the recommended bar is not marked")
	}
	if !strings.Contains(page, `data-lower-bound="`+strconv.FormatInt(doc.Rows[0].LowerBound, 10)+`"`) {
		t.Error("no lower bound line")
	}
	if doc.Recommendation != nil && !strings.Contains(page, template.HTMLEscapeString(doc.Recommendation.Text)) {
		t.Errorf("the page lacks the recommendation %q", doc.Recommendation.Text)
	}
}

func TestSweepHTMLStrategies(t *testing.T) {
	page, code := htmlOf(t, "sweep", "--strategies")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if n := strings.Count(page, `<rect class="bar `); n < 5 || !strings.Contains(page, "least reserved: ") {
		t.Errorf("strategies: %d bars, want one per strategy-* workload, and the least reserved", n)
	}
}

func TestFragcheckHTML(t *testing.T) {
	args := []string{"fragcheck", sweepFixture("seed_frag.pickle"), sweepFixture("gpt2_varlen.pickle"), "--workload", "free-but-fails"}
	page, code := htmlOf(t, args...)
	if code != exitFailure {
		t.Errorf("exit %d, want %d: the report does not change the verdict", code, exitFailure)
	}
	out, _, _ := gm(t, append(args, "-o", "json")...)
	var doc struct {
		Cases []struct {
			Name         string   `json:"name"`
			Status       string   `json:"status"`
			Frag         *float64 `json:"fragmentation"`
			PeakReserved int64    `json:"peak_reserved"`
			OOM          bool     `json:"oom"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	rows := dataAttrs(page, `<tr class="case `)
	if len(rows) != len(doc.Cases) || len(rows) != 3 {
		t.Fatalf("%d case rows, want %d", len(rows), len(doc.Cases))
	}
	for i, c := range doc.Cases {
		r := rows[i]
		frag := "NaN"
		if c.Frag != nil {
			frag = strconv.FormatFloat(*c.Frag, 'f', 4, 64)
		}
		if r["data-case"] != c.Name || r["data-status"] != c.Status || r["data-frag"] != frag ||
			r["data-peak-reserved"] != strconv.FormatInt(c.PeakReserved, 10) || r["data-oom"] != strconv.FormatBool(c.OOM) {
			t.Errorf("row %d: %v, want %+v", i, r, c)
		}
		if r["data-max-frag"] != "0.3000" || r["data-warn-frag"] != "0.2000" {
			t.Errorf("row %d: limits %s/%s, want the defaults", i, r["data-warn-frag"], r["data-max-frag"])
		}
	}
	if rows[0]["data-status"] != "fail" || rows[1]["data-status"] != "pass" {
		t.Errorf("seed_frag %s, gpt2 %s: want fail and pass", rows[0]["data-status"], rows[1]["data-status"])
	}
	// free-but-fails runs out of memory on its own 8 GiB card
	if rows[2]["data-oom"] != "true" || !strings.Contains(page, "out of memory at operation ") {
		t.Errorf("free-but-fails: %v, want an out-of-memory", rows[2])
	}
}

func TestHTMLUnwritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir.html")
	for _, args := range [][]string{
		{"run", "frag-demo"},
		{"sweep", "--workload", "frag-demo", "--grid", "defaults"},
		{"fragcheck", "--workload", "frag-demo"},
	} {
		_, errs, code := gm(t, append(args, "--html", path)...)
		if code != exitFailure || !strings.Contains(errs, "gpumem: error: writing "+path+": no such file or directory") {
			t.Errorf("gpumem %v --html into a missing directory: exit %d, %s", args, code, errs)
		}
	}
}

// An --html path that is the input itself is refused before anything is
// written, and the input stays whole.
func TestHTMLOverInputRefused(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "seed_frag.pickle")
	orig, err := os.ReadFile(filepath.Join("..", "..", "testdata", "pytorch", "seed_frag.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(trace, orig, 0o644)
	script := filepath.Join(dir, "w.gpumem")
	os.WriteFile(script, []byte("alloc a 1MiB\nfree a\n"), 0o644)
	for _, args := range [][]string{
		{"replay", trace, "--html", filepath.Join(dir, ".", "seed_frag.pickle")},
		{"run", script, "--html", script},
		{"sweep", trace, "--grid", "defaults", "--html", trace},
		{"fragcheck", trace, "--html", trace},
	} {
		_, errs, code := gm(t, args...)
		if code != exitUsage || !strings.Contains(errs, "is also an input: refusing to overwrite it") {
			t.Errorf("gpumem %v: exit %d, %s", args, code, errs)
		}
	}
	if now, _ := os.ReadFile(trace); !bytes.Equal(now, orig) {
		t.Error("the trace changed")
	}
	if es, _ := os.ReadDir(dir); len(es) != 2 {
		t.Errorf("files left: %v", es)
	}
}
