package budget

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/units"
)

// Common practice, and what the replay report colours: warn above 20%
// fragmentation, fail above 30%; a regression beyond 5% fails.
const (
	DefaultWarnFrag  = 0.20
	DefaultMaxFrag   = 0.30
	DefaultTolerance = 0.05
)

// Metric names the fragmentation ratio a limit applies to.
type Metric string

// The fragmentation ratios of a replay (see [figures.Fragmentation]).
const (
	Peaks  Metric = "peaks"   // 1 − peak allocated / peak reserved
	AtPeak Metric = "at_peak" // 1 − allocated / reserved when reserved peaked
	End    Metric = "end"     // 1 − allocated / reserved at the end
	Holes  Metric = "holes"   // 1 − largest free block / cached free bytes
)

// Metrics lists every metric, the default first.
func Metrics() []Metric { return []Metric{Peaks, AtPeak, End, Holes} }

// ParseMetric checks a metric name.
func ParseMetric(s string) (Metric, error) {
	for _, m := range Metrics() {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, 0, 4)
	for _, m := range Metrics() {
		names = append(names, string(m))
	}
	return "", fmt.Errorf("unknown fragmentation metric %q (known: %s)", s, strings.Join(names, ", "))
}

// MetricList is the metrics with their definitions, one a line, as help
// text shows them.
func MetricList() string {
	var b strings.Builder
	for _, m := range Metrics() {
		fmt.Fprintf(&b, "  %-8s %s\n", m, m.Definition())
	}
	return b.String()
}

// Definition says how m is computed, for people.
func (m Metric) Definition() string {
	switch m {
	case AtPeak:
		return "1 − allocated / reserved when reserved peaked"
	case End:
		return "1 − allocated / reserved at the end"
	case Holes:
		return "1 − largest free block / cached free bytes at the end"
	}
	return "1 − peak allocated / peak reserved"
}

// Of picks m's ratio out of f.
func (m Metric) Of(f figures.Fragmentation) float64 {
	switch m {
	case AtPeak:
		return f.AtPeak
	case End:
		return f.End
	case Holes:
		return f.Holes
	}
	return f.Peaks
}

// Limits are what a case must stay within.
type Limits struct {
	Metric Metric // the ratio WarnFrag and MaxFrag apply to
	// WarnFrag and MaxFrag are fragmentation ratios above which the case
	// warns and fails; [units.NoLimit] turns one off.
	WarnFrag, MaxFrag float64
	// MaxReserved is the most peak reserved memory allowed, in bytes;
	// 0 = no limit.
	MaxReserved uint64
	// MustFit is the card, in bytes, the case replays on; an
	// out-of-memory error fails it. 0 = an unlimited device.
	MustFit uint64
	// Categories are the most bytes each category may hold at the peak
	// of allocated memory, in CategoryNames order; 0 = no limit.
	Categories [len(CategoryNames)]uint64
}

// CategoryNames are the categories of allocations (package categories
// defines them), in the order Limits.Categories holds their limits.
var CategoryNames = [...]string{"parameter", "buffer", "gradient", "optimizer_state", "activation",
	"temporary", "input", "workspace", "unknown"}

// CategoryKeys are the budget keys of the per-category limits, in
// CategoryNames order: "activations: 6GiB".
var CategoryKeys = [len(CategoryNames)]string{"parameters", "buffers", "gradients", "optimizer_state", "activations",
	"temporaries", "inputs", "workspace", "unknown"}

// DefaultLimits returns the limits a case has unless told otherwise.
func DefaultLimits() Limits {
	return Limits{Metric: Peaks, WarnFrag: DefaultWarnFrag, MaxFrag: DefaultMaxFrag}
}

// Validate reports limits that contradict each other.
func (l Limits) Validate() error {
	if _, err := ParseMetric(string(l.Metric)); err != nil {
		return err
	}
	for _, r := range []struct {
		key string
		v   float64
	}{{"warn_frag", l.WarnFrag}, {"max_frag", l.MaxFrag}} {
		if math.IsNaN(r.v) || r.v < 0 || (r.v > 1 && !math.IsInf(r.v, 1)) {
			return fmt.Errorf("%s: %v is not a ratio between 0 and 1", r.key, r.v)
		}
	}
	if l.WarnFrag > l.MaxFrag {
		return fmt.Errorf("warn_frag %s is above max_frag %s", units.FormatRatio(l.WarnFrag), units.FormatRatio(l.MaxFrag))
	}
	return nil
}

// Case is one replay and the limits it is held to.
type Case struct {
	Name string
	// Trace is the snapshot pickle as written (in the budget file or on the
	// command line); Workload is a builtin workload's name or a script
	// file. Exactly one is set.
	Trace    string
	Traces   []string // the ranks of one job (files or globs); Trace may also be a glob or a folder
	Workload string
	Params   map[string]string // workload parameters
	Device   int               // which device's trace to replay

	// Setup is how the case replays: its settings over the recorded ones,
	// on its must_fit card (Setup.Card = Limits.MustFit).
	Setup  setup.Setup
	Limits Limits

	// Dir is the directory relative paths are relative to ("" = the
	// working directory); File and Line say where the case was defined,
	// empty and 0 for a case from the command line.
	Dir  string
	File string
	Line int
}

// Source is what the case replays, as written: the trace file or
// "workload NAME".
func (c *Case) Source() string {
	if c.Trace != "" {
		return c.Trace
	}
	if len(c.Traces) > 0 {
		return strings.Join(c.Traces, " ")
	}
	return "workload " + c.Workload
}

// Path resolves a path as written in the case (its trace, or a workload
// script) against the case's directory.
func (c *Case) Path(p string) string {
	if c.Dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// DefaultName is the name of a case that gives none: the base name of
// its trace or workload, without extension.
func DefaultName(traceOrWorkload string) string {
	base := filepath.Base(traceOrWorkload)
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}
