package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/record"
	"github.com/gpumem/gpumem/internal/textsafe"
)

func newRecordCmd(a *app) *cobra.Command {
	var o record.Options
	var output, oldFile string // -o/--output and --snapshot: older spellings of -f/--file
	cmd := &cobra.Command{
		Use:                   "record [-f FILE] [--max-entries N] [--every D] -- python3 SCRIPT [ARGS...] | LAUNCHER ...",
		DisableFlagsInUseLine: true,
		Short:                 "Run a PyTorch script and record a memory snapshot of it",
		Long:                  helpText("record"),
		Example:               helpText("record.examples"),
		Args:                  usageArgs(cobra.MinimumNArgs(1)),
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
