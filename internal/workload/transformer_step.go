package workload

import "fmt"

// Sizes of the workspaces cuBLAS keeps for the forward and the backward
// thread once each has run its first matmul (seen in the recorded run).
const (
	cublasWorkspace      = 32 * mib
	cublasExtraWorkspace = 1 * mib
)

// tf generates the operations of GPT-2-style training steps. The order
// and sizes follow a recorded PyTorch 2.11 run of GPT-2 small (HF
// transformers, fused SDPA attention, AdamW with foreach): every tensor
// the autograd graph saves, the temporaries of each kernel that showed in
// the recording, and the order in which Python references die.
//
// Errors are sticky: after the first, every call does nothing.
type tf struct {
	c   tfConfig
	b   *builder
	err error

	params    []tfParam
	fwdReady  bool // the forward thread's cuBLAS workspace exists
	bwdReady  bool // the backward thread's one exists
	optReady  bool // AdamW state exists
	bt, seq   uint64
	act       uint64 // bytes per activation element: 4, or 2 under bf16 autocast
	saving    bool   // autograd records the forward (false: checkpointed forward)
	recompute bool   // replaying a block inside backward
}

type tfParam struct {
	name string
	size uint64
}

func (t *tf) a(name string, size uint64) {
	if t.err == nil {
		t.err = t.b.alloc(name, size, 0)
	}
}

func (t *tf) f(names ...string) {
	for _, n := range names {
		if t.err == nil && n != "" {
			t.err = t.b.release(n)
		}
	}
}

// l names a tensor of block i.
func l(i int, s string) string { return fmt.Sprintf("%d.%s", i, s) }

func (t *tf) build() {
	c := t.c
	h := c.hidden
	t.params = append(t.params, tfParam{"wte", c.vocab * h * 4}, tfParam{"wpe", c.positions * h * 4})
	for i := range int(c.layers) {
		for _, p := range []tfParam{
			{"ln_1.weight", h * 4}, {"ln_1.bias", h * 4},
			{"attn.c_attn.weight", h * 3 * h * 4}, {"attn.c_attn.bias", 3 * h * 4},
			{"attn.c_proj.weight", h * h * 4}, {"attn.c_proj.bias", h * 4},
			{"ln_2.weight", h * 4}, {"ln_2.bias", h * 4},
			{"mlp.c_fc.weight", h * 4 * h * 4}, {"mlp.c_fc.bias", 4 * h * 4},
			{"mlp.c_proj.weight", 4 * h * h * 4}, {"mlp.c_proj.bias", h * 4},
		} {
			t.params = append(t.params, tfParam{l(i, p.name), p.size})
		}
	}
	t.params = append(t.params, tfParam{"ln_f.weight", h * 4}, tfParam{"ln_f.bias", h * 4})

	t.b.phase("model")
	for _, p := range t.params {
		t.a("p:"+p.name, p.size)
	}
	t.act = 4
	if c.bf16 {
		t.act = 2
	}
	for s := range c.steps {
		t.seq = c.seqs[s%len(c.seqs)]
		t.bt = c.batch * t.seq
		t.step(s)
	}

	// The script ends: the optimizer goes, then the model, last parameter
	// first. cuBLAS keeps its workspaces until the process exits.
	t.b.phase("teardown")
	if t.optReady {
		for _, p := range t.params {
			t.f("exp_avg:"+p.name, "exp_avg_sq:"+p.name)
		}
	}
	for i := len(t.params) - 1; i >= 0; i-- {
		t.f("p:" + t.params[i].name)
	}
}

