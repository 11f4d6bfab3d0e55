package replay

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// closedOps returns the plan's ops with frees appended for what stays live,
// so that the stream can run again and again through one allocator.
func closedOps(p *Plan) []alloc.Op {
	ops := append([]alloc.Op(nil), p.Ops...)
	live := map[uint32]bool{}
	for _, op := range ops {
		switch op.Kind {
		case alloc.OpAlloc:
			live[op.ID] = true
		case alloc.OpFree, alloc.OpFreeComplete:
			delete(live, op.ID)
		}
	}
	for id := range live {
		ops = append(ops, alloc.Op{Kind: alloc.OpFree, ID: id})
	}
	return ops
}

// BenchmarkReplayCUDA replays gpt2_varlen on the first GPU through the
// CUDA backend: the first pass pays for cudaMalloc, later passes reuse the
// cache as a training loop would. Skipped without a GPU.
func BenchmarkReplayCUDA(b *testing.B) {
	snap, err := trace.Open(filepath.Join(fixtures, "gpt2_varlen.pickle"))
	if err != nil {
		b.Fatal(err)
	}
	ops := closedOps(Build(snap.Traces[0]))
	a, err := alloc.New(alloc.Options{Device: alloc.CUDA(0)})
	if err != nil {
		b.Skip(err)
	}
	defer a.Close()
	start := time.Now()
	if _, err := a.Run(ops, 0, nil); err != nil {
		b.Fatal(err)
	}
	cold := float64(time.Since(start).Nanoseconds()) / float64(len(ops))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := a.Run(ops, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(ops)*b.N), "warm-ns/op")
	b.ReportMetric(cold, "cold-ns/op")
}

// On a real GPU, the device's used memory grows by exactly what
// reserved_bytes says at the peak, for both segment kinds, and everything
// is returned when the allocator closes. Skipped without a GPU.
func TestCUDAUsedMemory(t *testing.T) {
	snap, err := trace.Open(filepath.Join(fixtures, "gpt2_varlen.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	p := Build(snap.Traces[0])
	for _, conf := range []string{"", "expandable_segments:True"} {
		cfg, err := alloc.ParseConfig(conf)
		if err != nil {
			t.Fatal(err)
		}
		a, err := alloc.New(alloc.Options{Config: cfg, Device: alloc.CUDA(0)})
		if err != nil {
			t.Skip(err)
		}
		before, _, err := a.MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		// the op after which reserved memory peaks, from the simulated run
		sim, err := Run(p, Options{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		upto := sim.Extra.PeakOp + 1
		if _, err := a.Run(p.Ops[:upto], 0, nil); err != nil {
			t.Fatalf("%q: %v", conf, err)
		}
		at, _, _ := a.MemInfo()
		reserved := a.Stats().ReservedBytes[alloc.All].Current
		a.Close()
		probe, err := alloc.New(alloc.Options{Device: alloc.CUDA(0)})
		if err != nil {
			t.Fatal(err)
		}
		after, _, _ := probe.MemInfo()
		probe.Close()
		grew := int64(before) - int64(at)
		t.Logf("%q: reserved %d MiB at the peak, device used grew %d MiB, %d MiB not returned",
			conf, reserved>>20, grew>>20, (int64(before)-int64(after))>>20)
		if reserved != sim.Stats.ReservedBytes[alloc.All].Peak {
			t.Errorf("%q: reserved %d on the GPU at the peak op, %d simulated", conf, reserved, sim.Stats.ReservedBytes[alloc.All].Peak)
		}
		if d := grew - reserved; d < 0 || d > 64<<20 {
			t.Errorf("%q: device used grew by %d bytes for %d reserved", conf, grew, reserved)
		}
		if d := int64(before) - int64(after); d > 2<<20 || d < -(2<<20) {
			t.Errorf("%q: %d bytes not returned", conf, d)
		}
	}
}
