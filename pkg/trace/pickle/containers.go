package pickle

import (
	"github.com/gpumem/gpumem/pkg/trace/internal/limits"
	"github.com/gpumem/gpumem/pkg/trace/model"

	"encoding/binary"
	"fmt"
	"math"
)

// The decoder's value model. Every pickle value on the stack or in the
// memo is a val of 16 bytes (8 in the memo). Scalars are stored inline,
// strings as interned ids. Dicts and lists are conts while they are being
// filled; once complete they become compact results: an event dict is
// decoded into its list's []model.Event as the list takes it (its memo slot
// keeps only a kGone placeholder), a list of event dicts becomes one
// []model.Event, a list of frame dicts becomes an interned
// stack id, blocks and segments become structs. Only dicts and lists of
// no known shape (the top level, settings, annotations) keep their items.

// kind tells what a val holds. Values above kBytes exist only in this
// decoder: containers under construction and already-converted structs.
type kind uint8

const (
	kUnset     kind = iota // empty memo slot
	kNone                  // None
	kBool                  // n: 0 or 1
	kInt                   // n: int64 bits
	kUint                  // n: an integer in [2^63, 2^64)
	kBig                   // an integer beyond 64 bits (usable only if ignored)
	kFloat                 // n: float64 bits
	kStr                   // n: interned string id
	kBytes                 // bytes; content skipped
	kTuple                 // n: start<<32 | length in decoder.tuples
	kDict                  // n: cont id
	kList                  // n: cont id
	kEmpty                 // a closed empty list
	kEvents                // n: index in decoder.traces (closed list of events)
	kFrame                 // n: frame id
	kStack                 // n: stack id (closed list of frames)
	kBlock                 // n: index in decoder.blocks
	kSegment               // n: index in decoder.segs
	kGone                  // a memoized value that cannot be fetched again
	kSide                  // memo only: n is an index in decoder.side
	kEventDone             // n: index in decoder.pending (an event dict fastEvent read)
)

var kindNames = [...]string{
	kUnset: "nothing", kNone: "None", kBool: "bool", kInt: "int", kUint: "int",
	kBig: "big int", kFloat: "float", kStr: "str", kBytes: "bytes", kTuple: "tuple",
	kDict: "dict", kList: "list", kEmpty: "list",
	kEvents: "event list", kFrame: "frame dict", kStack: "frame list",
	kBlock: "block dict", kSegment: "segment dict", kGone: "re-used memo value",
	kEventDone: "event dict",
}

