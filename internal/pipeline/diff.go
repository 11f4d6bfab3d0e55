package pipeline

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// DefaultSiteDepth is how many user frames name an allocation site.
const DefaultSiteDepth = 3

// DiffSide is one side of a diff: a trace or a set of ranks (its worst
// rank stands for it) under its settings.
type DiffSide struct {
	Source   SetSource
	Settings Settings
}

// Diff replays both sides and compares their worst ranks; depth is the
// number of user frames that make a site (0: DefaultSiteDepth).
func Diff(ctx context.Context, a, b DiffSide, depth int) (*figures.Diff, error) {
	ra, na, err := worstRun(ctx, a)
	if err != nil {
		return nil, err
	}
	rb, nb, err := worstRun(ctx, b)
	if err != nil {
		return nil, err
	}
	d, err := DiffRuns(ra, rb, depth)
	if d != nil {
		d.RanksA, d.RanksB = na, nb
	}
	return d, err
}

// worstRun is the worst rank of a side and how many ranks it had.
func worstRun(ctx context.Context, s DiffSide) (*Run, int, error) {
	set, err := ReplaySet(ctx, s.Source, s.Settings)
	if err != nil {
		return nil, 0, err
	}
	return set.Runs[set.Worst], len(set.Runs), nil
}

// DiffRuns compares two replays; the sites come from what each held when
// its reserved memory peaked, the phases from their annotations.
func DiffRuns(a, b *Run, depth int) (*figures.Diff, error) {
	if depth <= 0 {
		depth = DefaultSiteDepth
	}
	d := &figures.Diff{A: a.Report, B: b.Report, Depth: depth, MarksA: a.Marks(), MarksB: b.Marks(), RanksA: 1, RanksB: 1,
		Categories: figures.DiffCategories(a.Report.Categories, b.Report.Categories)}
	var err error
	if d.Phases, err = diffPhases(a, b); err != nil {
		return nil, err
	}
	sa, sb := a.PeakSites(depth), b.PeakSites(depth)
	d.StacksA, d.StacksB = sa != nil, sb != nil
	if sa == nil || sb == nil {
		return d, nil // a site missing from one side says nothing
	}
	by := map[string]*figures.SiteDelta{}
	get := func(frames string) *figures.SiteDelta {
		s := by[frames]
		if s == nil {
			s = &figures.SiteDelta{Frames: frames}
			by[frames] = s
		}
		return s
	}
	for _, s := range sa {
		x := get(s.Frames)
		x.BytesA, x.CountA = s.Bytes, s.Count
	}
	for _, s := range sb {
		x := get(s.Frames)
		x.BytesB, x.CountB = s.Bytes, s.Count
	}
	for _, s := range by {
		d.Sites = append(d.Sites, *s)
	}
	abs := func(n int64) int64 { return max(n, -n) }
	slices.SortFunc(d.Sites, func(x, y figures.SiteDelta) int {
		return cmp.Or(cmp.Compare(abs(y.Change()), abs(x.Change())), cmp.Compare(y.Change(), x.Change()),
			cmp.Compare(y.BytesB, x.BytesB), strings.Compare(x.Frames, y.Frames))
	})
	return d, nil
}

// PeakSites groups the allocations live when reserved memory peaked by
// their top depth user frames, most bytes first; nil when the run has no
// stacks (a workload, or a trace recorded without them).
func (r *Run) PeakSites(depth int) []figures.Site {
	if r.snap == nil || len(r.snap.Stacks) == 0 || r.res == nil {
		return nil
	}
	n := min(r.res.Extra.PeakOp+1, len(r.plan.Ops), len(r.plan.Stack))
	live := map[uint32]int{} // allocation id → the op that made it
	for i, op := range r.plan.Ops[:n] {
		switch op.Kind {
		case alloc.OpAlloc:
			live[op.ID] = i
		case alloc.OpFree, alloc.OpFreeRequest:
			delete(live, op.ID)
		}
	}
	names := map[int32]string{} // stack → site, computed once per stack
	by := map[string]*figures.Site{}
	for _, i := range live {
		st := r.plan.Stack[i]
		name, ok := names[st]
		if !ok {
			name = siteName(r.snap, st, depth)
			names[st] = name
		}
		if name == "(no stack)" && r.cls != nil && i < len(r.plan.Event) {
			if blk, ok := r.cls.ByEvent(r.plan.Event[i]); ok {
				name = noStackName(r.cls, &blk) // by its category and phase
			}
		}
		s := by[name]
		if s == nil {
			s = &figures.Site{Frames: name}
			by[name] = s
		}
		s.Bytes += r.plan.Ops[i].Size
		s.Count++
	}
	out := make([]figures.Site, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y figures.Site) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Frames, y.Frames))
	})
	return out
}

// siteName is the top depth user frames of a stack, one per line: Python
// frames outside torch itself, or, when a stack has none, its top frames.
func siteName(snap *trace.Snapshot, st int32, depth int) string {
	if st < 0 || int(st) >= len(snap.Stacks) {
		return "(no stack recorded)"
	}
	var user, any []string
	for _, f := range snap.Stacks[st] {
		line := f.Name + " (" + f.Filename + ":" + strconv.Itoa(f.Line) + ")"
		if len(any) < depth {
			any = append(any, line)
		}
		if userFrame(f) && len(user) < depth {
			user = append(user, line)
		}
	}
	if len(user) == 0 {
		user = any
	}
	if len(user) == 0 {
		return "(no stack recorded)"
	}
	return strings.Join(user, "\n")
}

// userFrame reports whether f is the program's rather than PyTorch's: a
// Python file outside the torch package.
func userFrame(f trace.Frame) bool {
	name := strings.ReplaceAll(f.Filename, "\\", "/")
	return strings.HasSuffix(name, ".py") && !strings.HasPrefix(name, "torch/") && !strings.Contains(name, "/torch/")
}
