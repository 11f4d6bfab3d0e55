package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// python3Dir makes a folder with fake torch (and what else files says) on
// PYTHONPATH; it skips the test without python3.
func python3Dir(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	files["fake/torch/__init__.py"] = fakeTorch
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PYTHONPATH", filepath.Join(dir, "fake"))
	return dir
}

// A fake torchrun starts two ranks; each records itself through the
// sitecustomize, rank 1 dumps at its OOM, and children of a rank do not
// record. The user's own sitecustomize still runs.
func TestRecordLauncher(t *testing.T) {
	dir := python3Dir(t, map[string]string{
		"bin/torchrun": `#!/usr/bin/env python3
import os, subprocess, sys
procs = [subprocess.Popen([sys.executable] + sys.argv[1:], env=dict(os.environ, RANK=str(r))) for r in range(2)]
sys.exit(max(p.wait() for p in procs))
`,
		"train.py": `import os, signal, subprocess, sys, time, torch
# one write per line: the two ranks share stdout, unbuffered
sys.stdout.write("rank %s recording pid %s\n" % (os.environ["RANK"], os.environ.get("GPUMEM_RECORDING_PID") == str(os.getpid())))
child = subprocess.run([sys.executable, "-c", "import gpumem_hooks; print('child', gpumem_hooks._state['on'])"], capture_output=True, text=True)
sys.stdout.write(child.stdout.strip() + "\n")
if os.environ["RANK"] == "1":
    torch.fake_oom(caught=True)
else:
    os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.3)
`,
		"fake/sitecustomize.py": "import sys\nprint('user sitecustomize', file=sys.stderr)\n",
	})
	t.Chdir(dir)
	var out, errs bytes.Buffer
	code := run([]string{"record", "-f", "job.pickle", "--every", "100ms", "--max-entries", "9", "--",
		filepath.Join(dir, "bin", "torchrun"), "train.py"}, strings.NewReader(""), &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, &out, &errs)
	}
	for _, want := range []string{"rank 0 recording pid True", "rank 1 recording pid True", "child False"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, &out)
		}
	}
	if strings.Contains(errs.String(), "could not write") {
		t.Errorf("a dump failed:\n%s", &errs)
	}
	for _, want := range []string{
		"user sitecustomize",
		"job.rank1.pickle (out of memory on cuda:0",
		"job.rank0.pickle (every 0.1s)",
		"job.rank0.pickle (on SIGUSR1)",
		"job.rank0.pickle (at exit)",
		"gpumem: wrote 2 rank snapshots (job.rank0.pickle, job.rank1.pickle); replay them with: gpumem replay 'job.rank*.pickle'",
	} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, &errs)
		}
	}
	for _, r := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(dir, "job.rank"+r+".pickle"))
		if err != nil || !strings.Contains(string(b), `"max_entries": 9`) {
			t.Errorf("rank %s: %v %s", r, err, b)
		}
	}
	if _, _, code := gm(t, "record", "--every", "1m", "--", "python3", "train.py"); code != exitUsage {
		t.Errorf("--every without a launcher: exit %d, want 2", code)
	}
}
