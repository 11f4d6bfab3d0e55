package categories

import (
	"sort"
	"strings"

	"github.com/gpumem/gpumem/pkg/trace"
)

// span is a range [lo, hi) of positions.
type span struct{ lo, hi int }

func (s span) has(p int) bool { return p >= s.lo && p < s.hi }

// structure is the step structure of a trace: its optimizer steps and
// zero_grad calls, and per iteration where forward and backward begin.
type structure struct {
	n     int
	steps []span // optimizer steps, in order, disjoint
	zero  []span // zero_grad calls
	// per iteration k (0..len(steps)): its region [start, end) before its
	// step, and where its forward (fwd) and backward (bwd) begin
	start, end, fwd, bwd []int
}

// ranges returns the [START, END] ranges of the annotations of device
// whose name starts with prefix, as positions.
func ranges(snap *trace.Snapshot, device int, times *clock, prefix string) []span {
	pos := func(t int64, after bool) int {
		return sort.Search(times.n, func(i int) bool { ti := times.at(i); return ti > t || !after && ti == t })
	}
	var out []span
	open := -1
	for _, a := range snap.Annotations {
		if a.Device != device || !strings.HasPrefix(a.Fields["name"], prefix) || a.TimeUS == 0 {
			continue
		}
		switch a.Fields["stage"] {
		case "START":
			open = pos(a.TimeUS, false)
		case "END":
			if open >= 0 {
				out = append(out, span{open, max(open, pos(a.TimeUS, true))})
				open = -1
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	// keep them disjoint (nested or repeated marks)
	k := 0
	for _, s := range out {
		if k > 0 && s.lo < out[k-1].hi {
			out[k-1].hi = max(out[k-1].hi, s.hi)
			continue
		}
		out[k] = s
		k++
	}
	return out[:k]
}

// inAny is the span of ss (in order, disjoint) that holds p, -1 if none.
// It searches as sort.Search does, written out: a call of its function
// per step cost the rules a good part of their time.
func inAny(ss []span, p int) int {
	i, j := 0, len(ss) // the first span that ends after p is in [i, j]
	for i < j {
		if h := int(uint(i+j) >> 1); ss[h].hi > p {
			j = h
		} else {
			i = h + 1
		}
	}
	if i < len(ss) && ss[i].has(p) {
		return i
	}
	return -1
}

// cursor is inAny over ss for positions asked in increasing order, as
// the blocks' Borns come (Result.All): it steps past the spans that end
// at or before each, where inAny searches them all again.
type cursor struct {
	ss []span
	i  int // the first span that ends after the last position asked
}

// in is inAny(c.ss, p), p at least the last position asked.
func (c *cursor) in(p int) int {
	if i := c.next(p); i < len(c.ss) && c.ss[i].has(p) {
		return i
	}
	return -1
}

// next is the first span that ends after p (structure.iteration's
// answer, for the steps), p at least the last position asked.
func (c *cursor) next(p int) int {
	for c.i < len(c.ss) && c.ss[c.i].hi <= p {
		c.i++
	}
	return c.i
}

// kept reports whether b lives to the end of the trace, or at least
// past the end of the last of two or more steps (a program may free its
// model before the snapshot).
func (st *structure) kept(b *Block) bool {
	if k := len(st.steps); k >= 2 {
		return int(b.Freed) >= st.steps[k-1].hi
	}
	return int(b.Freed) >= st.n
}

// iteration is the iteration a position outside the steps falls in.
func (st *structure) iteration(p int) int {
	return sort.Search(len(st.steps), func(i int) bool { return st.steps[i].hi > p })
}

// classify puts every block of r into a category.
func classify(r *Result, snap *trace.Snapshot, times *clock) {
	st := &structure{n: r.Positions}
	st.steps = ranges(snap, r.Device, times, "Optimizer.step")
	st.zero = ranges(snap, r.Device, times, "Optimizer.zero_grad")
	r.Steps = len(st.steps)
	engine := engineAllocs(r, snap)
	st.phases(r, engine)
	decide(r, st)
	r.Method = method(r, engine != nil)
}

// engineAllocs returns the positions of the allocations made with no
// Python frame in a trace that records Python stacks: those made on the
// autograd engine's thread, in backward. nil when the trace has no stacks.
func engineAllocs(r *Result, snap *trace.Snapshot) []int32 {
	if !r.Stacks {
		return nil
	}
	out := []int32{}
	for i, b := range r.All() {
		if int(b.Born) >= 0 && !hasPythonFrame(snap, r.Stack(i)) {
			out = append(out, b.Born)
		}
	}
	return out
}

// hasPythonFrame reports whether stack st has a frame of a Python file.
func hasPythonFrame(snap *trace.Snapshot, st int32) bool {
	if st < 0 || int(st) >= len(snap.Stacks) {
		return false
	}
	for _, f := range snap.Stacks[st] {
		if strings.HasSuffix(f.Filename, ".py") {
			return true
		}
	}
	return false
}

// phases finds, per iteration, its region and where its forward and its
// backward begin.
func (st *structure) phases(r *Result, engine []int32) {
	k := len(st.steps)
	st.start, st.end = make([]int, k+1), make([]int, k+1)
	st.fwd, st.bwd = make([]int, k+1), make([]int, k+1)
	for i := 0; i <= k; i++ {
		if i > 0 {
			st.start[i] = st.steps[i-1].hi
		}
		st.end[i] = st.n
		if i < k {
			st.end[i] = st.steps[i].lo
		}
		st.fwd[i], st.bwd[i] = st.end[i], st.end[i]
	}
	if k == 0 {
		return
	}
	// forward begins with the first block of the iteration freed before
	// its step (a transient); the first gradient (freed by zero_grad) is
	// born in backward
	grad := make([]int, k+1)
	copy(grad, st.end)
	steps, zero := cursor{ss: st.steps}, cursor{ss: st.zero}
	for _, b := range r.All() {
		if int(b.Born) < 0 || steps.in(int(b.Born)) >= 0 || zero.in(int(b.Born)) >= 0 {
			continue
		}
		i := steps.next(int(b.Born)) // st.iteration
		if int(b.Freed) < st.end[i] {
			st.fwd[i] = min(st.fwd[i], int(b.Born))
		}
		if i < k && inAny(st.zero, int(b.Freed)) >= 0 {
			grad[i] = min(grad[i], int(b.Born))
		}
	}
	// iteration 0 also holds the setup: its forward begins with the first
	// transient after the last block kept to the end that has a
	// parameter's size (paramSizes): the last parameter made
	sizes := st.paramSizes(r)
	last := -1 // each size stands for one parameter, made in order
	for _, b := range r.All() {
		if int(b.Born) >= grad[0] {
			break // the blocks come in the order they were born
		}
		if int(b.Born) >= 0 && st.kept(b) && sizes[b.Size()] > 0 {
			sizes[b.Size()]--
			last = max(last, int(b.Born))
		}
	}
	if last >= 0 {
		st.fwd[0] = st.end[0]
		for _, b := range r.All() {
			if int(b.Born) >= st.end[0] {
				break
			}
			if int(b.Born) > last && int(b.Freed) < st.end[0] && inAny(st.zero, int(b.Born)) < 0 {
				st.fwd[0] = min(st.fwd[0], int(b.Born))
			}
		}
	}
	for i := 0; i < k; i++ {
		st.bwd[i] = backwardStart(r, st, i, st.fwd[i], grad[i], engine)
	}
	st.bwd[k] = st.end[k] // after the last step: no backward
}

// backwardStart is where backward begins in iteration i, whose forward
// begins at lo and whose first gradient is born at grad: the first
// allocation of the autograd engine's thread when the trace has stacks;
// else just after the forward's result (the loss), the last block born
// before the first gradient that outlives the step; else the first
// gradient; else where the iteration's transients peak.
func backwardStart(r *Result, st *structure, i, lo, grad int, engine []int32) int {
	end := st.end[i]
	if engine != nil {
		j := sort.Search(len(engine), func(j int) bool { return int(engine[j]) >= lo })
		if j < len(engine) && int(engine[j]) < end {
			return int(engine[j])
		}
	}
	// the loss: the last such block freed before the end; else the last
	// one (gradients kept by zero_grad(set_to_none=False) are kept too)
	// the blocks born in [lo, end): Blocks are in birth order
	n := r.NumBlocks()
	from := sort.Search(n, func(j int) bool { return int(r.bornAt(j)) >= lo })
	born := func(yield func(Block) bool) {
		for j := from; j < n && int(r.bornAt(j)) < end; j++ {
			if !yield(r.Block(j)) {
				return
			}
		}
	}
	loss, anyKept := -1, -1
	for b := range born {
		if int(b.Born) < min(grad, end) && int(b.Freed) >= st.steps[i].hi {
			anyKept = max(anyKept, int(b.Born))
			if !st.kept(&b) {
				loss = max(loss, int(b.Born))
			}
		}
	}
	if loss < 0 {
		loss = anyKept
	}
	if loss >= 0 {
		return loss + 1
	}
	if grad < end {
		return grad
	}
	// where the iteration's transients peak
	delta := map[int]int64{}
	for b := range born {
		if int(b.Freed) < end {
			delta[int(b.Born)] += int64(b.Size())
			delta[int(b.Freed)] -= int64(b.Size())
		}
	}
	var cur, best int64
	at := end
	for p := lo; p < end; p++ {
		cur += delta[p]
		if cur > best {
			best, at = cur, p+1
		}
	}
	return at
}

// paramSizes are the parameters' sizes, with how many have each: those
// of the gradients zero_grad frees in the first iteration when there is
// one per parameter (each has an optimizer state's size), else those of
// the optimizer state the first step makes (halved when every count is
// even: Adam makes two per parameter). Sharded and bucketed gradients
// (FSDP's flat ones, DDP's buckets) do not have the parameters' sizes;
// optimizer state, made per parameter, does.
func (st *structure) paramSizes(r *Result) map[uint64]int {
	grads, states := map[uint64]int{}, map[uint64]int{}
	if len(st.steps) == 0 {
		return grads
	}
	for _, b := range r.All() {
		if int(b.Born) >= max(st.end[0], st.steps[0].hi) {
			break // the blocks come in the order they were born: none after counts
		}
		switch {
		case int(b.Born) < 0:
		case int(b.Born) < st.end[0] && inAny(st.zero, int(b.Born)) < 0 && inAny(st.zero, int(b.Freed)) >= 0:
			grads[b.Size()]++
		case st.steps[0].has(int(b.Born)) && int(b.Freed) >= st.steps[0].hi:
			states[b.Size()]++
		}
	}
	perParam := len(grads) > 0
	for size := range grads {
		if len(states) > 0 && states[size] == 0 {
			perParam = false
		}
	}
	if perParam {
		return grads
	}
	// Adam-like optimizers keep two states per parameter: when every
	// size's count is even, each pair stands for one parameter
	even := true
	for _, n := range states {
		even = even && n%2 == 0
	}
	if even {
		for size := range states {
			states[size] /= 2
		}
	}
	return states
}
