package workload

import (
	"fmt"
	"strconv"
	"strings"
)

var transformerParams = []Param{
	{"layers", "12", "transformer blocks, 1 to 1024"},
	{"hidden", "768", "hidden size, 1 to 65536, a multiple of heads"},
	{"heads", "12", "attention heads, 1 to 1024"},
	{"seq", "1024", "sequence length, or a comma-separated list used one per step, cycling; each at most positions"},
	{"batch", "8", "batch size, 1 to 65536"},
	{"vocab", "50257", "vocabulary size, 1 to 4194304"},
	{"positions", "1024", "rows of the position embedding, 1 to 4194304 (at least the longest seq)"},
	{"dtype", "fp32", "fp32, or bf16 for autocast mixed precision"},
	{"checkpoint", "false", "gradient checkpointing of every block (true or false)"},
	{"attention", "sdpa", "sdpa (fused, as PyTorch picks by default) or eager (materialised scores)"},
	{"dropout", "true", "dropout after embeddings, attention and MLP, as GPT-2 trains (true or false)"},
	{"optimizer", "adamw", "adamw or sgd"},
	{"steps", "", "training steps, 1 to 65536 (default: one per seq in the list, or 3)"},
}

// tfConfig is a parsed set of transformer parameters.
type tfConfig struct {
	layers, hidden, heads, batch, vocab, positions uint64
	seqs                                           []uint64
	steps                                          int
	bf16, checkpoint, eager, dropout, adamw        bool
}

func transformer() Builtin {
	return Builtin{
		Name:        "transformer",
		Description: "GPT-2-style training steps (default GPT-2 small): forward, backward, AdamW, zero_grad(set_to_none)",
		Params:      transformerParams,
		Build: func(params map[string]string) (*Workload, error) {
			c, err := parseTransformer(params)
			if err != nil {
				return nil, fmt.Errorf("transformer: %w", err)
			}
			t := &tf{c: c, b: newBuilder("transformer", describe(c))}
			t.build()
			if t.err != nil {
				return nil, fmt.Errorf("transformer: %w", t.err)
			}
			return t.b.finish()
		},
	}
}

func parseTransformer(params map[string]string) (tfConfig, error) {
	var c tfConfig
	if err := checkParams("transformer", params, transformerParams); err != nil {
		return c, err
	}
	get := func(k string) string { return strings.TrimSpace(param(params, transformerParams, k)) }
	num := func(k string, lo, hi uint64) (uint64, error) {
		v, err := strconv.ParseUint(get(k), 10, 64)
		if err != nil || v < lo || v > hi {
			return 0, fmt.Errorf("parameter %s=%s: want an integer from %d to %d", k, quote(get(k)), lo, hi)
		}
		return v, nil
	}
	var err error
	for _, p := range []struct {
		dst    *uint64
		name   string
		lo, hi uint64
	}{
		{&c.layers, "layers", 1, 1024},
		{&c.hidden, "hidden", 1, 1 << 16},
		{&c.heads, "heads", 1, 1 << 10},
		{&c.batch, "batch", 1, 1 << 16},
		{&c.vocab, "vocab", 1, 1 << 22},
		{&c.positions, "positions", 1, 1 << 22},
	} {
		if *p.dst, err = num(p.name, p.lo, p.hi); err != nil {
			return c, err
		}
	}
	if c.hidden%c.heads != 0 {
		return c, fmt.Errorf("hidden %d is not a multiple of heads %d", c.hidden, c.heads)
	}
	for s := range strings.SplitSeq(get("seq"), ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil || v == 0 {
			return c, fmt.Errorf("parameter seq=%s: want positive integers separated by commas", quote(get("seq")))
		}
		if v > c.positions {
			return c, fmt.Errorf("seq %d is longer than positions %d", v, c.positions)
		}
		c.seqs = append(c.seqs, v)
	}
	c.steps = 3
	if len(c.seqs) > 1 {
		c.steps = len(c.seqs)
	}
	if get("steps") != "" {
		v, err := num("steps", 1, 1<<16)
		if err != nil {
			return c, err
		}
		c.steps = int(v)
	}
	switch get("dtype") {
	case "fp32":
	case "bf16":
		c.bf16 = true
	default:
		return c, fmt.Errorf("parameter dtype=%s: want fp32 or bf16", quote(get("dtype")))
	}
	switch get("attention") {
	case "sdpa":
	case "eager":
		c.eager = true
	default:
		return c, fmt.Errorf("parameter attention=%s: want sdpa or eager", quote(get("attention")))
	}
	switch get("optimizer") {
	case "adamw":
		c.adamw = true
	case "sgd":
	default:
		return c, fmt.Errorf("parameter optimizer=%s: want adamw or sgd", quote(get("optimizer")))
	}
	if c.checkpoint, err = parseBool(get("checkpoint")); err != nil {
		return c, fmt.Errorf("parameter checkpoint: %w", err)
	}
	if c.dropout, err = parseBool(get("dropout")); err != nil {
		return c, fmt.Errorf("parameter dropout: %w", err)
	}
	// The largest tensors must be sizes a device could hold.
	maxSeq := uint64(0)
	for _, s := range c.seqs {
		maxSeq = max(maxSeq, s)
	}
	for _, n := range [][]uint64{
		{c.batch, maxSeq, c.vocab, 4},
		{c.batch, c.heads, maxSeq, maxSeq, 4},
		{c.vocab, c.hidden, 4},
		{c.batch, maxSeq, c.hidden, 16},
	} {
		p := uint64(1)
		for _, f := range n {
			if p > maxSize/f {
				return c, fmt.Errorf("tensors larger than 1 PiB: reduce batch, seq, vocab or hidden")
			}
			p *= f
		}
	}
	return c, nil
}

func describe(c tfConfig) string {
	dt := "fp32"
	if c.bf16 {
		dt = "bf16 autocast"
	}
	seqs := make([]string, len(c.seqs))
	for i, s := range c.seqs {
		seqs[i] = strconv.FormatUint(s, 10)
	}
	s := fmt.Sprintf("%d layers, hidden %d, %d heads, vocab %d, batch %d, seq %s, %s, %d steps",
		c.layers, c.hidden, c.heads, c.vocab, c.batch, strings.Join(seqs, ","), dt, c.steps)
	if c.checkpoint {
		s += ", gradient checkpointing"
	}
	if c.eager {
		s += ", eager attention"
	}
	return s
}
