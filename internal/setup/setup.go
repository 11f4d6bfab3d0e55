package setup

import (
	"errors"
	"fmt"
	"math"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Backend is where a replay's allocator gets its memory.
type Backend string

// The backends.
const (
	Sim  Backend = "sim"  // a simulated card (the default)
	CUDA Backend = "cuda" // the first real GPU, through the driver API
)

// ParseBackend reads --backend; "" is Sim.
func ParseBackend(s string) (Backend, error) {
	switch Backend(s) {
	case "", Sim:
		return Sim, nil
	case CUDA:
		return CUDA, nil
	}
	return "", fmt.Errorf("unknown backend %q (want sim or cuda)", s)
}

// Setup is how one replay runs.
type Setup struct {
	// Config replaces the settings a trace was recorded with; nil keeps
	// them (PyTorch's defaults where nothing was recorded).
	Config *alloc.Config
	// Policy is the allocation policy; "" keeps the Config's (pytorch).
	Policy alloc.Policy
	// Card is the simulated card's size in bytes; 0 = no limit but the
	// one the recording shows.
	Card uint64
	// Usable is the part of Card the allocator can take (the card less the
	// CUDA context, as mem_get_info's free says before any allocation);
	// 0 = all of it.
	Usable uint64
	// Fraction is set_per_process_memory_fraction of the card; 0 = none.
	Fraction float64
	Backend  Backend // "" is Sim
	// IgnoreAddresses places segments by the model of the CUDA driver
	// instead of at their recorded addresses (a what-if check).
	IgnoreAddresses bool
}

// Error is a setting that cannot be used: Flag names it as the command
// line spells it (errors quote it), Hint may say what to do instead.
type Error struct {
	Flag string
	Err  error
	Hint string
}

func (e *Error) Error() string {
	if e.Err == ErrNoCard {
		return "--memory-fraction needs --device-memory"
	}
	return "--" + e.Flag + ": " + e.Err.Error()
}
func (e *Error) Unwrap() error { return e.Err }

// ErrNoCard is a memory fraction without a card to be a fraction of.
var ErrNoCard = errors.New("a memory fraction needs the card it is a fraction of")

// CheckFraction is the one rule for a memory fraction: in (0, 1], or 0
// for none.
func CheckFraction(f float64) error {
	if f == 0 {
		return nil
	}
	if math.IsNaN(f) || f < 0 || f > 1 {
		return fmt.Errorf("%v is not in (0, 1]", f)
	}
	return nil
}

// Check applies the rules every Setup keeps, wherever it was parsed.
func (s Setup) Check() error {
	if err := CheckFraction(s.Fraction); err != nil {
		return &Error{Flag: "memory-fraction", Err: err}
	}
	switch s.Backend {
	case "", Sim:
		if s.Fraction > 0 && s.Card == 0 {
			return &Error{Flag: "memory-fraction", Err: ErrNoCard,
				Hint: "give the card's size, e.g. --device-memory 80GiB, or use --backend cuda for a fraction of the real GPU"}
		}
	case CUDA:
		if s.Card > 0 {
			return &Error{Flag: "device-memory", Err: errors.New("is for the simulated device; --backend cuda uses the real card")}
		}
		if s.IgnoreAddresses {
			return &Error{Flag: "ignore-addresses", Err: errors.New("is for the simulated device; the real card places segments itself")}
		}
	default:
		return &Error{Flag: "backend", Err: fmt.Errorf("unknown backend %q (want sim or cuda)", s.Backend)}
	}
	return nil
}

// Options resolves s against the settings a trace recorded (nil: none,
// or a workload) into the options of its replay. It is the one place a
// Setup becomes a replay's options: every command that replays a trace
// under its recorded settings makes the same inferences (the recorded
// cap, pools, survived out-of-memory errors, recorded addresses).
func (s Setup) Options(recorded *alloc.Config) (replay.Options, error) {
	if err := s.Check(); err != nil {
		return replay.Options{}, err
	}
	cfg := alloc.DefaultConfig()
	if recorded != nil {
		cfg = *recorded
	}
	if s.Config != nil {
		cfg = *s.Config
	}
	if s.Policy != "" {
		cfg.Policy = s.Policy
	}
	o := replay.Options{Config: cfg, MemoryFraction: s.Fraction, RecordedCap: true}
	switch {
	case s.Backend == CUDA:
		o.Device = alloc.CUDA(0)
	case s.IgnoreAddresses:
		o.Device, o.DeviceTotal = alloc.SimModelled(s.capacity()), s.Card
	case s.Card > 0:
		o.Device, o.DeviceTotal = alloc.Sim(s.capacity()), s.Card
	}
	return o, nil
}

func (s Setup) capacity() uint64 {
	if s.Usable > 0 && s.Usable < s.Card {
		return s.Usable
	}
	return s.Card
}

// Recorded reads the settings a snapshot was recorded with; nil when it
// recorded none.
func Recorded(s trace.Settings) *alloc.Config {
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
