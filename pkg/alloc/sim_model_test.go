package alloc

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// TestSimDriverModel replays cudaMalloc/cudaFree sequences whose addresses
// an H200 returned (testdata/driver_addresses.json) through the simulated
// device with every address but the first hidden: the driver model must
// put each segment where the driver did, relative to the first.
func TestSimDriverModel(t *testing.T) {
	raw, err := os.ReadFile("testdata/driver_addresses.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Sequences []struct {
			Name string
			Ops  [][]any // ["a", id, size, addr] or ["f", id]
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	if len(f.Sequences) == 0 {
		t.Fatal("no sequences")
	}
	num := func(x any) uint64 {
		n, _ := x.(json.Number)
		v, err := n.Int64()
		if err != nil {
			t.Fatal(err)
		}
		return uint64(v)
	}
	for _, seq := range f.Sequences {
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
