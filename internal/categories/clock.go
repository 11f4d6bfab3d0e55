package categories

import "math"

// clock is the time of each position of a Builder, in about 4 bytes a
// position: each chunk of 1<<chunkBits positions keeps its first time and
// the others as 32-bit offsets from it (over an hour and ten minutes in
// microseconds), and only a chunk where one does not fit (a longer gap,
// or a time going back) keeps 8-byte times.
type clock struct {
	chunks []clockChunk
	n      int
}

type clockChunk struct {
	base  int64
	small []uint32 // t - base, while every one fits
	wide  []int64  // the times themselves, once one did not (small is nil)
}

func (c *clock) add(t int64) {
	k := len(c.chunks) - 1
	if k < 0 || len(c.chunks[k].small)+len(c.chunks[k].wide) == 1<<chunkBits {
		c.chunks = append(c.chunks, clockChunk{base: t, small: make([]uint32, 0, min(1<<chunkBits, max(c.n, 64)))})
		k++
	}
	ch := &c.chunks[k]
	c.n++
	if ch.wide == nil {
		if d := uint64(t - ch.base); t >= ch.base && d <= math.MaxUint32 {
			ch.small = append(ch.small, uint32(d))
			return
		}
		ch.wide = make([]int64, len(ch.small), cap(ch.small))
		for i, d := range ch.small {
			ch.wide[i] = ch.base + int64(d)
		}
		ch.small = nil
	}
	ch.wide = append(ch.wide, t)
}

// at is the time of position i (i < n).
func (c *clock) at(i int) int64 {
	ch := &c.chunks[i>>chunkBits]
	if ch.wide != nil {
		return ch.wide[i&(1<<chunkBits-1)]
	}
	return ch.base + int64(ch.small[i&(1<<chunkBits-1)])
}
