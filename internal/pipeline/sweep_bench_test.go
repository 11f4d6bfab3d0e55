package pipeline

import (
	"context"
	"testing"
)

// BenchmarkSweepGPT2 is `gpumem sweep gpt2_varlen.pickle` without the
// printing: decode, plan, the default grid's replays and the offline
// planner, with one worker and with two.
func BenchmarkSweepGPT2(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(map[int]string{1: "j1", 2: "j2"}[workers], func(b *testing.B) {
			in := SweepInput{Source: Source{Trace: pytorchFixture("gpt2_varlen.pickle")}, Workers: workers}
			for b.Loop() {
				if _, err := Sweep(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
