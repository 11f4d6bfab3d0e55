// Package record runs a PyTorch program with the CUDA caching allocator's
// history recording on, so that it writes memory snapshots gpumem can
// replay. One script runs under record.py (built in here); under a launcher
// (torchrun, accelerate, deepspeed) every rank records itself through a
// sitecustomize on PYTHONPATH.
//
// The package prepares the command and its environment and reads back what
// was written; running the process is the caller's [Runner], so that the
// command line can forward signals and tests can fake it.
package record

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RecordPy is the recording wrapper for one script; python/gpumem_record.py is a
// link to the same file for use without gpumem.
//
//go:embed record.py
var RecordPy []byte

// Options say what to record.
type Options struct {
	Snapshot   string        // the snapshot file (NAME.rank{R}.pickle under a launcher)
	MaxEntries int           // keep at most the last N allocator events
	Stacks     string        // python, or all (also C++)
	Every      time.Duration // launchers: dump every rank this often; 0: never
}

// UsageError is a mistake in the options or the command to record.
type UsageError struct {
	Msg  string
	Hint string // a line that says what to do instead; may be empty
}

func (e *UsageError) Error() string { return e.Msg }

func usage(msg string) error { return &UsageError{Msg: msg} }

// Runner runs argv with the environment env to its end and returns what
// exec.Cmd.Wait would (nil, an *exec.ExitError, or why it did not start).
type Runner func(argv, env []string) error

// Result says what a recording wrote.
type Result struct {
	Launched bool
	// Written are the snapshots written during the run: the one snapshot,
	// or the ranks' in rank order.
	Written []string
	// Glob replays all the ranks' snapshots (launchers only).
	Glob string
	// Failed are the dumps that could not be written, as "FILE (why):
	// error", in the order they failed; the file keeps its earlier
	// snapshot, if it had one.
	Failed []string
	// LastFailed says whether the last dump of some file failed: what the
	// file holds is older than the run's end (or nothing).
	LastFailed bool
}

// Check validates o against the command it will record.
func (o Options) Check(user []string) error {
	if o.MaxEntries <= 0 {
		return usage(fmt.Sprintf("--max-entries: want a positive number, not %d", o.MaxEntries))
	}
	if o.Stacks != "python" && o.Stacks != "all" {
		return usage(fmt.Sprintf("--stacks: want python or all, not %q", o.Stacks))
	}
	if o.Every < 0 || (o.Every > 0 && !IsLauncher(user)) {
		return usage("--every is for launchers (torchrun, accelerate, deepspeed); one script is dumped at exit and at its first OOM")
	}
	return checkWritable(o.Snapshot)
}

// checkWritable refuses a snapshot path whose folder cannot take a new
// file, or that is a folder, so that the run fails now rather than after
// hours of training. Under a launcher the ranks write beside it.
func checkWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usage(fmt.Sprintf("-f/--file: %s is a folder", path))
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".gpumem-record-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return usage(fmt.Sprintf("-f/--file: cannot write %s: %v", path, err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// Outcome is the line that tells what the run wrote, and whether it is a
// warning (nothing written).
func (r Result) Outcome(snapshot string) (line string, warning bool) {
	switch {
	case r.Launched && len(r.Written) > 0:
		return fmt.Sprintf("wrote %d rank snapshots (%s); replay them with: gpumem replay '%s'",
			len(r.Written), strings.Join(r.Written, ", "), r.Glob), false
	case r.Launched:
		return fmt.Sprintf("no rank wrote %s (ranks are the Python processes with RANK set)", r.Glob), true
	case len(r.Written) > 0 && r.LastFailed:
		return fmt.Sprintf("%s holds an earlier snapshot of this run; replay it with: gpumem replay %s", snapshot, snapshot), true
	case len(r.Written) > 0:
		return fmt.Sprintf("wrote %s; replay it with: gpumem replay %s", snapshot, snapshot), false
	}
	return fmt.Sprintf("no snapshot was written to %s", snapshot), true
}

// statusFile is the file in the run's private folder to which record.py
// and gpumem_hooks.py append one line per dump: "ok|fail TAB file TAB
// why"; the environment names it as GPUMEM_RECORD_STATUS.
const statusFile = "status"

