package alloc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fuzzBytes hands out the fuzzer's bytes one at a time, zeros once they
// run out.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// fuzzOptions decodes four bytes into allocator options. The config goes
// through ParseConfig, as a user's string would.
func fuzzOptions(b *fuzzBytes) (Options, error) {
	flags, b1, b2, b3 := b.next(), b.next(), b.next(), b.next()
	var parts []string
	if flags&0x02 != 0 {
		parts = append(parts, "expandable_segments:True")
	}
	if flags&0x04 != 0 {
		parts = append(parts, fmt.Sprintf("max_split_size_mb:%d", 40+int(b1)%160))
	}
	if flags&0x80 != 0 {
		parts = append(parts, fmt.Sprintf("max_non_split_rounding_mb:%d", 40+int(b1>>4)*8))
		if b1&1 != 0 {
			parts = append(parts, "large_segment_size_mb:40")
		}
	}
	if flags&0x08 != 0 {
		if b2&0x80 != 0 {
			parts = append(parts, fmt.Sprintf("roundup_power2_divisions:[1:%d,16:%d,>:%d]", 1<<(b2%5), 1<<(b2>>3%5), 1<<(b2>>5%4)))
		} else {
			parts = append(parts, fmt.Sprintf("roundup_power2_divisions:%d", 1<<(b2%5)))
		}
	}
	if flags&0x10 != 0 {
		parts = append(parts, fmt.Sprintf("garbage_collection_threshold:0.%d", 1+int(b3)%9))
	}
	conf, err := ParseConfig(strings.Join(parts, ","))
	if err != nil {
		return Options{}, err
	}
	if flags&0x01 != 0 { // any policy but pytorch
		ps := Policies()
		conf.Policy = ps[1+int(b2)%(len(ps)-1)]
	}
	// An unlimited device is given a card size: Sim(0) alone reports 2^50
	// bytes, whose expandable VA ranges overflow the simulator's address
	// space (TestExpandableDefaultDevice).
	o := Options{Config: conf, Device: Sim(0), DeviceTotal: 4 << 30}
	if flags&0x40 != 0 {
		// A small card: out-of-memory is common.
		o.Device, o.DeviceTotal = Sim(uint64(64+int(b3%32)*8)*mib), 0
	}
	if flags&0x20 != 0 {
		o.MemoryFraction = float64(1+b3%8) / 40 // 2.5% .. 20% of 4 GiB: 100 .. 800 MiB
		if o.DeviceTotal == 0 {
			o.MemoryFraction = float64(1+b3%8) / 10
		}
	}
	return o, nil
}

// fuzzSize spans tiny to ~110 MiB, dense around powers of two, and now
// and then a request no card holds (up to 2^60 bytes, as a hostile trace
// may ask).
func fuzzSize(b *fuzzBytes) uint64 {
	e, m := b.next(), b.next()
	if e == 255 {
		return 0
	}
	if e == 254 {
		return 1<<40 + uint64(m)<<52
	}
	base := uint64(1) << (9 + e%19) // 512 B .. 128 MiB
	size := base + base*uint64(m>>1)/128
	if m&1 != 0 {
		size-- // just below a boundary
	}
	return max(min(size, 110*mib), 1)
}

const (
	idFree = iota
	idLive
	idPending // freed, waiting for OpFreeComplete
)

type fuzzID struct {
	state    int
	size     uint64
	stream   uint64
	recorded bool // another stream uses it: its free stays pending
}

