package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/record"
	"github.com/gpumem/gpumem/pkg/textsafe"
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

SIGINT, SIGTERM and SIGHUP sent to gpumem go to the script's process
group, and gpumem waits for the script to write its snapshot and exit,
however long that takes; a second signal kills the script 5 s later, a
third at once. A snapshot whose last dump failed (a full disk) keeps the
earlier one and makes the exit status 1 when the script's was 0.

It is python/gpumem_record.py, built into gpumem: 'python3 python/gpumem_record.py -o
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
	sup := record.Supervisor{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr, Release: a.releaseSignals,
		Say: func(msg string) { fmt.Fprintf(a.stderr, "gpumem: %s\n", msg) }}
	res, err := record.Run(o, user, os.Environ(), sup.Run)
	var ue *record.UsageError
	if errors.As(err, &ue) {
		if ue.Hint != "" {
			return withHint(usageError{ue}, ue.Hint)
		}
		return usageError{ue}
	}
	var ce record.ChildExit
	if err != nil && !errors.As(err, &ce) {
		return err // the command did not start
	}
	// a dump that failed is an error when it was the file's last (what
	// the file holds is not the run's end), else a warning
	level := "warning"
	if res.LastFailed {
		level = "error"
	}
	for _, f := range res.Failed {
		fmt.Fprintf(a.stderr, "gpumem: %s: could not write %s\n", level, textsafe.Line(f))
	}
	if line, warning := res.Outcome(o.Snapshot); warning {
		fmt.Fprintf(a.stderr, "gpumem: warning: %s\n", textsafe.Line(line))
	} else {
		fmt.Fprintf(a.stderr, "gpumem: %s\n", textsafe.Line(line))
	}
	if err == nil {
		if res.LastFailed {
			return &exitError{code: exitFailure}
		}
		return nil
	}
	return &exitError{code: ce.Code()}
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
