package main

// Messages follow fixed rules:
//   - stdout carries data (tables, JSON); stderr carries progress,
//     warnings, errors and hints.
//   - errors are one line, "gpumem: error: ...", lowercase, no final period,
//     followed where it helps by "gpumem: hint: ..." lines.
//   - colour and progress bars only on a terminal, never with NO_COLOR.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/fileout"
	"github.com/gpumem/gpumem/pkg/pipeline"
	"github.com/gpumem/gpumem/pkg/textsafe"
	"github.com/gpumem/gpumem/pkg/version"
)

// Exit codes, documented in the root command's help and the README.
const (
	exitOK         = 0
	exitFailure    = 1   // a budget exceeded (fragcheck) or a runtime failure
	exitUsage      = 2   // bad flags, arguments or input files
	exitNoGPU      = 3   // --require-gpu and no usable GPU
	exitInterrupt  = 130 // SIGINT (Ctrl-C)
	exitTerminated = 143 // SIGTERM
)

// app is what every command shares: the streams and the terminal facts.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	color          bool // colour on stdout
	errColor       bool // colour (and progress bars) on stderr
	getenv         func(string) string
	nvml           nvml.Interface // nil: the real library; tests fake the GPUs
}

// usageError marks errors in how gpumem was called (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitError carries a specific exit code with an already printed outcome
// (fragcheck's failed budget) or a message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// hintError adds hint lines to an error.
type hintError struct {
	err   error
	hints []string
}

func (e hintError) Error() string { return e.err.Error() }
func (e hintError) Unwrap() error { return e.err }

func withHint(err error, hints ...string) error { return hintError{err, hints} }

func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{withHint(err, "usage: "+cmd.UseLine())}
		}
		return nil
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func newRootCmd(a *app) *cobra.Command {
	var noColor bool
	root := &cobra.Command{
		Use:   "gpumem",
		Short: "GPU memory profiler: replay allocation traces, explain out-of-memory errors, gate fragmentation",
		Long: `gpumem replays GPU allocation traces and scripted workloads through a
replica of PyTorch's CUDA caching allocator (on a simulated device, or on a
real GPU), and reports peak memory, fragmentation and out-of-memory errors.

EXIT STATUS
  0  success
  1  runtime failure, or a memory budget exceeded (fragcheck)
  2  usage error or bad input file
  3  --require-gpu given and no usable GPU
  130 interrupted (Ctrl-C); 143 terminated (SIGTERM)`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		DisableAutoGenTag: true,
		Version:           version.Get().String(),
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if noColor || a.getenv("NO_COLOR") != "" || a.getenv("TERM") == "dumb" {
				a.color, a.errColor = false, false
			}
			sizeNotes(a, cmd)
			return nil
		},
	}
	root.PersistentFlags().BoolVar(&noColor, "no-color", false, "never use colour")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(
		newReplayCmd(a),
		newDiffCmd(a),
		newHooksCmd(a),
		newFragcheckCmd(a),
		newRunCmd(a),
		newSummaryCmd(a),
		newSweepCmd(a),
		newConvertCmd(a),
		newRecordCmd(a),
		newEstimateCmd(a),
		newExporterCmd(a),
		newVersionCmd(a),
	)
	registerCompletions(root)
	return root
}

// run is main without the process: it returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	a.color = isTerminal(stdout)
	a.errColor = isTerminal(stderr)
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := interruptible(stderr)
	defer stop()
	ctx = pipeline.WithStdin(ctx, stdin) // the trace path "-"
	err := root.ExecuteContext(ctx)
	code := printError(stderr, err)
	if code == exitInterrupt && errors.Is(context.Cause(ctx), errTerminated) {
		code = exitTerminated
	}
	return code
}

// Interrupts. SIGINT or SIGTERM cancels the context every command runs
// under: trace decoding, replays (between batches of operations) and file
// writes check it, remove their temporary files and return, and gpumem
// exits 130 (143 for SIGTERM). Should a command not return within
// stopGrace, or a second signal come, the process exits at once.
var (
	errInterrupted = errors.New("interrupted")
	errTerminated  = errors.New("terminated")
)

const stopGrace = 2 * time.Second

func interruptible(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-done:
			return
		}
		cause, code := errInterrupted, exitInterrupt
		if sig == syscall.SIGTERM {
			cause, code = errTerminated, exitTerminated
		}
		cancel(cause)
		select {
		case <-sigs:
		case <-time.After(stopGrace):
		case <-done:
			return
		}
		fmt.Fprintln(stderr, "gpumem: interrupted")
		os.Exit(code)
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// printError prints err by the rules above and maps it to an exit code.
func printError(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "gpumem: error: %s\n", textsafe.Line(ee.msg))
		}
		return ee.code
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "gpumem: interrupted")
		return exitInterrupt
	}
	msg := err.Error()
	code := exitFailure
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, fileout.ErrIsInput) || strings.HasPrefix(msg, "unknown command ") || strings.HasPrefix(msg, "unknown flag") {
		code = exitUsage
	}
	var hints []string
	var he hintError
	if errors.As(err, &he) {
		hints = he.hints
	}
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		if pe.Kind != pipeline.Failed {
			code = exitUsage
		}
		hints = append(hints, pe.Hints...)
	}
	// one line, whatever the input files put in names and values
	fmt.Fprintf(stderr, "gpumem: error: %s\n", textsafe.Line(firstLine(msg)))
	for _, h := range hints {
		fmt.Fprintf(stderr, "gpumem: hint: %s\n", textsafe.Line(h))
	}
	if code == exitUsage && strings.HasPrefix(msg, "unknown command ") {
		// cobra's suggestions follow the first line: "Did you mean this?"
		// and one tab-indented name a line.
		for _, s := range suggestions(msg) {
			fmt.Fprintf(stderr, "gpumem: hint: did you mean %s?\n", s)
		}
		fmt.Fprintln(stderr, "gpumem: hint: run 'gpumem --help' for the list of commands")
	}
	return code
}

// suggestions are the names cobra suggests in an "unknown command" error.
func suggestions(msg string) []string {
	var out []string
	for _, l := range strings.Split(msg, "\n")[1:] {
		if strings.HasPrefix(l, "\t") && strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