// fuzzOp decodes one operation over 16 ids, turning an op that would be
// invalid for the id into one that is valid.
func fuzzOp(b *fuzzBytes, ids *[16]fuzzID) Op {
	k, idb := b.next(), b.next()
	id := uint32(idb % 16)
	st := &ids[id]
	stream := uint64(k>>4) & 1
	kind := OpKind(1 + k%8)
	if kind > OpEmptyCache { // two chances in eight for alloc
		kind = OpAlloc
	}
	if kind == OpEmptyCache && k&0x60 != 0 {
		kind = OpFree // empty_cache is rarer
	}
	switch st.state {
	case idFree:
		if kind != OpEmptyCache {
			kind = OpAlloc
		}
	case idLive:
		if kind == OpAlloc || kind == OpFreeComplete || (kind == OpRecordStream && st.size == 0) {
			kind = OpFree
		}
	case idPending:
		if kind != OpEmptyCache {
			kind = OpFreeComplete
		}
	}
	op := Op{Kind: kind, ID: id}
	switch kind {
	case OpAlloc:
		op.Size, op.Stream = fuzzSize(b), stream
	case OpRecordStream:
		op.Stream = st.stream ^ 1
	}
	return op
}

func (s *fuzzID) apply(op Op) {
	switch op.Kind {
	case OpAlloc:
		*s = fuzzID{state: idLive, size: op.Size, stream: op.Stream}
	case OpFree:
		s.state = idFree
		if s.recorded && s.size > 0 {
			s.state = idPending
		}
	case OpFreeRequest:
		s.state = idPending
		if s.size == 0 {
			s.state = idFree
		}
	case OpFreeComplete:
		s.state = idFree
	case OpRecordStream:
		s.recorded = true
	}
}

func FuzzAllocator(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 1, 12, 3, 0, 2, 12, 3, 3, 1, 0, 0, 7, 0})
	// expandable, two streams, record_stream, free_request
	f.Add([]byte{0x02, 0, 0, 0, 0, 1, 14, 0, 0x10, 2, 16, 200, 5, 1, 3, 1, 4, 2, 4, 2, 0, 3, 13, 9, 7, 0, 3, 3})
	// max_split + divisions + gc + fraction
	f.Add([]byte{0x3c, 40, 0x83, 4, 0, 1, 17, 10, 0, 2, 17, 10, 0, 3, 17, 10, 3, 1, 3, 2, 3, 3, 0, 4, 18, 0, 7, 0})
	// a small device: out-of-memory
	f.Add([]byte{0x40, 0, 0, 0, 0, 1, 18, 255, 0, 2, 18, 255, 0, 3, 18, 255, 3, 1, 0, 4, 18, 200, 7, 0, 0, 5, 4, 4})
	// nocache with pending frees
	f.Add([]byte{0x01, 0, 0, 0, 0, 1, 10, 10, 5, 1, 0, 3, 1, 4, 1, 0, 2, 19, 50, 4, 2, 4, 2, 7, 0})
	// expandable + gc + fraction + max_split: the §9.5 interaction
	f.Add([]byte{0x36, 10, 0, 5, 0, 1, 17, 64, 0, 2, 17, 64, 0, 3, 17, 64, 3, 2, 3, 1, 0, 4, 16, 0, 0, 5, 18, 100, 7, 0})
	f.Add([]byte{0xfe, 0x21, 0x9a, 7, 0, 1, 20, 250, 0x10, 2, 19, 1, 0, 3, 8, 3, 6, 3, 3, 3, 4, 2, 0, 6, 12, 0, 3, 1, 7, 0})
	f.Fuzz(fuzzAllocator)
}

// FuzzAllocatorSeeded starts every policy from a seeded layout, as a
// truncated trace does: segments holding several live and pending blocks
// that the operations then free, reuse and release.
func FuzzAllocatorSeeded(f *testing.F) {
	// two live blocks in one segment, both freed (the nocache double free)
	f.Add([]byte{0x01, 0, 1, 0, 0x01, 0x11, 0, 2, 0x40, 0x40, 3, 12, 2, 13, 7, 0})
	f.Add([]byte{0x01, 0, 2, 0, 0x13, 0x32, 1, 3, 0x80, 0x10, 0x20, 3, 12, 3, 13, 3, 14, 7, 0})
	f.Add([]byte{0x00, 0, 0, 0, 0x03, 0x21, 0, 2, 0x40, 0x41, 3, 12, 4, 13, 7, 0})
	f.Add([]byte{0x02, 0, 0, 0, 0x02, 0x11, 0, 2, 0x40, 0x40, 0, 1, 18, 0, 3, 12, 3, 13, 7, 0})
	f.Add([]byte{0x41, 0, 4, 7, 0x01, 0x31, 0, 3, 0xff, 0x01, 0x80, 0, 1, 19, 0, 3, 12, 7, 0})
	for pol := byte(0); pol < 8; pol++ {
		f.Add([]byte{0x01, 0, pol, 0, 0x03, 0x21, 1, 2, 0x40, 0x41, 3, 12, 4, 13, 3, 14, 7, 0})
	}
	f.Fuzz(func(t *testing.T, data []byte) { runFuzzAllocator(t, data, true) })
}

