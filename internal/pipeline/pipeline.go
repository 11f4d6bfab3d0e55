// Package pipeline is what every gpumem command runs between its flags and
// its output: open a trace or build a workload, resolve the allocator
// settings (the trace's recorded ones or those given, the policy, the
// backend, the card and its memory fraction), plan, replay, and build the
// data the renderers read (figures.Replay, sweep.Report, budget.Result).
//
// It knows the command line only by the flag names its errors quote; it
// never prints or exits. An *Error says whether the fault is in how gpumem
// was called or in an input file, so that the caller picks the exit status.
package pipeline

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/workload"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// Kind says where the fault behind an Error lies.
type Kind int

// The kinds of Error.
const (
	Failed Kind = iota // the replay itself failed (a device error, ...)
	Usage              // a setting that cannot be used as given
	Input              // an input file that cannot be read or replayed
)

// Error is a failure with its kind and hints for the user.
type Error struct {
	Kind  Kind
	Err   error
	Hints []string
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func usage(format string, args ...any) error {
	return &Error{Kind: Usage, Err: fmt.Errorf(format, args...)}
}

func hint(kind Kind, err error, hints ...string) error {
	return &Error{Kind: kind, Err: err, Hints: hints}
}

// Source is what to replay: a trace file (one device's events) or a
// workload (a built-in name or a script file).
type Source struct {
	Trace    string
	Device   int // which device's trace
	Workload string
	Params   map[string]string // workload parameters
	MaxOps   int               // a workload script's operation limit; 0 = the default
	Keep     Keep              // what the caller reads of the run, so how a trace may be read
	StopAt   int               // a trace: replay only its first StopAt ops; 0 = all
	// Progress receives a progress bar while a big trace is read; nil
	// draws none.
	Progress io.Writer
	// Pack, with KeepDetail, is the packer Detail will be given: the
	// replay that makes a trace's report then steps through its ops for
	// the explorer too, so that Detail need not replay it again.
	Pack figures.ExplorerPacker
}

// Keep says what a caller reads of a run beyond its report, and so how a
// trace may be read.
type Keep int

// What a caller keeps.
const (
	// KeepPlan: the report and the plan (Run.Marks, stacks); the trace is
	// read whole.
	KeepPlan Keep = iota
	// KeepReport: the report and notes alone; a big snapshot's trace may
	// then be planned as it is read, without keeping its events.
	KeepReport
	// KeepDetail: what Run.Detail (the HTML report) needs too: each op's
	// recorded time, kept packed beside the plan, which is planned as the
	// file is read as for KeepReport.
	KeepDetail
)

// Settings are how a replay runs: the setup (parsed and typed at the
// edge, see package setup) and what to keep of the run.
type Settings struct {
	setup.Setup
	Points int  // timeline points to keep; 0 = none
	Check  bool // check the allocator's invariants after every op
}

// options resolves s over the recorded settings (nil: PyTorch's
// defaults) into replay options.
func (s Settings) options(recorded *alloc.Config) (replay.Options, error) {
	o, err := s.Setup.Options(recorded)
	if err != nil {
		return o, setupErr(err)
	}
	o.Points, o.Check = s.Points, s.Check
	return o, nil
}

// setupErr is a setup's error as the pipeline reports it: a usage error,
// with the setup's hint.
func setupErr(err error) error {
	var se *setup.Error
	if errors.As(err, &se) && se.Hint != "" {
		return hint(Usage, err, se.Hint)
	}
	return &Error{Kind: Usage, Err: err}
}

// replayErr explains a failed replay; doing is "replaying x" or "running x".
func replayErr(doing string, err error) error {
	err = fmt.Errorf("%s: %w", doing, err)
	if errors.Is(err, alloc.ErrNoCUDA) {
		return hint(Failed, err, "without a GPU, leave out --backend cuda to use the simulated device")
	}
	return err
}

// LoadWorkload finds a built-in workload or parses a script file.
func LoadWorkload(name string, params map[string]string) (*workload.Workload, error) {
	w, err := workload.Lookup(name, params)
	if err != nil {
		return nil, workloadErr(err)
	}
	return w, nil
}

// workloadErr marks a workload's error as bad input; past a limit the list
// of builtins is no help.
func workloadErr(err error) error {
	var le *workload.LimitError
	if errors.As(err, &le) {
		return &Error{Kind: Input, Err: err}
	}
	return hint(Input, err, "run 'gpumem run --list' for the built-in workloads and their parameters")
}
