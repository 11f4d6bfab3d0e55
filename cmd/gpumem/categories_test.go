package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// profilerRecording is one of the programs recorded on an H200 beside
// torch.profiler (scripts/categories; internal/categories compares the two).
func profilerRecording(name string) string {
	return filepath.Join("..", "..", "internal", "categories", "testdata", "profiler", name+".pickle.gz")
}

// The categories at the peak sum to allocated_bytes.all.peak, on every
// recording with optimizer steps, with stacks and without, and leave
// nothing unknown there.
func TestReplayCategoriesSumToPeak(t *testing.T) {
	for _, path := range []string{
		profilerRecording("gpt"), profilerRecording("resnet"), profilerRecording("ckpt"), profilerRecording("leak"),
		sweepFixture("gpt2_varlen_stacks.pickle"), sweepFixture("gpt2_varlen.pickle"), sweepFixture("resnet50_fp32.pickle"),
		sweepFixture("oom_survive_resnet.pickle"), sweepFixture("graph_convnet.pickle"),
		filepath.Join("..", "..", "testdata", "pytorch", "ddp", "ddp_gpt2.rank0.pickle"),
	} {
		out, errs, code := gm(t, "replay", path, "-o", "json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", path, code, errs)
		}
		var doc struct {
			Stats      map[string]int64  `json:"memory_stats"`
			Categories map[string]uint64 `json:"categories"`
			Method     string            `json:"categories_method"`
			Timeline   []struct {
				Allocated  int64             `json:"allocated"`
				Categories map[string]uint64 `json:"categories"`
			} `json:"timeline"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, n := range doc.Categories {
			sum += n
		}
		if peak := doc.Stats["allocated_bytes.all.peak"]; int64(sum) != peak {
			t.Errorf("%s: categories sum to %d, allocated_bytes.all.peak is %d", path, sum, peak)
		}
		if doc.Categories["unknown"] != 0 || !strings.HasPrefix(doc.Method, "lifetimes") {
			t.Errorf("%s: %d bytes unknown, method %q", path, doc.Categories["unknown"], doc.Method)
		}
		// each timeline point's categories are requests: at most the
		// point's allocated blocks, and near them
		for i, p := range doc.Timeline {
			var sum uint64
			for _, n := range p.Categories {
				sum += n
			}
			if len(p.Categories) != 9 || int64(sum) > p.Allocated || p.Allocated > 1<<20 && float64(sum) < 0.9*float64(p.Allocated) {
				t.Errorf("%s: timeline point %d: categories sum to %d, allocated %d", path, i, sum, p.Allocated)
				break
			}
		}
	}
}

// diff ranks categories by their change: checkpointing removes
// activations; keeping evaluation losses with their graphs adds
// activations that outlive their step.
func TestDiffCategories(t *testing.T) {
	for _, c := range []struct {
		b    string
		grow bool
	}{{"ckpt", false}, {"leak", true}} {
		out, errs, code := gm(t, "diff", profilerRecording("gpt"), profilerRecording(c.b), "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var doc struct {
			Categories []struct {
				Category string `json:"category"`
				A, B     uint64
				Delta    int64 `json:"delta"`
			} `json:"categories"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Categories) != 9 {
			t.Fatalf("%s: %d categories", c.b, len(doc.Categories))
		}
		top := doc.Categories[0]
		if top.Category != "activation" || (top.Delta > 0) != c.grow || top.Delta != int64(top.B)-int64(top.A) {
			t.Errorf("gpt → %s: the largest change is %+v", c.b, top)
		}
	}
	out, _, _ := gm(t, "diff", profilerRecording("gpt"), profilerRecording("leak"))
	if !strings.Contains(out, "activations kept past the step that made them: a 0 B, b 492.66 MiB") {
		t.Errorf("the leak's activations that outlive their step are not named:\n%s", out)
	}
	if i, j := strings.Index(out, "by category, largest change first"), strings.Index(out, "Allocation sites"); i < 0 || j < i {
		t.Errorf("the categories do not come before the sites:\n%s", out)
	}
}

// A budget file limits categories at the peak: the leak's activations
// fail it, the plain loop passes.
func TestFragcheckCategoryBudget(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"gpt", "leak"} {
		data, err := os.ReadFile(profilerRecording(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".pickle.gz"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "gpumem.yaml")
	if err := os.WriteFile(cfg, []byte("version: 1\ndefaults:\n  activations: 1GiB\ncases:\n  - name: gpt\n    trace: gpt.pickle.gz\n  - name: leak\n    trace: leak.pickle.gz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := gm(t, "fragcheck", "--config", cfg)
	if code != 1 || !strings.Contains(out, "leak: fail: activations: 1.12 GiB at the peak of allocated memory, above the limit of 1.00 GiB") ||
		strings.Contains(out, "gpt: fail") {
		t.Errorf("exit %d\n%s\n%s", code, out, errs)
	}
}