func (k kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// val is one decoded value: 16 bytes, no pointers.
type val struct {
	k kind
	n uint64
}

// cont is a dict or list under construction. When its parent takes it
// (SETITEMS, APPENDS, TUPLE or STOP), it is complete: it is closed,
// converted by the shape of its keys or items, and res says what it
// became.
type cont struct {
	list      bool
	open      bool
	shared    bool // fetched from the memo while open: never recycled
	estimated bool // events capacity already sized from the bytes left
	memo      int  // memo slot holding this cont, -1 if none
	off       int64
	res       val
	items     []val // list items, or flattened dict key/value pairs
	events    []model.Event
	sinkList  int // the list number its events were handed to the sink under, -1 if none
}

type frameKey struct {
	file, name uint32
	line       int
}

func (d *decoder) newCont(list bool) uint32 {
	var id uint32
	if n := len(d.free); n > 0 {
		id = d.free[n-1]
		d.free = d.free[:n-1]
	} else {
		id = uint32(len(d.conts))
		d.conts = append(d.conts, &cont{})
		d.mem += contCost
	}
	c := d.conts[id]
	c.list, c.open, c.memo, c.off, c.sinkList = list, true, -1, d.op, -1
	return id
}

func (d *decoder) recycle(id uint32) {
	c := d.conts[id]
	*c = cont{items: c.items[:0]}
	d.free = append(d.free, id)
}

// Memo entries are vals packed into 8 bytes: kind<<56 | payload. Values
// whose payload needs more bits go to d.side.
func (d *decoder) pack(v val) uint64 {
	if v.n < 1<<56 {
		return uint64(v.k)<<56 | v.n
	}
	d.side = append(d.side, v)
	d.mem += valCost
	return uint64(kSide)<<56 | uint64(len(d.side)-1)
}

func (d *decoder) unpack(e uint64) val {
	v := val{kind(e >> 56), e & (1<<56 - 1)}
	if v.k == kSide {
		return d.side[v.n]
	}
	return v
}

// memoAt is memo slot i, for writing: a packed page is unpacked first.
func (d *decoder) memoAt(i int) *uint64 {
	pg := i >> memoPageBits
	if d.memo[pg] == nil {
		d.unpackPage(pg)
	}
	return &d.memo[pg][i&(memoPageLen-1)]
}

func (d *decoder) put(i uint64, v val) error {
	// A pickler numbers memo entries from 0 and each store costs at
	// least one byte, so no valid index exceeds the offset.
	if i > uint64(d.op) {
		return d.errorf("memo index %d out of range", i)
	}
	idx := int(i)
	if err := d.growMemo(idx); err != nil {
		return err
	}
	slot := d.memoAt(idx)
	if *slot == 0 {
		d.memoCount++
	} else {
		d.memoEpoch++
	}
	d.memoMax = max(d.memoMax, i+1)
	if v.k == kDict || v.k == kList {
		c := d.conts[v.n]
		if c.open {
			if c.memo >= 0 && c.memo != idx {
				c.shared = true
			}
			c.memo = idx
		} else {
			v = c.res
		}
	}
	if v.k == kEventDone { // another slot of a pending event dict
		if d.moreSlots == nil {
			d.moreSlots = map[uint64][]int{}
		}
		d.moreSlots[v.n] = append(d.moreSlots[v.n], idx)
	}
	*slot = d.pack(v)
	return nil
}

// growMemo adds memo pages up to the one of slot idx.
func (d *decoder) growMemo(idx int) error {
	for idx >= d.memoLen {
		// A sparse memo index may ask for many pages at once.
		d.mem += memoPageLen * 8
		if err := d.checkMem(); err != nil {
			return err
		}
		d.memo = append(d.memo, d.newPage())
		d.packed, d.wide = append(d.packed, nil), append(d.wide, nil)
		d.memoLen += memoPageLen
		// pages are filled in order: one a few pages back is done with
		if k := len(d.memo) - 1 - packLag; k >= 0 {
			d.packPage(k)
		}
	}
	return nil
}

func (d *decoder) get(i uint64) error {
	if i >= uint64(d.memoLen) {
		return d.errorf("memo key %d missing", i)
	}
	e := d.memoEntry(i)
	if e == 0 {
		return d.errorf("memo key %d missing", i)
	}
	v := d.unpack(e)
	if v.k == kEventDone {
		// an event dict fastEvent read, before its list took it: as for an
		// open dict fetched again, the copy is not kept and the list
		// refuses the dict
		d.pending[v.n].fetched = true
		v = val{k: kGone}
	}
	if v.k == kDict || v.k == kList {
		c := d.conts[v.n]
		if c.open {
			c.shared = true
		} else {
			v = c.res
		}
	}
	d.stack = append(d.stack, v)
	return nil
}

// closed records what cont id became and updates its memo slot.
func (d *decoder) closed(id uint32, c *cont, res val) {
	c.open = false
	c.res = res
	if c.memo >= 0 {
		old := uint64(kDict)<<56 | uint64(id)
		if c.list {
			old = uint64(kList)<<56 | uint64(id)
		}
		// (memoAt, in line for the usual unpacked page)
		slot := &d.memo[c.memo>>memoPageBits]
		if *slot == nil {
			d.unpackPage(c.memo >> memoPageBits)
		}
		if e := &(*slot)[c.memo&(memoPageLen-1)]; *e == old {
			*e = d.pack(res)
		}
	}
	if !c.shared && res.k != kDict && res.k != kList {
		d.recycle(id)
	}
}

// take resolves a value that is being stored into a parent: an open
// container is complete by then and is converted. Its items were taken
// when they were added, so this never recurses more than one level.
func (d *decoder) take(v val) (val, error) {
	if v.k == kEventDone { // an event dict outside an event list is not kept
		d.takeEvent(v)
		return val{k: kGone}, nil
	}
	if v.k != kDict && v.k != kList {
		return v, nil
	}
	id := uint32(v.n)
	c := d.conts[id]
	if !c.open {
		return c.res, nil
	}
	if !c.list {
		return d.closeDict(id, c)
	}
	var res val
	switch {
	case c.sinkList >= 0:
		res = val{kEvents, uint64(c.sinkList)}
	case len(c.events) > 0:
		ev := c.events
		if cap(ev)-len(ev) > len(ev)/4 {
			ev = append([]model.Event(nil), ev...)
		}
		c.events = nil
		d.traces = append(d.traces, ev)
		res = val{kEvents, uint64(len(d.traces) - 1)}
	case len(c.items) == 0:
		res = val{k: kEmpty}
	case allFrames(c.items):
		res = val{kStack, uint64(d.internStack(c.items))}
	default:
		res = v
	}
	d.closed(id, c, res)
	return res, nil
}

// keyMask has bit i set when the dict has well-known key i.
func keyMask(p []val) uint64 {
	var mask uint64
	for i := 0; i < len(p); i += 2 {
		if p[i].k == kStr && p[i].n < numKnown {
			mask |= 1 << p[i].n
		}
	}
	return mask
}

const (
	eventKeys   = 1 << sAction
	frameKeys   = 1 << sFilename
	segmentKeys = 1<<sBlocks | 1<<sSegmentType | 1<<sTotalSize
	blockKeys   = 1 << sState
)

// closeDict converts a complete dict that is not an element of an event
// list. Frames, blocks and segments are recognised by their keys; an
// event dict found elsewhere is not kept (kGone); any other dict keeps
// its pairs for the caller to read.
func (d *decoder) closeDict(id uint32, c *cont) (val, error) {
	p := c.items
	mask := keyMask(p)
	var res val
	switch {
	case mask&eventKeys != 0:
		res = val{k: kGone}
	case mask&frameKeys != 0:
		f, err := d.toFrame(p, c.off)
		if err != nil {
			return val{}, err
		}
		res = val{kFrame, uint64(f)}
	case mask&segmentKeys != 0:
		s, err := d.toSegment(p, c.off)
		if err != nil {
			return val{}, err
		}
		// (the sink sees the copy in segs: a pointer to s would move it
		// to the heap)
		d.segs = append(d.segs, s)
		if d.sink.Segment != nil {
			if err := d.sink.Segment(&d.segs[len(d.segs)-1]); err != nil {
				return val{}, err
			}
		}
		d.segOff = append(d.segOff, c.off)
		d.mem += segCost
		res = val{kSegment, uint64(len(d.segs) - 1)}
	case mask&blockKeys != 0:
		b, err := d.toBlock(p, c.off)
		if err != nil {
			return val{}, err
		}
		d.blocks = append(d.blocks, b)
		d.mem += blockCost
		res = val{kBlock, uint64(len(d.blocks) - 1)}
	default:
		res = val{kDict, uint64(id)}
	}
	d.closed(id, c, res)
	return res, nil
}

func allFrames(items []val) bool {
	for _, v := range items {
		if v.k != kFrame {
			return false
		}
	}
	return true
}

// Stacks are bounded as they are read, so that no report built from
// them can grow out of proportion: a run of more than maxRepeat copies of
// one frame becomes the frame and a marker, and frames past maxFrames
// become one marker.
// (A 1 MiB frame referenced 2,000 times through the memo would otherwise
// print 2 GB per allocation.)
const (
	maxFrames      = 64
	maxRepeat      = 3   // short runs are real recursion, kept as they are
	maxFrameString = 256 // bytes of a frame's filename or name kept
)

func (d *decoder) internStack(items []val) int32 {
	ids := d.stackBuf[:0]
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j].n == items[i].n {
			j++
		}
		if len(ids) >= maxFrames {
			ids = append(ids, d.countMarker(false, len(items)-i))
			break
		}
		if j-i > maxRepeat {
			ids = append(ids, int32(items[i].n), d.countMarker(true, j-i-1))
			i = j
			continue
		}
		ids = append(ids, int32(items[i].n))
		i++
	}
	d.stackBuf = ids
	// (kb is a local: appending to d.keyBuf would store to the heap, with
	// a write barrier while the GC runs, for each frame)
	kb := d.keyBuf[:0]
	for _, id := range ids {
		kb = binary.LittleEndian.AppendUint32(kb, uint32(id))
	}
	d.keyBuf = kb
	if id, ok := d.stackID[string(kb)]; ok {
		return id
	}
	fr := make([]model.Frame, len(ids))
	for i, id := range ids {
		fr[i] = d.frames[id]
	}
	id := int32(len(d.stacks))
	d.stacks = append(d.stacks, fr)
	d.stackID[string(d.keyBuf)] = id
	d.mem += int64(len(ids))*(eventCost+4) + strCost
	return id
}

