package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/internal/workload"
)

func sweepFixture(name string) string {
	return filepath.Join("..", "..", "testdata", "pytorch", name)
}

// gm runs gpumem with args and returns its stdout, stderr and exit code.
func gm(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

func sweepJSONOf(t *testing.T, args ...string) output.SweepJSON {
	t.Helper()
	out, errs, code := gm(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("gpumem %v: exit %d: %s", args, code, errs)
	}
	if errs != "" {
		t.Errorf("gpumem %v -o json wrote to stderr: %s", args, errs)
	}
	var doc output.SweepJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("gpumem %v: output is not the sweep document: %v\n%s", args, err, out)
	}
	return doc
}

func jsonRow(t *testing.T, doc output.SweepJSON, label string) output.SweepJSONRow {
	t.Helper()
	for _, r := range doc.Rows {
		if r.Label == label {
			return r
		}
	}
	t.Fatalf("no row %q in %s", label, doc.Source)
	return output.SweepJSONRow{}
}

type sweepTruth struct {
	AllocConf    string           `json:"alloc_conf"`
	Fraction     float64          `json:"per_process_memory_fraction"`
	MemoryStats  map[string]int64 `json:"memory_stats"`
	RecordedWith struct {
		DeviceTotal uint64 `json:"device_total_bytes"`
	} `json:"recorded_with"`
}

