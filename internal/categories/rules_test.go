package categories

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/gpumem/gpumem/pkg/trace"
)

// program writes a synthetic trace: each call adds an event one
// microsecond after the last.
type program struct {
	snap trace.Snapshot
	now  int64
	next uint64
}

func (p *program) alloc(size uint64) uint64 {
	p.next += 1 << 20
	p.now++
	p.snap.Traces[0] = append(p.snap.Traces[0], trace.Event{Action: trace.ActionAlloc, Addr: p.next, Size: size, Stack: -1, TimeUS: p.now})
	return p.next
}

func (p *program) free(addr uint64) {
	p.now++
	p.snap.Traces[0] = append(p.snap.Traces[0], trace.Event{Action: trace.ActionFreeRequested, Addr: addr, Stack: -1, TimeUS: p.now})
}

func (p *program) mark(name, stage string) {
	p.now++
	p.snap.Annotations = append(p.snap.Annotations, trace.Annotation{TimeUS: p.now, Fields: map[string]string{"name": name, "stage": stage}})
}

// training writes steps iterations of a small training loop and returns
// the category each address should get.
func training(steps int, setToNone bool) (*trace.Snapshot, map[uint64]Category) {
	p := &program{snap: trace.Snapshot{Traces: [][]trace.Event{nil}}}
	want := map[uint64]Category{}
	w1, w2 := p.alloc(4096), p.alloc(8192) // model.to(device)
	want[w1], want[w2] = Parameter, Parameter
	want[p.alloc(1024)] = Buffer // a running mean: no gradient has its size
	var x, loss uint64
	var states, grads []uint64
	for i := range steps {
		nx := p.alloc(65536) // the batch
		if x != 0 {
			p.free(x)
		}
		x = nx
		want[x] = Input
		t := p.alloc(16384) // forward: a temporary
		want[t] = Temporary
		a1 := p.alloc(32768)
		p.free(t)
		a2 := p.alloc(32768)
		want[a1], want[a2] = Activation, Activation
		if i == 0 {
			ws := p.alloc(1 << 22) // cuBLAS's workspace, at the first matmul
			want[ws] = Workspace
		}
		nl := p.alloc(512)
		if loss != 0 {
			p.free(loss)
		}
		loss = nl
		want[loss] = Activation // the forward's result, kept past the step
		// backward
		bt := p.alloc(32768)
		want[bt] = Temporary
		if i == 0 || setToNone {
			grads = []uint64{p.alloc(8192), p.alloc(4096)}
			for _, g := range grads {
				want[g] = Gradient
			}
		}
		p.free(a2)
		p.free(bt)
		p.free(a1)
		p.mark("Optimizer.step#AdamW.step", "START")
		if i == 0 {
			states = []uint64{p.alloc(4096), p.alloc(4096), p.alloc(8192), p.alloc(8192)}
			for _, s := range states {
				want[s] = OptimizerState
			}
		}
		st := p.alloc(8192)
		want[st] = Temporary
		p.free(st)
		p.mark("Optimizer.step#AdamW.step", "END")
		p.mark("Optimizer.zero_grad#AdamW.zero_grad", "START")
		if setToNone {
			for _, g := range grads {
				p.free(g)
			}
		}
		p.mark("Optimizer.zero_grad#AdamW.zero_grad", "END")
	}
	return &p.snap, want
}

// addrs is the address of each block of r, classified from snap: a
// block live before the trace has its own, the trace's k-th its k-th
// alloc's.
func addrs(r *Result, snap *trace.Snapshot) []uint64 {
	out := slices.Clone(r.headAddr)
	for _, e := range snap.Traces[r.Device] {
		if e.Action == trace.ActionAlloc {
			out = append(out, e.Addr)
		}
	}
	return out
}

func check(t *testing.T, snap *trace.Snapshot, r *Result, want map[uint64]Category) {
	t.Helper()
	addr := addrs(r, snap)
	for i, b := range r.All() {
		if w, ok := want[addr[i]]; ok && b.Category != w {
			t.Errorf("block at %#x of %d B born at %d: %s (%s), want %s", addr[i], b.Size(), b.Born, b.Category, b.Rule, w)
		}
	}
	var sum uint64
	_, bytes, held := peakOf(r)
	for _, n := range held {
		sum += n
	}
	if sum != bytes || sum == 0 {
		t.Errorf("categories sum to %d at the peak, allocated %d", sum, bytes)
	}
}