// FuzzAllocatorPools adds private pools to the operations: allocations
// routed to two private pools, pools released and emptied (~MemPool),
// claims of free blocks by address, and allocations the recording saw fail.
func FuzzAllocatorPools(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 12, 3, 0x01, 0, 2, 12, 3, 0x02, 3, 1, 0, 0x0d, 7, 0, 0})
	f.Add([]byte{0x40, 0, 0, 0, 0, 1, 18, 255, 0x11, 0, 2, 18, 255, 0x12, 3, 1, 0, 0x4c, 7, 0, 0x0c})
	f.Add([]byte{0, 0, 0, 0, 0, 1, 10, 3, 0x01, 3, 1, 0, 0x20, 0, 2, 10, 3, 0x21, 0, 3, 18, 0, 0x61, 7, 0, 0x4c})
	f.Fuzz(func(t *testing.T, data []byte) { runFuzz(t, data, false, true, "") })
}

// fuzzAllocator runs the operations data decodes to, checking everything
// after each one.
func fuzzAllocator(t *testing.T, data []byte) { runFuzzAllocator(t, data, false) }

// fuzzPools decorates op with a pool, flags and a hint from one more byte,
// and may first release or empty a pool.
type fuzzPools struct {
	created, released [3]bool
}

func (fp *fuzzPools) decorate(c byte, op *Op, a *Allocator) (pre *Op) {
	if c&0x0c == 0x0c {
		p := uint32(1 + (c>>6)%2)
		switch {
		case fp.created[p] && !fp.released[p] && c&0x01 == 0:
			fp.released[p] = true
			pre = &Op{Kind: OpPoolRelease, Pool: p}
		case c&0x02 != 0:
			pre = &Op{Kind: OpPoolEmpty, Pool: p}
		}
	}
	if op.Kind != OpAlloc {
		return pre
	}
	if p := uint32(c % 3); !fp.released[p] {
		op.Pool = p
		fp.created[p] = fp.created[p] || op.Size > 0 // no block, no pool
	}
	if c&0x10 != 0 {
		op.Flags |= FlagRecordedOOM
	}
	if c&0x03 == 0x03 && c&0x0c != 0x0c { // a release run came before it
		op.Flags |= FlagReleasedBefore
	}
	if c&0x20 != 0 {
		var free []uint64
		for _, s := range a.Snapshot() {
			for _, b := range s.Blocks {
				if b.State == BlockInactive {
					free = append(free, b.Address)
				}
			}
		}
		if len(free) > 0 {
			op.Flags |= FlagClaim
			op.Hint = free[int(c>>6)%len(free)]
		}
	}
	return pre
}

