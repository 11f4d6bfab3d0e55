package model

import (
	"cmp"
	"fmt"
	"slices"
)

// MinBlock is the caching allocator's granularity: segment and block
// addresses and sizes are multiples of it, and a replay that rebuilds a
// snapshot's segments relies on that.
const MinBlock = 512

// CheckSegment reports what is wrong with s for a replay to rebuild it,
// or "" if nothing: its address and size must be multiples of MinBlock
// and its blocks must lie inside it, in address order, without overlap,
// each a positive multiple of MinBlock.
func CheckSegment(s *Segment) string {
	switch {
	case s.Address%MinBlock != 0:
		return fmt.Sprintf("segment address %#x is not a multiple of %d", s.Address, MinBlock)
	case s.TotalSize == 0 || s.TotalSize%MinBlock != 0:
		return fmt.Sprintf("segment size %d is not a positive multiple of %d", s.TotalSize, MinBlock)
	case s.Address+s.TotalSize < s.Address:
		return fmt.Sprintf("segment at %#x of %d bytes runs past the end of the address space", s.Address, s.TotalSize)
	}
	for i := range s.Blocks {
		prefix := *s
		prefix.Blocks = s.Blocks[:i]
		if msg := CheckNextBlock(&prefix, &s.Blocks[i]); msg != "" {
			return fmt.Sprintf("block %d: %s", i, msg)
		}
	}
	return ""
}

// CheckNextBlock reports what is wrong with b as the block after s's
// last one (see CheckSegment), or "" if nothing.
func CheckNextBlock(s *Segment, b *Block) string {
	next := s.Address // lowest address b may start at
	if n := len(s.Blocks); n > 0 {
		next = s.Blocks[n-1].Address + s.Blocks[n-1].Size
	}
	end := s.Address + s.TotalSize
	switch {
	case b.Address%MinBlock != 0:
		return fmt.Sprintf("block address %#x is not a multiple of %d", b.Address, MinBlock)
	case b.Size == 0 || b.Size%MinBlock != 0:
		return fmt.Sprintf("block size %d is not a positive multiple of %d", b.Size, MinBlock)
	case b.Address < next:
		return fmt.Sprintf("block at %#x is out of address order or overlaps the previous one", b.Address)
	case b.Address >= end || b.Size > end-b.Address:
		return fmt.Sprintf("block at %#x of %d bytes lies outside its segment %#x-%#x", b.Address, b.Size, s.Address, end)
	}
	return ""
}

// CheckOverlap returns the index of a segment that overlaps another one
// of the same device, and a message; -1 and "" if none does. Segments
// that pass CheckSegment are assumed.
func CheckOverlap(segs []Segment) (int, string) {
	order := make([]int, len(segs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(segs[a].Device, segs[b].Device), cmp.Compare(segs[a].Address, segs[b].Address), cmp.Compare(a, b))
	})
	for k := 1; k < len(order); k++ {
		a, b := &segs[order[k-1]], &segs[order[k]]
		if a.Device == b.Device && b.Address < a.Address+a.TotalSize {
			return max(order[k-1], order[k]), fmt.Sprintf("segment at %#x overlaps the segment at %#x of %d bytes (device %d)",
				b.Address, a.Address, a.TotalSize, a.Device)
		}
	}
	return -1, ""
}

// IsSegmentAction reports whether a is a segment event (alloc, free,
// map or unmap).
func IsSegmentAction(a Action) bool {
	return a >= ActionSegmentAlloc && a <= ActionSegmentUnmap
}

// IsBlockAction reports whether a is a block event (alloc or free).
func IsBlockAction(a Action) bool {
	return a >= ActionAlloc && a <= ActionFreeCompleted
}

// CheckSegmentEvent reports what is wrong with a segment event for a
// replay, or "" if nothing: address and size must be multiples of
// MinBlock, the size positive.
func CheckSegmentEvent(e *Event) string {
	switch {
	case e.Addr%MinBlock != 0:
		return fmt.Sprintf("%s address %#x is not a multiple of %d", e.Action, e.Addr, MinBlock)
	case e.Size == 0 || e.Size%MinBlock != 0:
		return fmt.Sprintf("%s size %d is not a positive multiple of %d", e.Action, e.Size, MinBlock)
	}
	return ""
}
