package estimate

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/pkg/figures"
)

// A Vary is a parameter of the command: {NAME} in it takes each value.
type Vary struct {
	Name   string
	Values []string
}

var varyName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseVary reads NAME=v1,v2,... (--vary).
func ParseVary(spec string) (Vary, error) {
	name, vals, ok := strings.Cut(spec, "=")
	if !ok || !varyName.MatchString(name) {
		return Vary{}, fmt.Errorf("--vary %q: want NAME=v1,v2,... with NAME a word", spec)
	}
	v := Vary{Name: name}
	for _, s := range strings.Split(vals, ",") {
		if s == "" {
			return Vary{}, fmt.Errorf("--vary %q: empty value", spec)
		}
		v.Values = append(v.Values, s)
	}
	return v, nil
}

// Range is --find-max NAME=LO..HI: integers to search.
type Range struct {
	Name   string
	Lo, Hi int64
}

// ParseRange reads NAME=LO..HI (--find-max).
func ParseRange(spec string) (Range, error) {
	name, r, ok := strings.Cut(spec, "=")
	lo, hi, ok2 := strings.Cut(r, "..")
	if !ok || !ok2 || !varyName.MatchString(name) {
		return Range{}, fmt.Errorf("--find-max %q: want NAME=LO..HI", spec)
	}
	l, e1 := strconv.ParseInt(lo, 10, 64)
	h, e2 := strconv.ParseInt(hi, 10, 64)
	if e1 != nil || e2 != nil || l > h {
		return Range{}, fmt.Errorf("--find-max %q: want integers LO <= HI", spec)
	}
	return Range{Name: name, Lo: l, Hi: h}, nil
}

// Substitute replaces {NAME} by value in every argument of argv, and
// says whether any had it.
func Substitute(argv []string, name, value string) ([]string, bool) {
	out := make([]string, len(argv))
	found := false
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "{"+name+"}", value)
		found = found || out[i] != a
	}
	return out, found
}

// Fits says whether a run fitted on its card: the script finished with
// status 0 and met no out-of-memory error, caught or not.
func (r *Result) Fits() bool { return r.Err == nil && len(r.OOMs) == 0 }

// Trial is one run of a --vary or --find-max.
type Trial struct {
	Value         string
	PeakAllocated int64
	PeakReserved  int64
	Fits          bool
	Failure       string // why it does not fit: the OOM message, or the script's error
}

// NewTrial sums up a run.
func NewTrial(value string, r *Result) Trial {
	t := Trial{Value: value, PeakAllocated: r.Stats.AllocatedBytes[0].Peak, PeakReserved: r.Stats.ReservedBytes[0].Peak, Fits: r.Fits()}
	switch {
	case len(r.OOMs) > 0:
		t.Failure = "out of memory (tried to allocate " + figures.FormatSizeTorch(r.OOMs[0].Detail.AllocSize) + ")"
	case r.Info != nil && r.Info.Error != nil:
		t.Failure = r.Info.Error.Type + " at " + r.Info.Error.Site
	case r.Err != nil:
		t.Failure = r.Err.Error()
	}
	return t
}

// FindMax bisects r for the largest value that fits, calling try for
// each value it tests; the trials come back in the order made. ok is
// false when even r.Lo does not fit.
func FindMax(r Range, try func(v int64) (Trial, error)) (best int64, ok bool, trials []Trial, err error) {
	lo, hi := r.Lo, r.Hi
	t, err := try(lo)
	if err != nil {
		return 0, false, nil, err
	}
	trials = append(trials, t)
	if !t.Fits {
		return 0, false, trials, nil
	}
	// invariant: lo fits; everything above hi is unknown or does not fit
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		t, err := try(mid)
		if err != nil {
			return 0, false, trials, err
		}
		trials = append(trials, t)
		if t.Fits {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, true, trials, nil
}
