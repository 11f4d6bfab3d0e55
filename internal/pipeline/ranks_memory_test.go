package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// heldPerRank replays n links to one small snapshot as n ranks and
// returns the heap the finished set holds per rank.
func heldPerRank(t testing.TB, n int) uint64 {
	src, err := filepath.Abs(pytorchFixture("seed_frag.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("train.rank%d.pickle", i))
		if err := os.Symlink(src, p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	set, err := ReplaySet(context.Background(), SetSource{Paths: paths, Keep: KeepReport}, Settings{Points: 2000})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(set)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return (after.HeapAlloc - before.HeapAlloc) / uint64(n)
}

// A folder of thousands of tiny rank files holds little per rank: a
// plan of a small trace kept a megabyte (its log's first chunk, and the
// planner's buffers) until the set was done, so 3,000 ranks needed
// gigabytes. The bound is five times what a rank holds now.
func TestSmallRanksHoldLittle(t *testing.T) {
	if held := heldPerRank(t, 200); held > 128<<10 {
		t.Errorf("a set of small ranks holds %d KiB per rank", held>>10)
	}
}

// BenchmarkSmallRanks reports the heap a rank of a set of small ranks
// holds once the set is replayed.
func BenchmarkSmallRanks(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(float64(heldPerRank(b, 300)), "B/rank")
	}
}
