package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/htmlreport"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// writeHTML writes the HTML report of a replay to path. Besides rep it
// shows the segments at the peak, which takes a second replay stopped just
// after the peak operation, and, when the trace recorded stacks, the
// allocation sites live there. snap may be nil.
func writeHTML(a *app, path string, rep *figures.Replay, plan *replay.Plan, snap *trace.Snapshot, o replay.Options, res *replay.Result) error {
	var extra htmlreport.Extra
	if n := min(res.Extra.PeakOp+1, len(plan.Ops)); res.Done > 0 && n > 0 {
		o.Points, o.Check = 0, false
		upto := *plan // the same plan, seeds included, stopped after the peak
		upto.Ops = plan.Ops[:n]
		peak, err := replay.Run(&upto, o)
		if err != nil {
			return fmt.Errorf("replaying %s to its peak: %w", rep.Source, err)
		}
		extra.PeakSegments = segmentMaps(peak.Segments)
		extra.Sites = peakSites(plan, snap, n)
	}
	return writeHTMLFile(a, path, func(w io.Writer) error { return htmlreport.Write(w, rep, extra) })
}

// segmentMaps converts an allocator snapshot to the report's form.
func segmentMaps(segs []alloc.Segment) []figures.SegmentMap {
	out := make([]figures.SegmentMap, 0, len(segs))
	for _, s := range segs {
		m := figures.SegmentMap{Address: s.Address, Size: s.TotalSize, Blocks: make([]figures.Block, 0, len(s.Blocks))}
		for _, b := range s.Blocks {
			st := figures.Free
			switch b.State {
			case alloc.BlockAllocated:
				st = figures.Allocated
			case alloc.BlockPendingFree:
				st = figures.Pending
			}
			m.Blocks = append(m.Blocks, figures.Block{Size: b.Size, State: st})
		}
		out = append(out, m)
	}
	return out
}

// peakSites groups the allocations live after the first n operations by
// their recorded stack, most bytes first; nil when none has a stack.
func peakSites(plan *replay.Plan, snap *trace.Snapshot, n int) []htmlreport.Site {
	if snap == nil || len(plan.Stack) < n {
		return nil
	}
	live := map[uint32]int{} // allocation id → the op that made it
	for i, op := range plan.Ops[:n] {
		switch op.Kind {
		case alloc.OpAlloc:
			live[op.ID] = i
		case alloc.OpFree, alloc.OpFreeRequest:
			delete(live, op.ID) // no longer allocated, even if still pending
		}
	}
	type site struct {
		bytes uint64
		count int
	}
	by := map[int32]*site{}
	stacked := false
	for _, i := range live {
		st := plan.Stack[i]
		if st >= 0 && int(st) < len(snap.Stacks) {
			stacked = true
		} else {
			st = -1
		}
		s := by[st]
		if s == nil {
			s = &site{}
			by[st] = s
		}
		s.bytes += plan.Ops[i].Size
		s.count++
	}
	if !stacked {
		return nil
	}
	sites := make([]htmlreport.Site, 0, len(by))
	for st, s := range by {
		sites = append(sites, htmlreport.Site{Frames: strings.Join(stackLines(snap, st), "\n"), Bytes: s.bytes, Count: s.count})
	}
	slices.SortFunc(sites, func(x, y htmlreport.Site) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Frames, y.Frames))
	})
	return sites
}