func TestRulesTraining(t *testing.T) {
	for _, setToNone := range []bool{true, false} {
		snap, want := training(3, setToNone)
		r := Classify(snap, 0)
		if r.Steps != 3 || r.Method != "lifetimes and annotations" {
			t.Errorf("set_to_none=%v: %d steps, method %q", setToNone, r.Steps, r.Method)
		}
		check(t, snap, r, want)
	}
}

func TestRulesLeak(t *testing.T) {
	// losses kept with their graphs: every iteration's activations
	// outlive it
	p := &program{snap: trace.Snapshot{Traces: [][]trace.Event{nil}}}
	want := map[uint64]Category{}
	w := p.alloc(4096)
	want[w] = Parameter
	for i := range 3 {
		t := p.alloc(4096)
		p.free(t)
		kept := p.alloc(32768) // saved by the graph the kept loss holds
		want[t] = Temporary
		want[kept] = Activation
		if i == 0 {
			want[kept] = Workspace // a known failure: kept from the first forward, like cuBLAS's workspace
		}
		g := p.alloc(4096)
		want[g] = Gradient
		p.mark("Optimizer.step#SGD.step", "START")
		p.mark("Optimizer.step#SGD.step", "END")
		p.mark("Optimizer.zero_grad#SGD.zero_grad", "START")
		p.free(g)
		p.mark("Optimizer.zero_grad#SGD.zero_grad", "END")
	}
	r := Classify(&p.snap, 0)
	check(t, &p.snap, r, want)
	if _, _, held := peakOf(r); held[Activation] != 2*32768 {
		t.Errorf("activations at the peak: %d, want the two graphs kept past the first iteration", held[Activation])
	}
}

func TestRulesNoSteps(t *testing.T) {
	p := &program{snap: trace.Snapshot{Traces: [][]trace.Event{nil}}}
	w := p.alloc(4096)
	x := p.alloc(8192)
	p.free(x)
	y := p.alloc(2048) // after the first free: no structure, whatever its life
	z := p.alloc(1024)
	p.free(z)
	r := Classify(&p.snap, 0)
	check(t, &p.snap, r, map[uint64]Category{w: Parameter, x: Unknown, y: Unknown, z: Unknown})
	if r.Method != "lifetimes only (no optimizer step marks)" {
		t.Errorf("method %q", r.Method)
	}
}

func TestRulesBeforeTrace(t *testing.T) {
	// a ring buffer kept the last events only: blocks freed without an
	// alloc, and blocks of the final segments the trace never saw made
	snap, want := training(2, true)
	events := snap.Traces[0]
	snap.Segments = []trace.Segment{{Device: 0, Address: 1 << 40, TotalSize: 1 << 20,
		Blocks: []trace.Block{{Address: 1 << 40, Size: 1 << 20, State: trace.BlockAllocated, Stack: -1}}}}
	snap.Traces[0] = append([]trace.Event{{Action: trace.ActionFreeRequested, Addr: 1 << 41, Size: 512, TimeUS: 0}}, events...)
	r := Classify(snap, 0)
	want[1<<40] = Buffer // no gradient has its size
	want[1<<41] = Unknown
	check(t, snap, r, want)
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Category
		ok   bool
	}{{"activations", Activation, true}, {"optimizer_state", OptimizerState, true}, {"optimizer_states", OptimizerState, true},
		{"unknown", Unknown, true}, {"weights", Unknown, false}} {
		if got, ok := Parse(c.in); got != c.want || ok != c.ok {
			t.Errorf("Parse(%q) = %s, %v", c.in, got, ok)
		}
	}
}