// countMarker is marker for a run of a frame repeated n more times
// (repeat) or for n more frames, remembered by n: a deep recursion's
// stacks, thousands of them, each say the same, and formatting it is
// most of the cost of interning such a stack.
func (d *decoder) countMarker(repeat bool, n int) int32 {
	k := markerKey{repeat, n}
	if id, ok := d.markers[k]; ok {
		return id
	}
	text := fmt.Sprintf("… %d more frames", n)
	if repeat {
		text = fmt.Sprintf("… previous frame repeated %d more times", n)
	}
	id := d.marker(text)
	if d.markers == nil {
		d.markers = make(map[markerKey]int32)
	}
	d.markers[k] = id
	return id
}

type markerKey struct {
	repeat bool
	n      int
}

// marker returns the id of a frame that stands for frames left out.
func (d *decoder) marker(text string) int32 {
	name := d.intern([]byte(text))
	file := d.intern([]byte("…"))
	return d.internFrame(model.Frame{Filename: d.strs[file], Name: d.strs[name]}, file, name)
}

// frameString returns the id of string id cut to maxFrameString bytes.
func (d *decoder) frameString(id uint32) uint32 {
	if s := d.strs[id]; len(s) > maxFrameString {
		return d.intern([]byte(limits.Truncate(s, maxFrameString)))
	}
	return id
}