func readTruth(t *testing.T, name string) sweepTruth {
	t.Helper()
	b, err := os.ReadFile(sweepFixture(name + ".truth.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tr sweepTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tr
}

func compareTruth(t *testing.T, name string, row output.SweepJSONRow, tr sweepTruth) {
	t.Helper()
	for _, k := range []string{
		"reserved_bytes.all.peak", "allocated_bytes.all.peak", "segment.all.peak", "num_alloc_retries",
		"num_ooms", "num_device_alloc", "num_device_free", "reserved_bytes.all.current", "inactive_split_bytes.all.peak",
	} {
		if row.MemoryStats[k] != tr.MemoryStats[k] {
			t.Errorf("%s: %s = %d, PyTorch reported %d", name, k, row.MemoryStats[k], tr.MemoryStats[k])
		}
	}
	if row.PeakReserved != tr.MemoryStats["reserved_bytes.all.peak"] || row.Retries != tr.MemoryStats["num_alloc_retries"] {
		t.Errorf("%s: columns peak reserved %d, retries %d; PyTorch %d, %d", name, row.PeakReserved, row.Retries,
			tr.MemoryStats["reserved_bytes.all.peak"], tr.MemoryStats["num_alloc_retries"])
	}
}

// The sweep over gpt2_varlen under the settings the fixtures record gives
// exactly what PyTorch reported: the defaults, roundup_power2_divisions:4,
// and the 95% cap through --memory-fraction on the recorded card.
func TestSweepMatchesPyTorch(t *testing.T) {
	trace := sweepFixture("gpt2_varlen.pickle")
	doc := sweepJSONOf(t, "sweep", trace, "--grid", "defaults", "--grid", "roundup_power2_divisions:4")
	if len(doc.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(doc.Rows))
	}
	compareTruth(t, "defaults", jsonRow(t, doc, "defaults"), readTruth(t, "gpt2_varlen"))
	pow := readTruth(t, "gpt2_varlen_pow2div4")
	compareTruth(t, pow.AllocConf, jsonRow(t, doc, pow.AllocConf), pow)

	capped := readTruth(t, "gpt2_varlen_capped95")
	doc = sweepJSONOf(t, "sweep", trace, "--grid", "defaults",
		"--device-memory", fmt.Sprint(capped.RecordedWith.DeviceTotal), "--memory-fraction", fmt.Sprint(capped.Fraction))
	r := jsonRow(t, doc, "defaults")
	compareTruth(t, "capped", r, capped)
	if len(r.Cards) != 1 || !r.Cards[0].Fits || r.Cards[0].Allowed != uint64(capped.Fraction*float64(capped.RecordedWith.DeviceTotal)) {
		t.Errorf("capped: cards %+v", r.Cards)
	}
}

// The default grid: one table sorted by peak reserved, every setting of
// the grid in it, and a last line that recommends the settable setting
// the JSON names, with what it saves.
func TestSweepDefaultGrid(t *testing.T) {
	trace := sweepFixture("gpt2_varlen.pickle")
	doc := sweepJSONOf(t, "sweep", trace)
	grid := sweep.DefaultGrid(false)
	if len(doc.Rows) != len(grid) {
		t.Fatalf("%d rows for a grid of %d", len(doc.Rows), len(grid))
	}
	for i, r := range doc.Rows {
		if i > 0 && r.PeakReserved < doc.Rows[i-1].PeakReserved {
			t.Errorf("row %s (%d) after %s (%d): not sorted", r.Label, r.PeakReserved, doc.Rows[i-1].Label, doc.Rows[i-1].PeakReserved)
		}
	}
	rec := doc.Recommendation
	if rec == nil {
		t.Fatal("no recommendation")
	}
	def := jsonRow(t, doc, "defaults")
	best := jsonRow(t, doc, rec.Label)
	if !best.Settable || best.AllocConf != rec.AllocConf {
		t.Errorf("recommended %q (settable %v, conf %q vs %q)", rec.Label, best.Settable, best.AllocConf, rec.AllocConf)
	}
	for _, r := range doc.Rows {
		if r.Settable && r.PeakReserved < best.PeakReserved {
			t.Errorf("%s reserves %d, less than the recommended %s (%d)", r.Label, r.PeakReserved, rec.Label, best.PeakReserved)
		}
	}
	if rec.SavedBytes != def.PeakReserved-best.PeakReserved || rec.SavedBytes <= 0 {
		t.Errorf("saved %d, want %d - %d", rec.SavedBytes, def.PeakReserved, best.PeakReserved)
	}
	// nocache reserves less than any setting but is never advised.
	nc := jsonRow(t, doc, "nocache")
	if nc.Settable || nc.PeakReserved >= best.PeakReserved ||
		!slices.ContainsFunc(doc.NotAdvised, func(a output.SweepJSONAdvice) bool { return a.Label == "nocache" }) {
		t.Errorf("nocache %d settable %v; not advised %+v", nc.PeakReserved, nc.Settable, doc.NotAdvised)
	}
	for _, a := range doc.NotAdvised {
		if r := jsonRow(t, doc, a.Label); r.Settable || r.PeakReserved >= best.PeakReserved {
			t.Errorf("not advised: %s (settable %v, %d)", a.Label, r.Settable, r.PeakReserved)
		}
	}

	out, errs, code := gm(t, "sweep", trace)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range grid {
		if !strings.Contains(out, "│ "+s.Label+" ") {
			t.Errorf("table lacks %s:\n%s", s.Label, out)
		}
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	want := fmt.Sprintf("recommendation: PYTORCH_CUDA_ALLOC_CONF=%s: peak reserved ", rec.AllocConf)
	if !strings.HasPrefix(last, want) || !strings.Contains(last, fmt.Sprintf("(%.1f%%) against the defaults", rec.SavedPercent)) {
		t.Errorf("last line %q, want %q... with %.1f%%", last, want, rec.SavedPercent)
	}
	if !strings.Contains(out, "note: nocache reserves") {
		t.Errorf("no note on nocache:\n%s", out)
	}
	if !strings.Contains(errs, fmt.Sprintf("%d replays on", len(grid))) {
		t.Errorf("stderr %q", errs)
	}
}

// --device-memory: a column per card, with the op where it fails; a card
// nothing fits is left out of the recommendation.
func TestSweepCards(t *testing.T) {
	trace := sweepFixture("gpt2_varlen.pickle")
	doc := sweepJSONOf(t, "sweep", trace, "--device-memory", "16GiB, 24GiB", "--grid", "expandable_segments:True;nocache")
	if !slices.Equal(doc.DeviceMemory, []uint64{16 << 30, 24 << 30}) {
		t.Fatalf("cards %v", doc.DeviceMemory)
	}
	for _, r := range doc.Rows {
		if len(r.Cards) != 2 || r.Cards[0].Fits || r.Cards[0].OOMOpIndex == nil || !r.Cards[1].Fits || r.Cards[1].OOMOpIndex != nil {
			t.Fatalf("%s: cards %+v, want an OOM on 16 GiB and a fit on 24 GiB", r.Label, r.Cards)
		}
		if r.DeviceMemory != 24<<30 || r.OOMOpIndex != nil {
			t.Errorf("%s: headline on %d (oom %v), want 24 GiB", r.Label, r.DeviceMemory, r.OOMOpIndex)
		}
	}
	if doc.Recommendation == nil || doc.Recommendation.Label != "expandable_segments:True" {
		t.Errorf("recommendation %+v", doc.Recommendation)
	}
	out, _, code := gm(t, "sweep", trace, "--device-memory", "16GiB,24GiB", "--grid", "expandable_segments:True;nocache")
	op := *jsonRow(t, doc, "defaults").Cards[0].OOMOpIndex
	if code != 0 || !strings.Contains(out, "OOM at op "+units.FormatCount(int64(op))) || !strings.Contains(out, "note: no setting fits 16.00 GiB") {
		t.Errorf("exit %d, table without 'OOM at op %d' or the note:\n%s", code, op, out)
	}
}

func TestSweepMarkdown(t *testing.T) {
	out, errs, code := gm(t, "sweep", sweepFixture("seed_frag.pickle"), "-o", "markdown")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"## Sweep of `", "| setting", "|:---", "**recommendation: "} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}

// --strategies puts the strategy-* builtins in one table.
func TestSweepStrategies(t *testing.T) {
	doc := sweepJSONOf(t, "sweep", "--strategies", "--param", "steps=6", "--param", "every=2")
	var want, got []string
	for _, b := range workload.Builtins() {
		if strings.HasPrefix(b.Name, "strategy-") {
			want = append(want, b.Name)
		}
	}
	for _, r := range doc.Rows {
		got = append(got, r.Label)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || len(want) < 5 {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if doc.Baseline != "strategy-default" || doc.Recommendation == nil || doc.Recommendation.Label != doc.Rows[0].Label {
		t.Errorf("baseline %q, recommendation %+v, first row %s", doc.Baseline, doc.Recommendation, doc.Rows[0].Label)
	}
	out, errs, code := gm(t, "sweep", "--strategies", "--param", "steps=6")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "least reserved: "+doc.Rows[0].Label) {
		t.Errorf("last line %q", last)
	}
	// Under two settings: one row per strategy and setting.
	doc = sweepJSONOf(t, "sweep", "--strategies", "--grid", "defaults;expandable_segments:True")
	if len(doc.Rows) != 2*len(want) || doc.Baseline != "strategy-default / defaults" {
		t.Errorf("%d rows, baseline %q", len(doc.Rows), doc.Baseline)
	}
}

// A workload sweep runs on the workload's own limit when no card is given.
func TestSweepWorkload(t *testing.T) {
	doc := sweepJSONOf(t, "sweep", "--workload", "free-but-fails")
	if !slices.Equal(doc.DeviceMemory, []uint64{8 << 30}) {
		t.Fatalf("cards %v, want the workload's 8 GiB", doc.DeviceMemory)
	}
	if def := jsonRow(t, doc, "defaults"); def.Cards[0].Fits {
		t.Errorf("free-but-fails fits its 8 GiB under the defaults")
	}
}

// The transformer workload set to GPT-2 small with the fixture's batch and
// sequence lengths lands within 15% of the real gpt2_varlen run's peak
// reserved memory.
func TestSweepTransformerLikeGPT2(t *testing.T) {
	want := readTruth(t, "gpt2_varlen").MemoryStats["reserved_bytes.all.peak"]
	doc := sweepJSONOf(t, "sweep", "--workload", "transformer", "--grid", "defaults",
		"--param", "seq=512,1024,256,768,1024,384,896,640", "--param", "batch=8")
	got := jsonRow(t, doc, "defaults").PeakReserved
	if off := math.Abs(float64(got)/float64(want) - 1); off > 0.15 {
		t.Errorf("transformer peak reserved %d is %.1f%% off gpt2_varlen's %d", got, 100*off, want)
	}
}

func TestSweepUsage(t *testing.T) {
	trace := sweepFixture("gpt2_varlen.pickle")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sweep"}, 2, "want a TRACE"},
		{[]string{"sweep", trace, "--workload", "frag-demo"}, 2, "not several"},
		{[]string{"sweep", "--workload", "frag-demo", "--strategies"}, 2, "exclude each other"},
		{[]string{"sweep", trace, "--memory-fraction", "0.9"}, 2, "--memory-fraction needs --device-memory"},
		{[]string{"sweep", trace, "--device-memory", "24GiB", "--memory-fraction", "1.5"}, 2, "not in (0, 1]"},
		{[]string{"sweep", trace, "--device-memory", "24GiB,0"}, 2, `--device-memory: invalid size "0"`},
		{[]string{"sweep", trace, "--grid", "bogus:1"}, 2, `--grid: setting "bogus:1": Unrecognized key`},
		{[]string{"sweep", trace, "--grid", "nocache", "--grid", "nocache"}, 2, `setting "nocache" given twice`},
		{[]string{"sweep", trace, "-o", "xml"}, 2, `unknown format "xml"`},
		{[]string{"sweep", trace, "--jobs", "0"}, 2, "--jobs"},
		{[]string{"sweep", trace, "--param", "batch=2"}, 2, "--param is for"},
		{[]string{"sweep", "--strategies", "--param", "nosuch=1"}, 2, "no strategy workload takes it"},
		{[]string{"sweep", "--workload", "nosuch"}, 2, "no builtin workload"},
		{[]string{"sweep", "nosuch.pickle"}, 2, "nosuch.pickle"},
	} {
		out, errs, code := gm(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("gpumem %v: exit %d, stderr %q, stdout %q; want exit %d and %q", c.args, code, errs, out, c.code, c.want)
		}
	}
}

// BenchmarkSweepDefaultGrid is the whole command over gpt2_varlen's
// default grid: reading the trace, 11 replays on every core, the table.
func BenchmarkSweepDefaultGrid(b *testing.B) {
	trace := sweepFixture("gpt2_varlen.pickle")
	for b.Loop() {
		if code := run([]string{"sweep", trace}, strings.NewReader(""), io.Discard, io.Discard); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
}
