package categories

// Rule names the rule that decided a block's category; docs/categories.md
// gives each one's evidence and known failure cases. A block keeps the
// rule's number, not its text: a big trace has millions of blocks.
type Rule uint8

// The rules; ruleNone is a block no rule has decided yet.
const (
	ruleNone Rule = iota
	ruleStepTemp
	ruleStepKept
	ruleZeroFreed
	ruleZeroTemp
	ruleSaved
	rulePhaseTemp
	ruleStepFreed
	ruleSetupParam
	ruleSetupBuffer
	ruleSetupNoGrad
	ruleKeptGrad
	ruleWorkspace
	ruleInput
	ruleOutlives
	ruleHeld
	ruleMadeOnce
	ruleBuckets
	ruleBackwardKept
	ruleBeforeTrace
	ruleNoStructure
	ruleAfterTemp
	ruleAfterKept
	ruleNoStructPersi
	ruleCublas
)

var ruleNames = [...]string{ruleNone: "",
	ruleStepTemp:      "born and freed in optimizer.step",
	ruleStepKept:      "born in optimizer.step, kept past it",
	ruleZeroFreed:     "freed by zero_grad",
	ruleZeroTemp:      "born in zero_grad",
	ruleSaved:         "born in forward, freed in backward",
	rulePhaseTemp:     "born and freed in one phase",
	ruleStepFreed:     "freed in optimizer.step",
	ruleSetupParam:    "made before the first forward, kept to the end, a parameter's size",
	ruleSetupBuffer:   "made before the first forward, kept to the end, no parameter's size",
	ruleSetupNoGrad:   "made before the first forward, kept to the end (no gradients to tell)",
	ruleKeptGrad:      "born in the first backward, kept to the end, a gradient's size",
	ruleWorkspace:     "born in the first forward or backward, kept to the end",
	ruleInput:         "made before its iteration's forward, kept past its step",
	ruleOutlives:      "born in forward, kept past the next step, in several iterations",
	ruleHeld:          "born in forward, held into the next iteration",
	ruleMadeOnce:      "born in one forward after the first step and kept, not again",
	ruleBuckets:       "born in one forward after the first step and kept, not again, the parameters' size",
	ruleBackwardKept:  "born in backward, kept past its step, freed later but not by zero_grad",
	ruleBeforeTrace:   "live before the trace began",
	ruleNoStructure:   "no optimizer step in the trace",
	ruleAfterTemp:     "born and freed after the last step",
	ruleAfterKept:     "born in forward after the last step, kept to the end",
	ruleNoStructPersi: "made before anything was freed, kept to the end (no optimizer step)",
	ruleCublas:        "kept to the end, cuBLAS's workspace size",
}

// String is the rule's text, such as "born and freed in one phase".
func (r Rule) String() string {
	if int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return ""
}

