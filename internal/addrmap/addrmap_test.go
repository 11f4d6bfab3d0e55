package addrmap

import (
	"math/rand/v2"
	"testing"
)

// The map against a Go map under random sets, swaps, gets, deletes,
// takes, refs and puts, with keys drawn from a few hundred addresses (as a trace reuses them), the key 0
// and keys whose hashes collide.
func TestMatchesGoMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []uint64{0, 1, 1 << 63, ^uint64(0)}
	for i := range 300 {
		keys = append(keys, 0x7f0000000000+512*uint64(i)*uint64(1+i%7))
	}
	var m Map[int32]
	want := map[uint64]int32{}
	for step := range 200000 {
		k := keys[rng.IntN(len(keys))]
		switch rng.IntN(5) {
		case 0:
			m.Set(k, int32(step))
			want[k] = int32(step)
		case 1:
			m.Delete(k)
			delete(want, k)
		case 2:
			old, ok := m.Swap(k, int32(step))
			if w, wok := want[k]; old != w || ok != wok {
				t.Fatalf("step %d: Swap(%#x) = %d, %v; want %d, %v", step, k, old, ok, w, wok)
			}
			want[k] = int32(step)
		case 3:
			v, ok := m.Take(k)
			if w, wok := want[k]; v != w || ok != wok {
				t.Fatalf("step %d: Take(%#x) = %d, %v; want %d, %v", step, k, v, ok, w, wok)
			}
			delete(want, k)
		case 4:
			if rng.IntN(2) == 0 {
				r := m.Ref(k)
				if w, wok := want[k]; (r != nil) != wok || r != nil && *r != w {
					t.Fatalf("step %d: Ref(%#x) = %v; want %d, %v", step, k, r, w, wok)
				}
				if r != nil {
					*r = int32(step)
					want[k] = int32(step)
				}
				break
			}
			r, ok := m.Put(k)
			if w, wok := want[k]; ok != wok || *r != w {
				t.Fatalf("step %d: Put(%#x) = %d, %v; want %d, %v", step, k, *r, ok, w, wok)
			}
			*r = int32(step)
			want[k] = int32(step)
		}
		v, ok := m.Get(k)
		if w, wok := want[k]; v != w || ok != wok {
			t.Fatalf("step %d: Get(%#x) = %d, %v; want %d, %v", step, k, v, ok, w, wok)
		}
		if m.Len() != len(want) {
			t.Fatalf("step %d: Len() = %d, want %d", step, m.Len(), len(want))
		}
		if f, r := m.Find(k), m.Ref(k); k != 0 && f != r || k == 0 && f != nil {
			t.Fatalf("step %d: Find(%#x) = %p, Ref %p", step, k, f, r)
		}
	}
	for _, k := range keys {
		v, ok := m.Get(k)
		if w, wok := want[k]; v != w || ok != wok {
			t.Fatalf("Get(%#x) = %d, %v; want %d, %v", k, v, ok, w, wok)
		}
	}
	seen := map[uint64]int32{}
	for k, v := range m.All() {
		if _, again := seen[k]; again {
			t.Fatalf("All yields %#x twice", k)
		}
		seen[k] = v
	}
	if len(seen) != len(want) {
		t.Fatalf("All yields %d keys, want %d", len(seen), len(want))
	}
	for k, w := range want {
		if v, ok := seen[k]; !ok || v != w {
			t.Fatalf("All yields %#x = %d, %v; want %d", k, v, ok, w)
		}
	}
}

// Deleting keys that share a home slot leaves the others findable, in a
// table small enough that the probe runs wrap around its end.
func TestDeleteWrapsAround(t *testing.T) {
	var m Map[int]
	m.grow()
	mask := len(m.slots) - 1
	var same []uint64 // keys whose home is the table's last slot
	for k := uint64(1); len(same) < 6; k++ {
		if m.home(k) == mask {
			same = append(same, k)
		}
	}
	for i, k := range same {
		m.Set(k, i)
	}
	for d := range same {
		m.Delete(same[d])
		for i, k := range same {
			v, ok := m.Get(k)
			if ok != (i > d) || ok && v != i {
				t.Fatalf("after deleting %d keys, Get(key %d) = %d, %v", d+1, i, v, ok)
			}
		}
	}
	if m.Len() != 0 {
		t.Errorf("Len() = %d after deleting every key", m.Len())
	}
}

// A map reserved for n keys keeps the ones it held and takes n in all
// without growing its table again.
func TestReserve(t *testing.T) {
	for _, n := range []int{0, 1, 32, 33, 48, 49, 1000, 1024, 1025, 3072, 3073, 12305} {
		var m Map[int]
		m.Set(0, -1) // the key 0 lives beside the table
		m.Set(512, -2)
		m.Reserve(n)
		size := len(m.slots)
		for i := 2; i < n; i++ {
			m.Set(512*uint64(i), i)
		}
		if len(m.slots) != size {
			t.Errorf("Reserve(%d): the table grew from %d to %d slots", n, size, len(m.slots))
		}
		if v, ok := m.Get(0); !ok || v != -1 {
			t.Errorf("Reserve(%d): Get(0) = %d, %v", n, v, ok)
		}
		if v, ok := m.Get(512); !ok || v != -2 {
			t.Errorf("Reserve(%d): Get(512) = %d, %v", n, v, ok)
		}
		if !over(n, minSlots) && size != minSlots || size > minSlots && !over(n, size/2) || over(n, size) {
			t.Errorf("Reserve(%d): %d slots, not the fewest that hold it", n, size)
		}
	}
}

func BenchmarkMap(b *testing.B) {
	keys := make([]uint64, 4096)
	for i := range keys {
		keys[i] = 0x7f0000000000 + 512*uint64(i%700)*3
	}
	b.Run("addrmap", func(b *testing.B) {
		var m Map[int32]
		for i := 0; b.Loop(); i++ {
			k := keys[i&4095]
			if _, ok := m.Get(k); ok {
				m.Delete(k)
			} else {
				m.Set(k, int32(i))
			}
		}
	})
	b.Run("go", func(b *testing.B) {
		m := map[uint64]int32{}
		for i := 0; b.Loop(); i++ {
			k := keys[i&4095]
			if _, ok := m[k]; ok {
				delete(m, k)
			} else {
				m[k] = int32(i)
			}
		}
	})
}
