package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

type replayTruth struct {
	Replay        string           `json:"replay"`
	AllocConf     string           `json:"alloc_conf"`
	Device        int              `json:"device"`
	OOMOpIndex    *int             `json:"oom_op_index"`
	MemoryStats   map[string]int64 `json:"memory_stats"`
	MemorySummary string           `json:"memory_summary"`
	Fraction      float64          `json:"per_process_memory_fraction"`
	RecordedWith  struct {
		DeviceTotal uint64 `json:"device_total_bytes"`
	} `json:"recorded_with"`
}

func truthOf(t *testing.T, name string) replayTruth {
	t.Helper()
	b, err := os.ReadFile(sweepFixture(name + ".truth.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tr replayTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

// The JSON contract the fidelity check depends on: every memory_stats key
// under PyTorch's name, and "oom" null when the replay completes.
func TestReplayJSONContract(t *testing.T) {
	out, errs, code := gm(t, "replay", sweepFixture("seed_frag.pickle"), "--output", "json")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var doc struct {
		MemoryStats map[string]int64 `json:"memory_stats"`
		OOM         *json.RawMessage `json:"oom"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	want := truthOf(t, "seed_frag").MemoryStats
	if len(doc.MemoryStats) != len(want) {
		t.Errorf("%d memory_stats keys, PyTorch has %d", len(doc.MemoryStats), len(want))
	}
	for k, v := range want {
		if doc.MemoryStats[k] != v {
			t.Errorf("%s = %d, PyTorch reported %d", k, doc.MemoryStats[k], v)
		}
	}
	if doc.OOM != nil {
		t.Errorf("oom = %s, want null", *doc.OOM)
	}
}

// torch-summary is PyTorch's memory_summary byte for byte, on plain
// training, CUDA graphs, graph trees, a MemPool and a run that survived OOMs.
func TestReplayTorchSummary(t *testing.T) {
	for _, name := range []string{"resnet50_fp32", "graph_convnet", "compile_reduce_overhead", "mempool_single", "oom_survive_resnet"} {
		tr := truthOf(t, name)
		args := []string{"replay", sweepFixture(name + ".pickle"), "-o", "torch-summary"}
		if tr.Fraction > 0 {
			args = append(args, "--device-memory", strconv.FormatUint(tr.RecordedWith.DeviceTotal, 10),
				"--memory-fraction", strconv.FormatFloat(tr.Fraction, 'g', -1, 64))
		}
		out, errs, code := gm(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errs)
		}
		if out != tr.MemorySummary {
			t.Errorf("%s: torch-summary differs from PyTorch's memory_summary:\n%s\nwant:\n%s", name, out, tr.MemorySummary)
		}
	}
}

// On a card too small the replay stops at the first OOM, reported at the
// index of the failing allocation among alloc/free_completed events.
func TestReplayOOM(t *testing.T) {
	out, _, code := gm(t, "replay", sweepFixture("gpt2_varlen.pickle"), "--device-memory", "16GiB", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		OOM *struct {
			OpIndex  int    `json:"op_index"`
			Verdict  string `json:"verdict"`
			TorchMsg string `json:"torch_message"`
		} `json:"oom"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OOM == nil || doc.OOM.OpIndex != 3041 || doc.OOM.Verdict != "shortage" ||
		!strings.HasPrefix(doc.OOM.TorchMsg, "CUDA out of memory. Tried to allocate 1.54 GiB. GPU 0 has a total capacity of 16.00 GiB") {
		t.Fatalf("oom %+v", doc.OOM)
	}
	table, _, _ := gm(t, "replay", sweepFixture("gpt2_varlen.pickle"), "--device-memory", "16GiB")
	for _, want := range []string{"out of memory at operation 3,041", "real shortage", "Segments holding the holes", "Hints:"} {
		if !strings.Contains(table, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// What-if settings change the figures the way PyTorch's did on the H200.
func TestReplayWhatIf(t *testing.T) {
	for conf, want := range map[string]int64{
		"":                         19304284160,
		"expandable_segments:True": 17500733440,
		"max_split_size_mb:64":     52403634176,
	} {
		out, errs, code := gm(t, "replay", sweepFixture("gpt2_varlen.pickle"), "--alloc-conf", conf, "-o", "json")
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", conf, code, errs)
		}
		var doc struct {
			MemoryStats map[string]int64 `json:"memory_stats"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if got := doc.MemoryStats["reserved_bytes.all.peak"]; got != want {
			t.Errorf("%q: peak reserved %d, PyTorch reserved %d", conf, got, want)
		}
	}
}

func TestReplayErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pickle")
	if err := os.WriteFile(junk, []byte("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fix := sweepFixture("seed_frag.pickle")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
		hint string
	}{
		{[]string{"replay", filepath.Join(dir, "missing.pickle")}, exitUsage, "missing.pickle", ""},
		{[]string{"replay", junk}, exitUsage, "junk.pickle: byte ", ""},
		{[]string{"replay", text}, exitUsage, "notes.txt: unknown trace format", ""},
		{[]string{"replay", fix, "--alloc-conf", "bogus_option:1"}, exitUsage, "Unrecognized key 'bogus_option' in CUDA allocator config.", ""},
		{[]string{"replay", fix, "--alloc-conf", "max_split_size_mb:10"}, exitUsage, "must be >= 20", ""},
		{[]string{"replay", fix, "--memory-fraction", "0.5"}, exitUsage, "--memory-fraction needs --device-memory", "--device-memory 80GiB"},
		{[]string{"replay", fix, "--device-memory", "lots"}, exitUsage, "--device-memory", ""},
		{[]string{"replay", fix, "-o", "yaml"}, exitUsage, `unknown format "yaml"`, ""},
		{[]string{"replay", fix, "--device", "3"}, exitUsage, "--device 3", ""},
		{[]string{"replay", fix, "--policy", "magic"}, exitUsage, `unknown policy "magic"`, ""},
		{[]string{"replay"}, exitUsage, "requires at least 1 arg", ""},
		{[]string{"replay", fix, "--frobnicate"}, exitUsage, "unknown flag: --frobnicate", ""},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`, "gpumem --help"},
	} {
		out, errs, code := gm(t, tc.args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code != tc.code || !strings.HasPrefix(lines[0], "gpumem: error: ") || !strings.Contains(lines[0], tc.msg) {
			t.Errorf("gpumem %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.msg)
		}
		if tc.hint != "" && !strings.Contains(errs, "gpumem: hint: ") && !strings.Contains(errs, tc.hint) {
			t.Errorf("gpumem %v: no hint %q in %q", tc.args, tc.hint, errs)
		}
		if out != "" {
			t.Errorf("gpumem %v: wrote %q to stdout on error", tc.args, out)
		}
	}
}

// Output that is not a terminal carries no colour.
func TestReplayNoColor(t *testing.T) {
	out, _, _ := gm(t, "replay", sweepFixture("seed_frag.pickle"))
	if strings.Contains(out, "\x1b[") {
		t.Error("escape codes in output that is not a terminal")
	}
	if !strings.Contains(out, "very high") {
		t.Error("seed_frag's fragmentation is not marked very high")
	}
}

// With stacks in the trace, an OOM names the failing allocation's stack and
// the stacks of the blocks pinning the largest holes.
func TestReplayOOMFrames(t *testing.T) {
	out, _, code := gm(t, "replay", sweepFixture("gpt2_varlen_stacks.pickle"), "--device-memory", "16GiB", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		OOM *struct {
			Frames    []string   `json:"frames"`
			PinFrames [][]string `json:"pin_frames"`
		} `json:"oom"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.OOM == nil {
		t.Fatalf("%v: %s", err, out[:min(len(out), 300)])
	}
	if len(doc.OOM.PinFrames) == 0 || !strings.Contains(strings.Join(doc.OOM.PinFrames[0], "\n"), "modeling_gpt2.py") {
		t.Errorf("pin frames %v", doc.OOM.PinFrames)
	}
}

// A run function needs no cobra: the app and an options struct suffice.
func TestRunReplayWithoutCobra(t *testing.T) {
	var out, errs bytes.Buffer
	a := &app{stdout: &out, stderr: &errs, getenv: func(string) string { return "" }}
	o := &replayOpts{
		invocation: invocation{ctx: context.Background(), changed: func(flag string) bool { return flag == "alloc-conf" }},
		alloc:      allocFlags{conf: "expandable_segments:True", policy: "pytorch"},
		output:     "json", backend: "sim",
	}
	if err := runReplay(a, o, sweepFixture("seed_frag.pickle")); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Settings string `json:"settings"`
		Ops      int    `json:"ops"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Settings != "expandable_segments:True" || doc.Ops == 0 {
		t.Errorf("settings %q, %d ops (%v); stderr %s", doc.Settings, doc.Ops, err, &errs)
	}
}

// -o is checked against the registry before any work, in every command
// that has it.
func TestOutputFlagChecked(t *testing.T) {
	fix := sweepFixture("seed_frag.pickle")
	for _, args := range [][]string{
		{"replay", fix}, {"run", "frag-demo"}, {"sweep", fix}, {"diff", fix, fix}, {"summary"}, {"fragcheck", fix}, {"version"},
	} {
		out, errs, code := gm(t, append(args, "-o", "yaml")...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errs, `gpumem: error: --output: unknown format "yaml" (want `) {
			t.Errorf("%s -o yaml: exit %d, stdout %q, stderr %q", args[0], code, out, errs)
		}
	}
}

// The ranks of a DDP job, as a glob: one row per rank, the worst rank, and
// in JSON each rank's single-replay object.
func TestReplayRanks(t *testing.T) {
	glob := sweepFixture("ddp/ddp_gpt2.rank*.pickle")
	out, errs, code := gm(t, "replay", glob, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Runs []struct {
			Source      string           `json:"source"`
			Device      int              `json:"device"`
			MemoryStats map[string]int64 `json:"memory_stats"`
		} `json:"runs"`
		Worst *int `json:"worst"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Runs) != 2 || doc.Worst == nil {
		t.Fatalf("%v: %s", err, out[:min(len(out), 300)])
	}
	for i, r := range doc.Runs {
		if r.Device != i || !strings.HasSuffix(r.Source, fmt.Sprintf("rank%d.pickle", i)) || r.MemoryStats["reserved_bytes.all.peak"] != 4311744512 {
			t.Errorf("run %d: %s device %d peak %d", i, r.Source, r.Device, r.MemoryStats["reserved_bytes.all.peak"])
		}
	}
	out, _, code = gm(t, "replay", sweepFixture("ddp/ddp_gpt2.rank0.pickle"), sweepFixture("ddp/ddp_gpt2.rank1.pickle"))
	for _, want := range []string{"2 ranks", "worst rank  0", "max/min peak reserved 1.000×", "operations  6,966 replayed"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("table lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if _, errs, code := gm(t, "replay", glob, "-o", "torch-summary"); code != exitUsage || !strings.Contains(errs, "is for one rank") {
		t.Errorf("torch-summary of a set: exit %d, %s", code, errs)
	}
	// --device picks one rank's file; a single file replays as before
	out, _, code = gm(t, "replay", sweepFixture("ddp/ddp_gpt2.rank1.pickle"), "-o", "json")
	if code != 0 || !strings.Contains(out, `"device": 1`) || strings.Contains(out, `"runs"`) {
		t.Errorf("one rank's file: exit %d, %s", code, out[:min(len(out), 200)])
	}
}
