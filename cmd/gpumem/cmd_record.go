package main

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// recordPy is the recording wrapper, built in so that an installed binary
// can record; scripts/record.py is a link to the same file for use without
// gpumem.
//
//go:embed record.py
var recordPy []byte

type recordOpts struct {
	snapshot   string // --file/-f
	oldFile    string // --snapshot, the former name of --file
	output     string // -o/--output, an older one
	maxEntries int
	stacks     string
	every      time.Duration // launchers: dump every rank this often
}

func newRecordCmd(a *app) *cobra.Command {
	o := &recordOpts{}
	cmd := &cobra.Command{
		Use:                   "record [-f FILE] [--max-entries N] [--every D] -- python3 SCRIPT [ARGS...] | LAUNCHER ...",
		DisableFlagsInUseLine: true,
		Short:                 "Run a PyTorch script and record a memory snapshot of it",
		Long: `Run an unmodified PyTorch training script with the CUDA caching allocator's
history recording on (torch.cuda.memory._record_memory_history) and write a
memory snapshot (torch.cuda.memory._dump_snapshot) at the first
out-of-memory error and at exit. Replay the snapshot with 'gpumem replay'.

The command is a Python interpreter with a script, '-m module' or '-c CODE',
and its arguments; a bare script.py runs under python3. Interpreter options before
the script (-u, -X ..., -W ...) are kept. The exit status is the script's.

It is scripts/record.py, built into gpumem: 'python3 scripts/record.py -o
FILE -- train.py ARGS' does the same.

Under a launcher (torchrun, python -m torch.distributed.run, accelerate
launch, deepspeed) every Python process it starts with a RANK records
itself, through a sitecustomize on PYTHONPATH, and writes
NAME.rank{R}.pickle (FILE without .pickle, then the rank): at exit, at its
first out-of-memory error, on SIGUSR1 to that rank, and with --every,
periodically. 'gpumem replay NAME.rank*.pickle' replays them as one run.`,
		Example: `  gpumem record -- python3 train.py --epochs 1
  gpumem record -f oom.pickle --max-entries 200000 -- python3 -m mypkg.train
  gpumem replay oom.pickle --device-memory 24GiB
  gpumem record -f ddp.pickle -- torchrun --nproc_per_node 8 train.py
  gpumem replay 'ddp.rank*.pickle'`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := invoked(cmd)
			if err := useDeprecated(a, in, "output", o.output, "file", "-f/--file", &o.snapshot); err != nil {
				return err
			}
			if err := useDeprecated(a, in, "snapshot", o.oldFile, "file", "-f/--file", &o.snapshot); err != nil {
				return err
			}
			return runRecord(a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // the script's own flags are not ours
	fl.StringVarP(&o.snapshot, "file", "f", "snapshot.pickle", "write the snapshot to `FILE`")
	// -o/--output is a format in every other command; recorded command
	// lines may still use it, and --snapshot
	deprecatedFlag(cmd, &o.output, "output", "o", "file")
	deprecatedFlag(cmd, &o.oldFile, "snapshot", "", "file")
	fl.IntVar(&o.maxEntries, "max-entries", 1_000_000, "keep at most the last `N` allocator events")
	fl.StringVar(&o.stacks, "stacks", "python", "stack traces to record: python, or all (also C++; slower)")
	fl.DurationVar(&o.every, "every", 0, "under a launcher, also dump every rank this often (e.g. 10m)")
	return cmd
}

// pythonName matches interpreter names: python, python3, python3.12.
var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

// recordArgv turns the user's command into one that runs script (the
// record.py on disk) in front of it.
func recordArgv(user []string, script string, o *recordOpts) ([]string, error) {
	py, rest := user[0], user[1:]
	if strings.HasSuffix(py, ".py") {
		py, rest = "python3", user
	} else if !pythonName.MatchString(filepath.Base(py)) {
		return nil, withHint(usageError{fmt.Errorf("%s is not a Python interpreter", py)},
			"give the interpreter and the script: gpumem record -- python3 train.py ARGS")
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
	argv = append(argv, script, "-o", o.snapshot, "--max-entries", strconv.Itoa(o.maxEntries), "--stacks", o.stacks)
	switch {
	case i < len(rest) && rest[i] == "-m":
		if i+1 >= len(rest) {
			return nil, usageError{errors.New("-m needs a module name")}
		}
		return append(append(argv, "-m", rest[i+1]), rest[i+2:]...), nil
	case i < len(rest) && strings.HasPrefix(rest[i], "-m"):
		return append(append(argv, "-m", rest[i][2:]), rest[i+1:]...), nil
	case i < len(rest) && rest[i] == "-c":
		if i+1 >= len(rest) {
			return nil, usageError{errors.New("-c needs the code to run")}
		}
		return append(append(argv, "-c", rest[i+1]), rest[i+2:]...), nil
	case i < len(rest) && strings.HasPrefix(rest[i], "-c"):
		return append(append(argv, "-c", rest[i][2:]), rest[i+1:]...), nil
	case i < len(rest) && rest[i] == "--":
		i++
	}
	if i >= len(rest) {
		return nil, usageError{errors.New("no script to run: gpumem record -- python3 train.py ARGS")}
	}
	return append(append(argv, "--"), rest[i:]...), nil
}

// checkWritable refuses a snapshot path whose folder cannot take a new
// file, or that is a folder. Under a launcher the ranks write beside it.
func checkWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usageError{fmt.Errorf("-f/--file: %s is a folder", path)}
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".gpumem-record-*")
	if err != nil {
		return usageError{fmt.Errorf("-f/--file: cannot write %s: %w", path, unwrapPath(err))}
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// unwrapPath drops the temporary file's name from a *PathError.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func runRecord(a *app, o *recordOpts, user []string) error {
	if o.maxEntries <= 0 {
		return usageError{fmt.Errorf("--max-entries: want a positive number, not %d", o.maxEntries)}
	}
	if o.stacks != "python" && o.stacks != "all" {
		return usageError{fmt.Errorf("--stacks: want python or all, not %q", o.stacks)}
	}
	// a snapshot that cannot be written fails now, not after the run
	if err := checkWritable(o.snapshot); err != nil {
		return err
	}
	// a private folder, so nothing else on sys.path[0] shadows a module
	dir, err := os.MkdirTemp("", "gpumem-record-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	launched := isLauncher(user)
	if o.every < 0 || (o.every > 0 && !launched) {
		return usageError{errors.New("--every is for launchers (torchrun, accelerate, deepspeed); one script is dumped at exit and at its first OOM")}
	}
	argv, env := user, os.Environ()
	if launched {
		if env, err = launcherEnv(dir, o, env); err != nil {
			return err
		}
	} else {
		script := filepath.Join(dir, "record.py")
		if err := os.WriteFile(script, recordPy, 0o600); err != nil {
			return err
		}
		if argv, err = recordArgv(user, script, o); err != nil {
			return err
		}
	}

	c := exec.Command(argv[0], argv[1:]...)
	c.Env = env
	c.Stdin, c.Stdout, c.Stderr = a.stdin, a.stdout, a.stderr
	start := time.Now()
	if err := c.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	// Ctrl-C reaches the child from the terminal; a SIGTERM sent to gpumem
	// alone is passed on, so the script still writes its snapshot.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var waitErr error
wait:
	for {
		select {
		case s := <-term:
			c.Process.Signal(s)
		case waitErr = <-done:
			break wait
		}
	}

	if launched {
		if ranks, glob := rankSnapshots(o.snapshot, start); len(ranks) > 0 {
			fmt.Fprintf(a.stderr, "gpumem: wrote %d rank snapshots (%s); replay them with: gpumem replay '%s'\n",
				len(ranks), strings.Join(ranks, ", "), glob)
		} else {
			fmt.Fprintf(a.stderr, "gpumem: warning: no rank wrote %s (ranks are the Python processes with RANK set)\n", glob)
		}
	} else if fi, err := os.Stat(o.snapshot); err == nil && !fi.ModTime().Before(start.Add(-time.Second)) {
		fmt.Fprintf(a.stderr, "gpumem: wrote %s; replay it with: gpumem replay %s\n", o.snapshot, o.snapshot)
	} else {
		fmt.Fprintf(a.stderr, "gpumem: warning: no snapshot was written to %s\n", o.snapshot)
	}
	if waitErr == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return waitErr
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return &exitError{code: code}
}
