package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/record"
)

func newRecordCmd(a *app) *cobra.Command {
	var o record.Options
	var output, oldFile string // -o/--output and --snapshot: older spellings of -f/--file
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
			if err := useDeprecated(a, in, "output", output, "file", "-f/--file", &o.Snapshot); err != nil {
				return err
			}
			if err := useDeprecated(a, in, "snapshot", oldFile, "file", "-f/--file", &o.Snapshot); err != nil {
				return err
			}
			return runRecord(a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // the script's own flags are not ours
	fl.StringVarP(&o.Snapshot, "file", "f", "snapshot.pickle", "write the snapshot to `FILE`")
	// -o/--output is a format in every other command; recorded command
	// lines may still use it, and --snapshot
	deprecatedFlag(cmd, &output, "output", "o", "file")
	deprecatedFlag(cmd, &oldFile, "snapshot", "", "file")
	fl.IntVar(&o.MaxEntries, "max-entries", 1_000_000, "keep at most the last `N` allocator events")
	fl.StringVar(&o.Stacks, "stacks", "python", "stack traces to record: python, or all (also C++; slower)")
	fl.DurationVar(&o.Every, "every", 0, "under a launcher, also dump every rank this often (e.g. 10m)")
	return cmd
}

func runRecord(a *app, o record.Options, user []string) error {
	if err := tempDirUsable(); err != nil {
		return err
	}
	res, err := record.Run(o, user, os.Environ(), func(argv, env []string) error { return runForwarding(a, argv, env) })
	var ue *record.UsageError
	if errors.As(err, &ue) {
		if ue.Hint != "" {
			return withHint(usageError{ue}, ue.Hint)
		}
		return usageError{ue}
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return err // the command did not start
	}
	if line, warning := res.Outcome(o.Snapshot); warning {
		fmt.Fprintf(a.stderr, "gpumem: warning: %s\n", line)
	} else {
		fmt.Fprintf(a.stderr, "gpumem: %s\n", line)
	}
	if ee == nil {
		return nil
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return &exitError{code: code}
}

// tempDirUsable checks the folder record writes its helper scripts in,
// so that a bad TMPDIR is named as such, not as a bare "stat" error.
func tempDirUsable() error {
	dir := os.TempDir()
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = errors.New("not a folder")
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return usageError{withHint(fmt.Errorf("the temporary folder %s (TMPDIR) is not usable: %w", dir, err), "set TMPDIR to a folder you can write to, or unset it")}
	}
	return nil
}

// runForwarding runs argv on gpumem's own stdio. Ctrl-C reaches the child
// from the terminal; a SIGTERM sent to gpumem alone is passed on, so the
// script still writes its snapshot.
func runForwarding(a *app, argv, env []string) error {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = env
	c.Stdin, c.Stdout, c.Stderr = a.stdin, a.stdout, a.stderr
	if err := c.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	for {
		select {
		case s := <-term:
			c.Process.Signal(s)
		case err := <-done:
			return err
		}
	}
}
