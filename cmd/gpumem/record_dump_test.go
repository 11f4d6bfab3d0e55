package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeSnapshot adds torch.cuda.memory._snapshot to the fake torch: a
// pickled dict, until torch.fail_next(), after which pickling the
// snapshot fails half-way as a full disk would.
const fakeSnapshot = `
class _Full:
    def __reduce__(self):
        raise OSError(28, "No space left on device")
_failing = []
def _snapshot():
    if _failing:
        return {"history": dict(_history), "pad": "x" * 100000, "z": _Full()}
    return {"history": dict(_history), "observers": len(_observers)}
cuda.memory._snapshot = staticmethod(_snapshot)
def fail_next():
    _failing.append(1)
`

// A dump that fails (no space left) keeps the earlier good snapshot, leaves
// no temporary file, and is reported as a failure: record exits 1 and does
// not say "wrote".
func TestRecordFailedDumpKeepsSnapshot(t *testing.T) {
	dir := python3Dir(t, map[string]string{
		"train.py": `import sys, torch
torch.fake_oom(caught=True)   # dumped: the good snapshot
torch.fail_next()             # the dump at exit fails
`,
	})
	appendFile(t, filepath.Join(dir, "fake/torch/__init__.py"), fakeSnapshot)
	out := t.TempDir()
	snap := filepath.Join(out, "s.pickle")
	var stdout, stderr bytes.Buffer
	code := run([]string{"record", "-f", snap, "--", "python3", filepath.Join(dir, "train.py")}, strings.NewReader(""), &stdout, &stderr)
	b, err := os.ReadFile(snap)
	if err != nil || !bytes.HasPrefix(b, []byte{0x80}) || !bytes.Contains(b, []byte("observers")) {
		t.Errorf("the good snapshot is gone: %v %q", err, b)
	}
	if code != exitFailure || strings.Contains(stderr.String(), "gpumem: wrote") ||
		!strings.Contains(stderr.String(), "gpumem: error: could not write "+snap+" (at exit: [Errno 28] No space left on device)") ||
		!strings.Contains(stderr.String(), "gpumem: warning: "+snap+" holds an earlier snapshot of this run") {
		t.Errorf("exit %d, stderr:\n%s", code, &stderr)
	}
	if es, _ := os.ReadDir(out); len(es) != 1 {
		t.Errorf("files left beside the snapshot: %v", es)
	}

	// standalone, record.py says the same through its exit status
	stderr.Reset()
	c := exec.Command("python3", "../../python/gpumem_record.py", "-o", snap, "--", filepath.Join(dir, "train.py"))
	c.Stderr = &stderr
	if err := c.Run(); c.ProcessState.ExitCode() != 1 || !strings.Contains(stderr.String(), "record.py: could not write") {
		t.Errorf("record.py alone: %v, stderr:\n%s", err, &stderr)
	}
}

// gpumem_hooks.dump writes through a temporary file of its own (no name
// anyone can predict and plant a link under), keeps the earlier snapshot
// when a dump fails, and writes nothing over what is not a regular file.
func TestHooksDumpSafely(t *testing.T) {
	dir := python3Dir(t, map[string]string{})
	appendFile(t, filepath.Join(dir, "fake/torch/__init__.py"), fakeSnapshot)
	out := t.TempDir()
	fifo := filepath.Join(out, "fifo.pickle")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	prog := `import os, sys, torch, gpumem_hooks
out = sys.argv[1]
gpumem_hooks.start(out, on_signal=False)
print(gpumem_hooks.dump() == out)
torch.fail_next()
print(gpumem_hooks.dump() is None)
print(gpumem_hooks.dump(path=sys.argv[2]) is None)
gpumem_hooks.stop()
`
	c := exec.Command("python3", "-c", prog, filepath.Join(out, "s.pickle"), fifo)
	c.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "fake")+":../../python")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil || stdout.String() != "True\nTrue\nTrue\n" {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, &stdout, &stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, "s.pickle"))
	if err != nil || !bytes.Contains(b, []byte("observers")) {
		t.Errorf("the good snapshot is gone: %v", err)
	}
	if !strings.Contains(stderr.String(), "fifo.pickle is not a regular file") {
		t.Errorf("stderr:\n%s", &stderr)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v", err)
	}
	if es, _ := os.ReadDir(out); len(es) != 2 {
		t.Errorf("temporary files left: %v", es)
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}
