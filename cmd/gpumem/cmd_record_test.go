package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTorch is just enough of torch for record.py: it writes what it was
// asked to record into the "snapshot".
const fakeTorch = `
import json
class OutOfMemoryError(RuntimeError):
    pass
_history = {}
_observers = []
class _C:
    @staticmethod
    def _cuda_attach_out_of_memory_observer(f):
        _observers.append(f)
class cuda:
    OutOfMemoryError = OutOfMemoryError
    @staticmethod
    def is_available():
        return True
    class memory:
        @staticmethod
        def _record_memory_history(**kw):
            _history.update(kw)
        @staticmethod
        def _dump_snapshot(path):
            with open(path, "w") as f:
                json.dump(_history, f)
def fake_oom(caught):
    for f in _observers:
        f(0, 1 << 40, 0, 0)
    if not caught:
        raise OutOfMemoryError("CUDA out of memory")
`

func TestRecordRuns(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Chdir(dir) // so that -m finds pkg
	write("fake/torch/__init__.py", fakeTorch)
	t.Setenv("PYTHONPATH", filepath.Join(dir, "fake"))
	train := write("train.py", `import os, sys, torch
import helper  # from the script's own folder
print("argv", sys.argv[1:], __name__)
os.chdir("/")  # the snapshot still goes where it was asked
if sys.argv[1] == "oom":
    torch.fake_oom(caught=False)
sys.exit(int(sys.argv[1]))
`)
	write("helper.py", "")
	write("pkg/__init__.py", "")
	write("pkg/main.py", "import sys\nprint('module', sys.argv[1:], __name__)\n")

	for i, c := range []struct {
		args     []string
		code     int
		stdout   string
		stderr   string
		snapshot string
	}{
		{[]string{"--max-entries", "7", "--", "python3", train, "3", "x"}, 3,
			"argv ['3', 'x'] __main__", "record.py: wrote", `"max_entries": 7`},
		{[]string{"--", train, "oom"}, 1,
			"argv ['oom'] __main__", "out of memory on cuda:0 asking for 1099511627776 bytes", `"stacks": "python"`},
		{[]string{"--stacks", "all", "--", "python3", "-m", "pkg.main", "-v"}, 0,
			"module ['-v'] __main__", "gpumem: wrote", `"stacks": "all"`},
	} {
		out := filepath.Join(dir, "s.json")
		os.Remove(out)
		var stdout, stderr bytes.Buffer
		flag, note := "--snapshot", ""
		if i == 0 {
			// -o, the old spelling, still works, with a note
			flag, note = "-o", "gpumem: note: --output is deprecated; use --snapshot\n"
		}
		code := run(append([]string{"record", flag, out}, c.args...), strings.NewReader(""), &stdout, &stderr)
		if !strings.HasPrefix(stderr.String(), note) {
			t.Errorf("%s: stderr %q, want it to start with %q", flag, &stderr, note)
		}
		snap, _ := os.ReadFile(out)
		if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) ||
			!strings.Contains(string(snap), c.snapshot) {
			t.Errorf("%q: exit %d (want %d)\nstdout: %s\nstderr: %s\nsnapshot: %s", c.args, code, c.code, &stdout, &stderr, snap)
		}
	}

	var stderr bytes.Buffer
	if code := run([]string{"record", "--", "bash", "x.sh"}, nil, &bytes.Buffer{}, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "gpumem: error: bash is not a Python interpreter\ngpumem: hint: ") {
		t.Errorf("non-Python command: exit %d, %s", code, &stderr)
	}
}
