package pickle

import (
	"encoding/binary"
	"testing"
)

// signedEvents writes a snapshot of n events laid out alike, whose
// stream is a negative BININT and whose time_us is a LONG1 of six
// bytes, negative every third event. The addr of event badAddr is a
// negative LONG1 of the usual length, the size of event badSize a
// negative BININT.
func signedEvents(n, badAddr, badSize int) []byte {
	g := &evGen{b: []byte{opProto, 4}, set: map[int]bool{}, str: map[string]int{}}
	g.header(nil)
	g.b = append(g.b, opEmptyList)
	g.memoize()
	g.b = append(g.b, opMark)
	long6 := func(v uint64) {
		g.b = append(g.b, opLong1, 6)
		g.b = binary.LittleEndian.AppendUint64(g.b, v)[:len(g.b)+6]
	}
	for e := range n {
		g.b = append(g.b, opEmptyDict)
		g.memoize()
		g.b = append(g.b, opMark)
		g.s("action")
		g.s("alloc")
		g.s("addr")
		if e == badAddr {
			long6(0x8000_0000_0200)
		} else {
			long6(0x7f00_0000_0000 + 512*uint64(e))
		}
		g.s("size")
		if e == badSize {
			g.n(-1 << 20)
		} else {
			g.n(1 << 20)
		}
		g.s("stream")
		g.n(-3 - int64(e%2))
		g.s("time_us")
		if e%3 == 2 {
			long6(0x8000_0000_0000 + uint64(e)) // negative
		} else {
			long6(0x1000_0000_0000 + uint64(e))
		}
		g.s("frames")
		g.b = append(g.b, opEmptyList)
		g.memoize()
		g.b = append(g.b, opSetItems)
	}
	g.b = append(g.b, opAppends, opAppends, opSetItems, opStop)
	return g.b
}

// The fixed layout of a template compares a LONG1's sign bit and
// sign-extends a BININT as the general decoder does.
func TestFixedLayoutSigns(t *testing.T) {
	for _, bad := range [][2]int{{-1, -1}, {150, -1}, {-1, 150}} {
		data := signedEvents(300, bad[0], bad[1])
		checkSame(t, data)
		if _, err := readGeneral(data); (err == nil) != (bad[0] < 0 && bad[1] < 0) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
	s, err := readGeneral(signedEvents(300, -1, -1))
	if err != nil {
		t.Fatal(err)
	}
	if ev := s.Traces[0][5]; int64(ev.Stream) != -4 || ev.TimeUS >= 0 {
		t.Fatalf("event 5: %+v", ev)
	}
}
