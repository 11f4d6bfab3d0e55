package replay

import (
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// isSegment says action is a segment event's.
func isSegment(action trace.Action) bool {
	return 1<<(action&31)&segmentActions != 0
}

// stepPlain is step over events[i:end] (end < len(events): a step may
// read the event after) for a streamed plan of a trace without segment
// events, which a Planner plans as it reads. The usual allocation and
// free are planned here in line, and packed in line as opLog.putAlloc
// and putFree would pack them, with the log's place of writing held in
// locals (through the log's fields, these few stores and tests were as
// much again); anything else goes to step, or to put. It returns the
// index of the first event not stepped, -1 at a segment event (which
// such a plan declines).
func (b *builder) stepPlain(events []trace.Event, i, end, base int) int {
	p, log := b.p, b.p.log
	if log == nil || b.hint != 0 || b.releasedBefore || b.pp != nil {
		// (none of these without segment events)
		for ; i < end; i++ {
			if isSegment(events[i].Action) {
				return -1
			}
			i = b.step(events, i, base)
		}
		return i
	}
	for i < end && b.afterDevice { // the event after a device event: step notes it
		if isSegment(events[i].Action) {
			return -1
		}
		i = b.step(events, i, base) + 1
	}
	b.room(end - i)
	t := b.tail()
	for i < end {
		e := &events[i]
		switch {
		case e.Action == trace.ActionAlloc && e.Stream == 0:
			// step's usual allocation
			k := b.allocs
			b.allocs++
			l, known := p.byAddr.Put(e.Addr)
			b.opens[i&(plannerWindow-1)] = l.open
			if known && !l.freed {
				l.open = int32(k + 1)
				p.Skipped[SkipDoubleAlloc]++
				t.counted++
				i++
				continue
			}
			id := p.newID()
			*l = live1{id: id, open: int32(k + 1)}
			if s := log.sizes.slot(e.Size); log.sizes[s] == e.Size && id < 0x80 && t.follows(e.Stack) {
				// putAlloc's usual allocation, of a size in the cache
				// and an ID of one byte
				w := t.cur[t.at : t.at+3]
				w[0], w[1], w[2] = byte(alloc.OpAlloc)|hEventNext|sameStack(e.Stack), byte(id), byte(s)
				t.put(3, e.Stack)
				t.allocs++
			} else {
				b.setTail(t)
				log.putAlloc(id, e.Size, t.counted, e.Stack)
				b.room(end - i)
				t = b.tail()
			}
			t.counted++
			i++
			continue
		case e.Action == trace.ActionFreeRequested:
			next := &events[i+1]
			if next.Action != trace.ActionFreeCompleted || next.Addr != e.Addr {
				break
			}
			l := p.byAddr.Ref(e.Addr)
			if l == nil || l.freed || l.pending {
				break
			}
			// step's usual free
			b.opens[i&(plannerWindow-1)] = l.open
			if id := l.id; id < 0x80 && t.follows(e.Stack) {
				// putFree's usual free, of an ID of one byte
				w := t.cur[t.at : t.at+2]
				w[0], w[1] = byte(alloc.OpFree)|hEventNext|sameStack(e.Stack), byte(id)
				t.put(2, e.Stack)
			} else {
				b.setTail(t)
				log.putFree(id, t.counted, e.Stack)
				b.room(end - i)
				t = b.tail()
			}
			t.counted++
			p.freeIDs = append(p.freeIDs, l.id)
			*l = live1{freed: true}
			i += 2
			continue
		case isSegment(e.Action):
			b.setTail(t)
			return -1
		}
		b.setTail(t)
		i = b.step(events, i, base) + 1
		for i < end && b.afterDevice { // (only step sets it)
			if isSegment(events[i].Action) {
				return -1
			}
			i = b.step(events, i, base) + 1
		}
		b.room(end - i)
		t = b.tail()
	}
	b.setTail(t)
	return i
}

// room makes room in the log's chunk for the usual ops of n events, at 3
// bytes each, and one more op: stepPlain's loop then never tests for it.
// Put and step, which put the others, may take that room (put only tests
// for one op's): stepPlain makes it again after them.
func (b *builder) room(n int) {
	log := b.p.log
	for len(log.cur)-log.at < 3*n+maxOpLen {
		log.grow()
	}
}

// logTail is where an opLog is written, and the builder's count of
// events, as stepPlain holds them while it packs the usual ops.
type logTail struct {
	cur          []byte
	at           int
	event, stack int32 // the last op's
	n, allocs    int   // ops and allocations put
	counted      int32 // the builder's
}

// tail is the logTail of the builder's log.
func (b *builder) tail() logTail {
	l := b.p.log
	return logTail{l.cur, l.at, l.event, l.stack, 0, 0, b.counted}
}

// setTail stores t back in the builder and its log.
func (b *builder) setTail(t logTail) {
	l := b.p.log
	l.at, l.event, l.stack = t.at, t.event, t.stack
	l.n += t.n
	l.allocs += t.allocs
	b.counted = t.counted
}

// follows says an op of the next event and of stack would be the usual
// one: its Event the last op's + 1 and its Stack the last op's or none.
// Its header is then its kind, hEventNext and sameStack(stack), with no
// extra byte.
func (t *logTail) follows(stack int32) bool {
	return t.counted-t.event == 1 && (stack < 0 || stack == t.stack)
}

// sameStack is the header's hStackSame of the usual op (follows) of stack.
func sameStack(stack int32) byte {
	if stack >= 0 {
		return hStackSame
	}
	return 0
}

// put notes the usual op of len bytes and stack just written at t.at.
func (t *logTail) put(len int, stack int32) {
	t.at += len
	t.n++
	t.event, t.stack = t.counted, stack
}
