package budget

import (
	"fmt"
	"math"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
)

// Status is the verdict on a case, or on one finding; a higher status is
// worse.
type Status int

// The verdicts.
const (
	Pass  Status = iota // within every limit
	Warn                // a warning level crossed
	Fail                // a limit crossed, or a regression
	Error               // the case could not be run
)

func (s Status) String() string {
	switch s {
	case Warn:
		return "warn"
	case Fail:
		return "fail"
	case Error:
		return "error"
	}
	return "pass"
}

// MarshalText writes the status by name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Figures are what a replay measured, as the limits read them.
type Figures struct {
	PeakReserved  int64
	PeakAllocated int64
	Fragmentation figures.Fragmentation
	// OOM is the out-of-memory error that stopped the replay; nil when
	// it ran to completion.
	OOM *figures.OOM
	// MemoryStats is torch.cuda.memory_stats() at the end of the replay,
	// under PyTorch's names.
	MemoryStats map[string]int64
	// Categories is what allocated memory held at its peak, by category
	// name; nil when not measured (a workload).
	Categories map[string]uint64
}

// FiguresOf takes the figures out of a replay's report.
func FiguresOf(r *figures.Replay) Figures {
	return Figures{
		PeakReserved:  figures.PeakReserved(r.Stats),
		PeakAllocated: figures.PeakAllocated(r.Stats),
		Fragmentation: r.Fragmentation(),
		OOM:           r.OOM,
		MemoryStats:   r.Stats.Map(),
		Categories:    categoriesOf(r.Categories),
	}
}

func categoriesOf(c *figures.Categories) map[string]uint64 {
	if c == nil {
		return nil
	}
	out := map[string]uint64{}
	for _, s := range c.Shares {
		out[s.Name] = s.Bytes
	}
	return out
}

// Finding is one thing a check found: a limit crossed (Warn or Fail) or a
// note (Pass).
type Finding struct {
	Status Status
	// Limit is the key of the limit concerned: warn_frag, max_frag,
	// max_reserved, must_fit or baseline; "" for a case that could not
	// be run.
	Limit   string
	Message string
}

// Result is the verdict on one case.
type Result struct {
	Case     Case
	Figures  Figures // zero when Err is set
	Err      error   // why the case could not be run; nil when it ran
	Findings []Finding
	// Baseline is the case's entry in the baseline compared with; nil
	// when there was none.
	Baseline *Entry
}

// Status is the worst status of r's findings: Pass when it has none.
func (r *Result) Status() Status {
	s := Pass
	if r.Err != nil {
		return Error
	}
	for _, f := range r.Findings {
		s = max(s, f.Status)
	}
	return s
}

// Fragmentation is the case's fragmentation by its own metric; NaN when
// it could not be computed.
func (r *Result) Fragmentation() float64 {
	if r.Err != nil {
		return math.NaN()
	}
	return r.Case.Limits.Metric.Of(r.Figures.Fragmentation)
}

// Crossed lists the limits r's failing or warning findings concern, worst
// first, each once.
func (r *Result) Crossed() []string {
	var out []string
	for _, s := range []Status{Fail, Warn} {
		for _, f := range r.Findings {
			if f.Status == s && f.Limit != "" && !contains(out, f.Limit) {
				out = append(out, f.Limit)
			}
		}
	}
	return out
}

// Checker holds cases to their limits.
type Checker struct {
	// Strict turns warnings into failures.
	Strict bool
	// Baseline, when not nil, is compared with; Tolerance says how far a
	// case may regress from it (see the package comment).
	Baseline  *Baseline
	Tolerance float64
}

// Check judges the figures of case c.
func (k *Checker) Check(c Case, f Figures) Result {
	r := Result{Case: c, Figures: f}
	l := c.Limits
	add := func(s Status, limit, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if s == Warn && k.Strict {
			s, msg = Fail, msg+" (strict)"
		}
		r.Findings = append(r.Findings, Finding{Status: s, Limit: limit, Message: msg})
	}
	if o := f.OOM; o != nil {
		card := units.FormatUBytes(o.DeviceTotal) + " card"
		if o.Allowed > 0 && o.Allowed < o.DeviceTotal {
			card += ", " + units.FormatUBytes(o.Allowed) + " allowed"
		}
		add(Fail, "must_fit", "out of memory (%s) at operation %s: tried to allocate %s, a %s",
			card, units.FormatCount(int64(o.OpIndex)), units.FormatUBytes(o.AllocSize), o.Verdict())
	}
	frag := l.Metric.Of(f.Fragmentation)
	def := fmt.Sprintf("%s: %s", l.Metric, l.Metric.Definition())
	switch {
	case math.IsNaN(frag):
		add(Pass, "", "fragmentation not measured: no memory was reserved")
	case frag > l.MaxFrag:
		add(Fail, "max_frag", "fragmentation %s is above the limit of %s (%s)", units.FormatRatio(frag), units.FormatRatio(l.MaxFrag), def)
	case frag > l.WarnFrag:
		add(Warn, "warn_frag", "fragmentation %s is above the warning level of %s (%s)", units.FormatRatio(frag), units.FormatRatio(l.WarnFrag), def)
	}
	if l.MaxReserved > 0 && f.PeakReserved > 0 && uint64(f.PeakReserved) > l.MaxReserved {
		add(Fail, "max_reserved", "peak reserved %s is above the limit of %s",
			units.FormatBytes(f.PeakReserved), units.FormatUBytes(l.MaxReserved))
	}
	for i, limit := range l.Categories {
		key, name := CategoryKeys[i], CategoryNames[i]
		switch {
		case limit == 0:
		case f.Categories == nil:
			add(Warn, key, "%s not measured: the case has no allocation categories (a trace with its events has them)", key)
		case f.Categories[name] > limit:
			add(Fail, key, "%s: %s at the peak of allocated memory, above the limit of %s", key,
				units.FormatUBytes(f.Categories[name]), units.FormatUBytes(limit))
		}
	}
	if k.Baseline != nil {
		if e, ok := k.Baseline.Cases[c.Name]; ok {
			r.Baseline = &e
			r.Findings = append(r.Findings, e.compare(l.Metric, f, k.Tolerance)...)
		} else {
			add(Pass, "baseline", "not in the baseline yet")
		}
	}
	return r
}

// Failed is the result of a case that could not be run.
func (k *Checker) Failed(c Case, err error) Result {
	return Result{Case: c, Err: err}
}

// Summary counts results by status.
type Summary struct {
	Cases                   int
	Pass, Warn, Fail, Error int
}

// Summarize counts rs by status.
func Summarize(rs []Result) Summary {
	s := Summary{Cases: len(rs)}
	for i := range rs {
		switch rs[i].Status() {
		case Pass:
			s.Pass++
		case Warn:
			s.Warn++
		case Fail:
			s.Fail++
		case Error:
			s.Error++
		}
	}
	return s
}

// Status is the worst status counted.
func (s Summary) Status() Status {
	switch {
	case s.Error > 0:
		return Error
	case s.Fail > 0:
		return Fail
	case s.Warn > 0:
		return Warn
	}
	return Pass
}

func (s Summary) String() string {
	noun := "cases"
	if s.Cases == 1 {
		noun = "case"
	}
	return fmt.Sprintf("%d %s: %d passed, %d warned, %d failed, %d could not run", s.Cases, noun, s.Pass, s.Warn, s.Fail, s.Error)
}
