// Package addrmap is a hash map keyed by device addresses, for the paths
// that look a block up by its address once or twice an event: the plan's
// live allocations (pkg/replay) and the categories' open blocks
// (internal/categories).
//
// A Go map hashes each key with the runtime's general hash and probes
// groups of slots through control bytes; at two lookups an event of a big
// trace that was a tenth of a replay's CPU. Addresses are multiples of
// 512 and a trace reuses few of them, so a table this small stays in
// cache, and a multiplicative hash with linear probing finds a key in
// one or two loads.
package addrmap

import "iter"

// Map maps addresses to values of V. The zero Map is empty and ready.
type Map[V any] struct {
	slots []slot[V] // key 0 marks an empty slot; the key 0 itself lives in zero
	shift uint      // 64 - log2(len(slots))
	n     int       // keys in slots
	zero  bool      // the key 0 is present, with value zv
	zv    V
}

type slot[V any] struct {
	k uint64
	v V
}

// minSlots is the size of a map's first table.
const minSlots = 64

// halfSlots is the largest table filled at most half: a lookup of a key
// probes 1.5 slots on average at that load, and 2.5 at three quarters,
// where a bigger table stops (so that a map of many keys takes no more
// memory); up to it the table fits in a core's first cache at either.
const halfSlots = 2048

// over says whether n keys are too many for a table of size slots.
func over(n, size int) bool {
	if size <= halfSlots {
		return 2*n > size
	}
	return 4*n > 3*size
}

// home is k's first slot.
func (m *Map[V]) home(k uint64) int { return int(m.hash(k)) }

// hash is k's home slot in a table, and for the zero Map (no table,
// shift 0) a number no smaller than its table's length, 0: a test of
// hash(k) < len(slots) both finds the map empty and bounds the index.
func (m *Map[V]) hash(k uint64) uint64 {
	return (k * 0x9e3779b97f4a7c15) >> (m.shift & 63) // shift < 64: no check of a wider one
}

// Len is the number of keys.
func (m *Map[V]) Len() int {
	if m.zero {
		return m.n + 1
	}
	return m.n
}

// Get is the value of k and whether k is present.
func (m *Map[V]) Get(k uint64) (V, bool) {
	if k == 0 {
		return m.zv, m.zero
	}
	if m.slots == nil {
		var none V
		return none, false
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			return s.v, true
		}
		if s.k == 0 {
			var none V
			return none, false
		}
	}
}

// Find is Ref but for the key 0, for which it is nil: a lookup small
// enough for the compiler to copy into the caller, where a call would
// cost the caller the values it holds in registers. A caller that may
// look up the key 0 calls Ref when Find is nil.
func (m *Map[V]) Find(k uint64) *V {
	s := m.slots
	h := m.hash(k)
	if h >= uint64(len(s)) || k == 0 { // (no table: see hash)
		return nil
	}
	for s[h].k != k {
		if s[h].k == 0 {
			return nil
		}
		h = (h + 1) & uint64(len(s)-1)
	}
	return &s[h].v
}

// Ref is a pointer to the value of k, nil when k is absent: a lookup
// that can also change the value in place. The pointer is good until the
// next Swap, Set, Put, Take or Delete.
func (m *Map[V]) Ref(k uint64) *V {
	if k == 0 {
		if m.zero {
			return &m.zv
		}
		return nil
	}
	if m.slots == nil {
		return nil
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			return &s.v
		}
		if s.k == 0 {
			return nil
		}
	}
}

// Put is a pointer to the value of k, which it adds with the zero value
// when absent, and whether k was present: Get and Set in one probe when
// the value to set depends on the old one. The pointer is good until the
// next Swap, Set, Put, Take or Delete.
func (m *Map[V]) Put(k uint64) (v *V, ok bool) {
	if k == 0 {
		ok = m.zero
		if !ok {
			var none V
			m.zero, m.zv = true, none
		}
		return &m.zv, ok
	}
	if over(m.n+1, len(m.slots)) {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			return &s.v, true
		}
		if s.k == 0 {
			s.k = k
			m.n++
			return &s.v, false
		}
	}
}

// Set sets the value of k.
func (m *Map[V]) Set(k uint64, v V) { m.Swap(k, v) }

// Swap sets the value of k and returns the one it replaced, and whether
// there was one: Get and Set in one probe.
func (m *Map[V]) Swap(k uint64, v V) (old V, ok bool) {
	p, ok := m.Put(k)
	old, *p = *p, v
	return old, ok
}

// Delete removes k, if present.
func (m *Map[V]) Delete(k uint64) { m.Take(k) }

// Take removes k, if present, and returns its value and whether it was:
// Get and Delete in one probe.
func (m *Map[V]) Take(k uint64) (v V, ok bool) {
	if k == 0 {
		var none V
		v, ok = m.zv, m.zero
		m.zero, m.zv = false, none
		return v, ok
	}
	if m.slots == nil {
		return v, false
	}
	mask := len(m.slots) - 1
	i := m.home(k)
	for ; m.slots[i].k != k; i = (i + 1) & mask {
		if m.slots[i].k == 0 {
			return v, false
		}
	}
	v = m.slots[i].v
	// shift back the keys after i that may no longer be found past the
	// hole: those whose home is not in (i, j]
	for j := i; ; {
		j = (j + 1) & mask
		if m.slots[j].k == 0 {
			break
		}
		h := m.home(m.slots[j].k)
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		m.slots[i] = m.slots[j]
		i = j
	}
	m.slots[i] = slot[V]{}
	m.n--
	return v, true
}

// All yields every key and its value, in no particular order. The map
// must not change during the loop.
func (m *Map[V]) All() iter.Seq2[uint64, V] {
	return func(yield func(uint64, V) bool) {
		if m.zero && !yield(0, m.zv) {
			return
		}
		for i := range m.slots {
			if s := &m.slots[i]; s.k != 0 && !yield(s.k, s.v) {
				return
			}
		}
	}
}

// Reserve makes room for n keys in all, so that the map does not grow
// again until it holds more: a map filled key by key doubles its table,
// leaving each smaller one behind as garbage, and a caller that knows
// how many keys are coming can size it once.
func (m *Map[V]) Reserve(n int) {
	size := max(len(m.slots), minSlots)
	for over(n, size) { // Put's bound on the keys a table holds
		size *= 2
	}
	if size > len(m.slots) {
		m.resize(size)
	}
}

// grow doubles the table (or makes the first).
func (m *Map[V]) grow() { m.resize(max(2*len(m.slots), minSlots)) }

// resize makes a table of size slots, a power of two, and puts every key
// back.
func (m *Map[V]) resize(size int) {
	old := m.slots
	m.slots = make([]slot[V], size)
	// A table of pages fresh from the kernel is not cleared by Go: the
	// probes below (and Get's) would read each page first, mapping the
	// shared zero page, and fault again on its first write, a copy that
	// flushes the page from every core's TLB. Written first, each page
	// faults once; a table in reused memory is written twice, a few
	// microseconds for the biggest.
	clear(m.slots)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	mask := size - 1
	for _, s := range old {
		if s.k == 0 {
			continue
		}
		i := m.home(s.k)
		for m.slots[i].k != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = s
	}
}