func (d *decoder) internFrame(f model.Frame, file, name uint32) int32 {
	k := frameKey{file, name, f.Line}
	if id, ok := d.frameID[k]; ok {
		return id
	}
	id := int32(len(d.frames))
	d.frames = append(d.frames, f)
	d.mem += frameCost
	d.frameID[k] = id
	return id
}

// openOn is the container at d.stack[t], which opname is to change: a k
// (a list or a dict) still open to changes.
func (d *decoder) openOn(opname string, t int, k kind) (*cont, error) {
	v := d.stack[t]
	if v.k != k {
		return nil, d.errorf("%s on a %s, not a %s", opname, v.k, k)
	}
	c := d.conts[v.n]
	if !c.open {
		return nil, d.errorf("%s is changed by %s after it was used", k, opname)
	}
	return c, nil
}

// appendsOn appends items to the list at d.stack[t].
func (d *decoder) appendsOn(opname string, t int, items []val) error {
	c, err := d.openOn(opname, t, kList)
	if err != nil {
		return err
	}
	return d.appendItems(c, items)
}

// appendItems adds items to list c. Event dicts are decoded straight
// into c.events, which makes c an event list.
func (d *decoder) appendItems(c *cont, items []val) error {
	for i := 0; i < len(items); i++ {
		v := items[i]
		if v.k == kEventDone {
			if len(c.items) > 0 {
				return d.errorf("list mixes event dicts with other values")
			}
			if len(d.moreSlots) == 0 {
				k, err := d.appendEvents(c, items[i:])
				if err != nil {
					return err
				}
				i += k - 1
				continue
			}
			if d.pending[v.n].fetched {
				return d.errorf("event dict fetched again from the memo (not supported)")
			}
			if err := d.addEvent(c, d.takeEvent(v), len(items)-i); err != nil {
				return err
			}
			continue
		}
		if v.k == kDict {
			if e := d.conts[v.n]; e.open && keyMask(e.items)&eventKeys != 0 {
				if len(c.items) > 0 {
					return d.errorf("list mixes event dicts with other values")
				}
				ev, err := d.toEvent(e.items, e.off)
				if err != nil {
					return err
				}
				d.ev = ev // not a local, which the sink's pointer would move to the heap
				if err := d.addEvent(c, &d.ev, len(items)-i); err != nil {
					return err
				}
				d.closed(uint32(v.n), e, val{k: kGone})
				continue
			}
		}
		v, err := d.take(v)
		if err != nil {
			return err
		}
		if v.k == kGone {
			return d.errorf("event dict fetched again from the memo (not supported)")
		}
		if len(c.events) > 0 || c.sinkList >= 0 {
			return d.errorf("list mixes event dicts with other values (%s)", v.k)
		}
		if len(c.items) == cap(c.items) {
			was := cap(c.items)
			c.items = append(c.items, v)
			d.chargeGrowth(cap(c.items), &was)
			continue
		}
		c.items = append(c.items, v)
	}
	return nil
}

