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
	"sync"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/suggest"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/version"
	"github.com/gpumem/gpumem/pkg/trace"
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
	mem            *membudget.Guard // the --max-memory watchdog (memory.go)
	nvml           nvml.Interface   // nil: the real library; tests fake the GPUs
	// releaseSignals hands SIGINT and SIGTERM over to a command that
	// handles them itself (record, which passes them to its script and
	// waits): the root handler then no longer cancels or exits. Call it
	// after signal.Notify of the command's own channel.
	releaseSignals func()
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

// subcommands are gpumem's commands by name, each with the function that
// makes it.
var subcommands = []struct {
	name string
	make func(*app) *cobra.Command
}{
	{"replay", newReplayCmd},
	{"diff", newDiffCmd},
	{"hooks", newHooksCmd},
	{"fragcheck", newFragcheckCmd},
	{"run", newRunCmd},
	{"summary", newSummaryCmd},
	{"sweep", newSweepCmd},
	{"convert", newConvertCmd},
	{"record", newRecordCmd},
	{"estimate", newEstimateCmd},
	{"exporter", newExporterCmd},
	{"version", newVersionCmd},
}

// subcommandsFor makes the command that args name first, alone: making
// the other eleven (their flags and help texts) was about 0.45M
// instructions, 8% of every process start. Any other args (none, a flag
// first, help, completion, a misspelt name) get every command, which
// cobra's listings, completions and suggestions need.
func subcommandsFor(a *app, args []string) []*cobra.Command {
	for _, c := range subcommands {
		if len(args) > 0 && args[0] == c.name {
			return []*cobra.Command{c.make(a)}
		}
	}
	all := make([]*cobra.Command, len(subcommands))
	for i, c := range subcommands {
		all[i] = c.make(a)
	}
	return all
}

// newRootCmd makes the root command and its subcommands: with args (the
// process's arguments), only the one they name, if they name one.
func newRootCmd(a *app, args ...string) *cobra.Command {
	var noColor bool
	root := &cobra.Command{
		Use:               "gpumem",
		Short:             "GPU memory profiler: replay allocation traces, explain out-of-memory errors, gate fragmentation",
		Long:              helpText("gpumem"),
		SilenceUsage:      true,
		SilenceErrors:     true,
		DisableAutoGenTag: true,
		Version:           version.Get().String(),
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if noColor || a.getenv("NO_COLOR") != "" || a.getenv("TERM") == "dumb" {
				a.color, a.errColor = false, false
			}
			sizeNotes(a, cmd)
			a.applyReadFlags(cmd)
			return nil
		},
	}
	root.PersistentFlags().BoolVar(&noColor, "no-color", false, "never use colour")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{withHint(err, suggest.FlagHints(c, err)...)}
	})
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(subcommandsFor(a, args)...)
	registerCompletions(root)
	root.SetOut(a.stdout) // the completion command keeps the writer it is made with
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil { // cobra's exits 0 with its help for a shell it lacks
		c.Use, c.Args, c.RunE = "completion SHELL", usageArgs(cobra.NoArgs), func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	return root
}

// run is main without the process: it returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	a.color = isTerminal(stdout)
	a.errColor = isTerminal(stderr)
	root := newRootCmd(a, args...)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop, release := interruptible(stderr)
	defer stop()
	a.releaseSignals = release
	ctx = pipeline.WithStdin(ctx, stdin) // the trace path "-"
	ctx, outOfMemory := context.WithCancelCause(ctx)
	a.mem = &membudget.Guard{Cancel: outOfMemory}
	err := root.ExecuteContext(ctx)
	a.mem.Stop()
	if errors.Is(context.Cause(ctx), membudget.ErrOutOfMemory) {
		err = usageError{withHint(&membudget.Error{Budget: a.mem.Budget()}, "give it more with --max-memory, if the machine has it")}
	}
	outOfMemory(nil)
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

func interruptible(stderr io.Writer) (context.Context, func(), func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var once sync.Once
	release := func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
		})
	}
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
		release()
		cancel(nil)
	}, release
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
	if errors.As(err, &ue) || errors.Is(err, fileout.ErrIsInput) || errors.Is(err, fileout.ErrUnwritable) || strings.HasPrefix(msg, "unknown command ") || strings.HasPrefix(msg, "unknown flag") {
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
	var we *trace.WindowError
	if errors.As(err, &we) {
		hints = append(hints, "zstd --decompress --memory=N reads it, and so does gpumem with --zstd-max-window N, where there is the memory")
	}
	if strings.HasPrefix(msg, "unknown command ") {
		hints = append(hints, suggest.CommandHints(msg, "gpumem")...)
	}
	// one line, whatever the input files put in names and values
	fmt.Fprintf(stderr, "gpumem: error: %s\n", textsafe.FirstLine(msg))
	for _, h := range hints {
		fmt.Fprintf(stderr, "gpumem: hint: %s\n", textsafe.Line(h))
	}
	return code
}
