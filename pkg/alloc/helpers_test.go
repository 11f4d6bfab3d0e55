package alloc

import (
	"errors"
	"fmt"
	"testing"
)

// newChecked makes an allocator that runs the invariant checker after
// every operation, and closes it when the test ends.
func newChecked(t testing.TB, o Options) *Allocator {
	t.Helper()
	o.Check = true
	a, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	t.Cleanup(a.Close)
	return a
}

func mustParse(t testing.TB, s string) Config {
	t.Helper()
	c, err := ParseConfig(s)
	if err != nil {
		t.Fatalf("ParseConfig(%q): %v", s, err)
	}
	return c
}

// withConfig is an allocator on an unlimited simulated device under conf.
func withConfig(t testing.TB, conf string) *Allocator {
	t.Helper()
	return newChecked(t, Options{Config: mustParse(t, conf)})
}

func mustAlloc(t testing.TB, a *Allocator, id uint32, size, stream uint64) uint64 {
	t.Helper()
	addr, err := a.Alloc(id, size, stream)
	if err != nil {
		t.Fatalf("Alloc(id %d, %d bytes, stream %d): %v", id, size, stream, err)
	}
	return addr
}

func mustFree(t testing.TB, a *Allocator, id uint32) {
	t.Helper()
	if err := a.Free(id); err != nil {
		t.Fatalf("Free(%d): %v", id, err)
	}
}

// mustRun applies ops and fails the test on an error or an out-of-memory.
func mustRun(t testing.TB, a *Allocator, ops ...Op) {
	t.Helper()
	res, err := a.Run(ops, 0, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.OOM != nil || res.Done != len(ops) {
		t.Fatalf("Run: done %d of %d, OOM %+v", res.Done, len(ops), res.OOM)
	}
}

// expectStats compares the named memory_stats keys.
func expectStats(t testing.TB, a *Allocator, want map[string]int64) {
	t.Helper()
	got := a.Stats().Map()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("memory_stats has no key %q", k)
			continue
		}
		if g != v {
			t.Errorf("%s = %d, want %d", k, g, v)
		}
	}
}

// checkSnapshot verifies a snapshot against the statistics: blocks tile
// their segments and add up to the allocated, active and reserved bytes.
func checkSnapshot(a *Allocator) error {
	segs := a.Snapshot()
	st := a.Stats()
	var reserved, allocated, active, requested uint64
	var prevEnd uint64
	for i, s := range segs {
		if s.Address+s.TotalSize < s.Address {
			return fmt.Errorf("segment 0x%x of %d bytes wraps past the end of the address space", s.Address, s.TotalSize)
		}
		if i > 0 && s.Address < prevEnd {
			return fmt.Errorf("segment 0x%x overlaps the one before or is out of order", s.Address)
		}
		prevEnd = s.Address + s.TotalSize
		at := s.Address
		var alloc, act, req uint64
		for _, b := range s.Blocks {
			if b.Address != at {
				return fmt.Errorf("segment 0x%x: block at 0x%x, want 0x%x", s.Address, b.Address, at)
			}
			if b.Size == 0 || b.Size%512 != 0 {
				return fmt.Errorf("segment 0x%x: block 0x%x has size %d", s.Address, b.Address, b.Size)
			}
			at += b.Size
			switch b.State {
			case BlockAllocated:
				alloc += b.Size
				act += b.Size
				req += b.RequestedSize
			case BlockPendingFree:
				act += b.Size
				req += b.RequestedSize
			}
		}
		if at != s.Address+s.TotalSize {
			return fmt.Errorf("segment 0x%x of %d bytes: blocks end at 0x%x", s.Address, s.TotalSize, at)
		}
		if alloc != s.AllocatedSize || act != s.ActiveSize || req != s.RequestedSize {
			return fmt.Errorf("segment 0x%x: sizes %d/%d/%d, blocks say %d/%d/%d", s.Address,
				s.AllocatedSize, s.ActiveSize, s.RequestedSize, alloc, act, req)
		}
		reserved += s.TotalSize
		allocated += alloc
		active += act
		requested += req
	}
	if int64(reserved) != st.ReservedBytes[All].Current {
		return fmt.Errorf("snapshot segments hold %d bytes, reserved_bytes is %d", reserved, st.ReservedBytes[All].Current)
	}
	if int64(allocated) != st.AllocatedBytes[All].Current {
		return fmt.Errorf("snapshot allocated %d bytes, allocated_bytes is %d", allocated, st.AllocatedBytes[All].Current)
	}
	if int64(active) != st.ActiveBytes[All].Current {
		return fmt.Errorf("snapshot active %d bytes, active_bytes is %d", active, st.ActiveBytes[All].Current)
	}
	if int64(requested) != st.RequestedBytes[All].Current {
		return fmt.Errorf("snapshot requested %d bytes, requested_bytes is %d", requested, st.RequestedBytes[All].Current)
	}
	if err := a.Check(); err != nil {
		return err
	}
	return nil
}

func mustSnapshot(t testing.TB, a *Allocator) []Segment {
	t.Helper()
	if err := checkSnapshot(a); err != nil {
		t.Fatal(err)
	}
	return a.Snapshot()
}

// isOOM reports whether err is an out-of-memory from Alloc.
func isOOM(err error) bool { return errors.Is(err, ErrOutOfMemory) }