// decide applies the rules to every block.
func decide(r *Result, st *structure) {
	k := len(st.steps)
	grads := map[uint64]int{} // sizes of the first iteration's gradients → how many
	gradIt := -1              // the iteration grads counts
	addGrad := func(it int, size uint64) {
		if gradIt < 0 {
			gradIt = it
		}
		if it == gradIt {
			grads[size]++
		}
	}
	var setup []int // made before the first forward and kept: parameters or buffers
	var keptBwd []int
	keptFwd := map[int][]int{} // iteration → blocks born in its forward and kept past the next step
	// the first position a block is freed at: the blocks come in the
	// order they were born, and none is freed before it is born, so the
	// walk stops at the first born at or after the earliest free so far
	firstFree := st.n
	for _, b := range r.All() {
		if int(b.Born) >= firstFree {
			break
		}
		if int(b.Freed) < st.n {
			firstFree = min(firstFree, int(b.Freed))
		}
	}
	steps, zero := cursor{ss: st.steps}, cursor{ss: st.zero} // over the Borns
	for i, b := range r.All() {
		p := int(b.Born)
		if p < 0 {
			switch {
			case st.kept(b):
				setup = append(setup, i)
				r.set(i, 0, Setup, ruleNone) // decided below
			case inAny(st.zero, int(b.Freed)) >= 0:
				r.set(i, Gradient, Backward, ruleZeroFreed)
			default:
				r.set(i, Unknown, Setup, ruleBeforeTrace)
			}
			continue
		}
		if k == 0 {
			if p >= firstFree {
				// this block and every one after it, born at or after
				// the first free, has no structure to go by
				r.setFrom(i, Unknown, After, ruleNoStructure)
				break
			}
			if int(b.Freed) == st.n {
				setup = append(setup, i)
				r.set(i, 0, Setup, ruleNone) // decided below
			} else {
				r.set(i, Unknown, After, ruleNoStructure)
			}
			continue
		}
		if j := steps.in(p); j >= 0 {
			if int(b.Freed) < st.steps[j].hi {
				r.set(i, Temporary, Optimizer, ruleStepTemp)
			} else {
				r.set(i, OptimizerState, Optimizer, ruleStepKept)
			}
			continue
		}
		if j := zero.in(p); j >= 0 {
			if int(b.Freed) < st.zero[j].hi {
				r.set(i, Temporary, ZeroGrad, ruleZeroTemp)
			} else {
				r.set(i, Unknown, ZeroGrad, ruleZeroTemp)
			}
			continue
		}
		it := steps.next(p) // st.iteration
		phase := Forward
		switch {
		case it == k:
			phase = After
		case p >= st.bwd[it]:
			phase = Backward
		case p < st.fwd[it] && it == 0:
			phase = Setup
		}
		r.set(i, 0, phase, ruleNone) // the phase alone: each branch below decides the rest
		if inAny(st.zero, int(b.Freed)) >= 0 {
			r.set(i, Gradient, phase, ruleZeroFreed)
			addGrad(it, b.Size())
			continue
		}
		if it == k { // after the last step
			switch {
			case int(b.Freed) < st.n:
				r.set(i, Temporary, phase, ruleAfterTemp)
			case p < st.fwd[it]:
				r.set(i, Input, phase, ruleInput)
			case cublasWorkspace(r, i):
				r.set(i, Workspace, phase, ruleCublas)
			default:
				r.set(i, Activation, phase, ruleAfterKept)
				keptFwd[it] = append(keptFwd[it], i)
			}
			continue
		}
		stepEnd := st.steps[it].hi
		switch {
		case int(b.Freed) < st.end[it]: // freed before its step
			if p < st.bwd[it] && int(b.Freed) >= st.bwd[it] {
				r.set(i, Activation, phase, ruleSaved)
			} else {
				r.set(i, Temporary, phase, rulePhaseTemp)
			}
		case int(b.Freed) < stepEnd:
			r.set(i, Temporary, phase, ruleStepFreed)
		case p < st.fwd[it]:
			if it == 0 && st.kept(b) {
				setup = append(setup, i)
			} else {
				r.set(i, Input, phase, ruleInput)
			}
		case p >= st.bwd[it] && st.kept(b) && cublasWorkspace(r, i):
			r.set(i, Workspace, phase, ruleCublas)
		case p >= st.bwd[it]:
			if it == 0 && st.kept(b) {
				keptBwd = append(keptBwd, i)
			} else {
				r.set(i, Unknown, phase, ruleBackwardKept)
				keptBwd = append(keptBwd, i)
			}
		default: // born in forward, kept past the step
			switch {
			case st.kept(b) && cublasWorkspace(r, i):
				r.set(i, Workspace, phase, ruleCublas)
			case it == 0 && st.kept(b):
				r.set(i, Workspace, phase, ruleWorkspace)
			case it+1 == k && st.kept(b): // the last iteration's: held to the end, or a leak's
				r.set(i, Activation, phase, ruleHeld)
				keptFwd[it] = append(keptFwd[it], i)
			case it+1 == k || int(b.Freed) < st.steps[it+1].hi:
				r.set(i, Activation, phase, ruleHeld) // a result the next iteration replaces
			default:
				r.set(i, Activation, phase, ruleOutlives)
				keptFwd[it] = append(keptFwd[it], i)
			}
		}
	}
	// blocks born in backward and kept past the step: when no gradient was
	// freed by zero_grad (zero_grad(set_to_none=False) keeps them),
	// gradients if they have a parameter's size; else workspace
	setupSizes := map[uint64]bool{}
	for _, i := range setup {
		b := r.Block(i)
		setupSizes[b.Size()] = true
	}
	sized := func(size uint64) bool {
		if len(grads) > 0 {
			return false // zero_grad frees them: what backward kept is no gradient
		}
		return setupSizes[size]
	}
	var kept []int
	for _, i := range keptBwd {
		if b := r.Block(i); sized(b.Size()) {
			kept = append(kept, i)
		} else if st.kept(&b) {
			r.set(i, Workspace, b.Phase, ruleWorkspace)
		}
	}
	for _, i := range kept {
		b := r.Block(i)
		r.set(i, Gradient, b.Phase, ruleKeptGrad)
		addGrad(st.iteration(int(b.Born)), b.Size())
	}
	// what was made before the first forward and kept: a parameter when it
	// has a parameter's size (paramSizes: a gradient's, else an optimizer
	// state's), else a buffer
	ps := st.paramSizes(r)
	if len(ps) == 0 && len(grads) > 0 {
		ps = grads // gradients kept by zero_grad(set_to_none=False), no optimizer state
	}
	for _, i := range setup {
		b := r.Block(i)
		switch {
		case k == 0 || len(ps) == 0:
			rule := ruleSetupNoGrad
			if k == 0 {
				rule = ruleNoStructPersi
			}
			r.set(i, Parameter, Setup, rule)
		case ps[b.Size()] > 0:
			ps[b.Size()]--
			r.set(i, Parameter, Setup, ruleSetupParam)
		default:
			r.set(i, Buffer, Setup, ruleSetupBuffer)
		}
	}
	var params uint64
	for _, i := range setup {
		if b := r.Block(i); b.Category == Parameter {
			params += b.Size()
		}
	}
	resolveKept(r, keptFwd, k, params)
}

