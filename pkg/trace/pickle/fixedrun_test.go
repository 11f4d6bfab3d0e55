package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// mixedEvents writes a snapshot of n events whose layouts follow no
// order, as r picks them: ints of other lengths, the frames list a
// fresh empty one, none (two memo stores per event or one) or one
// fetched from the memo, a negative stream, now and then a segment's
// action; event bad is a segment's of a size done refuses. With filler, 300 strs are memoized before the
// events, whose keys and actions are then fetched with LONG_BINGET.
func mixedEvents(n int, filler bool, bad int, r *rand.Rand) []byte {
	g := &evGen{b: []byte{opProto, 4}, set: map[int]bool{}, str: map[string]int{}}
	var fill func()
	if filler {
		fill = func() {
			g.s("filler")
			g.b = append(g.b, opEmptyList)
			g.memoize()
			g.b = append(g.b, opMark)
			for i := range 300 {
				g.s(fmt.Sprint("s", i))
			}
			g.b = append(g.b, opAppends)
		}
	}
	g.header(fill)
	g.b = append(g.b, opEmptyList)
	g.memoize()
	g.b = append(g.b, opMark)
	frames := -1 // the memo slot of a shared frames list
	for e := range n {
		g.b = append(g.b, opEmptyDict)
		g.memoize()
		g.b = append(g.b, opMark)
		g.s("action")
		// (free_completed first in the second half: memoized after
		// the loops read events, which must count the memo's slots)
		act := []string{"alloc", "free_requested", "free_completed"}[r.IntN(2+2*e/n)]
		if r.IntN(50) == 0 || e == bad {
			act = "segment_alloc"
		}
		g.s(act)
		g.s("addr")
		addr := uint64(0x7f00_0000_0000) + 512*uint64(e)
		g.b = append(g.b, opLong1, 6)
		g.b = binary.LittleEndian.AppendUint64(g.b, addr)[:len(g.b)+6]
		g.s("size")
		switch {
		case e == bad:
			g.n(2<<20 + 200)
		case act == "segment_alloc":
			g.n(2 << 20)
		default:
			g.n([]int64{512, 1 << 20, 1 << 33, 200}[r.IntN(4)])
		}
		g.s("stream")
		g.n([]int64{0, 7, -3, 70000}[r.IntN(4)])
		g.s("time_us")
		g.n(1_700_000_000_000_000 + int64(e))
		switch c := r.IntN(8); {
		case frames < 0 || c < 4:
			g.s("frames")
			g.b = append(g.b, opEmptyList)
			if i := g.memoize(); frames < 0 {
				frames = i
			}
		case c == 4:
			g.s("frames")
			g.get(frames) // (a layout the loops do not take)
		}
		g.b = append(g.b, opSetItems)
	}
	g.b = append(g.b, opAppends, opAppends, opSetItems, opStop)
	return g.b
}

// Events whose layouts switch at random, of the usual fixed layouts
// runLoop and runLoopWide read (actions fetched with BINGET, or with
// LONG_BINGET in dicts of more than 55 bytes), read as the general
// decoder reads them.
func TestFixedRunSwitches(t *testing.T) {
	for seed := range uint64(6) {
		filler := seed%2 == 1
		checkSame(t, mixedEvents(3000, filler, 2500, rand.New(rand.NewPCG(seed, 1))))
		data := mixedEvents(3000, filler, -1, rand.New(rand.NewPCG(seed, 1)))
		checkSame(t, data)
		// the loops took the layouts
		d := newDecoder(bytes.NewReader(data), int64(len(data)))
		if _, err := d.decode(); err != nil {
			t.Fatal(err)
		}
		usual, wide := 0, 0
		for _, tp := range d.tmpls {
			if tp.ok && tp.fixed && tp.run.ok {
				usual++
			}
			if tp.ok && tp.fixed && tp.run.wide {
				wide++
			}
		}
		if filler && wide < 2 || !filler && usual < 2 {
			t.Fatalf("seed %d: %d templates for runLoop, %d for runLoopWide", seed, usual, wide)
		}
	}
}
