package pipeline

import (
	"context"
	"testing"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/pkg/trace"
)

// BenchmarkCategoriesGPT2 sets what the categories cost against the
// replay that reports them: "replay" is `gpumem replay -o json`'s work
// on gpt2_varlen_stacks (decode, plan, replay, categories), "categories"
// the classification and the two replays that size the peak, alone.
func BenchmarkCategoriesGPT2(b *testing.B) {
	path := pytorchFixture("gpt2_varlen_stacks.pickle")
	s := Settings{Points: 2000}
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			if _, err := Replay(context.Background(), Source{Trace: path, Keep: KeepReport}, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("categories", func(b *testing.B) {
		r, err := Replay(context.Background(), Source{Trace: path, Keep: KeepReport}, s)
		if err != nil {
			b.Fatal(err)
		}
		snap, err := trace.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := r.addCategories(categories.Classify(snap, 0)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
