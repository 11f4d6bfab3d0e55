package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Cap is a per-process memory cap (set_per_process_memory_fraction)
// inferred from a recording. The snapshot does not store it, but it shows
// (docs/pytorch-allocator.md §10.1, §19.5): with a cap C the allocator
// asks the device for a segment of A bytes only while reserved + A <= C, and
// otherwise releases its cached segments and retries, or fails. So
//
//   - every segment obtained at reserved R gives C >= R + A (Low: the
//     tightest cap that lets every recorded request through);
//   - every release run followed by the segment it made room for, whose
//     first attempt could not have fitted under any cap >= Low
//     (R_before + A > Low), gives C < R_before + A;
//   - every out-of-memory the device itself could have met (its recorded
//     device_free >= A) gives C < R + A, R after the releases.
//
// Any cap in [Low, High] reproduces the recording's decisions; a replay
// uses Low.
//
// An out-of-memory the device itself raised (device_free < A: the card
// was full, with or without a cap) says instead how much the card had
// for the program: the R bytes it had reserved, after the releases, and
// the device_free it had left. The least such R + device_free over the
// trace is Device; a replay on a simulated card of that size meets those
// out-of-memory errors where the program did. Device is 0 when there is
// none, or when a recorded segment would not have fitted under it (other
// tenants of the card gave memory back between the errors).
type Cap struct {
	Low, High uint64
	// Retries and OOMs count the events that bound the cap from above;
	// both 0 when the recording shows no cap, only a full device.
	Retries, OOMs int
	// Event is the trace index of the event giving High (or, without a
	// cap, Device), Released the segments its release run gave back (0
	// for an out-of-memory).
	Event    int
	Released int
	// Device is the memory the card had for the program, from its
	// DeviceOOMs out-of-memory errors that the device raised.
	Device     uint64
	DeviceOOMs int
}

// Capped says that the recording shows a cap (Low and High bound it).
func (c *Cap) Capped() bool { return c != nil && c.Retries+c.OOMs > 0 }

// From says what the cap was inferred from, for reports; "" without a cap.
func (c *Cap) From() string {
	if !c.Capped() {
		return ""
	}
	var ev []string
	if c.Retries > 0 {
		ev = append(ev, fmt.Sprintf("%d retr%s that released cached segments", c.Retries, plural(c.Retries, "y", "ies")))
	}
	if c.OOMs > 0 {
		ev = append(ev, fmt.Sprintf("%d out-of-memory error%s", c.OOMs, plural(c.OOMs, "", "s")))
	}
	return fmt.Sprintf("%s that an uncapped run would not have (the tightest at trace event %s) and a reserved peak of %s",
		strings.Join(ev, " and "), units.FormatCount(int64(c.Event)), units.FormatBytes(int64(c.Low)))
}

