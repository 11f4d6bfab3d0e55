package pickle

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// Hostile inputs of issue #12: each must cost memory and output in
// proportion to its size, and fail with a short error that says where.

// allocated returns the heap bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// refs is n BINGETs of memo index 0, appended to the list below in
// batches of 1000.
func refs(n int) praw {
	b := []byte{opEmptyList, opMark}
	for i := range n {
		if i > 0 && i%1000 == 0 {
			b = append(b, opAppends, opMark)
		}
		b = append(b, opBinGet, 0)
	}
	return append(b, opAppends)
}

func TestBoundedStacks(t *testing.T) {
	// 2,000 references to one frame whose filename is 1 MiB: a report
	// printing this stack once used to print 2 GB.
	frame := append(encode(nil, pdict{{"filename", strings.Repeat("x", 1<<20)}, {"line", 1}, {"name", "f"}}), opMemoize)
	frames := append(append([]byte{opEmptyList, opMark}, frame...), bytes.Repeat([]byte{opBinGet, 0}, 1999)...)
	frames = append(frames, opAppends)
	ev := event("alloc", 512, 512)
	ev[6].v = praw(frames)
	// and 200 distinct frames
	var long []any
	for i := range 200 {
		long = append(long, pdict{{"filename", "a.py"}, {"line", i + 1}, {"name", "g"}})
	}
	ev2 := event("alloc", 1024, 512)
	ev2[6].v = long
	s, err := decode(pickleOf(snapshotOf(ev, ev2)))
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stacks[s.Traces[0][0].Stack]
	if len(st) != 2 || len(st[0].Filename) != maxFrameString+len("…") || !strings.HasSuffix(st[0].Filename, "x…") ||
		st[1].Name != "… previous frame repeated 1999 more times" {
		t.Errorf("repeated frame: got %d frames, the first with a filename of %d bytes", len(st), len(st[0].Filename))
	}
	st = s.Stacks[s.Traces[0][1].Stack]
	if len(st) != maxFrames+1 || st[maxFrames-1].Line != maxFrames || st[maxFrames].Name != "… 136 more frames" {
		t.Errorf("long stack: got %d frames, last %+v", len(st), st[len(st)-1])
	}
}

func TestMemoReferencesBounded(t *testing.T) {
	// One list referenced 4 million times from an 8 MB input: 64 MB of
	// references, 300 MB allocated as the list grew.
	in := pickleOf(praw(append([]byte{opEmptyList, opEmptyList, opMemoize, opAppend}, refs(4_000_000)[1:]...)))
	var err error
	n := allocated(func() { _, err = decode(in) })
	if err == nil || !strings.Contains(err.Error(), "MiB of memory") || n > 160<<20 {
		t.Errorf("allocated %d MiB, error %v; want a memory error within 160 MiB", n>>20, err)
	}
}

func TestNestingBounded(t *testing.T) {
	// 2 million empty lists, each a container of its own.
	in := append([]byte{opProto, 4}, bytes.Repeat([]byte{opEmptyList}, 2_000_000)...)
	in = append(in, opStop)
	var err error
	n := allocated(func() { _, err = decode(in) })
	if err == nil || !strings.Contains(err.Error(), "MiB of memory") || n > 160<<20 {
		t.Errorf("allocated %d MiB, error %v; want a memory error within 160 MiB", n>>20, err)
	}
}

func TestLongStringCheap(t *testing.T) {
	// A 20 MB action: neither kept whole nor quoted whole.
	in := pickleOf(snapshotOf(event("\x1b[2J"+strings.Repeat("a", 20<<20), 512, 512)))
	var err error
	n := allocated(func() { _, err = decode(in) })
	if err == nil || len(err.Error()) > 200 || strings.Contains(err.Error(), "\x1b") || n > 8<<20 {
		t.Errorf("allocated %d MiB, error of %d bytes %.300q", n>>20, len(err.Error()), err)
	}
}

func TestSegmentChecks(t *testing.T) {
	block := func(addr, size int) pdict {
		return pdict{{"address", addr}, {"size", size}, {"state", "active_allocated"}}
	}
	seg := func(addr, size int, blocks ...any) pdict {
		return pdict{{"device", 0}, {"address", addr}, {"total_size", size}, {"segment_type", "large"}, {"blocks", blocks}}
	}
	good := seg(1<<21, 2048, block(1<<21, 512), block(1<<21+512, 1536))
	with := func(events []any, segs ...any) []byte {
		return pickleOf(pdict{{"segments", segs}, {"device_traces", []any{events}}})
	}
	if _, err := decode(with(nil, good)); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	for _, c := range []struct {
		name string
		in   []byte
		msg  string
	}{
		{"size not a multiple of 512", with(nil, seg(1<<21, 1000)), "segment size 1000 is not a positive multiple of 512"},
		{"unaligned segment", with(nil, seg(1<<21+8, 512)), "segment address 0x200008 is not a multiple of 512"},
		{"block outside", with(nil, seg(1<<21, 1024, block(1<<22, 512))), "block 0: block at 0x400000 of 512 bytes lies outside its segment 0x200000-0x200400"},
		{"blocks out of order", with(nil, seg(1<<21, 2048, block(1<<21+512, 512), block(1<<21, 512))), "block 1: block at 0x200000 is out of address order"},
		{"block size", with(nil, seg(1<<21, 2048, block(1<<21, 100))), "block 0: block size 100 is not a positive multiple of 512"},
		{"segments overlap", with(nil, good, seg(1<<21+1024, 2048)), "segment at 0x200400 overlaps the segment at 0x200000 of 2048 bytes (device 0)"},
		{"unaligned event", with([]any{event("free_requested", 1<<21+1, 512)}, good), "free_requested address 0x200001 is not a multiple of 512"},
		{"segment_free size", with([]any{event("segment_free", 1<<22, 1000)}, good), "segment_free size 1000 is not a positive multiple of 512"},
	} {
		_, err := decode(c.in)
		fe, ok := err.(*FormatError)
		if !ok || fe.Offset <= 0 || !strings.Contains(fe.Msg, c.msg) {
			t.Errorf("%s: got %v, want a *FormatError at an offset saying %s", c.name, err, c.msg)
		}
	}
}
