package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

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
	res, err := record.Run(o, user, os.Environ(), func(argv, env []string) error { return runForwarding(a, argv, env) })
	var ue *record.UsageError
	if errors.As(err, &ue) {
		if ue.Hint != "" {
			return withHint(usageError{ue}, ue.Hint)
		}
		return usageError{ue}
	}
	var ce childExit
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
	code := ce.ws.ExitStatus()
	if ce.ws.Signaled() {
		code = 128 + int(ce.ws.Signal())
	}
	return &exitError{code: code}
}

// childExit is how the recorded command ended, when not with status 0.
type childExit struct{ ws syscall.WaitStatus }

func (e childExit) Error() string { return fmt.Sprintf("the command ended with %v", e.ws) }

// recordKillGrace is how long the script has after a second signal before
// its process group is killed; a third signal kills it at once.
const recordKillGrace = 5 * time.Second

// forwarded are the signals record passes to the script.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// runForwarding runs argv on gpumem's own stdio, in a process group of
// its own, and waits for it whatever gpumem is sent: SIGINT, SIGTERM and
// SIGHUP go to the script's group (so a kill -INT of gpumem alone reaches
// the script, which then writes its snapshot); a second signal gives it
// recordKillGrace more, then SIGKILL; a third kills it at once. On a
// terminal the script's group is the foreground one, so Ctrl-C reaches
// it once, straight from the terminal, and it may read the terminal
// (pdb). As PID 1 of a container gpumem also reaps the orphans that the
// kernel gives it. The error is a childExit unless the script exited 0.
func runForwarding(a *app, argv, env []string) error {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = env
	c.Stdin, c.Stdout, c.Stderr = a.stdin, a.stdout, a.stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	tty := foregroundTTY(a.stdin)
	if tty >= 0 {
		c.SysProcAttr.Foreground, c.SysProcAttr.Ctty = true, tty
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if a.releaseSignals != nil {
		a.releaseSignals() // ours from now on: the root handler would exit early
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	if tty >= 0 {
		defer takeTerminalBack(tty)
	}
	pid := c.Process.Pid
	done := make(chan error, 1)
	if os.Getpid() == 1 {
		go func() { done <- reapUntil(pid) }()
	} else {
		go func() { done <- c.Wait() }()
	}
	var kill <-chan time.Time
	for n := 0; ; {
		select {
		case s := <-sigs:
			n++
			switch n {
			case 1:
				fmt.Fprintf(a.stderr, "gpumem: passing %v to the script and waiting for it (again to stop it)\n", s)
				syscall.Kill(-pid, s.(syscall.Signal))
			case 2:
				fmt.Fprintf(a.stderr, "gpumem: killing the script in %v (again to kill it now)\n", recordKillGrace)
				kill = time.After(recordKillGrace)
			default:
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		case <-kill:
			syscall.Kill(-pid, syscall.SIGKILL)
		case err := <-done:
			if ce, ok := err.(childExit); ok && ce.ws.Exited() && ce.ws.ExitStatus() == 0 {
				return nil
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
					return childExit{ws}
				}
			}
			return err
		}
	}
}

// foregroundTTY is the descriptor of stdin when it is the terminal whose
// foreground process group is gpumem's, else -1.
func foregroundTTY(stdin io.Reader) int {
	f, ok := stdin.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return -1
	}
	fg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	if err != nil || fg != syscall.Getpgrp() {
		return -1
	}
	return int(f.Fd())
}

// takeTerminalBack makes gpumem's process group the terminal's foreground
// again, as a shell does when a job ends; from the background that takes
// SIGTTOU ignored.
func takeTerminalBack(tty int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, syscall.Getpgrp())
}

// reapUntil waits for child as PID 1 must wait: it reaps every process
// that ends, the orphans the kernel hands to PID 1 among them, until the
// child ends, and returns the child's status as a childExit. (Its stdio
// are gpumem's own files, so exec.Cmd has nothing left to collect.)
func reapUntil(child int) error {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil:
			return err
		case pid == child:
			return childExit{ws}
		}
	}
}
