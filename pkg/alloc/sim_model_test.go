package alloc

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// addrSeq is one recorded sequence of segment operations, as
// testdata/*_addresses.json hold them: each op a JSON array whose first
// item is its kind.
type addrSeq struct {
	Name string
	Ops  [][]any
}

// loadSequences reads path's sequences, numbers kept as json.Number.
func loadSequences(t *testing.T, path string) []addrSeq {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Sequences []addrSeq }
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&f); err != nil {
		t.Fatal(err)
	}
	if len(f.Sequences) == 0 {
		t.Fatalf("%s: no sequences", path)
	}
	return f.Sequences
}

// TestSimDriverModel replays cudaMalloc/cudaFree sequences whose addresses
// an H200 returned (testdata/driver_addresses.json) through the simulated
// device with every address but the first hidden: the driver model must
// put each segment where the driver did, relative to the first.
func TestSimDriverModel(t *testing.T) {
	num := func(x any) uint64 {
		n, _ := x.(json.Number)
		v, err := n.Int64()
		if err != nil {
			t.Fatal(err)
		}
		return uint64(v)
	}
	for _, seq := range loadSequences(t, "testdata/driver_addresses.json") {
		p := openSimProbe(true, false)
		if p == nil {
			t.Fatal("cannot open the simulated device")
		}
		type seg struct{ addr, size uint64 }
		live := map[uint64]seg{}
		var base, recBase uint64
		for i, op := range seq.Ops {
			id := num(op[1])
			if op[0] == "f" {
				s := live[id]
				delete(live, id)
				if rc := p.free(s.addr, s.size); rc != 0 {
					t.Fatalf("%s op %d: free rc %d", seq.Name, i, rc)
				}
				continue
			}
			size, rec := num(op[2]), num(op[3])
			got, rc := p.malloc(size, rec)
			if rc != 0 {
				t.Fatalf("%s op %d: malloc rc %d", seq.Name, i, rc)
			}
			if base == 0 {
				base, recBase = got, rec
			}
			if got-base != rec-recBase {
				t.Errorf("%s op %d (%d MiB): at %+d MiB from the first segment, the driver gave %+d MiB", seq.Name, i,
					size>>20, int64(got-base)>>20, int64(rec-recBase)>>20)
				break
			}
			live[id] = seg{got, size}
		}
		p.destroy()
	}
}

// In a process that runs kernels the start-up range below the 2 MiB hole is
// filled bottom up once the first chunk is carved. On an H200, a fresh
// process asked for 2, 20 and 20 MiB, ran PyTorch's fill_ and mul_, then
// asked for six more 20 MiB: they landed at these MiB from the first.
func TestSimKernelsOpenStartupRange(t *testing.T) {
	want := []int64{0, 74, -446, -414, -394, -374, -354, -334, -314}
	for _, kernels := range []bool{false, true} {
		p := openSimProbe(true, kernels)
		if p == nil {
			t.Fatal("cannot open the simulated device")
		}
		var base uint64
		for i, w := range want {
			size := uint64(20 << 20)
			if i == 0 {
				size = 2 << 20
			}
			got, rc := p.malloc(size, 0x7f0000000000)
			if rc != 0 {
				t.Fatalf("malloc %d: rc %d", i, rc)
			}
			if i == 0 {
				base = got
			}
			rel := int64(got-base) >> 20
			if !kernels && i >= 3 {
				w = -446 - 32*int64(i-2) // no kernels: chunks top down
			}
			if rel != w {
				t.Errorf("kernels=%v malloc %d: at %+d MiB, want %+d", kernels, i, rel, w)
			}
		}
		p.destroy()
	}
}

