package replay

import (
	"encoding/binary"

	"github.com/gpumem/gpumem/pkg/trace"
)

// tape keeps one device's events, as the read that found its start state
// saw them, packed into a few bytes each (about 8 for a real trace's,
// against the 48 of a trace.Event and the much more of decoding them from
// the pickle again): the passes that need the whole trace before they can
// plan it (the snapshot planner, the walk for private pools, the planner
// with the pools found) read the tape instead of the file.
type tape struct {
	chunks [][]byte
	mapped []bool // per chunk: outside the Go heap (tapeChunk)
	n      int    // events
	last   trace.Event
}

// Header byte of a taped event: its action, then flags saying which
// fields are the previous event's.
const (
	tAction     = 0x0f // 0: the action follows as a byte
	tStreamSame = 1 << 4
	tNoStack    = 1 << 5 // Stack is -1
	tStackSame  = 1 << 6 // Stack is the previous event's (and not -1)
	tTimeSame   = 1 << 7
)

// add appends e.
func (t *tape) add(e *trace.Event) {
	var buf [64]byte
	p := &t.last
	h := byte(0)
	if e.Action <= tAction {
		h = byte(e.Action)
	}
	if e.Stream == p.Stream {
		h |= tStreamSame
	}
	switch {
	case e.Stack == -1:
		h |= tNoStack
	case e.Stack == p.Stack:
		h |= tStackSame
	}
	if e.TimeUS == p.TimeUS {
		h |= tTimeSame
	}
	b := append(buf[:0], h)
	if h&tAction == 0 {
		b = append(b, byte(e.Action))
	}
	b = binary.AppendVarint(b, int64(e.Addr-p.Addr))
	b = binary.AppendUvarint(b, e.Size)
	if h&tStreamSame == 0 {
		b = binary.AppendUvarint(b, e.Stream)
	}
	if h&(tNoStack|tStackSame) == 0 {
		b = binary.AppendVarint(b, int64(e.Stack)-int64(p.Stack))
	}
	if h&tTimeSame == 0 {
		b = binary.AppendVarint(b, e.TimeUS-p.TimeUS)
	}
	*p = *e
	k := len(t.chunks) - 1
	if k < 0 || len(t.chunks[k])+len(b) > cap(t.chunks[k]) {
		size := firstChunk
		if k >= 0 {
			size = min(2*cap(t.chunks[k]), logChunk)
		}
		c, mapped := tapeChunk(size)
		t.chunks, t.mapped = append(t.chunks, c), append(t.mapped, mapped)
		k++
	}
	t.chunks[k] = append(t.chunks[k], b...)
	t.n++
}

// each hands f the events in order (e is only valid during the call); it
// stops at f's first error. With drop, each chunk is let go once read:
// the tape is empty after.
func (t *tape) each(drop bool, f func(e *trace.Event) error) error {
	var e trace.Event
	for k, c := range t.chunks {
		for p := 0; p < len(c); {
			h := c[p]
			p++
			e.Action = trace.Action(h & tAction)
			if e.Action == 0 {
				e.Action = trace.Action(c[p])
				p++
			}
			d, n := binary.Varint(c[p:])
			p += n
			e.Addr += uint64(d)
			e.Size, p = uvarint(c, p)
			if h&tStreamSame == 0 {
				e.Stream, p = uvarint(c, p)
			}
			switch {
			case h&tNoStack != 0:
				e.Stack = -1
			case h&tStackSame == 0:
				d, n := binary.Varint(c[p:])
				p += n
				e.Stack += int32(d)
			}
			if h&tTimeSame == 0 {
				d, n := binary.Varint(c[p:])
				p += n
				e.TimeUS += d
			}
			if err := f(&e); err != nil {
				return err
			}
		}
		if drop {
			t.freeChunk(k)
		}
	}
	if drop {
		t.free()
	}
	return nil
}

// free lets the tape go: it is empty after.
func (t *tape) free() {
	for k := range t.chunks {
		t.freeChunk(k)
	}
	*t = tape{}
}

func (t *tape) freeChunk(k int) {
	if t.mapped[k] && t.chunks[k] != nil {
		freeTapeChunk(t.chunks[k])
	}
	t.chunks[k] = nil
}
