package replay

import (
	"encoding/binary"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// isSegment says action is a segment event's.
func isSegment(action trace.Action) bool {
	return 1<<(action&31)&segmentActions != 0
}

// stepPlain is step over events[i:end] (end < len(events): a step may
// read the event after) for a streamed plan of a trace without segment
// events, which a Planner plans as it reads. Runs of the usual
// allocations and frees go to plainRun, anything else to step. It
// returns the index of the first event not stepped, -1 at a segment
// event (which such a plan declines).
func (b *builder) stepPlain(events []trace.Event, i, end, base int) int {
	log := b.p.log
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
	for i < end {
		if !b.afterDevice { // (the event after a device event: step notes it)
			b.room(end - i)
			if i = b.plainRun(events, i, end); i >= end { // (end + 1 after a free at end - 1)
				break
			}
		}
		if isSegment(events[i].Action) {
			return -1
		}
		i = b.step(events, i, base) + 1
	}
	return i
}

// plainRun plans the run of usual events from events[i] on, up to end:
// an allocation (of the default stream) or a free (a free_requested and
// its free_completed, i < end reads the event after) of a block of an ID
// of one byte whose address the map finds (Find), whose op is the usual
// one (sameStack) and, for an allocation, whose size the log's cache
// holds. It plans and packs them as step and opLog.putAlloc and
// putFree would, and returns the index of the first other event, which
// step plans. The log must have room for the run (room).
//
// It is step cut down to what these events need, with the builder's and
// the log's state in locals, stored back at the end, and no call: a call
// in the loop would cost the loop the values it holds in registers,
// spilled and loaded again each event. For the same reason the loop
// carries as few values as it can: the event index i, the log's at and
// the last op's stack. The allocations and frees it planned follow from
// how far i and at moved, an allocation being one event and 3 bytes, a
// free two events and 2 bytes: each allocation moves at - i by 2, a free
// not at all.
func (b *builder) plainRun(events []trace.Event, i, end int) int {
	p, log := b.p, b.p.log
	cur, at := log.cur, log.at
	stack := log.stack // the last op's
	if b.counted-log.event != 1 {
		return i // the first op would not follow the last (and each after does)
	}
	i0 := i
	// an allocation's open: 1 + its index among the alloc events,
	// b.allocs + the allocations planned before it, (at - i - d0) / 2
	d0 := at - i
	open0 := 2*(b.allocs+1) - d0 // open = (open0 + at - i) / 2
	events = events[:end+1]      // (i < end: events[i] and [i+1] need no check)
	for ; i < len(events)-1; i++ {
		e := &events[i]
		if e.Stack >= 0 && e.Stack != stack { // not the usual op (sameStack)
			break
		}
		if e.Action == trace.ActionAlloc && e.Stream == 0 {
			// step's usual allocation, of a known address, freed
			l := p.byAddr.Find(e.Addr)
			if l == nil || !l.freed {
				break
			}
			// newID, its ID tested before it is taken
			id, n := p.next, len(p.freeIDs)
			if n > 0 {
				id = p.freeIDs[n-1]
			}
			sl := log.sizes.slot(e.Size)
			if id >= 0x80 || log.sizes[sl] != e.Size {
				break
			}
			if n > 0 {
				p.freeIDs = p.freeIDs[:n-1]
			} else {
				p.next++
			}
			b.opens[i&(plannerWindow-1)] = l.open
			*l = live1{id: id, open: int32((open0 + at - i) >> 1)} // (/ 2 of a positive number)
			// putAlloc's usual allocation, of a size in the cache and an
			// ID of one byte: header, ID, slot, and a zero byte past the
			// op (room leaves space for it, and the chunk's unused bytes
			// are zero): one store, one check
			op := uint32(byte(alloc.OpAlloc)|hEventNext|sameStack(e.Stack)) | id<<8 | uint32(sl)<<16
			binary.LittleEndian.PutUint32(cur[at:], op)
			at += 3
		} else if e.Action == trace.ActionFreeRequested {
			next := &events[i+1]
			if next.Action != trace.ActionFreeCompleted || next.Addr != e.Addr {
				break
			}
			// step's usual free, of a live block
			l := p.byAddr.Find(e.Addr)
			n := len(p.freeIDs)
			if l == nil || l.freed || l.pending || l.id >= 0x80 || n == cap(p.freeIDs) {
				break // (or the append would grow freeIDs: a call)
			}
			b.opens[i&(plannerWindow-1)] = l.open
			// append, in the room it has: the compiler cannot tell, and
			// a self-assignment stores no pointer
			p.freeIDs = p.freeIDs[:n+1]
			p.freeIDs[n] = l.id
			// putFree's usual free, of an ID of one byte
			cur[at+1], cur[at] = byte(l.id), byte(alloc.OpFree)|hEventNext|sameStack(e.Stack)
			at += 2
			*l = live1{freed: true}
			i++
		} else {
			break
		}
		stack = e.Stack
	}
	allocs := (at - i - d0) / 2
	frees := (i - i0 - allocs) / 2
	if ops := allocs + frees; ops > 0 {
		// each op a counted event, and an allocation an alloc event
		b.counted += int32(ops)
		b.allocs += allocs
		log.at, log.event, log.stack = at, b.counted-1, stack
		log.n += ops
		log.allocs += allocs
	}
	return i
}

// room makes room in the log's chunk for the usual ops of n events, at 3
// bytes each (and the byte past the last that plainRun writes), and one
// more op: plainRun then never tests for it. Step, which puts the
// others, may take that room: stepPlain makes it again after it.
func (b *builder) room(n int) {
	log := b.p.log
	for len(log.cur)-log.at < 3*n+maxOpLen {
		log.grow()
	}
}

// sameStack is the header's hStackSame of the usual op of stack (one
// whose Event is the last op's + 1 and whose Stack is the last op's or
// none, whose header is then its kind, hEventNext and sameStack(stack),
// with no extra byte).
func sameStack(stack int32) byte {
	return byte(uint32(^stack)>>31) * hStackSame // (no branch: 1 when stack >= 0)
}
