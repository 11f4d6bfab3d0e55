package estimate

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/gpumem/gpumem/internal/units"
)

// A Vary is a parameter of the command: {NAME} in it takes each value.
type Vary struct {
	Name   string
	Values []string
}

// varyName is compiled at its first use, not at every process start.
var varyName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// ParseVary reads NAME=v1,v2,... (--vary).
func ParseVary(spec string) (Vary, error) {
	name, vals, ok := strings.Cut(spec, "=")
	if !ok || !varyName().MatchString(name) {
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
	if !ok || !ok2 || !varyName().MatchString(name) {
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
		t.Failure = "out of memory (tried to allocate " + units.FormatSizeTorch(r.OOMs[0].Detail.AllocSize) + ")"
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

// Trials are the runs of --vary (each value) or --find-max (a bisection
// of Range) of {Name} in a command.
type Trials struct {
	Name   string
	Values []string // --vary
	Range  *Range   // --find-max
}

// ParseTrials reads --vary or --find-max (one of them) for argv, which
// must hold {NAME}.
func ParseTrials(vary, findMax string, argv []string) (Trials, error) {
	var t Trials
	switch {
	case vary != "" && findMax != "":
		return t, errors.New("--vary and --find-max: give one")
	case vary != "":
		v, err := ParseVary(vary)
		if err != nil {
			return t, err
		}
		t.Name, t.Values = v.Name, v.Values
	default:
		r, err := ParseRange(findMax)
		if err != nil {
			return t, err
		}
		t.Name, t.Range = r.Name, &r
	}
	if _, found := Substitute(argv, t.Name, ""); !found {
		return t, fmt.Errorf("the command has no {%s} to vary", t.Name)
	}
	return t, nil
}

// Run estimates argv once per value (say tells which), and returns the
// trials and, for --find-max, the largest value that fits (nil: none).
func (t Trials) Run(set Settings, argv, env []string, run Runner, say func(value string)) ([]Trial, *int64, error) {
	try := func(value string) (Trial, error) {
		cmdline, _ := Substitute(argv, t.Name, value)
		say(value)
		rs, err := runAll(set.Options, cmdline, env, nil, run)
		if err != nil {
			return Trial{}, err
		}
		if err := notStarted(rs); err != nil {
			return Trial{}, err
		}
		// several ranks: the worst one's peaks; it fits when all fit
		t := NewTrial(value, rs[Worst(rs)])
		for _, r := range rs {
			if !r.Fits() && t.Fits {
				t.Fits, t.Failure = false, NewTrial(value, r).Failure
			}
		}
		return t, nil
	}
	if t.Range == nil {
		var trials []Trial
		for _, v := range t.Values {
			tr, err := try(v)
			if err != nil {
				return nil, nil, err
			}
			trials = append(trials, tr)
		}
		return trials, nil, nil
	}
	best, ok, trials, err := FindMax(*t.Range, func(v int64) (Trial, error) { return try(fmt.Sprint(v)) })
	if err != nil || !ok {
		return trials, nil, err
	}
	return trials, &best, nil
}
