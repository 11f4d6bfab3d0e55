package budget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/gpumem/gpumem/internal/units"
)

// baselineVersion is the format version WriteBaseline writes.
const baselineVersion = 1

// Baseline holds each case's committed figures, by case name.
type Baseline struct {
	Cases map[string]Entry
}

// Entry is one case's figures in a baseline. Ratios are rounded to four
// decimals, so that rewriting an unchanged baseline changes nothing.
type Entry struct {
	Source        string `json:"source"`
	PeakReserved  int64  `json:"peak_reserved"`
	PeakAllocated int64  `json:"peak_allocated"`
	// Fragmentation holds every ratio that could be computed, by metric.
	Fragmentation map[Metric]float64 `json:"fragmentation"`
	OOM           bool               `json:"oom"`
}

type baselineFile struct {
	Version int              `json:"version"`
	Cases   map[string]Entry `json:"cases"`
}

// EntryOf makes the baseline entry of a result that ran.
func EntryOf(r *Result) Entry {
	f := r.Figures
	e := Entry{
		Source:        r.Case.Source(),
		PeakReserved:  f.PeakReserved,
		PeakAllocated: f.PeakAllocated,
		Fragmentation: map[Metric]float64{},
		OOM:           f.OOM != nil,
	}
	for _, m := range Metrics() {
		if v := m.Of(f.Fragmentation); !math.IsNaN(v) && !math.IsInf(v, 0) {
			e.Fragmentation[m] = round4(v)
		}
	}
	return e
}

// NewBaseline makes the baseline of rs over old (which may be nil): a
// case that ran gets its new figures; every other entry of old stays, a
// case that could not run as one that was not run this time (a run of
// some cases only), so that a broken input or a partial run does not
// erase what was committed. An entry whose case is gone from the budget
// file is removed by hand.
func NewBaseline(rs []Result, old *Baseline) *Baseline {
	b := &Baseline{Cases: map[string]Entry{}}
	if old != nil {
		for name, e := range old.Cases {
			b.Cases[name] = e
		}
	}
	for i := range rs {
		if r := &rs[i]; r.Err == nil {
			b.Cases[r.Case.Name] = EntryOf(r)
		}
	}
	return b
}

// WriteBaseline writes b as indented JSON with sorted keys: no
// timestamps, no absolute paths.
func WriteBaseline(w io.Writer, b *Baseline) error {
	cases := b.Cases
	if cases == nil {
		cases = map[string]Entry{}
	}
	data, err := json.MarshalIndent(baselineFile{Version: baselineVersion, Cases: cases}, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// maxBaselineSize bounds a baseline file: an entry takes about 300
// bytes, so this holds tens of thousands of cases.
const maxBaselineSize = 16 << 20

// ReadBaseline reads the baseline file at path (a regular file of at
// most maxBaselineSize bytes).
func ReadBaseline(path string) (*Baseline, error) {
	data, err := readBounded(path, maxBaselineSize, "a baseline")
	if err != nil {
		return nil, err
	}
	return ParseBaseline(path, data)
}

// ParseBaseline parses a baseline file's contents; name is used in errors.
func ParseBaseline(name string, data []byte) (*Baseline, error) {
	var f struct {
		Version *int                        `json:"version"`
		Cases   map[string]*json.RawMessage `json:"cases"`
	}
	fail := func(format string, args ...any) error {
		return &FileError{File: name, Err: fmt.Errorf(format, args...)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fail("not a baseline: %v", jsonMessage(err))
	}
	if dec.More() {
		return nil, fail("not a baseline: data after the JSON document")
	}
	if f.Version == nil || *f.Version != baselineVersion {
		return nil, fail("not a baseline of version %d (it needs \"version\": %d)", baselineVersion, baselineVersion)
	}
	b := &Baseline{Cases: make(map[string]Entry, len(f.Cases))}
	for name, raw := range f.Cases {
		var e Entry
		if raw == nil {
			return nil, fail("case %q: no figures", name)
		}
		if err := json.Unmarshal(*raw, &e); err != nil {
			return nil, fail("case %q: %v", name, jsonMessage(err))
		}
		if e.PeakReserved < 0 || e.PeakAllocated < 0 {
			return nil, fail("case %q: negative peak memory", name)
		}
		for m, v := range e.Fragmentation {
			if _, err := ParseMetric(string(m)); err != nil {
				return nil, fail("case %q: %v", name, err)
			}
			if v < -1 || v > 1 {
				return nil, fail("case %q: fragmentation %s %v is not a ratio", name, m, v)
			}
		}
		b.Cases[name] = e
	}
	return b, nil
}

// jsonMessage shortens encoding/json's errors for people.
func jsonMessage(err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return "the file is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%s: want %s, found %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// compare finds regressions of f from e: peak reserved memory grown by
// more than tol of its baseline, or fragmentation by more than tol
// absolute. Gains beyond tol are noted so that the baseline gets updated.
func (e Entry) compare(m Metric, f Figures, tol float64) []Finding {
	var out []Finding
	add := func(s Status, format string, args ...any) {
		out = append(out, Finding{Status: s, Limit: "baseline", Message: fmt.Sprintf(format, args...)})
	}
	base, now := float64(e.PeakReserved), float64(f.PeakReserved)
	switch {
	case now > base*(1+tol):
		grew := "from nothing"
		if base > 0 {
			grew = units.FormatRatio(now/base-1) + " above"
		}
		add(Fail, "peak reserved %s is %s the baseline %s (tolerance %s)",
			units.FormatUBytes(uint64(now)), grew, units.FormatUBytes(uint64(base)), units.FormatRatio(tol))
	case now < base*(1-tol):
		add(Pass, "peak reserved %s is %s below the baseline %s: update the baseline to keep the gain",
			units.FormatUBytes(uint64(now)), units.FormatRatio(1-now/base), units.FormatUBytes(uint64(base)))
	}
	was, ok := e.Fragmentation[m]
	exact := m.Of(f.Fragmentation)
	cur := round4(exact)
	if ok && !math.IsNaN(cur) {
		// Compare in whole 1e-4 steps, as stored, so a baseline just
		// written never regresses from itself by rounding.
		d := math.Round((cur-was)*1e4) / 1e4
		switch {
		case d > tol:
			add(Fail, "fragmentation %s is %s above the baseline %s (tolerance %s, %s: %s)",
				units.FormatRatio(exact), units.FormatPoints(d), units.FormatRatio(was), units.FormatPoints(tol), m, m.Definition())
		case d < -tol:
			add(Pass, "fragmentation %s is %s below the baseline %s: update the baseline to keep the gain",
				units.FormatRatio(exact), units.FormatPoints(-d), units.FormatRatio(was))
		}
	}
	return out
}
