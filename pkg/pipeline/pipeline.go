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

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
	"github.com/gpumem/gpumem/pkg/workload"
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
	// Detail keeps what Run.Detail (the HTML report) needs beyond the
	// report: each op's recorded time.
	Detail bool
	StopAt int // a trace: replay only its first StopAt ops; 0 = all
	// Lean says the caller reads only the report (Run.Report and Notes,
	// not Detail): a big snapshot's trace may then be planned as it is
	// read, without keeping its events.
	Lean bool
	// Progress receives a progress bar while a big trace is read; nil
	// draws none.
	Progress io.Writer
}

// Settings are the allocator settings as given on the command line.
type Settings struct {
	AllocConf      string // PYTORCH_CUDA_ALLOC_CONF syntax
	AllocConfGiven bool   // use AllocConf, not the trace's recorded settings
	Policy         string // allocation policy: pytorch, nocache, ...
	DeviceMemory   string // simulated card size with a unit; "" = no limit
	MemoryFraction float64
	Backend        string // "sim" (or "") or "cuda"
	Points         int    // timeline points to keep; 0 = none
	Check          bool   // check the allocator's invariants after every op
	// RecordedCap replays a trace under the memory cap its recording shows
	// when no card size or fraction is given (replay does; a sweep sets
	// its own cards).
	RecordedCap bool
	// IgnoreAddresses keeps only the first segment's recorded address and
	// places the others by the model of the CUDA driver (a what-if check).
	IgnoreAddresses bool
}

// options resolves s over the recorded settings (nil: PyTorch's
// defaults) into replay options.
func (s Settings) options(recorded *alloc.Config) (replay.Options, error) {
	o := replay.Options{Points: s.Points, Check: s.Check, RecordedCap: s.RecordedCap}
	cfg := alloc.DefaultConfig()
	if recorded != nil {
		cfg = *recorded
	}
	if s.AllocConfGiven {
		c, err := alloc.ParseConfig(s.AllocConf)
		if err != nil {
			return o, usage("--alloc-conf: %w", err)
		}
		cfg = c
	}
	p, err := alloc.ParsePolicy(s.Policy)
	if err != nil {
		return o, usage("--policy: %w", err)
	}
	cfg.Policy = p
	o.Config = cfg
	if s.DeviceMemory != "" {
		n, err := budget.ParseSize(s.DeviceMemory)
		if err != nil {
			return o, usage("--device-memory: %w", err)
		}
		if n == 0 {
			return o, usage("--device-memory: invalid size %q: zero bytes", s.DeviceMemory)
		}
		o.DeviceTotal = n
		o.Device = alloc.Sim(n)
	}
	if f := s.MemoryFraction; f != 0 {
		if !(f > 0 && f <= 1) { // NaN too
			return o, usage("--memory-fraction: %v is not in (0, 1]", f)
		}
		// a fraction of the simulated card, or of the real one (cuda)
		if s.DeviceMemory == "" && s.Backend != "cuda" {
			return o, hint(Usage, errors.New("--memory-fraction needs --device-memory"),
				"give the card's size, e.g. --device-memory 80GiB, or use --backend cuda for a fraction of the real GPU")
		}
		o.MemoryFraction = f
	}
	switch s.Backend {
	case "sim", "":
	case "cuda":
		// "cuda" drives the first GPU through the driver API.
		if s.DeviceMemory != "" {
			return o, usage("--device-memory is for the simulated device; --backend cuda uses the real card")
		}
		if s.IgnoreAddresses {
			return o, usage("--ignore-addresses is for the simulated device; the real card places segments itself")
		}
		o.Device = alloc.CUDA(0)
	default:
		return o, usage("--backend: unknown backend %q (want sim or cuda)", s.Backend)
	}
	if s.IgnoreAddresses {
		o.Device = alloc.SimModelled(o.DeviceTotal)
	}
	return o, nil
}

// replayErr explains a failed replay; doing is "replaying x" or "running x".
func replayErr(doing string, err error) error {
	err = fmt.Errorf("%s: %w", doing, err)
	if errors.Is(err, alloc.ErrNoCUDA) {
		return hint(Failed, err, "without a GPU, leave out --backend cuda to use the simulated device")
	}
	return err
}

// RecordedConfig reads the settings a snapshot was recorded with; nil when
// it recorded none.
func RecordedConfig(s trace.Settings) *alloc.Config {
	if !s.Present {
		return nil
	}
	c, err := alloc.ParseConfig(s.AllocConf)
	if err != nil {
		c = alloc.DefaultConfig()
	}
	// the structured fields are what was in force, whatever the string said
	c.MaxSplitSize = 0
	if s.MaxSplitSize > 0 {
		c.MaxSplitSize = uint64(s.MaxSplitSize)
	}
	c.GCThreshold = s.GCThreshold
	c.ExpandableSegments = s.ExpandableSegments
	for i, d := range s.RoundupPower2Divisions {
		c.RoundupPower2Divisions[i] = uint32(max(d, 0))
	}
	return &c
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
	return hint(Input, err, "run 'gpumem run --list' for the built-in workloads")
}
