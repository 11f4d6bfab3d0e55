package workload

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// fragDemo is the classic fragmentation demonstration, op for op what the
// recorded PyTorch run seed_frag did:
//
//	xs = [torch.randn(128, 128*(i%10+1)).cuda() for i in range(100)]  # every
//	      third (i%3 == 0) dropped as soon as it is made
//	y = torch.empty(4 << 20, dtype=torch.uint8, device="cuda"); del y
//	torch.cuda.empty_cache()
//	del xs  # CPython frees a list's items last to first
func fragDemo() Builtin {
	return Builtin{
		Name:        "frag-demo",
		Description: "100 fp32 tensors of shape (128, 128·(i%10+1)), every third freed at once, then 4 MiB and empty_cache",
		Build: func(params map[string]string) (*Workload, error) {
			if err := checkParams("frag-demo", params, nil); err != nil {
				return nil, err
			}
			b := newBuilder("frag-demo", "")
			b.phase("tensors")
			var kept []string
			for i := range 100 {
				name := fmt.Sprintf("x[%d]", i)
				if err := b.alloc(name, 4*128*128*uint64(i%10+1), 0); err != nil {
					return nil, err
				}
				if i%3 == 0 {
					if err := b.release(name); err != nil {
						return nil, err
					}
					continue
				}
				kept = append(kept, name)
			}
			b.phase("4 MiB")
			if err := b.alloc("y", 4*mib, 0); err != nil {
				return nil, err
			}
			if err := b.release("y"); err != nil {
				return nil, err
			}
			if err := b.emptyCache(); err != nil {
				return nil, err
			}
			b.phase("teardown")
			for i := len(kept) - 1; i >= 0; i-- {
				if err := b.release(kept[i]); err != nil {
					return nil, err
				}
			}
			return b.finish()
		},
	}
}

// freeButFails leaves 4 GiB free in eight 512 MiB holes, one in each of
// eight 1 GiB segments that a live block pins; with the device full, a
// 2 GiB request finds no hole big enough and no whole segment to release.
func freeButFails() Builtin {
	return Builtin{
		Name:        "free-but-fails",
		Description: "4 GiB free, yet a 2 GiB request fails: the free memory is in 512 MiB holes of pinned segments (8 GiB device)",
		Build: func(params map[string]string) (*Workload, error) {
			if err := checkParams("free-but-fails", params, nil); err != nil {
				return nil, err
			}
			b := newBuilder("free-but-fails", "")
			b.w.Limit = 8 * gib
			steps := []func() error{
				func() error { b.phase("fill the device with 1 GiB segments"); return nil },
				repeatN(8, func(k int) error { return b.alloc(fmt.Sprintf("big[%d]", k), gib, 0) }),
				repeatN(8, func(k int) error { return b.release(fmt.Sprintf("big[%d]", k)) }),
				func() error { b.phase("reuse the cache in 512 MiB halves"); return nil },
				repeatN(16, func(k int) error { return b.alloc(fmt.Sprintf("half[%d]", k), 512*mib, 0) }),
				func() error { b.phase("free every other half"); return nil },
				repeatN(8, func(k int) error { return b.release(fmt.Sprintf("half[%d]", 2*k)) }),
				func() error { b.phase("ask for 2 GiB"); return nil },
				func() error { return b.alloc("want", 2*gib, 0) },
			}
			for _, s := range steps {
				if err := s(); err != nil {
					return nil, err
				}
			}
			return b.finish()
		},
	}
}

func repeatN(n int, f func(int) error) func() error {
	return func() error {
		for k := range n {
			if err := f(k); err != nil {
				return err
			}
		}
		return nil
	}
}

// The strategy workloads share one toy training loop whose sequence
// length changes every step, so that the same work under each strategy
// can be compared: peak reserved, fragmentation, device calls.
var strategyParams = []Param{
	{"steps", "20", "training steps, 1 to 1048576"},
	{"seed", "7", "seed of the per-step sequence lengths, 1 to 1048576"},
	{"layers", "6", "layers, 1 to 1048576"},
	{"hidden", "1024", "hidden size, 1 to 1048576"},
	{"batch", "16", "batch size, 1 to 1048576"},
	{"maxseq", "2048", "longest sequence, 128 to 1048576; each step draws a multiple of 128 up to it"},
}

type strategy struct {
	name, desc string
	extra      []Param
	// keep: intermediates and last step's output stay referenced (the
	// default); otherwise they are freed as soon as they are dead.
	keep bool
	// every: empty_cache every so many steps (0: never).
	everyParam bool
	pool       bool // buffers sized for maxseq made once, reused each step
	warmup     bool // one step at maxseq first
}

func strategies() []Builtin {
	list := []strategy{
		{name: "strategy-default", desc: "toy training loop with varying sequence length, PyTorch defaults: intermediates and last outputs stay referenced", keep: true},
		{name: "strategy-free-early", desc: "the same loop freeing each intermediate as soon as it is dead (del, no lingering outputs)"},
		{name: "strategy-empty-cache", desc: "the default loop calling empty_cache every N steps", keep: true, everyParam: true,
			extra: []Param{{"every", "5", "steps between empty_cache calls, 1 to 1048576"}}},
		{name: "strategy-pool", desc: "the same loop with buffers preallocated for the longest sequence and reused", pool: true},
		{name: "strategy-warmup", desc: "the default loop after one warm-up step at the longest sequence", keep: true, warmup: true},
	}
	out := make([]Builtin, len(list))
	for i, s := range list {
		known := append(append([]Param{}, strategyParams...), s.extra...)
		out[i] = Builtin{
			Name:        s.name,
			Description: s.desc,
			Params:      known,
			Build: func(params map[string]string) (*Workload, error) {
				if err := checkParams(s.name, params, known); err != nil {
					return nil, err
				}
				n := map[string]uint64{}
				for _, p := range known {
					v, err := strconv.ParseUint(param(params, known, p.Name), 10, 64)
					if err != nil || v == 0 || v > 1<<20 {
						return nil, fmt.Errorf("%s: parameter %s=%s: want an integer from 1 to %d", s.name, p.Name, quote(param(params, known, p.Name)), 1<<20)
					}
					n[p.Name] = v
				}
				if n["maxseq"] < 128 {
					return nil, fmt.Errorf("%s: maxseq must be at least 128", s.name)
				}
				b := newBuilder(s.name, s.desc)
				return s.build(b, n)
			},
		}
	}
	return out
}

