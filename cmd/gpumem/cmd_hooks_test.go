package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The hooks against fake torch, Lightning and transformers: the context
// manager, dump(tag) with the rank in the name, and both callbacks.
func TestHooksFake(t *testing.T) {
	dir := python3Dir(t, map[string]string{
		"fake/lightning/__init__.py":         "",
		"fake/lightning/pytorch/__init__.py": "class Callback:\n    pass\n",
		"fake/transformers/__init__.py":      "class TrainerCallback:\n    pass\n",
		"use.py": `import os, types, torch, gpumem_hooks as h
os.environ["RANK"] = "3"
with h.recording("run.pickle", max_entries=5):
    h.dump("warm")
try:
    with h.recording("oom.pickle"):
        torch.fake_oom(caught=False)
except torch.OutOfMemoryError:
    pass
cb = h.lightning_callback("pl.pickle", steps=[2], every_n_steps=5)
tr = types.SimpleNamespace(global_step=0)
cb.on_fit_start(tr, None)
for s in range(1, 11):
    tr.global_step = s
    cb.on_train_batch_end(tr, None, None, None, s)
cb.on_exception(tr, None, torch.OutOfMemoryError("x"))
cb.on_fit_end(tr, None)
h.stop()
hf = h.hf_callback("hf.pickle", steps=[1])
st = types.SimpleNamespace(global_step=1)
hf.on_train_begin(None, st, None)
hf.on_step_end(None, st, None)
hf.on_train_end(None, st, None)
`,
	})
	t.Chdir(dir)
	// gpumem hooks writes the module where the program imports it from
	if _, errs, code := gm(t, "hooks", filepath.Join(dir, "gpumem_hooks.py")); code != 0 {
		t.Fatalf("gpumem hooks: exit %d %s", code, errs)
	}
	out, err := exec.Command("python3", "use.py").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, f := range []string{"run.rank3.warm.pickle", "run.rank3.pickle", "oom.rank3.pickle",
		"pl.rank3.step2.pickle", "pl.rank3.step5.pickle", "pl.rank3.step10.pickle", "pl.rank3.oom.pickle", "pl.rank3.end.pickle",
		"hf.rank3.step1.pickle", "hf.rank3.end.pickle"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("no %s:\n%s", f, out)
		}
	}
	for _, f := range []string{"pl.rank3.step3.pickle", "hf.rank3.step2.pickle"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s written at a step not asked for", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "run.rank3.pickle")); !strings.Contains(string(b), `"max_entries": 5`) {
		t.Errorf("run.rank3.pickle: %s", b)
	}
	if !strings.Contains(string(out), "oom.rank3.pickle (out of memory on cuda:0") {
		t.Errorf("the OOM dump is not said:\n%s", out)
	}
}

// With real PyTorch: on a GPU the context manager writes a snapshot gpumem
// replays; without one it warns and the program runs on. Skipped where
// torch is absent.
func TestHooksTorch(t *testing.T) {
	if err := exec.Command("python3", "-c", "import torch").Run(); err != nil {
		t.Skip("no torch")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	if _, errs, code := gm(t, "hooks"); code != 0 {
		t.Fatalf("gpumem hooks: exit %d %s", code, errs)
	}
	out, err := exec.Command("python3", "-c", `import torch, gpumem_hooks as h
with h.recording("t.pickle"):
    if torch.cuda.is_available():
        x = [torch.empty(n << 20, device="cuda") for n in (1, 3, 5)]
        del x[1]
print("cuda", torch.cuda.is_available())
`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "cuda True") {
		if !strings.Contains(string(out), "torch sees no CUDA device; not recording") {
			t.Errorf("without CUDA: %s", out)
		}
		return
	}
	if stdout, errs, code := gm(t, "replay", "t.pickle", "-o", "json"); code != 0 || !strings.Contains(stdout, `"allocated_bytes.all.peak"`) {
		t.Errorf("replay: exit %d %s", code, errs)
	}
}