// resolveKept decides the blocks born in forward and kept past the next
// step (keptFwd, by iteration; k-1 is the last iteration, k the tail
// after the last step). A leak repeats: blocks of a size kept in two or
// more iterations, and all such blocks when several iterations before
// the last kept some, are activations kept past their step. What one
// iteration before the last kept alone is state made once (oneOff); the
// last iteration's and the tail's other blocks are results kept to the
// end.
func resolveKept(r *Result, keptFwd map[int][]int, k int, params uint64) {
	its := map[uint64]map[int]bool{} // size → the iterations that kept one
	for it, bs := range keptFwd {
		for _, i := range bs {
			b := r.Block(i)
			if its[b.Size()] == nil {
				its[b.Size()] = map[int]bool{}
			}
			its[b.Size()][it] = true
		}
	}
	rest := map[int][]int{} // the middle iterations' blocks of no repeated size
	for it, bs := range keptFwd {
		for _, i := range bs {
			b := r.Block(i)
			switch {
			case len(its[b.Size()]) >= 2:
				r.setCategory(i, Activation, ruleOutlives)
			case it < k-1:
				rest[it] = append(rest[it], i)
			}
		}
	}
	if len(rest) >= 2 {
		for _, bs := range rest {
			for _, i := range bs {
				r.setCategory(i, Activation, ruleOutlives)
			}
		}
		return
	}
	oneOff(r, rest, params)
}

// oneOff decides the blocks born in forward and kept past the next step
// when only one iteration made any: no leak, which repeats, but state
// made once after the first step. When they add up to the parameters'
// size (within 10%) they are gradients, such as DistributedDataParallel's
// buckets rebuilt at the second forward; else workspace. Blocks of
// several iterations stay activations kept past their step.
func oneOff(r *Result, keptFwd map[int][]int, params uint64) {
	if len(keptFwd) != 1 {
		return
	}
	for _, bs := range keptFwd {
		var sum uint64
		for _, i := range bs {
			b := r.Block(i)
			sum += b.Size()
		}
		c, rule := Workspace, ruleMadeOnce
		if params > 0 && sum >= params-params/10 && sum <= params+params/10 {
			c, rule = Gradient, ruleBuckets
		}
		for _, i := range bs {
			r.setCategory(i, c, rule)
		}
	}
}

// cublasWorkspace reports whether block i is one of the pair PyTorch
// allocates once per cuBLAS handle (a thread and stream: the forward's,
// the autograd engine's, a graph capture's): cuBLAS's workspace, 32 MiB
// on Hopper (CUBLAS_WORKSPACE_CONFIG :4096:8) or 8 MiB + 128 KiB before
// (:4096:2:16:8), then at once cuBLASLt's 1 MiB, both kept. Only the
// pair counts: a result of 32 MiB alone is no workspace.
func cublasWorkspace(r *Result, i int) bool {
	big := func(size uint64) bool { return size == 32<<20 || size == 4096<<10*2+16<<10*8 }
	pair := func(w, lt Block) bool {
		return big(w.Size()) && lt.Size() == 1<<20 && int(lt.Born) == int(w.Born)+1 && int(w.Freed) == int(lt.Freed)
	}
	return i+1 < r.NumBlocks() && pair(r.Block(i), r.Block(i+1)) || i > 0 && pair(r.Block(i-1), r.Block(i))
}

// method says how the categories were decided.
func method(r *Result, stacks bool) string {
	switch {
	case r.Steps == 0:
		return "lifetimes only (no optimizer step marks)"
	case stacks:
		return "lifetimes, annotations and stacks"
	}
	return "lifetimes and annotations"
}
