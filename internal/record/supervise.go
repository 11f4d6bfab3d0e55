package record

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
	"golang.org/x/sys/unix"
)

// This file runs the recorded command as a supervisor: in a process group
// of its own, on the caller's terminal, with the caller's signals passed
// on to it and waited for (docs: the README's Reliability section).

// ChildExit is how the recorded command ended, when not with status 0.
type ChildExit struct{ ws syscall.WaitStatus }

func (e ChildExit) Error() string { return fmt.Sprintf("the command ended with %v", e.ws) }

// Code is the exit status a shell gives for the command's end: its own,
// or 128 + the signal that killed it.
func (e ChildExit) Code() int {
	if e.ws.Signaled() {
		return 128 + int(e.ws.Signal())
	}
	return e.ws.ExitStatus()
}

// Supervisor runs the recorded command on the caller's stdio and stands
// between it and the signals the caller is sent (see Run).
type Supervisor struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Release, when not nil, is called once the supervisor has taken over
	// SIGINT, SIGTERM and SIGHUP (a caller's own handler would exit early).
	Release func()
	// Say tells the user what the supervisor does with a signal.
	Say func(msg string)
}

// KillGrace is how long the script has after a second signal before
// its process group is killed; a third signal kills it at once.
const KillGrace = 5 * time.Second

// forwarded are the signals record passes to the script.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// Run runs argv on the supervisor's stdio, in a process group of
// its own, and waits for it whatever gpumem is sent: SIGINT, SIGTERM and
// SIGHUP go to the script's group (so a kill -INT of gpumem alone reaches
// the script, which then writes its snapshot); a second signal gives it
// KillGrace more, then SIGKILL; a third kills it at once. On a
// terminal the script's group is the foreground one, so Ctrl-C reaches
// it once, straight from the terminal, and it may read the terminal
// (pdb). As PID 1 of a container gpumem also reaps the orphans that the
// kernel gives it. The error is a ChildExit unless the script exited 0.
func (sv Supervisor) Run(argv, env []string) error {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = env
	c.Stdin, c.Stdout, c.Stderr = sv.Stdin, sv.Stdout, sv.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	tty := foregroundTTY(sv.Stdin)
	if tty >= 0 {
		c.SysProcAttr.Foreground, c.SysProcAttr.Ctty = true, tty
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if sv.Release != nil {
		sv.Release() // ours from now on: the caller's handler would exit early
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
				sv.Say(fmt.Sprintf("passing %v to the script and waiting for it (again to stop it)", s))
				syscall.Kill(-pid, s.(syscall.Signal))
			case 2:
				sv.Say(fmt.Sprintf("killing the script in %v (again to kill it now)", KillGrace))
				kill = time.After(KillGrace)
			default:
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		case <-kill:
			syscall.Kill(-pid, syscall.SIGKILL)
		case err := <-done:
			if ce, ok := err.(ChildExit); ok && ce.ws.Exited() && ce.ws.ExitStatus() == 0 {
				return nil
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
					return ChildExit{ws}
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
// child ends, and returns the child's status as a ChildExit. (Its stdio
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
			return ChildExit{ws}
		}
	}
}
