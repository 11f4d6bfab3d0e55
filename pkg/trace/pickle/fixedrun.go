package pickle

import (
	"encoding/binary"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// The loops that read runs of event dicts laid out as a template's
// usual fixed layout, for fixedRead (fixedRun): runLoop, for the dicts
// of up to 55 bytes whose action is a BINGET (the one-byte memo index of
// a trace with fewer than 256 slots before its events), and runLoopWide,
// for those of up to 95 bytes or whose indices are LONG_BINGETs (a trace
// that memoized more before its events, as those of private pools do).

// Why a loop stopped: it read as many as it was given (runAll), or
// met a dict that fixedRead must read (runSlow), or one that is not laid
// out as the template (runOther), or read the last dict that fastEvents
// would read (runEnd).
const (
	runAll = iota
	runSlow
	runOther
	runEnd
)

// runLayout is a usual fixed layout as runLoop (ok) or runLoopWide
// (wide) reads it: its words and masks with those of the opcode after
// the dict, EMPTY_DICT; near is the bits of a difference in that opcode
// alone; ns is the memo stores of each dict. runLoop compares seven
// words (a usual event dict takes about 50 bytes, and an eighth word
// would cost as much as a fifth of the rest of runLoop's work),
// runLoopWide twelve.
type runLayout struct {
	ok, wide bool
	ns       int
	w, m     [12]uint64
	near     uint64
}

// set makes l the runLayout of template t's fixed layout: ok or wide if
// it is a usual one, the action fetched from the memo, no other values
// but ints, an address and a size, and one or two memo stores, the
// dict's and that of its frames list.
func (l *runLayout) set(t *template) {
	l.ok, l.wide = false, false
	if t.fact == 0 || t.fbase.haveFree || len(t.fvars) > 0 || !t.fsized || !t.fself || t.nstores > 2 || t.flen >= len(l.w)*8 {
		return
	}
	l.ok = t.flen < 7*8 && t.factMask == 0xff
	l.wide = !l.ok
	l.ns = t.nstores
	for i := range l.w {
		l.w[i], l.m[i] = t.fw[i/4][i%4], t.fm[i/4][i%4]
	}
	i, sh := t.flen/8, t.flen%8*8
	l.w[i] |= opEmptyDict << sh
	l.m[i] |= 0xff << sh
	l.near = ^uint64(0xff << sh)
}

// A run is the result of fixedRun: the events read, k; the position,
// at: that of a dict it stopped at (past its EMPTY_DICT), or past the
// SETITEMS of the last one read (runEnd); why it stopped; the template
// it read with last, p, and the events read before p's, kp (-1 if it
// read with no other); the memo's fresh slots, counted up to mm.
type run struct {
	k, at, why, p, kp int
	mm                uint64
}

// fixedRun reads, for fixedRead, the dicts from the one at d.buf[at]
// (past its EMPTY_DICT) while each is laid out as the fixed layout of
// template p, a usual one, with runLoop or runLoopWide. At a dict of
// another layout, if p read events (read says it did before), it notes
// them (tmplHit) and goes on with the template that followed p last
// time (runNext), as fastEvents would, or the first whose usual layout
// takes the dict (runFind), as tmplEvent would: a switch of layouts,
// which some traces make every few events, costs no return to the
// decoder's loop. The k-th event goes to pend[k], pending event n+k, and
// its stores to the memo slots from mm on, in memo page pg (which has
// room for two slots per event of pend, and one past them).
//
//go:noinline
func fixedRun(d *decoder, p int, read bool, at int, pend []pendingEvent, pg *[memoPageLen]uint64, n, mm uint64) run {
	r := run{at: at, p: p, kp: -1, mm: mm}
	for {
		t := &d.tmpls[r.p&(len(d.tmpls)-1)]
		loop := runLoop
		if t.run.wide {
			loop = runLoopWide
		}
		// (the loop itself goes on to the template runNext finds, as
		// below, if it is of the same loop: it returns the one it read
		// with last, and the events read before that one's, kq, or -1)
		var k, last, kq int
		k, r.at, r.why, r.mm, last, kq = loop(d, r.p, r.at, pend[r.k:], pg, n+uint64(r.k), r.mm)
		if kq >= 0 {
			r.p, r.kp, read = last, r.k+kq, false
			r.k += kq
			k -= kq
		}
		r.k += k
		if r.why != runOther {
			return r
		}
		var q int
		var u *template
		switch {
		case k > 0 || read:
			// (noted, as kp says to fixedRead even if p goes on; the
			// loop of the one runNext finds compares the dict)
			if q, u = d.runNext(r.p, r.at); u == nil {
				q, u = d.runFind(r.p, r.at)
			}
			d.tmplHit(r.p)
			r.kp = r.k
		case r.kp >= 0:
			// (the one runNext found took no dict: those runFind
			// finds take it)
			q, u = d.runFind(r.p, r.at)
		}
		if u == nil {
			return r
		}
		r.p, read = q, false
	}
}

// runLoop reads, for fixedRun, the dicts from the one at buf[at] (past
// its EMPTY_DICT) while each is laid out as template t's usual fixed
// layout (t.run.ok) and followed by another dict: fewer than 56 bytes,
// the action a BINGET of a slot whose action t knows, no other values
// but ints, an address and a size, and one or two memo stores, the
// dict's and its frames list's. The k-th event goes to pend[k], pending
// event n+k, and its stores to memo page pg from slot j on. It returns
// the events read, the position, why it stopped and the next fresh slot.
//
// It calls nothing but ahead, every pfStep bytes, and keeps few values
// in the loop (k, at, j, self), so that they stay in registers: the
// template's are loaded from it where they are used, and the dicts the
// buffer holds are counted before the loop (each takes t.flen+1 bytes),
// which then checks only k.
//
// At a dict of another layout after one it read, it goes on, as
// fixedRun would, with the template runNext finds if runLoop reads that
// one's dicts too (noting t's hit, tmplHit): a trace whose events
// alternate between two layouts stays in the loop. Then it returns too
// the template it read with last, p, and the events read before p's, kq
// (-1 if it read with t alone).
//
//go:noinline
func runLoop(d *decoder, p int, at int, pend []pendingEvent, pg *[memoPageLen]uint64, n, j uint64) (int, int, int, uint64, int, int) {
	const m = len(d.tmpls) - 1
	// what the loop below does not use lies in memory (not SSA'd), so
	// that the values it does stay in registers
	sw := runState{d: d, pend: pend, p: p & m, kq: -1}
	sw.t = &d.tmpls[sw.p]
	self := uint64(kEventDone)<<56 | n
	k := 0
	for {
		t := sw.t
		pe, view := sw.span(at, k)
		if view == nil {
			return k, at - 1, runEnd, j, sw.p, sw.kq
		}
		sw.seg = k
		for ; k < len(pe); k++ {
			if at >= sw.pf {
				sw.ahead(view, at)
			}
			b := (*[fixedView]byte)(view[at : at+fixedView])
			l := &t.run
			if x := fixedDiff((*[32]byte)(b[0:]), (*[4]uint64)(l.w[0:4]), (*[4]uint64)(l.m[0:4])) | fixedDiff3((*[24]byte)(b[32:]), (*[3]uint64)(l.w[4:7]), (*[3]uint64)(l.m[4:7])); x != 0 {
				// a dict whose next opcode is not EMPTY_DICT (APPENDS: the
				// last of its list) goes to fixedRead (as does, now and
				// then, one of another layout whose differences lie in the
				// same byte of other words, which it finds out)
				if x&l.near == 0 {
					return k, at, runSlow, j, sw.p, sw.kq
				}
				break
			}
			// (a BINGET's entry is the action alone)
			act := t.facts[b[t.fact&(fixedWords*8-1)]]
			fi := &t.fints
			// the address and the size not sign-extended: those with the
			// sign bit set (a BININT's, set refuses them) go to fixedRead
			fa, fs := &fi[intAddr], &fi[intSize]
			addr := binary.LittleEndian.Uint64(b[fa.off&(fixedWords*8-1):]) & fa.mask
			size := binary.LittleEndian.Uint64(b[fs.off&(fixedWords*8-1):]) & fs.mask
			// (an action not known yet is 0, which done does not pass)
			if !donePasses(model.Action(act), addr, size) || addr&fa.sign|size&fs.sign != 0 {
				return k, at, runSlow, j, sw.p, sw.kq
			}
			// (j+1 < memoPageLen: the mask only spares a bounds check; with
			// one store, the 0 of fstores[1] goes to the next fresh slot, as
			// fixedRead's stores go too)
			pg[j&(memoPageLen-1)], pg[(j+1)&(memoPageLen-1)] = self+uint64(k), t.fstores[1]
			// the event alone, field by field (a copy of t.fbase would
			// write them twice): the rest of pe.f is read only while an
			// event is read, which fills it first
			ev := &pe[k].f.ev
			ev.Action, ev.Stack = model.Action(act), t.fbase.ev.Stack
			ev.Addr, ev.Size = addr, size
			ev.Stream = fixedInt64(b, &fi[intStream])
			ev.TimeUS = int64(fixedInt64(b, &fi[intTime]))
			pe[k].slot, pe[k].fetched = int64(j), false
			j += uint64(l.ns)
			at += t.flen + 1 // (past the next dict's EMPTY_DICT)
		}
		if k == len(pe) {
			if at > len(view)-fixedView {
				return k, at - 1, runEnd, j, sw.p, sw.kq
			}
			return k, at, runAll, j, sw.p, sw.kq
		}
		if !sw.follow(k, at, false) {
			return k, at, runOther, j, sw.p, sw.kq
		}
	}
}

// runLoopWide is runLoop for the usual layouts it does not take
// (t.run.wide): up to 95 bytes, and the action a BINGET or a
// LONG_BINGET.
//
//go:noinline
func runLoopWide(d *decoder, p int, at int, pend []pendingEvent, pg *[memoPageLen]uint64, n, j uint64) (int, int, int, uint64, int, int) {
	const m = len(d.tmpls) - 1
	// what the loop below does not use lies in memory (not SSA'd), so
	// that the values it does stay in registers
	sw := runState{d: d, pend: pend, p: p & m, kq: -1}
	sw.t = &d.tmpls[sw.p]
	self := uint64(kEventDone)<<56 | n
	k := 0
	for {
		t := sw.t
		pe, view := sw.span(at, k)
		if view == nil {
			return k, at - 1, runEnd, j, sw.p, sw.kq
		}
		sw.seg = k
		for ; k < len(pe); k++ {
			if at >= sw.pf {
				sw.ahead(view, at)
			}
			b := (*[fixedView]byte)(view[at : at+fixedView])
			l := &t.run
			x := fixedDiff((*[32]byte)(b[0:]), (*[4]uint64)(l.w[0:4]), (*[4]uint64)(l.m[0:4])) |
				fixedDiff((*[32]byte)(b[32:]), (*[4]uint64)(l.w[4:8]), (*[4]uint64)(l.m[4:8])) |
				fixedDiff((*[32]byte)(b[64:]), (*[4]uint64)(l.w[8:12]), (*[4]uint64)(l.m[8:12]))
			if x != 0 {
				if x&l.near == 0 {
					return k, at, runSlow, j, sw.p, sw.kq
				}
				break
			}
			// the action as t.action finds it, in line
			jx := uint64(binary.LittleEndian.Uint32(b[t.fact&(fixedWords*8-1):]) & t.factMask)
			e := t.facts[jx&0xff]
			fi := &t.fints
			fa, fs := &fi[intAddr], &fi[intSize]
			addr := binary.LittleEndian.Uint64(b[fa.off&(fixedWords*8-1):]) & fa.mask
			size := binary.LittleEndian.Uint64(b[fs.off&(fixedWords*8-1):]) & fs.mask
			act := e & 0xff
			if uint64(e>>8) != jx>>8 || !donePasses(model.Action(act), addr, size) || addr&fa.sign|size&fs.sign != 0 {
				return k, at, runSlow, j, sw.p, sw.kq
			}
			pg[j&(memoPageLen-1)], pg[(j+1)&(memoPageLen-1)] = self+uint64(k), t.fstores[1]
			ev := &pe[k].f.ev
			ev.Action, ev.Stack = model.Action(act), t.fbase.ev.Stack
			ev.Addr, ev.Size = addr, size
			ev.Stream = fixedInt64(b, &fi[intStream])
			ev.TimeUS = int64(fixedInt64(b, &fi[intTime]))
			pe[k].slot, pe[k].fetched = int64(j), false
			j += uint64(l.ns)
			at += t.flen + 1
		}
		if k == len(pe) {
			if at > len(view)-fixedView {
				return k, at - 1, runEnd, j, sw.p, sw.kq
			}
			return k, at, runAll, j, sw.p, sw.kq
		}
		if !sw.follow(k, at, true) {
			return k, at, runOther, j, sw.p, sw.kq
		}
	}
}

// runState is what runLoop and runLoopWide keep in memory, apart from
// the values their inner loops hold in registers: the template t they
// read with (index p), the events pend takes, the events read before
// t's (kq, -1 if t is the first) and those read when t's run began (seg,
// which the loops set).
type runState struct {
	d          *decoder
	t          *template // (one pointer, not d and an index, in registers)
	pend       []pendingEvent
	p, kq, seg int
	pf         int // where the loop calls ahead next
}

// span is the part of pend the inner loop fills from event k on, the
// dicts at d.buf[at:] that t reads (each takes t.flen+1 bytes with the
// next one's EMPTY_DICT, so the loop checks only its index), and the
// view of the buffer it reads them through; a nil view when the buffer
// ends before at's dict may.
func (sw *runState) span(at, k int) (pe []pendingEvent, view []byte) {
	t, buf := sw.t, sw.d.buf
	lim := len(buf) - t.maxLen
	if at > lim {
		return nil, nil
	}
	// (a division only if it holds fewer: near the buffer's end)
	pe = sw.pend
	if x, d := uint(lim-at), uint(t.flen+1); x+d < uint(len(pe)-k)*d {
		pe = pe[:k+int(x/d)+1]
	}
	// (t.maxLen >= fixedView: the view at lim lies in the buffer)
	return pe, buf[:lim+fixedView]
}

// Prefetch: a big file is read in place, from a mapping of the page
// cache's 4 KiB pages, where the processor's own prefetch stops at each
// page's end; the loops' loads of a dict's words then waited for memory,
// a line after another (half of runLoop's time at 10M events). Every
// pfStep bytes, the loops ask for the pfStep bytes pfAhead bytes ahead
// (ahead): hints, which do not wait, so that the lines lie in the cache
// when the loop gets there. (A load of each line instead, which waits,
// saved a third as much.)
const (
	pfAhead = 2048
	pfStep  = 512 // (what one prefetch asks for)
)

// ahead prefetches view's pfStep bytes pfAhead bytes on from at, and
// sets where the loop calls it next.
//
//go:noinline
func (sw *runState) ahead(view []byte, at int) {
	if from := at + pfAhead; from < len(view) {
		prefetch(&view[from])
	}
	sw.pf = at + pfStep
}

// follow is a dict of another layout at d.buf[at], event k, after one
// read with t: it reports whether the loop goes on with the template
// runNext would find, as fixedRun would (noting t's hit), and makes it
// t; only if the loop (runLoopWide when wide) reads its dicts.
func (sw *runState) follow(k, at int, wide bool) bool {
	const m = len(sw.d.tmpls) - 1
	d, p := sw.d, sw.p
	if k == sw.seg || d.tmplPrev&m == p {
		return false
	}
	q := d.tmpls[p].next & m
	u := &d.tmpls[q]
	takes := u.run.ok
	if wide {
		takes = u.run.wide
	}
	if q == p || !u.ok || !u.fixed || !takes || u.epoch != d.memoEpoch || len(d.buf)-at < u.maxLen {
		return false
	}
	d.tmplHit(p)
	sw.p, sw.t, sw.kq = q, u, k
	return true
}

// donePasses reports whether done passes, with no check, an event of
// action act at address addr of size size (an address and a size given):
// a block's event at an aligned address, or a segment's whose size is
// aligned and not 0 too.
func donePasses(act model.Action, addr, size uint64) bool {
	if addr%model.MinBlock != 0 {
		return false
	}
	return model.IsBlockAction(act) || model.IsSegmentAction(act) && size != 0 && size%model.MinBlock == 0
}

// runNext is the template that tmplHit(p) would predict, for fixedRun
// at the dict at d.buf[at]: its index and itself if it is another one,
// current, of a usual fixed layout, and the buffer holds its dicts at
// at; nil if not. (Its loop compares the dict.)
func (d *decoder) runNext(p, at int) (int, *template) {
	const m = len(d.tmpls) - 1
	q := p // (tmplHit sets p's next to p when p was the last)
	if d.tmplPrev&m != p&m {
		q = d.tmpls[p&m].next
	}
	u := &d.tmpls[q&m]
	if q&m == p&m || !u.ok || !u.fixed || !u.run.ok && !u.run.wide || u.epoch != d.memoEpoch || len(d.buf)-at < u.maxLen {
		return p, nil
	}
	return q & m, u
}

// runFind is the first template but p whose usual layout takes the
// dict at d.buf[at] (runTakes), for fixedRun, as tmplEvent would find it
// (the layouts of some traces' events follow no order): its index and
// itself, nil if none does.
func (d *decoder) runFind(p, at int) (int, *template) {
	for k := range d.tmpls {
		if k != p&(len(d.tmpls)-1) && d.runTakes(&d.tmpls[k], at) {
			return k, &d.tmpls[k]
		}
	}
	return p, nil
}

// runTakes reports whether template u's fixed layout, a usual one, may
// read the dict at d.buf[at]: u is current, the buffer holds its dicts,
// and the dict is laid out as u's (but for the opcode after it, which
// fixedRead then reads).
func (d *decoder) runTakes(u *template, at int) bool {
	if !u.ok || !u.fixed || !u.run.ok && !u.run.wide || u.epoch != d.memoEpoch || len(d.buf)-at < u.maxLen {
		return false
	}
	b := (*[fixedView]byte)(d.buf[at : at+fixedView])
	l := &u.run
	x := fixedDiff((*[32]byte)(b[0:]), (*[4]uint64)(l.w[0:4]), (*[4]uint64)(l.m[0:4])) |
		fixedDiff((*[32]byte)(b[32:]), (*[4]uint64)(l.w[4:8]), (*[4]uint64)(l.m[4:8])) |
		fixedDiff((*[32]byte)(b[64:]), (*[4]uint64)(l.w[8:12]), (*[4]uint64)(l.m[8:12]))
	return x&l.near == 0
}