// fuzzSeed decodes up to three seeded segments (the start state of a
// truncated trace) over ids 12..15 and seeds them, checking the allocator
// after each. Blocks are live or pending, several to a segment.
func fuzzSeed(t *testing.T, a *Allocator, b *fuzzBytes, ids *[16]fuzzID) {
	t.Helper()
	head := b.next()
	nseg := 1 + int(head&3)%3
	next := uint32(12)
	for s := 0; s < nseg && next < 16; s++ {
		shape := b.next()
		small := shape&0x80 != 0
		size := uint64(2+int(shape&0x0f)*2) * mib
		if small {
			size = 2 * mib
		}
		stream := uint64(shape>>4) & 1
		nblk := 1 + int(b.next())%3
		slot := size / uint64(nblk) / 512 * 512
		var blocks []SeedBlock
		for i := 0; i < nblk && next < 16; i++ {
			r := b.next()
			req := max(slot*uint64(r&0x7f)/128/512*512, 512)
			if r&1 != 0 {
				req -= 100 // not a multiple of 512
			}
			blk := SeedBlock{Offset: uint64(i) * slot, Size: (req + 511) / 512 * 512, Requested: req, ID: next,
				Pending: r&0x80 != 0}
			blocks = append(blocks, blk)
			st := fuzzID{state: idLive, size: req, stream: stream}
			if blk.Pending {
				st.state = idPending
			}
			ids[next] = st
			next++
		}
		if err := a.Seed(0x7f0000000000+uint64(s)*(64*mib), size, stream, small, blocks); err != nil {
			if errors.Is(err, ErrOutOfMemory) || errors.Is(err, ErrBackend) {
				// A policy that seeds block by block (by malloc) may have
				// seeded some before the device ran out: the snapshot
				// says which; the test goes on without the others.
				seeded := map[uint32]BlockState{}
				for _, seg := range a.Snapshot() {
					for _, blk := range seg.Blocks {
						if blk.State != BlockInactive {
							seeded[blk.ID] = blk.State
						}
					}
				}
				for _, blk := range blocks {
					if st, ok := seeded[blk.ID]; !ok {
						ids[blk.ID] = fuzzID{}
					} else if (st == BlockPendingFree) != blk.Pending {
						t.Fatalf("seed %d: block %d seeded as %s", s, blk.ID, st)
					}
				}
				return
			}
			t.Fatalf("seed %d (%d bytes, %+v): %v", s, size, blocks, err)
		}
		if err := a.Check(); err != nil {
			t.Fatalf("after seed %d (%+v): %v", s, blocks, err)
		}
	}
}

func runFuzzAllocator(t *testing.T, data []byte, seeded bool) { runFuzz(t, data, seeded, false, "") }

// runFuzzPolicy is runFuzzAllocator under policy pol ("" = as decoded).
func runFuzzPolicy(t *testing.T, data []byte, seeded bool, pol Policy) {
	runFuzz(t, data, seeded, false, pol)
}

