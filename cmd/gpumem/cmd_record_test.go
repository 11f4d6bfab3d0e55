package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
		{[]string{"--", "python3", "-c", "import sys, torch; print('code', sys.argv, __name__); sys.exit(4)", "a"}, 4,
			"code ['-c', 'a'] __main__", "gpumem: wrote", `"max_entries": 1000000`},
	} {
		out := filepath.Join(dir, "s.json")
		os.Remove(out)
		var stdout, stderr bytes.Buffer
		flag, note := "-f", ""
		switch i {
		case 0: // the old spellings still work, with a note
			flag, note = "-o", "gpumem: note: --output is deprecated; use -f/--file\n"
		case 1:
			flag, note = "--snapshot", "gpumem: note: --snapshot is deprecated; use -f/--file\n"
		case 2:
			flag = "--file"
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

	// an unwritable snapshot fails before the script runs
	var stderr bytes.Buffer
	marker := filepath.Join(dir, "ran")
	code := run([]string{"record", "-f", filepath.Join(dir, "no", "such", "s.pickle"), "--", "python3", "-c",
		"open(" + strconv.Quote(marker) + ", 'w')"}, nil, &bytes.Buffer{}, &stderr)
	if _, err := os.Stat(marker); code != exitUsage || err == nil ||
		!strings.HasPrefix(stderr.String(), "gpumem: error: -f/--file: cannot write "+filepath.Join(dir, "no", "such", "s.pickle")+": no such file or directory\n") {
		t.Errorf("unwritable snapshot: exit %d, ran: %v, stderr %s", code, err == nil, &stderr)
	}

	// without torch: one line, no traceback
	write("broken/torch.py", "raise ImportError('broken install')\n")
	t.Setenv("PYTHONPATH", filepath.Join(dir, "broken"))
	stderr.Reset()
	code = run([]string{"record", "-f", filepath.Join(dir, "t.pickle"), "--", train, "0"}, nil, &bytes.Buffer{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "cannot import torch: broken install\n") || strings.Contains(stderr.String(), "Traceback") {
		t.Errorf("no torch: exit %d, stderr %s", code, &stderr)
	}

	stderr.Reset()
	if code := run([]string{"record", "--", "bash", "x.sh"}, nil, &bytes.Buffer{}, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "gpumem: error: bash is not a Python interpreter\ngpumem: hint: ") {
		t.Errorf("non-Python command: exit %d, %s", code, &stderr)
	}
}