// Describe is the one-line account of the cap for people.
func (c *Cap) Describe() string {
	var says []string
	if c.Capped() {
		says = append(says, fmt.Sprintf("recorded under a cap of about %s (up to %s more), inferred from %s",
			units.FormatBytes(int64(c.Low)), units.FormatBytes(int64(c.High-c.Low)), c.From()))
	}
	if c.Device > 0 {
		says = append(says, fmt.Sprintf("recorded on a card that had %s for the program (what it had reserved plus what the device had free), "+
			"inferred from %d out-of-memory error%s the device itself raised; replayed on a card of that size",
			units.FormatBytes(int64(c.Device)), c.DeviceOOMs, plural(c.DeviceOOMs, "", "s")))
	}
	return strings.Join(says, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// allocationSize is PyTorch's get_allocation_size: the segment a request of
// `rounded` bytes needs.
func allocationSize(rounded uint64) uint64 {
	const small, minLarge, roundLarge = 1 << 20, 10 << 20, 2 << 20
	switch {
	case rounded <= small:
		return 2 << 20
	case rounded < minLarge:
		return alloc.DefaultConfig().LargeSegmentSize
	}
	return (rounded + roundLarge - 1) / roundLarge * roundLarge
}

// inferCap reads a cap from one device's events; reserved0 is what the
// device held before the first event (a truncated trace's seeds). nil when
// nothing bounds a cap from above: the run shows no sign of one.
func inferCap(events []trace.Event, s trace.Settings, reserved0 uint64) *Cap {
	return inferCapFrom(traceEvents(events), s, reserved0, nil, nil)
}

// capEvent is what the cap reads of an event: its action, address, size
// and stream (an index, compared only with other events' streams).
type capEvent struct {
	action             trace.Action
	addr, size, stream uint64
}

// capEvents are the events inferCapFrom reads, by index.
type capEvents interface {
	len() int
	at(k int) capEvent
}

// traceEvents are a trace's events as the cap reads them.
type traceEvents []trace.Event

func (t traceEvents) len() int { return len(t) }
func (t traceEvents) at(k int) capEvent {
	e := &t[k]
	return capEvent{e.Action, e.Addr, e.Size, e.Stream}
}

// inferCapFrom is inferCap on some of a trace's events: the device events
// and those just after them (all that the cap reads but for garbage
// collection's watch), frees[k] being the whole free large segments
// gcWatch counted before events[k] (nil: events is the whole trace).
// emptyCache(k), when not nil, says that the release run beginning at
// events[k] was an empty_cache() call (a capture starting): it bounds no
// cap.
func inferCapFrom(events capEvents, s trace.Settings, reserved0 uint64, frees []int32, emptyCache func(k int) bool) *Cap {
	cr := capReader{events: events, s: s, cfg: alloc.DefaultConfig()}
	for i, d := range s.RoundupPower2Divisions {
		cr.cfg.RoundupPower2Divisions[i] = uint32(max(d, 0))
	}
	allocAfter, need, couldServe, stageTwo := cr.allocAfter, cr.need, cr.couldServe, cr.stageTwo
	var bounds []capBound
	reserved, low := reserved0, reserved0
	var device uint64 // the least reserved + device_free of a device out-of-memory
	deviceOOMs, deviceEvent := 0, 0
	gc := newGCWatch(s)
	n := events.len()
	at := func(k int) { // the watch as it was before events[k]
		if frees != nil && gc != nil && k < n {
			gc.free, gc.recorded = int(frees[k]), true
		}
	}
	action := func(k int) trace.Action { return events.at(k).action }
	afterOOM := false // the last device event was a recorded out-of-memory
	for i := 0; i < n; i++ {
		at(i)
		e := events.at(i)
		switch e.action {
		case trace.ActionSegmentAlloc:
			afterOOM = false
			if i == 0 || action(i-1) != trace.ActionSegmentFree {
				low = max(low, gc.quiet(reserved))
			}
			low = max(low, reserved+e.size)
			reserved += e.size
		case trace.ActionSegmentMap:
			// the cap check counts the whole request, not the pages mapped
			afterOOM = false
			if i == 0 || action(i-1) != trace.ActionSegmentMap {
				low = max(low, reserved+max(need(allocAfter(i)), e.size))
			}
			reserved += e.size
			low = max(low, reserved)
		case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
			before := reserved
			j := i
			for ; j < n; j++ {
				ej := events.at(j)
				if ej.action != trace.ActionSegmentFree && ej.action != trace.ActionSegmentUnmap {
					break
				}
				reserved -= min(ej.size, reserved)
				gc.see(ej.action, ej.addr, ej.size)
			}
			if j >= n {
				i = j - 1
				break
			}
			at(j)
			next := events.at(j)
			var a uint64
			k := -1
			switch {
			case next.action == trace.ActionSegmentAlloc && j+1 < n:
				// §19.5: the segment must be the one the next alloc asked for
				al := events.at(j + 1)
				if al.action == trace.ActionAlloc && al.addr == next.addr && al.stream == next.stream &&
					need(j+1) == next.size {
					a, k = next.size, j+1
				}
			case next.action == trace.ActionSegmentMap:
				k = allocAfter(j)
				a = need(k)
			}
			for r := i; a > 0 && r < j; r++ {
				if couldServe(events.at(r), k) {
					a = 0
				}
			}
			if (emptyCache != nil && emptyCache(i)) || (afterOOM && next.action == trace.ActionSegmentAlloc) {
				a = 0
			}
			if a > 0 {
				v := before + a
				if x := stageTwo(i, j, k); x > 0 && j-i > 1 {
					// a retry gives back that one segment first and
					// releases everything only when the cap still refuses
					v = min(v, before-x+a)
				}
				switch {
				case gc.left():
					// whole free segments stayed cached: no retry released
					// everything, garbage collection ran (reserved >
					// threshold × cap) and stopped once reserved was back
					// under it
					v = uint64(float64(before)/gc.t) + 1
					low = max(low, gc.quiet(reserved))
				case s.GCThreshold > 0:
					// garbage collection releases before the first attempt,
					// when reserved > threshold × cap: a bound either way
					v = max(v, uint64(float64(before)/s.GCThreshold)+1)
				}
				bounds = append(bounds, capBound{v: v, event: i, runs: j - i})
			}
			i = j - 1
		case trace.ActionOOM:
			afterOOM = true
			a := allocationSize(e.size) // the entry's size is already rounded
			if e.addr >= a {            // device_free: the device had room, so a cap refused it
				bounds = append(bounds, capBound{v: reserved + a, event: i, oom: true})
			} else if deviceOOMs++; deviceOOMs == 1 || reserved+e.addr < device {
				device, deviceEvent = reserved+e.addr, i
			}
		}
		gc.see(e.action, e.addr, e.size) // after: a new segment is not yet a cached one (a release run saw its own)
	}
	c := capOf(bounds, low)
	// a card that had room for every recorded segment (low) and no more
	// than the errors say; a trace without segment events (an RMM log, a
	// text trace) knows neither
	if deviceOOMs > 0 && low > 0 && device >= low && (c == nil || device > c.Low) {
		if c == nil {
			c = &Cap{Event: deviceEvent}
		}
		c.Device, c.DeviceOOMs = device, deviceOOMs
	}
	return c
}

// capBound is one event that bounds a cap from above: the cap is below v.
type capBound struct {
	v           uint64
	event, runs int  // the event, and the segments its release run gave back
	oom         bool // an out-of-memory error, not a retry
}

// capOf is the cap the bounds and the reserved peak low leave: the
// tightest bound above low (a bound at or below low would have refused a
// segment the recording got); nil when none is.
func capOf(bounds []capBound, low uint64) *Cap {
	var c *Cap
	for _, b := range bounds {
		if b.v <= low {
			continue
		}
		if c == nil {
			c = &Cap{Low: low, High: b.v - 1, Event: b.event, Released: b.runs}
		} else if b.v-1 < c.High {
			c.High, c.Event, c.Released = b.v-1, b.event, b.runs
		}
		if b.oom {
			c.OOMs++
		} else {
			c.Retries++
		}
	}
	return c
}

// capReader answers what inferCapFrom asks of the events around a release
// run: which request the device events were for, the segment it needed,
// and whether a segment the run gave back would have served it.
type capReader struct {
	events capEvents
	s      trace.Settings
	cfg    alloc.Config // the recording's rounding
}

// allocAfter is the index of the alloc the device events from k on were
// for, -1 when none follows them.
func (c capReader) allocAfter(k int) int {
	for n := c.events.len(); k < n; k++ {
		switch c.events.at(k).action {
		case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
			continue
		case trace.ActionAlloc:
			return k
		}
		return -1
	}
	return -1
}

// need is the segment alloc k asked for (get_allocation_size); 0 for none.
func (c capReader) need(k int) uint64 {
	if k < 0 {
		return 0
	}
	return allocationSize(alloc.RoundSize(c.cfg, c.events.at(k).size))
}

// couldServe says whether a whole free segment would have held the
// request of alloc k: best fit finds it before any retry, so a release
// run giving it back was an empty_cache.
func (c capReader) couldServe(seg capEvent, k int) bool {
	al := c.events.at(k)
	rounded := alloc.RoundSize(c.cfg, al.size)
	small := rounded <= 1<<20
	if seg.action == trace.ActionSegmentUnmap {
		// pages unmapped from an expandable range were a free block's,
		// mapped, of at least that size: a large request it held was
		// served before any retry (small ones do not use the range)
		return !small && seg.stream == al.stream && seg.size >= rounded
	}
	if seg.action != trace.ActionSegmentFree {
		return false
	}
	if seg.stream != al.stream || small != (seg.size == 2<<20) || seg.size < rounded {
		return false
	}
	// max_split_size: oversize blocks serve only oversize requests
	m := c.s.MaxSplitSize
	return m <= 0 || seg.size < uint64(m) || rounded >= uint64(m)
}

// stageTwo is the segment of the run events[i:j] that
// release_available_cached_blocks would give back for alloc k under
// max_split_size (§6.3): the smallest whole free segment of its stream at
// least as large as the request and max_split_size; 0 without
// max_split_size or such a segment.
func (c capReader) stageTwo(i, j, k int) uint64 {
	if c.s.MaxSplitSize <= 0 || k < 0 {
		return 0
	}
	al := c.events.at(k)
	want := max(alloc.RoundSize(c.cfg, al.size), uint64(c.s.MaxSplitSize))
	var x uint64
	for r := i; r < j; r++ {
		seg := c.events.at(r)
		if seg.action == trace.ActionSegmentFree && seg.stream == al.stream && seg.size >= want && (x == 0 || seg.size < x) {
			x = seg.size
		}
	}
	return x
}

// gcWatch follows, under a garbage collection threshold t, the whole free
// segments of the large pool: when a request found no cached block and got
// a new segment without releasing any while such a segment was cached,
// garbage collection did not run, so reserved <= t × cap (§6.1, §6.2,
// §10.2). Segments older than the trace are not known, which only
// weakens the bound. Off (nil) without a threshold or with expandable
// segments.
type gcWatch struct {
	t     float64
	bases []uint64 // sorted
	segs  map[uint64]*gcSeg
	free  int // whole free large segments
	// recorded: free is set from a watch that saw the whole trace
	// (inferCapFrom), which see leaves alone
	recorded bool
}

type gcSeg struct {
	size uint64
	live int
}

func newGCWatch(s trace.Settings) *gcWatch {
	if s.GCThreshold <= 0 || s.ExpandableSegments {
		return nil
	}
	return &gcWatch{t: s.GCThreshold, segs: map[uint64]*gcSeg{}}
}

// of is the segment holding addr, nil if not known.
func (w *gcWatch) of(addr uint64) *gcSeg {
	k, _ := slices.BinarySearch(w.bases, addr+1)
	if k == 0 {
		return nil
	}
	if g := w.segs[w.bases[k-1]]; addr < w.bases[k-1]+g.size {
		return g
	}
	return nil
}

func (w *gcWatch) large(g *gcSeg) bool { return g.size > 2<<20 }

func (w *gcWatch) see(action trace.Action, addr, size uint64) {
	if w == nil || w.recorded {
		return
	}
	switch action {
	case trace.ActionSegmentAlloc:
		if _, ok := w.segs[addr]; ok {
			return
		}
		k, _ := slices.BinarySearch(w.bases, addr)
		w.bases = slices.Insert(w.bases, k, addr)
		g := &gcSeg{size: size}
		w.segs[addr] = g
		if w.large(g) {
			w.free++
		}
	case trace.ActionSegmentFree:
		g, ok := w.segs[addr]
		if !ok {
			return
		}
		if g.live == 0 && w.large(g) {
			w.free--
		}
		k, _ := slices.BinarySearch(w.bases, addr)
		w.bases = slices.Delete(w.bases, k, k+1)
		delete(w.segs, addr)
	case trace.ActionAlloc, trace.ActionFreeCompleted:
		g := w.of(addr)
		if g == nil || !w.large(g) {
			return
		}
		was := g.live == 0
		if action == trace.ActionAlloc {
			g.live++
		} else if g.live > 0 {
			g.live--
		}
		switch {
		case was && g.live > 0:
			w.free--
		case !was && g.live == 0:
			w.free++
		}
	}
}

// left says whether whole free large segments are cached.
func (w *gcWatch) left() bool { return w != nil && w.free > 0 }

// quiet is the least cap under which garbage collection stays quiet at
// this reserved level, when it must have (0 when nothing follows).
func (w *gcWatch) quiet(reserved uint64) uint64 {
	if w == nil || w.free == 0 {
		return 0
	}
	return uint64(math.Ceil(float64(reserved) / w.t))
}
