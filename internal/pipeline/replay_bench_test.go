package pipeline

import (
	"context"
	"os"
	"testing"
)

// BenchmarkReplayBigTrace is `gpumem replay FILE -o json`'s work, without
// the printing, on the snapshot named by GPUMEM_BIG_TRACE (for instance
// one made by scripts/gen_trace.py): decode, plan, replay, categories.
// Profile it with -cpuprofile to see where the command's time goes;
// scripts/bench_decode.sh compares the command with the opcode walk.
func BenchmarkReplayBigTrace(b *testing.B) {
	path := os.Getenv("GPUMEM_BIG_TRACE")
	if path == "" {
		b.Skip("set GPUMEM_BIG_TRACE to a snapshot pickle (make one with scripts/gen_trace.py)")
	}
	s := Settings{Points: 2000}
	for b.Loop() {
		if _, err := Replay(context.Background(), Source{Trace: path, Keep: KeepReport}, s); err != nil {
			b.Fatal(err)
		}
	}
}
