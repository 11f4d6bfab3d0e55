package estimate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Exec is the Runner of an estimate run from the command line: the
// script reads stdin, and writes its stdout and stderr on w (the report
// owns stdout), with the emulator's pipes as its descriptors 3 and 4; a
// SIGTERM sent to gpumem is passed on, and the script's end awaited.
func Exec(stdin io.Reader, w io.Writer) Runner {
	return func(argv, env []string, files []*os.File) error {
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = env
		c.Stdin, c.Stdout, c.Stderr = stdin, w, w
		c.ExtraFiles = files
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
}

// ExitCode is the exit status a shell gives for a script that ended with
// err (an *exec.ExitError): its own, or 128 + the signal that killed it;
// ok is false for any other error (nil included).
func ExitCode(err error) (code int, ok bool) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	code = ee.ExitCode()
	if ws, isWS := ee.Sys().(syscall.WaitStatus); isWS && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return code, true
}
