package replay

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// Reasons a memory_stats key is not settled by a trace
// (docs/pytorch-allocator.md §21). A replay never prints such a figure as
// exact: Result.Inexact names each key with its reason.
const (
	// An empty_cache() (torch.cuda.empty_cache, torch.cuda.graph's capture
	// start, ~MemPool's emptyCache, a program's call after a caught OOM)
	// synchronizes every stream (num_sync_all_streams +1) whether or not
	// it releases a segment; one that releases nothing leaves no event.
	InexactSilentSync = "lower bound: an empty_cache() that releases nothing (a graph capture's, a MemPool teardown's, " +
		"a call after a caught out-of-memory error) leaves no trace event"
	// Segments the driver model placed (the recorded addresses hidden, or
	// a what-if past the recording) may sit elsewhere in a real run, and
	// best fit breaks ties between free blocks by address.
	InexactPlacement = "depends on where the CUDA driver places segments the recording does not show " +
		"(the model's other placement gives %d)"
	// A truncated trace (a max_entries ring buffer) keeps the last events:
	// the state it began in is rebuilt, what happened before it is not.
	InexactTruncated = "covers the kept events only: the trace starts after the program had allocated (a max_entries ring buffer)"
)

// inexact names the keys of r's memory_stats that the trace behind p
// cannot settle, with the reason; nil when every key is settled.
//
//   - num_sync_all_streams is a lower bound when the trace used private
//     pools (each graph capture calls empty_cache(), each ~MemPool of a
//     freeable pool synchronizes), when the program survived an
//     out-of-memory error (its empty_cache() after catching one finds
//     nothing left to release when the failing malloc's retry gave it all
//     back), or when it called empty_cache() at all (a call when nothing
//     was cached leaves no event).
//   - a truncated trace settles the current values (rebuilt from the
//     final snapshot) but not the peaks and running totals, nor the
//     counters, which cover the kept events only.
func inexact(p *Plan, r *Result) map[string]string {
	if p == nil || r == nil {
		return nil
	}
	m := map[string]string{}
	if len(p.Pools) > 0 || p.RecordedOOMs > 0 || p.EmptyCaches > 0 {
		m["num_sync_all_streams"] = InexactSilentSync
	}
	if p.Truncated {
		for k := range r.Stats.Map() {
			if strings.HasPrefix(k, "num_") || strings.HasSuffix(k, ".peak") ||
				strings.HasSuffix(k, ".allocated") || strings.HasSuffix(k, ".freed") {
				m[k] = InexactTruncated
			}
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// placementCheck replays p again when the driver model placed some of
// r's segments (Addressing.ModelledFrom >= 0: the recorded addresses were
// hidden, or the replay left its recording), on the model's other
// placement (alloc.SimOtherPlacement), and names each key whose value
// moves (InexactPlacement): the trace does not settle it. A replay that
// compares nothing (a sweep's) or ran on a real card is not checked.
//
// A replay none of whose decisions could have gone otherwise on other
// addresses (r.placementSettled) needs no second one, where the other
// placement cannot run out of address space (placementRoom): it would make
// the same calls, the device the same answers, and every key would agree.
// Nor does one whose watch of the other placement agreed to the end
// (r.otherAgrees): that device, asked the same calls, gave the same
// answers and kept the segments in the same order, so the allocator's
// every decision, and so every key, would have been the same.
func placementCheck(p *Plan, o Options, r *Result) error {
	if o.NoDivergence || r.Addressing == nil || r.Addressing.ModelledFrom < 0 || r.OOM != nil {
		return nil
	}
	dev, ok := alloc.SimOtherPlacement(o.Device)
	if !ok || (r.placementSettled && placementRoom(r.Stats)) || r.otherAgrees {
		return nil
	}
	if r.other != nil { // it ran beside
		if r.other.err != nil {
			return r.other.err
		}
		placementCompare(r, r.other.stats, r.other.oom)
		return nil
	}
	return placementReplay(p, o, r, dev)
}

// placementRoom: the simulated device's address space, [4 GiB, 128 TiB),
// holds a new segment wherever the others sit, at every step of a replay
// with stats s (a replay never resets its peaks). The device fails a
// cudaMalloc of cs bytes only when no gap between its n live ranges (at
// most the segment peak, plus the one asked for), of L bytes in all (at
// most the reserved peak), takes cs rounded to 32 MiB and aligned: when
// (n+1)(cs+64 MiB) + L exceeds it, cs at most the reserved peak. 64 TiB
// leaves room for the driver's start-up mappings.
func placementRoom(s alloc.Stats) bool {
	n := max(s.Segment[alloc.All].Peak, s.Segment[alloc.All].Current) + 2
	l := max(s.ReservedBytes[alloc.All].Peak, s.ReservedBytes[alloc.All].Current)
	const room = 1 << 46
	if n < 0 || n > 1<<20 || l < 0 || l > 1<<40 {
		return false
	}
	return n*(l+64<<20)+l <= room
}

// placementReplay is placementCheck's second replay, on dev.
func placementReplay(p *Plan, o Options, r *Result, dev alloc.Device) error {
	o.Device, o.Points, o.Check, o.NoDivergence, o.Observe = dev, 0, false, true, nil
	other, err := run(p.Ops, p.Event, p.Seeds, o, p)
	if err != nil {
		return err
	}
	placementCompare(r, other.Stats, other.OOM != nil)
	return nil
}

// placementCompare names in r.Inexact each key whose value differs in
// other, the statistics of the replay on the other placement, unless that
// one ran out of memory (oom): then there is nothing to compare key by key.
func placementCompare(r *Result, other alloc.Stats, oom bool) {
	if oom {
		return
	}
	want, got := r.Stats.Map(), other.Map()
	for k, v := range want {
		if got[k] == v {
			continue
		}
		if r.Inexact == nil {
			r.Inexact = map[string]string{}
		}
		if _, ok := r.Inexact[k]; !ok {
			r.Inexact[k] = fmt.Sprintf(InexactPlacement, got[k])
		}
	}
}