func TestRemedies(t *testing.T) {
	var at [NumCategories]uint64
	at[Parameter], at[Gradient], at[OptimizerState], at[Activation] = 100, 100, 200, 1000
	got := map[string]uint64{}
	for _, r := range Remedies(at, 400, 4) {
		got[r.Name] = r.Bytes
	}
	want := map[string]uint64{
		"not keeping results past their step (a leak)":                 400,
		"activation checkpointing":                                     600,
		"bf16 weights, gradients and activations":                      600,
		"sharding optimizer state and gradients over 4 ranks (ZeRO-2)": 225,
		"also sharding parameters over 4 ranks (ZeRO-3, FSDP)":         300,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

// The same GPT-2 run recorded with and without stacks gets the same
// categories: the rules need no stacks.
func TestStacksOptional(t *testing.T) {
	var at [2][NumCategories]uint64
	for i, name := range []string{"gpt2_varlen", "gpt2_varlen_stacks"} {
		snap, err := trace.Open("../../testdata/pytorch/" + name + ".pickle")
		if err != nil {
			t.Fatal(err)
		}
		r := Classify(snap, 0)
		if want := []bool{false, true}[i]; r.Stacks != want || r.Steps != 8 {
			t.Fatalf("%s: stacks %v, %d steps", name, r.Stacks, r.Steps)
		}
		_, _, at[i] = peakOf(r)
	}
	// the backward's start differs by an allocation: 512 B of the loss's
	// gradient moves between activation and temporary
	for c := range at[0] {
		if d := int64(at[0][c]) - int64(at[1][c]); d > 4096 || d < -4096 {
			t.Errorf("%s: %d without stacks, %d with", Category(c), at[0][c], at[1][c])
		}
	}
	if at[0][Activation] == 0 || at[0][Parameter] == 0 || at[0][OptimizerState] != 2*at[0][Parameter] {
		t.Errorf("without stacks %v", at[0])
	}
}

// DistributedDataParallel rebuilds its gradient buckets at the second
// forward and keeps them: state made once, the parameters' size, so
// gradients, and no leak.
func TestDDPBuckets(t *testing.T) {
	snap, err := trace.Open("../../testdata/pytorch/ddp/ddp_gpt2.rank0.pickle")
	if err != nil {
		t.Fatal(err)
	}
	r := Classify(snap, 0)
	_, _, held := peakOf(r)
	p, g, o := held[Parameter], held[Gradient], held[OptimizerState]
	if p == 0 || g < p-p/10 || g > p+p/10 || o != 2*p {
		t.Errorf("parameters %d, gradients %d, optimizer state %d", p, g, o)
	}
	for _, b := range r.All() {
		if b.KeptPastStep() {
			t.Fatalf("a leak: %+v", b)
		}
	}
}

// A CUDA graph's capture runs on a stream of its own, with a cuBLAS
// handle and workspace pair of its own: workspace, not a leak, though
// more than one iteration made one.
func TestCublasPairsAreNoLeak(t *testing.T) {
	snap, err := trace.Open("../../testdata/pytorch/graph_convnet.pickle")
	if err != nil {
		t.Fatal(err)
	}
	r := Classify(snap, 0)
	pairs := 0
	for _, b := range r.All() {
		if b.KeptPastStep() {
			t.Errorf("a leak: %+v", b)
		}
		if b.Rule == ruleCublas && b.Size() == 32<<20 {
			pairs++
		}
	}
	if _, _, held := peakOf(r); pairs < 2 || held[Workspace] < 64<<20 {
		t.Errorf("%d cuBLAS pairs, %d bytes of workspace at the peak", pairs, held[Workspace])
	}
}

// A big trace has millions of blocks, each kept until the trace is read:
// a block holds no address, its Born as an offset in its group, its
// Freed as its lifetime and its size as an index among the sizes, and
// packs into 6 bytes, and its category, phase and rule (the rule's
// number, not its text) into 2 more. The rule still prints as its text,
// and every block keeps its Born, Freed and size, those that do not fit
// included (kept apart): a Born far from its group's first, long lives,
// sizes past the first 65535.
func TestBlockSize(t *testing.T) {
	if n := unsafe.Sizeof(rec{}); n > 6 {
		t.Errorf("a block takes %d bytes, want at most 6", n)
	}
	sizes := []uint64{0, 1, 511, 512, 1 << 20, 1<<32 + 512, 1<<39 - 1, 1 << 39, 1<<41 - 512, 1 << 41, 1<<48 - 512, 3 << 40}
	type want struct {
		born, freed int32 // freed -1: never
		size        uint64
	}
	var wants []want
	born := int32(0)
	for i := range 3*(1<<bornGroupBits) + 100 {
		switch {
		case i == 5000 || i == 9000: // a group's blocks far apart
			born += 1 << 16
		case i%7 == 0:
			born += 3
		default:
			born++
		}
		w := want{born, born + int32(i%5)*100, sizes[i%len(sizes)]}
		switch i % 11 {
		case 3:
			w.freed = -1
		case 4:
			w.freed = born + 1<<20 // long-lived
		case 5:
			w.freed = born + lifeFar - 1
		case 6:
			w.freed = born + lifeFar
		}
		wants = append(wants, w)
	}
	wants[len(wants)-1].size = ^uint64(0)
	var l blockList
	for _, w := range wants {
		l.add(w.born, w.size)
	}
	for i, w := range wants {
		if w.freed >= 0 {
			l.setFreed(i, w.freed)
		}
	}
	const end = 1 << 30
	for i, w := range wants {
		if w.freed < 0 {
			w.freed = end
		}
		if w.size == ^uint64(0) {
			w.size = 1<<48 - 512 // the largest kept, below 256 TiB
		}
		b := l.block(i, l.recs.at(i), end)
		if b.Born != w.born || b.Freed != w.freed || b.Size() != w.size ||
			l.born(i) != w.born || l.freed(i, end) != w.freed || l.size(i) != w.size {
			t.Fatalf("block %d: %+v (born %d freed %d size %d), want %+v", i, b, l.born(i), l.freed(i, end), l.size(i), w)
		}
	}
	if len(l.far) == 0 || len(l.late) == 0 || len(l.odd) != 0 || len(l.sizes) != len(sizes) {
		t.Errorf("kept apart: %d Borns, %d Freeds, %d sizes; want some Borns and Freeds; %d sizes, want %d",
			len(l.far), len(l.late), len(l.odd), len(l.sizes), len(sizes))
	}
	var many blockList // more sizes than an index holds
	for i := range oddSize + 100 {
		many.add(int32(i), uint64(i%(oddSize+50)+1)<<9)
	}
	many.done()
	for i := range oddSize + 100 {
		if got, want := many.size(i), uint64(i%(oddSize+50)+1)<<9; got != want {
			t.Fatalf("block %d of many sizes: size %d, want %d", i, got, want)
		}
	}
	if len(many.odd) != 50 {
		t.Errorf("%d sizes kept apart, want the 50 of sizes past the first 65535 (the rest repeat earlier ones)", len(many.odd))
	}
	// a byte a block while its classes are few, two past 256 of them
	cl := newClasses(1000)
	wantCls := make([]uint16, 1000)
	for i := range wantCls {
		wantCls[i] = uint16(i%40) << 4
		if i >= 500 {
			wantCls[i] = uint16(i*7) % (1 << 13)
		}
		cl.set(i, wantCls[i])
		if i == 499 && (cl.wide != nil || len(cl.values) != 40) {
			t.Fatalf("40 classes: wide %v, %d values", cl.wide != nil, len(cl.values))
		}
	}
	for i, w := range wantCls {
		if got := cl.get(i); got != w {
			t.Fatalf("block %d: class %#x, want %#x", i, got, w)
		}
	}
	if cl.wide == nil {
		t.Error("past 256 classes, still a byte a block")
	}
	// setFrom gives every block from one on a class, two bytes a block or one
	cl.setFrom(900, 0x123)
	few := newClasses(10)
	few.set(0, 1<<4)
	few.setFrom(3, 2<<4)
	for i := range 1000 {
		want := wantCls[i]
		if i >= 900 {
			want = 0x123
		}
		if got := cl.get(i); got != want {
			t.Fatalf("block %d after setFrom: class %#x, want %#x", i, got, want)
		}
		if i >= 10 {
			continue
		}
		switch {
		case i == 0:
			want = 1 << 4
		case i >= 3:
			want = 2 << 4
		default:
			want = 0
		}
		if got := few.get(i); got != want {
			t.Fatalf("block %d of a few after setFrom: class %#x, want %#x", i, got, want)
		}
	}
	for _, c := range []Category{Parameter, Unknown} {
		for _, p := range []Phase{Setup, After} {
			for _, rule := range []Rule{ruleNone, ruleCublas} {
				if gc, gp, gr := unpackCls(packCls(c, p, rule)); gc != c || gp != p || gr != rule {
					t.Errorf("%v %v %v packed and back: %v %v %v", c, p, rule, gc, gp, gr)
				}
			}
		}
	}
	b := Block{Category: Activation, Rule: ruleOutlives}
	if got := fmt.Sprintf("%s", b.Rule); got != "born in forward, kept past the next step, in several iterations" || !b.KeptPastStep() {
		t.Errorf("rule prints as %q, kept past step %v", got, b.KeptPastStep())
	}
	for r := ruleNone + 1; int(r) < len(ruleNames); r++ {
		if r.String() == "" {
			t.Errorf("rule %d has no text", r)
		}
	}
}

// peakOf is the peak of allocated memory the blocks' lifetimes give: the
// first position after which it was highest (-1: before the first event),
// that memory, and what each category held then.
func peakOf(r *Result) (at int, bytes uint64, held [NumCategories]uint64) {
	delta := make([]int64, r.Positions+1)
	var cur int64
	for _, b := range r.All() {
		if b.Born < 0 {
			cur += int64(b.Size())
		} else {
			delta[b.Born] += int64(b.Size())
		}
		if int(b.Freed) < r.Positions {
			delta[b.Freed] -= int64(b.Size())
		}
	}
	best, at := cur, -1
	for p := 0; p < r.Positions; p++ {
		cur += delta[p]
		if cur > best {
			best, at = cur, p
		}
	}
	for _, b := range r.All() {
		if int(b.Born) > at {
			break // the blocks come in the order they were born
		}
		if int(b.Freed) > at {
			held[b.Category] += b.Size()
		}
	}
	return at, uint64(max(best, 0)), held
}

// InOrder finds what ByEvent finds, asked in order or not.
func TestInOrder(t *testing.T) {
	snap, err := trace.Open("testdata/profiler/gpt.pickle.gz")
	if err != nil {
		t.Fatal(err)
	}
	r := Classify(snap, 0)
	var last int32
	for i := range r.All() {
		last = max(last, r.Event(i))
	}
	for _, events := range [][]int32{{-1, 0, 1, 2, 3, 5, 8, 13, last, last + 1}, {7, 3, 3, 9, 0, last}} {
		in := r.InOrder()
		for _, e := range events {
			got, ok := in(e)
			if want, wok := r.ByEvent(e); ok != wok || ok && got != want.Category {
				t.Errorf("event %d of %v: %v %v, ByEvent %+v %v", e, events, got, ok, want, wok)
			}
		}
	}
}

// A born block's event and stack, kept beside it, come back as its alloc
// event's: across chunks, a chunk whose first stack comes late, and
// events far from the position (free_requested events whose
// free_completed never comes; then free_completed events alone).
func TestEventAndStack(t *testing.T) {
	var events []trace.Event
	n := 3<<chunkBits/2 + 10
	for i := range n {
		stack := int32(-1)
		if i >= 1<<chunkBits+100 {
			stack = int32(i % 5)
		}
		addr := uint64(i+1) << 20
		events = append(events, trace.Event{Action: trace.ActionAlloc, Addr: addr, Size: 512, Stack: stack, TimeUS: int64(i)})
		switch {
		case i < 40_000:
			events = append(events, trace.Event{Action: trace.ActionFreeRequested, Addr: addr, TimeUS: int64(i)})
		case i < 90_000:
			events = append(events, trace.Event{Action: trace.ActionFreeCompleted, Addr: addr, TimeUS: int64(i)})
		}
	}
	snap := &trace.Snapshot{Traces: [][]trace.Event{events}}
	r := Classify(snap, 0)
	if r.NumBlocks() != n {
		t.Fatalf("%d blocks, want %d", r.NumBlocks(), n)
	}
	var event int32
	k := 0
	for _, e := range events {
		switch e.Action {
		case trace.ActionAlloc:
			if got := r.Event(k); got != event {
				t.Fatalf("block %d: event %d, want %d", k, got, event)
			}
			if got := r.Stack(k); got != e.Stack {
				t.Fatalf("block %d: stack %d, want %d", k, got, e.Stack)
			}
			if b, ok := r.ByEvent(event); !ok || b != r.Block(k) {
				t.Fatalf("ByEvent(%d) is not block %d", event, k)
			}
			k++
			event++
		case trace.ActionFreeCompleted:
			event++
		}
	}
	if w := []uint8{r.side.ev[0].w, r.side.ev[1].w}; w[0] != 4 || w[1] != 2 {
		t.Errorf("events kept in %v bytes per chunk, want [4 2]", w)
	}
}