// readStatus reads the dumps' outcomes: the failures, and whether the
// last dump of some file failed. A missing file says nothing.
func readStatus(path string) (failed []string, lastFailed bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	last := map[string]bool{} // file -> its last dump failed
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || (f[0] != "ok" && f[0] != "fail") {
			continue
		}
		last[f[1]] = f[0] == "fail"
		if f[0] == "fail" {
			failed = append(failed, fmt.Sprintf("%s (%s)", f[1], f[2]))
		}
	}
	for _, f := range last {
		lastFailed = lastFailed || f
	}
	return failed, lastFailed
}

// Run records the user's command: it writes the Python side into a private
// temporary folder (so nothing else on sys.path[0] shadows a module), runs
// the command through run with env extended, and reports the snapshots
// written. The error is run's, which carries the program's exit status.
func Run(o Options, user, env []string, run Runner) (Result, error) {
	if err := o.Check(user); err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "gpumem-record-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	res := Result{Launched: IsLauncher(user)}
	argv := user
	if res.Launched {
		if env, err = launcherEnv(dir, o, env); err != nil {
			return res, err
		}
	} else {
		script := filepath.Join(dir, "record.py")
		if err := os.WriteFile(script, RecordPy, 0o600); err != nil {
			return res, err
		}
		if argv, err = Argv(user, script, o); err != nil {
			return res, err
		}
	}
	status := filepath.Join(dir, statusFile)
	if err := os.WriteFile(status, nil, 0o600); err != nil {
		return res, err
	}
	env = append(slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "GPUMEM_RECORD_STATUS=")
	}), "GPUMEM_RECORD_STATUS="+status)
	start := time.Now()
	runErr := run(argv, env)
	res.Failed, res.LastFailed = readStatus(status)
	if res.Launched {
		res.Written, res.Glob = rankSnapshots(o.Snapshot, start)
	} else if writtenSince(o.Snapshot, start) {
		res.Written = []string{o.Snapshot}
	}
	return res, runErr
}

// writtenSince reports whether path was written during a run that began at
// start (a second's slack for coarse file times).
func writtenSince(path string, start time.Time) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.ModTime().Before(start.Add(-time.Second))
}

// pythonName matches interpreter names: python, python3, python3.12;
// compiled at its first use, not at every process start.
var pythonName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^python[0-9.]*$`) })

// Argv turns the user's command into one that runs script (record.py on
// disk) in front of it.
func Argv(user []string, script string, o Options) ([]string, error) {
	py, rest := user[0], user[1:]
	if strings.HasSuffix(py, ".py") {
		py, rest = "python3", user
	} else if !pythonName().MatchString(filepath.Base(py)) {
		return nil, &UsageError{Msg: py + " is not a Python interpreter",
			Hint: "give the interpreter and the script: gpumem record -- python3 train.py ARGS"}
	}
	argv := []string{py}
	// interpreter options go before record.py, the rest after it
	i := 0
	for ; i < len(rest); i++ {
		a := rest[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" || a == "-m" || strings.HasPrefix(a, "-m") {
			break
		}
		if a == "-c" || strings.HasPrefix(a, "-c") {
			break
		}
		argv = append(argv, a)
		if (a == "-X" || a == "-W") && i+1 < len(rest) {
			i++
			argv = append(argv, rest[i])
		}
	}
	argv = append(argv, script, "-o", o.Snapshot, "--max-entries", strconv.Itoa(o.MaxEntries), "--stacks", o.Stacks)
	switch {
	case i < len(rest) && rest[i] == "-m":
		if i+1 >= len(rest) {
			return nil, usage("-m needs a module name")
		}
		return append(append(argv, "-m", rest[i+1]), rest[i+2:]...), nil
	case i < len(rest) && strings.HasPrefix(rest[i], "-m"):
		return append(append(argv, "-m", rest[i][2:]), rest[i+1:]...), nil
	case i < len(rest) && rest[i] == "-c":
		if i+1 >= len(rest) {
			return nil, usage("-c needs the code to run")
		}
		return append(append(argv, "-c", rest[i+1]), rest[i+2:]...), nil
	case i < len(rest) && strings.HasPrefix(rest[i], "-c"):
		return append(append(argv, "-c", rest[i][2:]), rest[i+1:]...), nil
	case i < len(rest) && rest[i] == "--":
		i++
	}
	if i >= len(rest) {
		return nil, usage("no script to run: gpumem record -- python3 train.py ARGS")
	}
	return append(append(argv, "--"), rest[i:]...), nil
}