// appendEvents adds the run of event dicts fastEvent read that items
// starts with to event list c, or hands them to the sink, as addEvent
// and takeEvent would one at a time, and returns how many it added. (An
// event with more memo slots than its own goes to takeEvent.) Each
// event's memo slot says kGone from now on, if not written again since.
func (d *decoder) appendEvents(c *cont, items []val) (int, error) {
	k := 0
	if d.sink.Events != nil {
		return d.sinkEvents(c, items)
	}
	if sink := d.sink.Event; sink != nil {
		// one pass, which a big trace's events take: the check, the
		// call, the slot
		if c.sinkList < 0 {
			c.sinkList = d.sinkLists
			d.sinkLists++
		}
		list := c.sinkList
		for ; k < len(items) && items[k].k == kEventDone; k++ {
			n := items[k].n
			pe := &d.pending[n]
			if pe.fetched {
				return k, d.errorf("event dict fetched again from the memo (not supported)")
			}
			if err := sink(list, &pe.f.ev); err != nil {
				return k, err
			}
			// dropSlot, in line
			if i := pe.slot; i >= 0 {
				if pg := d.memo[i>>memoPageBits]; pg != nil {
					if slot := &pg[i&(memoPageLen-1)]; *slot == uint64(kEventDone)<<56|n {
						*slot = uint64(kGone) << 56
					}
				} else {
					d.dropSlot(i, n)
				}
			}
		}
	} else {
		for k < len(items) && items[k].k == kEventDone {
			k++
		}
		for done := 0; done < k; {
			if len(c.events) == cap(c.events) {
				d.growEvents(c, len(items)-done)
			}
			m := min(k-done, cap(c.events)-len(c.events))
			evs := c.events[len(c.events) : len(c.events)+m]
			for i, v := range items[done : done+m] {
				pe := &d.pending[v.n]
				if pe.fetched {
					return done + i, d.errorf("event dict fetched again from the memo (not supported)")
				}
				evs[i] = pe.f.ev
			}
			c.events = c.events[:len(c.events)+m]
			done += m
		}
		for _, v := range items[:k] {
			d.dropSlot(d.pending[v.n].slot, v.n)
		}
	}
	if d.outstanding -= k; d.outstanding == 0 {
		d.pending = d.pending[:0]
	}
	return k, nil
}

// eventBatch is the most events sinkEvents hands sink.Events at once
// (an APPENDS of Python's pickler holds 1000).
const eventBatch = 1024

// sinkEvents is appendEvents for a sink that takes runs of events
// (Sink.Events): the events are copied into d.batch, their slots dropped
// as appendEvents does, and handed over in one call a batch.
func (d *decoder) sinkEvents(c *cont, items []val) (int, error) {
	if c.sinkList < 0 {
		c.sinkList = d.sinkLists
		d.sinkLists++
	}
	if d.batch == nil {
		d.batch = make([]model.Event, eventBatch)
	}
	k := 0
	for k < len(items) && items[k].k == kEventDone {
		m, fetched, packed := batchEvents(d.pending, d.memo, items[k:], d.batch[:eventBatch])
		if packed {
			// (dropSlot passes over the slots batchEvents dropped)
			for _, v := range items[k : k+m] {
				d.dropSlot(d.pending[v.n].slot, v.n)
			}
		}
		k += m
		// the events before one fetched again are taken, as one at a time
		if m > 0 {
			if err := d.sink.Events(c.sinkList, d.batch[:m]); err != nil {
				return k - m, err
			}
		}
		if fetched {
			return k, d.errorf("event dict fetched again from the memo (not supported)")
		}
	}
	if d.outstanding -= k; d.outstanding == 0 {
		d.pending = d.pending[:0]
	}
	return k, nil
}