func (t *tf) step(s int) {
	c := t.c
	bt, h, v := t.bt, c.hidden, c.vocab
	bth := bt * h
	t.b.phase(fmt.Sprintf("step %d forward (seq %d)", s, t.seq))
	t.saving = true
	t.a("input_ids", bt*8)

	// Embeddings.
	t.a("wte_out", bth*4)
	t.a("pos_tmp", t.seq*8)
	t.a("pos_ids", t.seq*8)
	t.f("pos_tmp")
	t.a("wpe_out", t.seq*h*4)
	t.a("emb", bth*4)
	t.dropout("emb", "emb.mask", "0.x", bth*4, true)

	t.saving = !c.checkpoint
	for i := range int(c.layers) {
		t.blockForward(i)
	}
	t.saving = true
	last := l(int(c.layers), "x")
	t.layerNorm("ln_f", bt, bth)
	t.f("wte_out", "wpe_out")

	// LM head (tied to wte) and the loss.
	t.linearForward("lm_head", "ln_f", true, bt*v, "wte", "")
	t.a("pad_labels", c.batch*(t.seq+1)*8)
	t.a("shift_labels", bt*8)
	if c.bf16 {
		t.a("logits.float", bt*v*4)
	}
	t.a("log_softmax", bt*v*4)
	t.a("loss", 4)
	t.a("total_weight", 4)
	t.f("pad_labels")
	if c.bf16 {
		t.f("logits.float")
	}

	t.b.phase(fmt.Sprintf("step %d backward", s))
	t.a("loss.grad", 4)
	t.a("nll.grad", bt*v*4)
	t.f("shift_labels", "total_weight")
	t.a("log_softmax.grad", bt*v*4)
	t.f("nll.grad", "log_softmax")
	grad := "log_softmax.grad"
	if c.bf16 {
		t.a("logits.grad", bt*v*2)
		t.f(grad)
		grad = "logits.grad"
	}
	t.weightGrad("wte.lm_head", "wte", v*h)
	if !t.bwdReady {
		t.a("cublas.backward", cublasWorkspace)
		t.bwdReady = true
	}
	t.a("ln_f.in.grad", bth*t.act)
	t.f(grad, t.saved("ln_f"))
	t.dropWeightCast("wte")
	t.a("res.grad", bth*4)
	t.a("g:ln_f.weight", h*4)
	t.a("g:ln_f.bias", h*4)
	t.f("ln_f.in.grad", last, "ln_f.mean", "ln_f.rstd")

	for i := int(c.layers) - 1; i >= 0; i-- {
		if c.checkpoint {
			t.saving, t.recompute = true, true
			t.blockForward(i)
			t.f(l(i+1, "x.re"))
			t.recompute = false
		}
		t.blockBackward(i)
	}

	// Embedding backward.
	if c.dropout {
		t.a("emb.grad", bth*4)
		t.f("res.grad", "emb.mask")
	} else {
		t.b.rename("res.grad", "emb.grad")
	}
	t.a("wpe.grad.sum", t.seq*h*4)
	t.a("g:wpe", c.positions*h*4)
	t.f("wpe.grad.sum", "pos_ids")
	t.embeddingBackward()
	t.f("emb.grad")
	t.a("g:wte", v*h*4)
	t.f("g:wte.lm_head", "wte.grad.emb", "loss.grad")

	t.b.phase(fmt.Sprintf("step %d optimizer", s))
	if c.adamw {
		if !t.optReady {
			// AdamW makes its state lazily, at the first step.
			for _, p := range t.params {
				t.a("exp_avg:"+p.name, p.size)
				t.a("exp_avg_sq:"+p.name, p.size)
			}
			t.optReady = true
		}
		// The foreach implementation holds one temporary per parameter.
		for _, p := range t.params {
			t.a("tmp:"+p.name, p.size)
		}
		for i := len(t.params) - 1; i >= 0; i-- {
			t.f("tmp:" + t.params[i].name)
		}
	}
	t.b.phase(fmt.Sprintf("step %d zero_grad", s))
	for _, p := range t.params {
		t.f("g:" + p.name)
	}
	// The step's outputs die when the loop rebinds its variables.
	t.f("input_ids", "loss", "lm_head")
	if !c.checkpoint {
		for i := int(c.layers) - 1; i >= 0; i-- {
			t.f(l(i, "k"), l(i, "v"))
		}
	}
}

// saved is the name of the tensor a matmul saved for its input x: x
// itself, or under autocast its bf16 copy.
func (t *tf) saved(x string) string {
	if t.c.bf16 {
		return x + ".bf16"
	}
	return x
}

// layerNorm makes name (fp32 under autocast too) with its statistics.
func (t *tf) layerNorm(name string, bt, bth uint64) {
	t.a(name, bth*4)
	t.a(name+".mean", bt*4)
	t.a(name+".rstd", bt*4)
	if !t.saving {
		t.f(name+".mean", name+".rstd")
	}
}

// linearForward makes out = in·W (+ b). Under autocast the fp32 input and
// the weights are cast to bf16 first; the casts are what backward keeps.
func (t *tf) linearForward(out, in string, castIn bool, outElems uint64, weight, bias string) {
	if t.c.bf16 {
		if castIn {
			t.a(in+".bf16", t.bt*t.c.hidden*2)
			t.f(in)
		}
		t.a("cast:"+weight, t.paramSize(weight)/2)
		if bias != "" {
			t.a("cast:"+bias, t.paramSize(bias)/2)
		}
	}
	t.a(out, outElems*t.act)
	if !t.fwdReady {
		t.a("cublas.forward", cublasWorkspace)
		t.a("cublas.forward.extra", cublasExtraWorkspace)
		t.fwdReady = true
	}
}