func (s strategy) build(b *builder, n map[string]uint64) (*Workload, error) {
	rng := rand.New(rand.NewPCG(n["seed"], 0))
	maxSeq := n["maxseq"] / 128 * 128
	t := toy{b: b, layers: int(n["layers"]), hidden: n["hidden"], batch: n["batch"], keep: s.keep}
	if err := checkBytes(t.batch * maxSeq * t.hidden * 4 * 4); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	if s.pool {
		b.phase("preallocate")
		if err := t.allocPool(maxSeq); err != nil {
			return nil, err
		}
	}
	if s.warmup {
		b.phase("warm-up")
		if err := t.step(maxSeq); err != nil {
			return nil, err
		}
	}
	for step := range n["steps"] {
		seq := 128 * (1 + rng.Uint64N(maxSeq/128))
		b.phase(fmt.Sprintf("step %d (seq %d)", step, seq))
		var err error
		if s.pool {
			err = t.poolStep()
		} else {
			err = t.step(seq)
		}
		if err != nil {
			return nil, err
		}
		if s.everyParam && (step+1)%n["every"] == 0 {
			if err := b.emptyCache(); err != nil {
				return nil, err
			}
		}
	}
	b.phase("teardown")
	if err := t.teardown(); err != nil {
		return nil, err
	}
	return b.finish()
}

// checkBytes rejects parameters whose tensors would not fit any device.
func checkBytes(n uint64) error {
	if n > maxSize {
		return fmt.Errorf("tensors of %d bytes are too large", n)
	}
	return nil
}

// toy is a small MLP stack trained with a loss over its output: per layer
// an activation (kept for backward) and a 4× wider intermediate.
type toy struct {
	b      *builder
	layers int
	hidden uint64
	batch  uint64
	keep   bool
	out    bool // an output of the last step is still referenced
	pooled bool
}

// step runs forward and backward at sequence length seq.
func (t *toy) step(seq uint64) error {
	b := t.b
	act := t.batch * seq * t.hidden * 4
	var err error
	do := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	for l := range t.layers {
		do(func() error { return b.alloc(fmt.Sprintf("act[%d]", l), act, 0) })
		do(func() error { return b.alloc(fmt.Sprintf("mid[%d]", l), 4*act, 0) })
		if !t.keep {
			// Only the activation is needed for backward in this model.
			do(func() error { return b.release(fmt.Sprintf("mid[%d]", l)) })
		}
	}
	// The new output is made while the last one is still referenced.
	do(func() error { return b.alloc("out.new", act, 0) })
	if t.out {
		do(func() error { return b.release("out") })
	}
	do(func() error { b.rename("out.new", "out"); return nil })
	t.out = true
	for l := t.layers - 1; l >= 0; l-- {
		do(func() error { return b.alloc("grad", act, 0) })
		do(func() error { return b.alloc("gmid", 4*act, 0) })
		do(func() error { return b.release("gmid") })
		do(func() error { return b.release("grad") })
		if t.keep {
			do(func() error { return b.release(fmt.Sprintf("mid[%d]", l)) })
		}
		do(func() error { return b.release(fmt.Sprintf("act[%d]", l)) })
	}
	if !t.keep {
		do(func() error { t.out = false; return b.release("out") })
	}
	return err
}

// allocPool makes every buffer a step needs, sized for seq, once.
func (t *toy) allocPool(seq uint64) error {
	act := t.batch * seq * t.hidden * 4
	t.pooled = true
	for l := range t.layers {
		if err := t.b.alloc(fmt.Sprintf("act[%d]", l), act, 0); err != nil {
			return err
		}
		if err := t.b.alloc(fmt.Sprintf("mid[%d]", l), 4*act, 0); err != nil {
			return err
		}
	}
	for _, x := range []struct {
		name string
		size uint64
	}{{"out", act}, {"grad", act}, {"gmid", 4 * act}} {
		if err := t.b.alloc(x.name, x.size, 0); err != nil {
			return err
		}
	}
	return nil
}

// poolStep does a step inside the pool: the allocator sees nothing.
func (t *toy) poolStep() error { return nil }

func (t *toy) teardown() error {
	var names []string
	if t.pooled {
		names = append(names, "gmid", "grad", "out")
		for l := t.layers - 1; l >= 0; l-- {
			names = append(names, fmt.Sprintf("mid[%d]", l), fmt.Sprintf("act[%d]", l))
		}
	} else if t.out {
		names = append(names, "out")
	}
	for _, n := range names {
		if err := t.b.release(n); err != nil {
			return err
		}
	}
	return nil
}

// parseBool accepts the spellings people type on command lines.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "t", "true", "yes", "on":
		return true, nil
	case "0", "f", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%s is not true or false", quote(s))
}

// Completions are the built-in workloads as shell completion offers
// them: each name, a tab, the first line of its description.
func Completions() []string {
	var out []string
	for _, b := range Builtins() {
		d := b.Description
		if i := strings.IndexByte(d, '\n'); i >= 0 {
			d = d[:i]
		}
		out = append(out, b.Name+"\t"+d)
	}
	return out
}
