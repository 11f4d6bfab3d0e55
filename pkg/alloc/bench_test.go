package alloc

import (
	"testing"
)

// benchSizes mixes small-pool, large-pool and oversize-looking requests.
var benchSizes = []uint64{512, 3000, 65536, 700 << 10, 3 << 20, 12<<20 + 5, 1 << 20, 40 << 20, 200}

const benchWindow = 32 // allocations kept live: frees are not always of the last block

// benchWarm returns an allocator holding benchWindow live allocations
// after one full pass over the chunk, so that its cache is warm.
func benchWarm(b *testing.B, chunk []Op) *Allocator {
	b.Helper()
	a, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.Close)
	warm := make([]Op, benchWindow)
	for i := range warm {
		warm[i] = Op{Kind: OpAlloc, ID: uint32(i), Size: benchSizes[i%len(benchSizes)]}
	}
	for _, ops := range [][]Op{warm, chunk} {
		if res, err := a.Run(ops, 0, nil); err != nil || res.OOM != nil {
			b.Fatalf("warm-up: %+v, %v", res, err)
		}
	}
	return a
}

// BenchmarkAllocFreePair: steady state, alloc+free pairs batched into Run
// calls of 4096 operations. Pair j frees the allocation made benchWindow
// pairs earlier and allocates under its id.
func BenchmarkAllocFreePair(b *testing.B) {
	const pairs = 2048 // a multiple of benchWindow: the chunk can repeat
	chunk := make([]Op, 0, 2*pairs)
	for j := range pairs {
		id := uint32(j % benchWindow)
		chunk = append(chunk,
			Op{Kind: OpFree, ID: id},
			Op{Kind: OpAlloc, ID: id, Size: benchSizes[j%len(benchSizes)], Stream: uint64(j/benchWindow) & 1})
	}
	a := benchWarm(b, chunk)
	b.ResetTimer()
	n := 0
	for n < b.N {
		ops := chunk[:2*min(pairs, b.N-n)]
		if res, err := a.Run(ops, 0, nil); err != nil || res.OOM != nil {
			b.Fatalf("Run: %+v, %v", res, err)
		}
		n += len(ops) / 2
	}
	// Every pair reallocates the id it frees, so any prefix of the chunk
	// leaves all benchWindow ids live, as the next Run expects.
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/pair")
}

// BenchmarkAllocFreeSingle: the same pairs through Alloc and Free, one
// cgo crossing each.
func BenchmarkAllocFreeSingle(b *testing.B) {
	a := benchWarm(b, nil)
	b.ResetTimer()
	for j := 0; j < b.N; j++ {
		id := uint32(j % benchWindow)
		if err := a.Free(id); err != nil {
			b.Fatal(err)
		}
		if _, err := a.Alloc(id, benchSizes[j%len(benchSizes)], uint64(j/benchWindow)&1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/pair")
}

// BenchmarkAllocFreeLoop: the steady state of a training loop: every
// allocation is freed again soon, on one stream, so the cache always holds
// a fitting block (alloc+free pairs of mixed sizes, batched into Run calls).
func BenchmarkAllocFreeLoop(b *testing.B) {
	const pairs = 2048
	chunk := make([]Op, 0, 2*pairs)
	for j := range pairs {
		id := uint32(benchWindow + j%4)
		chunk = append(chunk,
			Op{Kind: OpAlloc, ID: id, Size: benchSizes[j%len(benchSizes)]},
			Op{Kind: OpFree, ID: id})
	}
	a := benchWarm(b, nil)
	if _, err := a.Run(chunk, 0, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	n := 0
	for n < b.N {
		ops := chunk[:2*min(pairs, b.N-n)]
		if res, err := a.Run(ops, 0, nil); err != nil || res.OOM != nil {
			b.Fatalf("Run: %+v, %v", res, err)
		}
		n += len(ops) / 2
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/pair")
}

// BenchmarkSimModelledSegments: a replay whose addresses the driver model
// chooses (a what-if, or a trace without addresses) with thousands of
// segments live: 4,000 segments of 25 MiB, every other one freed, 2,000
// more. The model looks at every chunk for each cudaMalloc, so this shows
// the cost per chunk.
func BenchmarkSimModelledSegments(b *testing.B) {
	const n = 4000
	var ops []Op
	for i := range n {
		ops = append(ops, Op{Kind: OpAlloc, ID: uint32(i), Size: 25 << 20})
	}
	for i := 0; i < n; i += 2 {
		ops = append(ops, Op{Kind: OpFree, ID: uint32(i)})
	}
	for i := n; i < n+n/2; i++ {
		ops = append(ops, Op{Kind: OpAlloc, ID: uint32(i), Size: 25 << 20})
	}
	for b.Loop() {
		a, err := New(Options{Device: SimModelled(0)})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := a.Run(ops, 0, nil); err != nil || res.OOM != nil {
			b.Fatalf("Run: %+v, %v", res, err)
		}
		a.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ops)), "ns/segment-op")
}
