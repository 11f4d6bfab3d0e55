package record

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRecordScriptInSync(t *testing.T) {
	src, err := os.ReadFile("../../python/gpumem_record.py")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, RecordPy) {
		t.Fatal("python/gpumem_record.py no longer shows the built-in internal/record/record.py")
	}
}

func TestHooksScriptInSync(t *testing.T) {
	src, err := os.ReadFile("../../python/gpumem_hooks.py")
	if err != nil || !bytes.Equal(src, HooksPy) {
		t.Fatalf("python/gpumem_hooks.py no longer shows the built-in internal/record/gpumem_hooks.py (%v)", err)
	}
}

func TestRecordArgv(t *testing.T) {
	o := Options{Snapshot: "s.pickle", MaxEntries: 10, Stacks: "python"}
	ours := []string{"R", "-o", "s.pickle", "--max-entries", "10", "--stacks", "python"}
	for _, c := range []struct {
		user []string
		want []string // after the interpreter and its options: ours, then this
		pre  []string // interpreter and its options
	}{
		{[]string{"python3", "train.py", "--lr", "1"}, []string{"--", "train.py", "--lr", "1"}, []string{"python3"}},
		{[]string{"train.py", "-o", "x"}, []string{"--", "train.py", "-o", "x"}, []string{"python3"}},
		{[]string{"/usr/bin/python3.12", "-u", "-X", "dev", "-Wignore", "t.py"}, []string{"--", "t.py"}, []string{"/usr/bin/python3.12", "-u", "-X", "dev", "-Wignore"}},
		{[]string{"python", "-m", "pkg.train", "-v"}, []string{"-m", "pkg.train", "-v"}, []string{"python"}},
		{[]string{"python", "-mpkg", "a"}, []string{"-m", "pkg", "a"}, []string{"python"}},
		{[]string{"python3", "--", "-weird.py"}, []string{"--", "-weird.py"}, []string{"python3"}},
		{[]string{"python3", "-u", "-c", "print(1)", "a"}, []string{"-c", "print(1)", "a"}, []string{"python3", "-u"}},
		{[]string{"python3", "-cprint(1)"}, []string{"-c", "print(1)"}, []string{"python3"}},
	} {
		got, err := Argv(c.user, "R", o)
		want := slices.Concat(c.pre, ours, c.want)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q:\n got %q, %v\nwant %q", c.user, got, err, want)
		}
	}
	for _, c := range []struct {
		user []string
		want string
	}{
		{[]string{"bash", "train.sh"}, "bash is not a Python interpreter"},
		{[]string{"python3"}, "no script to run: gpumem record -- python3 train.py ARGS"},
		{[]string{"python3", "-u"}, "no script to run: gpumem record -- python3 train.py ARGS"},
		{[]string{"python3", "-m"}, "-m needs a module name"},
		{[]string{"python3", "-c"}, "-c needs the code to run"},
	} {
		if _, err := Argv(c.user, "R", o); err == nil || err.Error() != c.want {
			t.Errorf("%q: got %v, want %s", c.user, err, c.want)
		}
	}
}

func TestIsLauncher(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{"torchrun", "--nproc_per_node", "2", "train.py"}, true},
		{[]string{"/opt/bin/accelerate", "launch", "train.py"}, true},
		{[]string{"deepspeed", "train.py"}, true},
		{[]string{"python3", "-u", "-m", "torch.distributed.run", "train.py"}, true},
		{[]string{"python", "-mtorch.distributed.launch", "train.py"}, true},
		{[]string{"python3", "-m", "pkg.train"}, false},
		{[]string{"python3", "train.py", "-m", "torch.distributed.run"}, false},
		{[]string{"train.py"}, false},
	} {
		if got := IsLauncher(c.argv); got != c.want {
			t.Errorf("IsLauncher(%q) = %v, want %v", c.argv, got, c.want)
		}
	}
}

// Run with a fake runner: the one script runs behind record.py with our
// options, and a snapshot the "program" writes is reported; a launcher
// gets the environment that makes its ranks record, and their files come
// back in rank order.
func TestRunFake(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "s.pickle")
	o := Options{Snapshot: snap, MaxEntries: 5, Stacks: "python"}
	fail := errors.New("exit 3")
	res, err := Run(o, []string{"python3", "train.py"}, []string{"A=1"}, func(argv, env []string) error {
		if len(argv) < 3 || filepath.Base(argv[1]) != "record.py" || !slices.Contains(argv, "train.py") {
			t.Errorf("argv %q", argv)
		}
		if b, err := os.ReadFile(argv[1]); err != nil || !bytes.Equal(b, RecordPy) {
			t.Errorf("record.py on disk: %v", err)
		}
		if len(env) != 2 || env[0] != "A=1" || !strings.HasPrefix(env[1], "GPUMEM_RECORD_STATUS="+filepath.Dir(argv[1])) {
			t.Errorf("env %q", env)
		}
		return errors.Join(os.WriteFile(snap, nil, 0o600), fail)
	})
	if !errors.Is(err, fail) || res.Launched || !slices.Equal(res.Written, []string{snap}) {
		t.Errorf("one script: %+v, %v", res, err)
	}

	o.Every = time.Minute
	res, err = Run(o, []string{"torchrun", "train.py"}, []string{"PYTHONPATH=/u", "GPUMEM_RECORDING_PID=9"}, func(argv, env []string) error {
		var path string
		for _, kv := range env {
			if p, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok {
				path = p
			}
			if strings.HasPrefix(kv, "GPUMEM_RECORDING_PID=") {
				t.Errorf("a stale %s reaches the ranks", kv)
			}
		}
		site, err := os.ReadFile(filepath.Join(strings.Split(path, ":")[0], "sitecustomize.py"))
		if !strings.HasSuffix(path, ":/u") || err != nil || !bytes.Equal(site, recordSitePy) {
			t.Errorf("PYTHONPATH %q: %v", path, err)
		}
		if !slices.Contains(env, "GPUMEM_RECORD_EVERY=60") || !slices.Contains(env, "GPUMEM_RECORD_SNAPSHOT="+snap) {
			t.Errorf("env %q", env)
		}
		for _, r := range []string{"10", "2", "0.step5"} {
			os.WriteFile(filepath.Join(dir, "s.rank"+r+".pickle"), nil, 0o600)
		}
		return nil
	})
	want := []string{filepath.Join(dir, "s.rank2.pickle"), filepath.Join(dir, "s.rank10.pickle")}
	if err != nil || !res.Launched || !slices.Equal(res.Written, want) || res.Glob != filepath.Join(dir, "s.rank*.pickle") {
		t.Errorf("launcher: %+v, %v", res, err)
	}

	if _, err := Run(o, []string{"python3", "train.py"}, nil, nil); err == nil || !strings.HasPrefix(err.Error(), "--every is for launchers") {
		t.Errorf("--every without a launcher: %v", err)
	}
}
