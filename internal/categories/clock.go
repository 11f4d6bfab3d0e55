package categories

import (
	"encoding/binary"
	"math/bits"
)

// clock is the time of each position of a Builder, in a few bits a
// position: every clockGroup positions a mark keeps the group's first
// time and where the rest of the group begins; the rest are the
// differences from the time before, kept as their least plus each one's
// excess over it in as many bits as the largest excess needs (a trace's
// steps of a few microseconds take a few bits). A group is packed once
// it is whole; at decodes at most a group's. The groups fill slabs of
// clockSlab bytes, never copied as they grow; a group never straddles two.
type clock struct {
	first []int64  // each group's first time
	off   []uint32 // where each group's differences begin: slab<<16 | offset
	slabs [][]byte
	open  [clockGroup]int64 // the times of the last group, not packed yet
	n     int
}

const (
	clockGroupBits = 6 // clockGroup = 64 positions a mark
	clockGroup     = 1 << clockGroupBits
	clockSlab      = 1 << 16
	// the most bytes a group's differences take: their least, the width,
	// and 63 excesses of up to 64 bits
	clockGroupMax = binary.MaxVarintLen64 + 1 + (clockGroup-1)*8
)

// add gives position n its time t. Small enough to inline: the times of
// a group wait in open, as they came, and are packed once it is whole.
func (c *clock) add(t int64) {
	c.open[c.n&(clockGroup-1)] = t
	if c.n++; c.n&(clockGroup-1) == 0 {
		c.pack()
	}
}

// pack packs the last group, whole, into the slabs and marks where.
func (c *clock) pack() {
	k := len(c.slabs) - 1
	if k < 0 || clockSlab-len(c.slabs[k]) < clockGroupMax {
		c.slabs = append(c.slabs, make([]byte, 0, min(clockSlab, max(c.n, 256))))
		k++
	}
	c.first = append(c.first, c.open[0])
	c.off = append(c.off, uint32(k)<<16|uint32(len(c.slabs[k])))
	var d [clockGroup - 1]int64 // the differences from the time before
	least, top := c.open[1]-c.open[0], c.open[1]-c.open[0]
	for j := range d {
		v := c.open[j+1] - c.open[j] // wraps as int64 does; at wraps back
		d[j] = v
		least, top = min(least, v), max(top, v)
	}
	most := uint64(top) - uint64(least) // the largest excess
	w := uint(bits.Len64(most))
	b := binary.AppendVarint(c.slabs[k], least)
	b = append(b, byte(w))
	if w > 0 {
		b = appendBits(b, &d, least, w)
	}
	c.slabs[k] = b
}

// appendBits appends the excesses over least of d, w bits each (0 < w <=
// 64), the first in the lowest bits of the first byte: the bits gather
// in a word, written 8 bytes at a time once full (at reads them a byte at
// a time), the last one in as few bytes as hold the rest. Narrow
// excesses, the usual, go four at a time, as one of 4w bits (two at a
// time up to 32 bits).
func appendBits(b []byte, d *[clockGroup - 1]int64, least int64, w uint) []byte {
	var word bitWord
	j := 0
	switch w1, w2, w3 := w&63, 2*w&63, 3*w&63; { // masked: known to be below 64 where used
	case w <= 16:
		for ; j+4 <= len(d); j += 4 {
			q := d[j : j+4 : j+4]
			x := uint64(q[0]-least) | uint64(q[1]-least)<<w1 | uint64(q[2]-least)<<w2 | uint64(q[3]-least)<<w3
			b = word.put(b, x, 4*w)
		}
	case w <= 32:
		for ; j+2 <= len(d); j += 2 {
			q := d[j : j+2 : j+2]
			b = word.put(b, uint64(q[0]-least)|uint64(q[1]-least)<<w1, 2*w)
		}
	}
	for ; j < len(d); j++ {
		b = word.put(b, uint64(d[j]-least), w)
	}
	if word.n > 0 { // the word's first bytes, as many as hold the rest
		end := len(b) + int(word.n+7)/8
		return binary.LittleEndian.AppendUint64(b, word.acc)[:end]
	}
	return b
}

// bitWord is appendBits' word of bits not yet written: n of them (< 64)
// in acc.
type bitWord struct {
	acc uint64
	n   uint
}

// put adds the w low bits of x (0 < w <= 64; the rest are 0), and
// appends the word to b once full.
func (bw *bitWord) put(b []byte, x uint64, w uint) []byte {
	bw.acc |= x << (bw.n & 63)
	if bw.n += w; bw.n >= 64 {
		b = binary.LittleEndian.AppendUint64(b, bw.acc)
		bw.n -= 64
		bw.acc = 0
		if bw.n > 0 {
			bw.acc = x >> (w - bw.n) // the bits that did not fit
		}
	}
	return b
}

// at is the time of position i (i < n).
func (c *clock) at(i int) int64 {
	g, j := i>>clockGroupBits, i&(clockGroup-1)
	if g == len(c.off) { // the last group, not packed yet
		return c.open[j]
	}
	t := c.first[g]
	o := c.off[g]
	b := c.slabs[o>>16][o&(clockSlab-1):]
	least, k := binary.Varint(b)
	w := uint(b[k])
	b = b[k+1:]
	var acc uint64
	var nacc uint
	get := func(w uint) uint64 { // w <= 56
		for ; nacc < w; nacc += 8 {
			acc |= uint64(b[0]) << nacc
			b = b[1:]
		}
		v := acc & (1<<w - 1)
		acc >>= w
		nacc -= w
		return v
	}
	for range j {
		var x uint64
		if w > 56 {
			x = get(32)
			x |= get(w-32) << 32
		} else {
			x = get(w)
		}
		t += int64(uint64(least) + x)
	}
	return t
}