// runFuzz runs the operations data decodes to, from a seeded start when
// seeded, with private pools when pools, under policy pol ("" = as
// decoded), checking everything after each one.
func runFuzz(t *testing.T, data []byte, seeded, pools bool, pol Policy) {
	if len(data) > 4096 {
		return
	}
	b := fuzzBytes(data)
	o, err := fuzzOptions(&b)
	if err != nil {
		t.Fatalf("decoded config refused: %v", err)
	}
	if pol != "" {
		o.Config.Policy = pol
	}
	o.Check = true
	a, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	defer a.Close()
	// a twin of a takes every op through BlockSteps, whose check compares
	// each step (the segments the op touched) with a walk of every segment
	twin, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	defer twin.Close()
	var steps BlockSteps
	defer steps.Free()
	var ids [16]fuzzID
	if seeded {
		tb, tids := b, ids
		fuzzSeed(t, a, &b, &ids)
		fuzzSeed(t, twin, &tb, &tids)
	}
	var history []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("config %q policy %s fraction %v device total %d\nops:\n  %s\n%s", o.Config.Text, o.Config.Policy,
			o.MemoryFraction, o.DeviceTotal, strings.Join(history, "\n  "), fmt.Sprintf(format, args...))
	}
	step := func(op Op) {
		history = append(history, fmt.Sprintf("%+v", op))
		res, err := a.Run([]Op{op}, len(history)-1, nil)
		if err != nil {
			fail("%v", err)
		}
		if sres, err := steps.Run(twin, []Op{op}, len(history)-1, 4, nil); err != nil {
			fail("stepped: %v", err)
		} else if sres.Done != res.Done || (sres.OOM != nil) != (res.OOM != nil) || len(sres.Survived) != len(res.Survived) {
			fail("stepped: %+v, run: %+v", sres, res)
		}
		if len(res.Survived) > 0 {
			if op.Flags&FlagRecordedOOM == 0 || len(res.Survived) != 1 || res.Survived[0].Size != op.Size {
				fail("survived %+v", res.Survived)
			}
			history[len(history)-1] += " -> recorded OOM"
			op.Size = 0 // it holds nothing; its free is still due
		}
		if res.OOM != nil {
			if op.Kind != OpAlloc || res.OOM.Size != op.Size || res.OOM.Rounded < op.Size {
				fail("OOM %+v", *res.OOM)
			}
			history[len(history)-1] += " -> OOM"
			return // the id stays free
		}
		ids[op.ID].apply(op)
		if err := fuzzConsistent(a, &ids); err != nil {
			fail("%v", err)
		}
	}
	var fp fuzzPools
	a.SetFollowsRecording(pools) // FlagReleasedBefore may empty the cache
	twin.SetFollowsRecording(pools)
	for len(b) > 0 && len(history) < 400 {
		op := fuzzOp(&b, &ids)
		if pools {
			if pre := fp.decorate(b.next(), &op, a); pre != nil {
				step(*pre)
			}
		}
		step(op)
	}
	// Give everything back: then nothing may stay reserved.
	for id := range ids {
		switch ids[id].state {
		case idLive:
			step(Op{Kind: OpFree, ID: uint32(id)})
			if ids[id].state == idPending {
				step(Op{Kind: OpFreeComplete, ID: uint32(id)})
			}
		case idPending:
			step(Op{Kind: OpFreeComplete, ID: uint32(id)})
		}
	}
	for p := uint32(1); p < 3; p++ {
		if fp.created[p] && !fp.released[p] {
			step(Op{Kind: OpPoolRelease, Pool: p})
		}
	}
	step(Op{Kind: OpEmptyCache})
	st := a.Stats()
	// A policy that keeps its cache (RMM's pool, TensorFlow's BFC) gives
	// nothing back on empty_cache, but nothing may stay active.
	info, _ := o.Config.Policy.Info()
	keeps := info.KeepsCache
	if st.ActiveBytes[All].Current != 0 || (!keeps && (st.ReservedBytes[All].Current != 0 || len(a.Snapshot()) != 0)) {
		fail("after freeing everything and empty_cache: reserved %d, active %d, %d segments",
			st.ReservedBytes[All].Current, st.ActiveBytes[All].Current, len(a.Snapshot()))
	}
}

// fuzzConsistent checks the statistics and the snapshot against each other
// and against what the fuzzer believes is live.
func fuzzConsistent(a *Allocator, ids *[16]fuzzID) error {
	st := a.Stats()
	if n := len(st.Map()); n != 122 {
		return fmt.Errorf("memory_stats has %d keys, want 122", n)
	}
	if err := checkSnapshot(a); err != nil {
		return err
	}
	var live, pending int64
	for _, s := range ids {
		switch {
		case s.state == idLive && s.size > 0:
			live++
		case s.state == idPending:
			pending++
		}
	}
	if st.Allocation[All].Current != live {
		return fmt.Errorf("allocation.all.current = %d, %d ids live", st.Allocation[All].Current, live)
	}
	// A sync (empty_cache, the OOM path) may have completed pending frees.
	if act := st.Active[All].Current; act < live || act > live+pending {
		return fmt.Errorf("active.all.current = %d, %d ids live and %d pending", act, live, pending)
	}
	for _, seg := range a.Snapshot() {
		for _, blk := range seg.Blocks {
			if blk.State == BlockInactive {
				continue
			}
			if blk.ID >= 16 {
				return fmt.Errorf("block 0x%x has id %d", blk.Address, blk.ID)
			}
			s := ids[blk.ID]
			want := idLive
			if blk.State == BlockPendingFree {
				want = idPending
			}
			if s.state != want || blk.RequestedSize != s.size || blk.Size < s.size {
				return fmt.Errorf("block 0x%x (%s, %d bytes for %d) is id %d, which the ops left %+v",
					blk.Address, blk.State, blk.Size, blk.RequestedSize, blk.ID, s)
			}
		}
	}
	return nil
}