func (t *tf) dropWeightCast(names ...string) {
	if !t.c.bf16 {
		return
	}
	for _, n := range names {
		if n != "" {
			t.f("cast:" + n)
		}
	}
}

func (t *tf) paramSize(name string) uint64 {
	for _, p := range t.params {
		if p.name == name {
			return p.size
		}
	}
	panic("workload: unknown parameter " + name)
}

// weightGrad makes the fp32 gradient g:<param>; under autocast it is
// computed in bf16 and cast up.
func (t *tf) weightGrad(grad, param string, elems uint64) {
	if t.c.bf16 {
		t.a("g16:"+grad, elems*2)
		t.a("g:"+grad, elems*4)
		t.f("g16:" + grad)
		return
	}
	t.a("g:"+grad, elems*4)
}

// dropout makes out from in with a bool mask; without dropout out is in.
func (t *tf) dropout(in, mask, out string, size uint64, freeIn bool) {
	if !t.c.dropout {
		t.b.rename(in, out)
		return
	}
	elems := t.bt * t.c.hidden
	t.a(mask, elems)
	t.a(out, size)
	if freeIn {
		t.f(in)
	}
	if !t.saving {
		t.f(mask)
	}
}

// blockForward runs block i from i.x to i+1.x (i+1.x.re when recomputing
// inside backward). When not saving, tensors die as soon as they are dead.
func (t *tf) blockForward(i int) {
	c := t.c
	bt, h := t.bt, c.hidden
	bth := bt * h
	out := l(i+1, "x")
	if t.recompute {
		out = l(i+1, "x.re")
	}
	p := func(s string) string { return l(i, s) }

	t.layerNorm(p("ln_1"), bt, bth)
	t.linearForward(p("qkv"), p("ln_1"), true, 3*bth, p("attn.c_attn.weight"), p("attn.c_attn.bias"))
	if !t.saving {
		t.f(t.saved(p("ln_1")))
		t.dropWeightCast(p("attn.c_attn.weight"), p("attn.c_attn.bias"))
	}
	if !c.checkpoint {
		// The key/value cache the model returns, alive until the step ends.
		t.a(p("k"), bth*t.act)
		t.a(p("v"), bth*t.act)
	}
	t.attentionForward(i)
	t.linearForward(p("attn.proj"), p("attn"), false, bth, p("attn.c_proj.weight"), p("attn.c_proj.bias"))
	if !t.saving {
		t.f(p("attn"))
		t.dropWeightCast(p("attn.c_proj.weight"), p("attn.c_proj.bias"))
	}
	t.dropout(p("attn.proj"), p("attn.mask"), p("attn.drop"), bth*t.act, true)
	t.a(p("mid"), bth*4)
	if !t.saving {
		t.f(p("attn.drop"))
	}

	t.layerNorm(p("ln_2"), bt, bth)
	t.linearForward(p("fc"), p("ln_2"), true, 4*bth, p("mlp.c_fc.weight"), p("mlp.c_fc.bias"))
	if !t.saving {
		t.f(t.saved(p("ln_2")))
		t.dropWeightCast(p("mlp.c_fc.weight"), p("mlp.c_fc.bias"))
	}
	// gelu_new: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), one kernel per op.
	g := 4 * bth * t.act
	t.a(p("gelu.half"), g)
	t.a(p("gelu.cube"), g)
	t.a(p("gelu.scaled"), g)
	t.f(p("gelu.cube"))
	t.a(p("gelu.inner"), g)
	t.f(p("gelu.scaled"))
	if !t.saving {
		t.f(p("fc"))
	}
	t.a(p("gelu.arg"), g)
	t.f(p("gelu.inner"))
	t.a(p("gelu.tanh"), g)
	t.f(p("gelu.arg"))
	t.a(p("gelu.onep"), g)
	if !t.saving {
		t.f(p("gelu.tanh"))
	}
	t.a(p("gelu"), g)
	if !t.saving {
		t.f(p("gelu.half"), p("gelu.onep"))
	}
	t.linearForward(p("mlp.proj"), p("gelu"), false, bth, p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
	if !t.saving {
		t.f(p("gelu"))
		t.dropWeightCast(p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
	}
	t.dropout(p("mlp.proj"), p("mlp.mask"), p("mlp.drop"), bth*t.act, true)
	t.a(out, bth*4)
	if t.saving {
		t.f(p("attn.drop"))
	} else {
		t.f(p("mid"))
	}
	t.f(p("mlp.drop"))
}

func (t *tf) attentionForward(i int) {
	c := t.c
	p := func(s string) string { return l(i, s) }
	bth := t.bt * c.hidden
	if !c.eager {
		t.a(p("attn"), bth*t.act)
		t.a(p("attn.lse"), c.batch*c.heads*t.seq*4)
		if !t.saving {
			t.f(p("attn.lse"), p("qkv"))
		}
		return
	}
	sq := c.batch * c.heads * t.seq * t.seq
	t.a(p("scores"), sq*t.act)
	// Autocast runs softmax in fp32.
	t.a(p("probs"), sq*4)
	t.f(p("scores"))
	if c.dropout {
		t.a(p("probs.mask"), sq)
		t.a(p("probs.drop"), sq*4)
	}
	t.a(p("attn.heads"), bth*t.act)
	t.a(p("attn"), bth*t.act) // heads merged back: a contiguous copy
	t.f(p("attn.heads"))
	if !t.saving {
		t.f(p("probs"), p("qkv"))
		if c.dropout {
			t.f(p("probs.mask"), p("probs.drop"))
		}
	}
}

// stagingRows is how many partial sums the bias-gradient reduction of a
// width-wide matrix stages: two per input row, capped by a grid limit
// (both read off the recorded run on an H200).
func (t *tf) stagingRows(width uint64) uint64 {
	return min(2*t.bt, 128*(272384/width))
}

// linearBackward makes the input gradient and the weight and bias
// gradients of a linear layer, with the reduction's staging buffer.
func (t *tf) linearBackward(i int, name string, inElems, in, out uint64, semaphore uint64) string {
	p := func(s string) string { return l(i, s) }
	g := p(name + ".in.grad")
	t.a(g, inElems*t.act)
	t.weightGrad(p(name+".weight"), p(name+".weight"), in*out)
	t.a("g:"+p(name+".bias"), out*4)
	t.a("bias.staging", out*4*t.stagingRows(out))
	t.a("bias.semaphore", semaphore)
	t.f("bias.semaphore", "bias.staging")
	return g
}

func (t *tf) blockBackward(i int) {
	c := t.c
	h := c.hidden
	bth := t.bt * h
	p := func(s string) string { return l(i, s) }
	g4 := 4 * bth * t.act

	// MLP.
	dg := t.dropoutBackward(p("mlp"), bth)
	gin := t.linearBackward(i, "mlp.c_proj", 4*bth, 4*h, h, 24)
	t.f(dg, p("gelu"))
	t.dropWeightCast(p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
	t.a(p("gelu.g1"), g4)
	t.a(p("gelu.g2"), g4)
	t.f(gin, p("gelu.onep"), p("gelu.half"))
	t.a(p("gelu.g3"), g4)
	t.f(p("gelu.g1"), p("gelu.tanh"))
	t.a(p("fc.grad"), g4)
	t.f(p("gelu.g3"))
	t.a(p("gelu.g5"), g4)
	t.a(p("gelu.g6"), g4)
	t.a(p("gelu.g7"), g4)
	t.a(p("gelu.g8"), g4)
	t.f(p("gelu.g7"), p("gelu.g6"), p("gelu.g5"), p("fc"), p("gelu.g8"))
	t.a(p("gelu.g9"), g4)
	t.f(p("gelu.g2"), p("gelu.g9"))
	gin = t.linearBackward(i, "mlp.c_fc", bth, h, 4*h, 96)
	t.f(p("fc.grad"), t.saved(p("ln_2")))
	t.dropWeightCast(p("mlp.c_fc.weight"), p("mlp.c_fc.bias"))
	t.layerNormBackward(p("ln_2"), gin, p("mid"))

	// Attention.
	dg = t.dropoutBackward(p("attn"), bth)
	gin = t.linearBackward(i, "attn.c_proj", bth, h, h, 24)
	t.f(dg)
	t.dropWeightCast(p("attn.c_proj.weight"), p("attn.c_proj.bias"))
	t.attentionBackward(i, gin)
	gin = t.linearBackward(i, "attn.c_attn", bth, h, 3*h, 72)
	t.f(p("qkv.grad"), t.saved(p("ln_1")))
	t.dropWeightCast(p("attn.c_attn.weight"), p("attn.c_attn.bias"))
	t.layerNormBackward(p("ln_1"), gin, p("x"))
}

// dropoutBackward makes the gradient through a dropout from the residual
// gradient and returns its name; without dropout the branch sees the
// residual gradient itself, and "" comes back.
func (t *tf) dropoutBackward(prefix string, bth uint64) string {
	if !t.c.dropout {
		return ""
	}
	t.a(prefix+".drop.grad", bth*t.act)
	t.f(prefix + ".mask")
	return prefix + ".drop.grad"
}

// layerNormBackward adds the norm's input gradient into the residual
// gradient (autograd accumulates in place) and frees what forward saved.
func (t *tf) layerNormBackward(name, gin, input string) {
	h := t.c.hidden
	t.a(name+".grad", t.bt*h*4)
	t.a("g:"+name+".weight", h*4)
	t.a("g:"+name+".bias", h*4)
	t.f(gin, input, name+".mean", name+".rstd", name+".grad")
}

func (t *tf) attentionBackward(i int, gin string) {
	c := t.c
	p := func(s string) string { return l(i, s) }
	bth := t.bt * c.hidden
	lse := c.batch * c.heads * t.seq * 4
	if !c.eager {
		t.a(p("dq"), bth*t.act)
		t.a(p("dk"), bth*t.act)
		t.a(p("dv"), bth*t.act)
		t.a("sdpa.dq_accum", bth*4)
		t.a("sdpa.delta", lse)
		t.a("sdpa.delta2", lse)
		t.f("sdpa.delta", "sdpa.dq_accum")
		t.a("sdpa.workspace", bth*4+3*t.bt)
		t.f("sdpa.delta2", "sdpa.workspace", gin, p("qkv"), p("attn.lse"), p("attn"))
	} else {
		sq := c.batch * c.heads * t.seq * t.seq
		t.a(p("attn.heads.grad"), bth*t.act)
		t.f(gin)
		t.a(p("dv"), bth*t.act)
		t.a(p("probs.grad"), sq*t.act)
		t.f(p("attn.heads.grad"))
		if c.dropout {
			t.f(p("probs.drop"))
			t.a(p("probs.drop.grad"), sq*4)
			t.f(p("probs.grad"), p("probs.mask"))
			t.b.rename(p("probs.drop.grad"), p("probs.grad"))
		}
		t.a(p("scores.grad"), sq*t.act)
		t.f(p("probs.grad"), p("probs"))
		t.a(p("dq"), bth*t.act)
		t.a(p("dk"), bth*t.act)
		t.f(p("scores.grad"), p("qkv"), p("attn"))
	}
	t.a(p("qkv.grad"), 3*bth*t.act)
	t.f(p("dq"), p("dk"), p("dv"))
}

// embeddingBackward makes wte.grad.emb. Past 3072 indices PyTorch sorts
// them and reduces partial segments (about 1.1 per index for random
// tokens); the temporaries below are the ones the recording shows.
func (t *tf) embeddingBackward() {
	c := t.c
	v, h, bt := c.vocab, c.hidden, t.bt
	if bt <= 3072 {
		t.a("wte.grad.emb", v*h*4)
		return
	}
	idx := bt * 8
	segs := bt + bt/10
	t.a("emb.sorted", idx)
	t.a("emb.order", idx)
	t.a("emb.keys", idx)
	t.a("emb.sort_tmp", 16*bt+18943)
	t.f("emb.sort_tmp", "emb.keys")
	t.a("wte.grad.emb", v*h*4)
	t.a("emb.seg_offsets", idx)
	t.a("emb.seg_count", 8)
	t.a("emb.scan_in", idx)
	t.a("emb.scan_tmp", 1279)
	t.f("emb.scan_tmp", "emb.scan_in")
	t.a("emb.partial_offsets", idx)
	t.a("emb.partial_sizes", idx)
	t.a("emb.scan_tmp", 1279)
	t.f("emb.scan_tmp")
	t.a("emb.partial_count", 8)
	t.a("emb.partial_index", segs*8)
	t.a("emb.partial_grad", segs*h*4)
	t.f("emb.partial_grad", "emb.partial_index", "emb.partial_count", "emb.partial_sizes",
		"emb.partial_offsets", "emb.seg_count", "emb.seg_offsets", "emb.order", "emb.sorted")
}