// batchEvents copies, for sinkEvents, the events that the kEventDone
// values items starts with stand for into buf, as many as it has room
// for, and drops their memo slots (dropSlot, in line) in the pages in
// memo; it returns how many it copied, whether it stopped at one fetched
// from the memo meanwhile, and whether one's slot lies in a packed page
// (which dropSlot must unpack). It calls nothing, so that its loop keeps
// its values in registers.
func batchEvents(pending []pendingEvent, memo [][]uint64, items []val, buf []model.Event) (int, bool, bool) {
	packed := false
	items = items[:min(len(items), len(buf))]
	buf = buf[:len(items)]
	for i, v := range items {
		if v.k != kEventDone {
			return i, false, packed
		}
		pe := &pending[v.n]
		if pe.fetched {
			return i, true, packed
		}
		buf[i] = pe.f.ev
		if s := pe.slot; s >= 0 {
			if pg := memo[s>>memoPageBits]; pg != nil {
				if slot := &pg[s&(memoPageLen-1)]; *slot == uint64(kEventDone)<<56|v.n {
					*slot = uint64(kGone) << 56
				}
			} else {
				packed = true
			}
		}
	}
	return len(items), false, packed
}

// dropSlot makes memo slot i (none if negative) of pending event n say
// kGone from now on, if not written again since.
func (d *decoder) dropSlot(i int64, n uint64) {
	if i < 0 {
		return
	}
	var slot *uint64
	if pg := d.memo[i>>memoPageBits]; pg != nil {
		slot = &pg[i&(memoPageLen-1)]
	} else {
		slot = d.memoAt(int(i))
	}
	if *slot == uint64(kEventDone)<<56|n {
		*slot = uint64(kGone) << 56
	}
}

// addEvent adds ev to event list c, or hands it to the sink; more events
// are known to follow in this batch.
func (d *decoder) addEvent(c *cont, ev *model.Event, more int) error {
	if d.sink.Event != nil {
		if c.sinkList < 0 {
			c.sinkList = d.sinkLists
			d.sinkLists++
		}
		return d.sink.Event(c.sinkList, ev)
	}
	if len(c.events) == cap(c.events) {
		d.growEvents(c, more)
	}
	c.events = append(c.events, *ev)
	return nil
}

// growEvents makes room in an event list. Once the list has a few
// thousand events, the bytes they took predict how many the rest of the
// input holds, so the slice is sized once instead of being regrown (and
// copied) a dozen times.
func (d *decoder) growEvents(c *cont, more int) {
	n := len(c.events)
	want := n + more
	newCap := 0
	if !c.estimated && n >= 4096 && d.size > 0 {
		c.estimated = true
		// The events in this batch lie before d.op too.
		used := float64(d.op-c.off) / float64(want) // bytes per event so far
		left := d.size - d.op
		est := n + int(float64(left)/used*1.02) + 1024
		// An event needs more than 16 bytes of pickle.
		est = min(est, n+int(left/16)+1024)
		if est > want {
			newCap = est
		}
	}
	if newCap == 0 {
		newCap = max(want, n+n/4, 256)
	}
	d.mem += int64(newCap-cap(c.events)) * eventCost
	ev := make([]model.Event, n, newCap)
	copy(ev, c.events)
	c.events = ev
}

// setItemsOn adds key/value pairs to the dict at d.stack[t].
func (d *decoder) setItemsOn(opname string, t int, pairs []val) error {
	c, err := d.openOn(opname, t, kDict)
	if err != nil {
		return err
	}
	if len(pairs)%2 != 0 {
		return d.errorf("%s with an odd number of values", opname)
	}
	return d.addPairs(c, pairs)
}

// addPairs adds pairs to dict c. The values are complete, so they are
// taken (converted) now; the dict itself is converted when its parent
// takes it, as more SETITEM(S) may follow.
func (d *decoder) addPairs(c *cont, pairs []val) error {
	for i, v := range pairs {
		if v.k == kDict || v.k == kList || v.k == kEventDone {
			v, err := d.take(v)
			if err != nil {
				return err
			}
			pairs[i] = v
		}
	}
	was := cap(c.items)
	c.items = append(c.items, pairs...)
	d.chargeGrowth(cap(c.items), &was)
	return nil
}

func floatOf(v val) float64 { return math.Float64frombits(v.n) }
