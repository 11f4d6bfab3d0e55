package categories

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/figures"
)

// Remedies are upper bounds on what the usual remedies could save at the
// peak, from what each category held then (at, indexed by Category) and
// the part of the activations kept past their step (kept); ranks is the
// data-parallel width the sharding bound assumes. They are
// bounds from one trace: the exact answer comes from re-running the
// program (gpumem estimate).
func Remedies(at [NumCategories]uint64, kept uint64, ranks int) []figures.Remedy {
	if ranks < 2 {
		ranks = 8
	}
	var out []figures.Remedy
	add := func(name string, bytes uint64, basis string) {
		if bytes > 0 {
			out = append(out, figures.Remedy{Name: name, Bytes: bytes, Basis: basis})
		}
	}
	kept = min(kept, at[Activation])
	add("not keeping results past their step (a leak)", kept,
		"activations kept past the step that made them: results held with their graphs")
	add("activation checkpointing", at[Activation]-kept,
		"the activations of the step live at the peak; recomputation keeps each checkpoint's input, so less is saved")
	half := (at[Parameter] + at[Gradient] + at[Activation] + at[Temporary]) / 2
	add("bf16 weights, gradients and activations", half,
		"half of parameters, gradients, activations and temporaries, if all were fp32")
	shard := (at[OptimizerState] + at[Gradient]) / uint64(ranks) * uint64(ranks-1)
	add(fmt.Sprintf("sharding optimizer state and gradients over %d ranks (ZeRO-2)", ranks), shard,
		fmt.Sprintf("(%d-1)/%d of optimizer state and gradients", ranks, ranks))
	add(fmt.Sprintf("also sharding parameters over %d ranks (ZeRO-3, FSDP)", ranks),
		shard+at[Parameter]/uint64(ranks)*uint64(ranks-1),
		fmt.Sprintf("(%d-1)/%d of parameters, optimizer state and gradients; the gathered layer is not counted", ranks, ranks))
	return out
}
