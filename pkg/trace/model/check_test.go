package model

import (
	"strings"
	"testing"
)

func TestCheckSegment(t *testing.T) {
	blk := func(addr, size uint64) Block { return Block{Address: addr, Size: size} }
	for _, c := range []struct {
		s    Segment
		want string // "" if fine, else a part of the message
	}{
		{Segment{Address: 1 << 21, TotalSize: 2048, Blocks: []Block{blk(1<<21, 512), blk(1<<21+512, 1536)}}, ""},
		{Segment{Address: 1 << 21, TotalSize: 2048, Blocks: []Block{blk(1<<21+1024, 1024)}}, ""}, // gaps are allowed
		{Segment{Address: 1 << 21, TotalSize: 2048}, ""},
		{Segment{Address: 1 << 21, TotalSize: 2048, Blocks: []Block{blk(1<<21+1536, 1024)}}, "lies outside its segment"},
		{Segment{Address: 1 << 21, TotalSize: 2048, Blocks: []Block{blk(1<<21, 1024), blk(1<<21+512, 512)}}, "block 1: block at 0x200200 is out of address order"},
		{Segment{Address: 1 << 21, TotalSize: 2048, Blocks: []Block{blk(1<<20, 512)}}, "out of address order"},
		{Segment{Address: 1 << 21, TotalSize: 2048, Blocks: []Block{blk(1<<21, 0)}}, "block size 0 is not"},
		{Segment{Address: 1<<64 - 512, TotalSize: 1024}, "runs past the end of the address space"},
	} {
		got := CheckSegment(&c.s)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%+v: got %q, want %q", c.s, got, c.want)
		}
	}
}

func TestCheckOverlap(t *testing.T) {
	segs := []Segment{
		{Device: 0, Address: 4096, TotalSize: 1024},
		{Device: 1, Address: 4096, TotalSize: 1024}, // another device
		{Device: 0, Address: 5120, TotalSize: 512},  // touching is fine
	}
	if i, msg := CheckOverlap(segs); i >= 0 {
		t.Fatalf("got %d %s, want no overlap", i, msg)
	}
	segs = append(segs, Segment{Device: 0, Address: 4608, TotalSize: 512})
	if i, msg := CheckOverlap(segs); i != 3 || !strings.Contains(msg, "segment at 0x1200 overlaps the segment at 0x1000") {
		t.Errorf("got %d %q", i, msg)
	}
}