// simSequence runs allocations (a size in MiB) and frees (-k frees the k-th
// allocation, counting from 1) through a simulated device without kernels
// whose first segment is at the hint an H200 gave, and returns where each
// allocation landed, in MiB from the first.
func simSequence(t *testing.T, steps []int64) []int64 {
	t.Helper()
	p := openSimProbe(true, false)
	if p == nil {
		t.Fatal("cannot open the simulated device")
	}
	defer p.destroy()
	type seg struct{ addr, size uint64 }
	var segs []seg
	var base uint64
	var at []int64
	for _, s := range steps {
		if s < 0 {
			g := segs[-s-1]
			if rc := p.free(g.addr, g.size); rc != 0 {
				t.Fatalf("free rc %d", rc)
			}
			continue
		}
		size := uint64(s) << 20
		got, rc := p.malloc(size, 0x7f7870800000)
		if rc != 0 {
			t.Fatalf("malloc rc %d", rc)
		}
		if base == 0 {
			base = got
		}
		segs = append(segs, seg{got, size})
		at = append(at, int64(got-base)>>20)
	}
	return at
}

// Given-back room is reused from its top, but never a run of exactly the
// chunk's size: twelve 20 MiB chunks, the top ten freed (with the region's
// first one), then six more (script.free_top_10 on the H200).
func TestSimReusesGivenBackRoomTopDown(t *testing.T) {
	steps := []int64{20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10,
		20, 20, 20, 20, 20, 20}
	got := simSequence(t, steps)[12:]
	want := []int64{0, -520, -552, -584, -616, -648}
	if !slices.Equal(got, want) {
		t.Errorf("after the frees: %v, want %v", got, want)
	}
	// every other one freed: 32 MiB holes, none reused
	steps = []int64{20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, -1, -3, -5, -7, -9, -11, 20, 20, 20}
	got = simSequence(t, steps)[12:]
	want = []int64{0, -872, -904}
	if !slices.Equal(got, want) {
		t.Errorf("after freeing every other one: %v, want %v", got, want)
	}
}

// A request takes, in the chunk carved last that has room, the smallest gap
// that fits (compile_reduce_overhead's sequence on the H200: a 2 MiB
// request after a free goes above the live 2 MiB block, not into the larger
// freed room below it, which the 12 MiB request then takes).
func TestSimTailsSmallestGapNewestChunk(t *testing.T) {
	steps := []int64{2, 20, 2, 20, 20, 32, 2, 20, -5, -8, 2, 12}
	got := simSequence(t, steps)
	want := []int64{0, 74, 94, -446, -478, -510, -458, -542, -456, -478}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Given-back chunks that touch stay separate entries where the start-up
// range opens as given-back room (GM_SIM_KERNEL_SIGNAL) right above a first
// chunk given back before the program's first kernel: a free merges only
// the chunk it gives back with its neighbours. The hole index keys such a
// chunk as joined below (gm_sim.c, given_key_of). Segments placed at the
// first chunk's bottom cut that room, leave none of it, and their frees
// give it back, each time changing the key of the chunk above. The checker
// (I7) runs after every op.
func TestSimTouchingGivenBackChunks(t *testing.T) {
	p := openSimProbeFlags(false, true, true)
	if p == nil {
		t.Fatal("cannot open the simulated device")
	}
	defer p.destroy()
	const first = 0x7f0000000000
	check := func(op string) {
		t.Helper()
		if msg := p.simCheck(); msg != "" {
			t.Fatalf("after %s: %s", op, msg)
		}
	}
	if got, rc := p.malloc(40<<20, first); rc != 0 || got != first {
		t.Fatalf("first malloc: at %#x rc %d", got, rc)
	}
	check("the first malloc")
	if rc := p.free(first, 40<<20); rc != 0 {
		t.Fatalf("free rc %d", rc)
	}
	check("its free") // [first, first+64 MiB) given back
	if rc := p.kernelsStarted(); rc != 0 {
		t.Fatalf("kernels rc %d", rc)
	}
	check("the first kernel") // the range given back above it, apart
	// 32 MiB: the first chunk's top half stays given back, apart from the
	// range's room; 64 MiB: the whole first chunk
	for _, size := range []uint64{32 << 20, 64 << 20} {
		if got, rc := p.malloc(size, first); rc != 0 || got != first {
			t.Fatalf("%d MiB at the first chunk's bottom: at %#x rc %d", size>>20, got, rc)
		}
		check("a malloc at the first chunk's bottom")
		if rc := p.free(first, size); rc != 0 {
			t.Fatalf("free of %d MiB: rc %d", size>>20, rc)
		}
		check("its free") // the first chunk given back whole
	}
}
