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
func placementCheck(p *Plan, o Options, r *Result) error {
	if o.NoDivergence || r.Addressing == nil || r.Addressing.ModelledFrom < 0 || r.OOM != nil {
		return nil
	}
	dev, ok := alloc.SimOtherPlacement(o.Device)
	if !ok {
		return nil
	}
	o.Device, o.Points, o.Check, o.NoDivergence = dev, 0, false, true
	other, err := run(p.Ops, p.Event, p.Seeds, o, p)
	if err != nil {
		return err
	}
	if other.OOM != nil {
		return nil // the other placement ran out of memory: nothing to compare key by key
	}
	want, got := r.Stats.Map(), other.Stats.Map()
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
	return nil
}
