package pipeline

import (
	"sort"
	"strconv"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// explorer builds what the HTML report's explorer draws for one device's
// plan: the allocations' lifetimes from the ops, and the block-level
// changes of each op from a replay stepped one op at a time, each step's
// blocks compared with the last. times holds each op's recorded time (nil:
// none); snap gives the stacks and annotations (nil for workloads).
func explorer(device int, plan *replay.Plan, o replay.Options, res *replay.Result,
	snap *trace.Snapshot, times []int64) (*figures.Explorer, error) {
	n := res.Done
	if res.OOM != nil {
		n = res.OOMOp + 1 // the failing op, after its release steps
	}
	e := &figures.Explorer{Device: device, Ops: n, PeakOp: res.Extra.PeakOp, OOMOp: -1}
	if res.OOM != nil {
		e.OOMOp, e.OOMSize, e.OOMRounded = res.OOMOp, res.OOM.Size, res.OOM.Rounded
	}
	if len(times) >= n && n > 0 {
		e.TimeUS = times[:n]
	}
	live := map[uint32]int32{} // allocation id → index in e.Allocs
	for _, s := range plan.Seeds {
		for _, b := range s.Blocks {
			live[b.ID] = int32(len(e.Allocs))
			e.Allocs = append(e.Allocs, figures.Lifetime{Start: 0, End: int32(n), Released: int32(n),
				Size: max(b.Requested, b.Size), Address: s.Address + b.Offset, Stream: s.Stream, Stack: -1})
		}
	}
	stackOf := func(i int) int32 {
		if i < len(plan.Stack) && snap != nil && plan.Stack[i] >= 0 && int(plan.Stack[i]) < len(snap.Stacks) {
			return plan.Stack[i]
		}
		return -1
	}
	o.Points, o.Check = 0, false
	var prev, cur []alloc.FlatBlock
	var buf alloc.SnapshotBuffer
	defer buf.Free()
	sinceKey, lastKey := 0, 0
	err := replay.Step(plan, o, func(i int, a *alloc.Allocator) bool {
		if i >= n {
			return false
		}
		op := plan.Ops[i]
		switch op.Kind {
		case alloc.OpAlloc:
			if res.OOM != nil && i == res.OOMOp {
				break // the failing request holds no block
			}
			live[op.ID] = int32(len(e.Allocs))
			e.Allocs = append(e.Allocs, figures.Lifetime{Start: int32(i), End: int32(n), Released: int32(n),
				Size: op.Size, Stream: op.Stream, Stack: stackOf(i)})
		case alloc.OpFree, alloc.OpFreeRequest:
			if k, ok := live[op.ID]; ok && e.Allocs[k].End == int32(n) {
				e.Allocs[k].End = int32(i)
			}
		}
		cur = a.AppendBlocks(cur[:0], &buf)
		c := diff(prev, cur, live)
		for _, b := range c.Ins {
			if b.Alloc >= 0 && b.State == figures.StateAllocated && e.Allocs[b.Alloc].Address == 0 {
				e.Allocs[b.Alloc].Address = b.Address
			}
		}
		if op.Kind == alloc.OpFreeComplete || op.Kind == alloc.OpFree {
			if k, ok := live[op.ID]; ok {
				e.Allocs[k].Released = int32(i)
				delete(live, op.ID)
			}
		}
		e.Changes = append(e.Changes, c)
		// a key once the changes since the last one hold as many blocks as
		// the list: keys at most double the data, and the page applies at
		// most that many blocks' worth of changes to reach any op
		sinceKey += len(c.Ins) + 1
		if sinceKey >= len(cur) && i+1-lastKey >= minKeyGap {
			e.Keys = append(e.Keys, figures.Keyframe{Op: i + 1, Blocks: diff(nil, cur, live).Ins})
			sinceKey, lastKey = 0, i+1
		}
		prev, cur = cur, prev
		return true
	})
	if err != nil {
		return nil, err
	}
	if snap != nil && len(snap.Stacks) > 0 {
		e.Stacks, e.Frames, e.User = internFrames(snap.Stacks)
	}
	if snap != nil && e.TimeUS != nil {
		e.Spans = spans(snap.Annotations, device, e.TimeUS)
	}
	return e, nil
}

// minKeyGap is the fewest ops between two keyframes of the block list.
const minKeyGap = 1024

// diff is the one replacement that turns prev into cur: the blocks between
// their common head and tail. An allocation id names one allocation from
// one op to the next, so equal blocks of consecutive ops are the same.
func diff(prev, cur []alloc.FlatBlock, live map[uint32]int32) figures.Change {
	p := 0
	for p < len(prev) && p < len(cur) && same(prev[p], cur[p]) {
		p++
	}
	s := 0
	for s < len(prev)-p && s < len(cur)-p && same(prev[len(prev)-1-s], cur[len(cur)-1-s]) {
		s++
	}
	c := figures.Change{Pos: int32(p), Del: int32(len(prev) - p - s)}
	for _, b := range cur[p : len(cur)-s] {
		r := figures.BlockRec{Address: b.Address, Size: b.Size, First: b.SegSize != 0, SegSize: b.SegSize, Alloc: -1}
		switch {
		case b.State == alloc.BlockAllocated:
			r.State = figures.StateAllocated
		case b.State == alloc.BlockPendingFree:
			r.State = figures.StatePending
		case b.SegBlocks > 1:
			r.State = figures.StateSplit
		default:
			r.State = figures.StateFree
		}
		if r.State >= figures.StateAllocated {
			if k, ok := live[b.ID]; ok {
				r.Alloc = k
			}
		}
		c.Ins = append(c.Ins, r)
	}
	return c
}

// same says two blocks of consecutive ops are one unchanged block. A
// block's segment gaining or losing other blocks does not change it: only
// a free block's colour depends on that, and a whole free segment's only
// block changes when the segment splits.
func same(a, b alloc.FlatBlock) bool {
	return a.Address == b.Address && a.Size == b.Size && a.SegSize == b.SegSize && a.ID == b.ID && a.State == b.State
}

// internFrames writes each distinct frame once.
func internFrames(stacks [][]trace.Frame) ([][]int32, []string, []bool) {
	idx := map[trace.Frame]int32{}
	var frames []string
	var user []bool
	out := make([][]int32, len(stacks))
	for i, st := range stacks {
		out[i] = make([]int32, len(st))
		for j, f := range st {
			k, ok := idx[f]
			if !ok {
				k = int32(len(frames))
				idx[f] = k
				frames = append(frames, f.Name+" ("+f.Filename+":"+strconv.Itoa(f.Line)+")")
				user = append(user, userFrame(f))
			}
			out[i][j] = k
		}
	}
	return out, frames, user
}

// spans turns one device's record_function annotations into op ranges: a
// START and the END of the same name that follows it make one span.
func spans(ann []trace.Annotation, device int, times []int64) []figures.Span {
	opAt := func(t int64) int {
		return sort.Search(len(times), func(i int) bool { return times[i] >= t })
	}
	open := map[string][]int{}
	var out []figures.Span
	for _, a := range ann {
		if a.Device != device {
			continue
		}
		name := a.Fields["name"]
		switch a.Fields["stage"] {
		case "START":
			open[name] = append(open[name], opAt(a.TimeUS))
		case "END":
			if st := open[name]; len(st) > 0 {
				out = append(out, figures.Span{Name: name, Start: st[len(st)-1], End: opAt(a.TimeUS)})
				open[name] = st[:len(st)-1]
			}
		default:
			k := opAt(a.TimeUS)
			out = append(out, figures.Span{Name: name, Start: k, End: k})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// opTimes is the recorded time of each op of plan: that of the alloc or
// free_completed event it replays, or of the next such event.
func opTimes(ev []int64, plan *replay.Plan) []int64 {
	if len(ev) == 0 {
		return nil
	}
	out := make([]int64, len(plan.Event))
	for i, k := range plan.Event {
		out[i] = ev[min(int(k), len(ev)-1)]
	}
	// keep it monotonic: a free_requested op takes the next event's time
	for i := 1; i < len(out); i++ {
		out[i] = max(out[i], out[i-1])
	}
	return out
}
