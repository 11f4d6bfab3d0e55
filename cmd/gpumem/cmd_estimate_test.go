package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/estimate"
	"github.com/gpumem/gpumem/internal/output"
)

func estimatePython(t *testing.T) string {
	t.Helper()
	py, ok := estimate.TestInterpreter()
	if !ok {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Python with torch 2.11 at %s: run scripts/pyenv.sh", py)
		}
		t.Skipf("no Python with torch 2.11 at %s: run scripts/pyenv.sh to run the estimate tests", py)
	}
	return py
}

func TestEstimateUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"estimate", "--gpu", "Z80", "--", "python3", "x.py"}, `--gpu: unknown card "Z80"`},
		{[]string{"estimate", "--device-memory", "12", "--", "python3", "x.py"}, "less than 1 MiB"},
		{[]string{"estimate", "--alloc-conf", "bogus:1", "--", "python3", "x.py"}, "--alloc-conf"},
		{[]string{"estimate", "--vary", "BS", "--", "python3", "x.py"}, "want NAME=v1,v2"},
		{[]string{"estimate", "--find-max", "BS=9..1", "--", "python3", "x.py"}, "LO <= HI"},
		{[]string{"estimate", "--vary", "BS=1,2", "--", "python3", "x.py"}, "no {BS} to vary"},
		{[]string{"estimate", "--vary", "BS=1", "--find-max", "BS=1..2", "--", "python3", "x.py"}, "give one"},
		{[]string{"estimate", "-o", "yaml", "--", "python3", "x.py"}, "--output"},
	} {
		_, errs, code := gm(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errs, exitUsage, c.want)
		}
	}
}

const trainScript = `
import sys, torch, torch.nn as nn
bs = int(sys.argv[1])
m = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(m.parameters())
for _ in range(2):
    x = torch.randn(bs, 1024, device="cuda")
    m(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
print("loss", m(x).sum().item())
`

// The JSON of an estimate and of --vary/--find-max follow their schemas,
// the trace written replays to the same peaks, and the bigger batch does
// not fit a small card.
func TestEstimateJSON(t *testing.T) {
	py := estimatePython(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, []byte(trainScript), 0o644); err != nil {
		t.Fatal(err)
	}
	schemas := loadSchemas(t)
	trace := filepath.Join(dir, "run.trace")
	out, errs, code := gm(t, "estimate", "-o", "json", "-f", trace, "--device-memory", "1GiB", "--", py, script, "64")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if err := validate(schemas["estimate.schema.json"], out); err != nil {
		t.Errorf("estimate.schema.json: %v", err)
	}
	var doc output.EstimateJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if !doc.ExitOK || doc.PeakReserved == 0 || doc.Composition["parameter"] != 4*(1024*4096+4096+4096*1024+1024) ||
		len(doc.StandIns) != 1 || !strings.Contains(errs, "loss 0.0") {
		t.Errorf("document: %+v\nstderr: %s", doc, errs)
	}
	rep, errs, code := gm(t, "replay", trace, "--device-memory", "1GiB", "-o", "json")
	if code != 0 {
		t.Fatalf("replay of the trace: exit %d: %s", code, errs)
	}
	var r output.ReplayJSON
	if err := json.Unmarshal([]byte(rep), &r); err != nil {
		t.Fatal(err)
	}
	if got := r.MemoryStats["reserved_bytes.all.peak"]; got != doc.PeakReserved {
		t.Errorf("the trace replays to a peak reserved of %d, the estimate said %d", got, doc.PeakReserved)
	}

	out, errs, code = gm(t, "estimate", "-o", "json", "--device-memory", "1GiB", "--vary", "BS=64,100000", "--", py, script, "{BS}")
	if code != 0 {
		t.Fatalf("--vary: exit %d: %s", code, errs)
	}
	if err := validate(schemas["estimate-vary.schema.json"], out); err != nil {
		t.Errorf("estimate-vary.schema.json: %v", err)
	}
	var v output.VaryJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Trials) != 2 || !v.Trials[0].Fits || v.Trials[1].Fits || !strings.Contains(v.Trials[1].Failure, "out of memory") ||
		v.Trials[0].PeakReserved != doc.PeakReserved {
		t.Errorf("--vary: %+v", v.Trials)
	}
}

// The renderers' JSON follows the schemas without a Python to run: an
// estimate's report built from a replay, with every part filled in.
func TestEstimateRenderers(t *testing.T) {
	schemas := loadSchemas(t)
	set, err := estimate.NewSettings("H200", "30MiB", "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(t.TempDir(), "t.trace")
	if err := os.WriteFile(trace, []byte("# gpumem-trace v1\nalloc 0x7f0000000000 1048576\nalloc 0x7f0000200000 512\nfree 0x7f0000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := &estimate.Result{Ops: 3, Info: &estimate.Info{
		Composition:    map[string]int64{"parameter": 1048576, "activation": 512},
		TopActivations: []estimate.ModuleBytes{{Module: "layers.0", Bytes: 512}},
		StandIns:       []estimate.StandIn{{Kind: "item", Site: "train.py:3", Count: 2}},
		NotModelled:    []estimate.StandIn{{Kind: "aten.convolution.default: cuDNN workspace", Site: "train.py:5", Count: 3}},
		OOMs:           []estimate.OOMSite{{Op: 4, Size: 1 << 30, Site: "train.py:9", Stack: []string{"x"}}},
		Error:          &estimate.ScriptError{Type: "OutOfMemoryError", Message: "CUDA out of memory.", Site: "train.py:9"},
	}, OOMs: []estimate.OOM{{Op: 4, Size: 1 << 30, Message: "CUDA out of memory."}}}
	res.Stats.ReservedBytes[0].Allocated, res.Stats.ReservedBytes[0].Current = 2<<20, 2<<20
	res.Stats.AllocatedBytes[0].Allocated = 1048576 + 512
	rep, err := estimate.Build(context.Background(), set, []string{"python3", "train.py"}, trace, res)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := output.EstimateFormats.Render(&b, "json", rep, output.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := validate(schemas["estimate.schema.json"], b.String()); err != nil {
		t.Errorf("estimate.schema.json: %v\n%s", err, b.String())
	}
	b.Reset()
	if err := output.EstimateFormats.Render(&b, "table", rep, output.Options{}); err != nil || !strings.Contains(b.String(), "module layers.0") || !strings.Contains(b.String(), "(tracked as the script ran)") ||
		!strings.Contains(b.String(), "x3      aten.convolution.default: cuDNN workspace  (train.py:5)") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	max := int64(7)
	v := &output.VaryResult{Name: "BS", Card: set.Card, Command: []string{"python3", "t.py", "{BS}"}, FindMax: true, Max: &max,
		Trials: []estimate.Trial{{Value: "7", PeakAllocated: 1, PeakReserved: 2, Fits: true}, {Value: "8", Fits: false, Failure: "out of memory"}}}
	b.Reset()
	if err := output.VaryFormats.Render(&b, "json", v, output.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := validate(schemas["estimate-vary.schema.json"], b.String()); err != nil {
		t.Errorf("estimate-vary.schema.json: %v\n%s", err, b.String())
	}
}
