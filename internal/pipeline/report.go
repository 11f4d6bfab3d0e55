package pipeline

import (
	"cmp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// buildReport turns a replay's result into the data every renderer reads.
// plan and snap may be nil (workloads have neither).
func buildReport(source string, o replay.Options, res *replay.Result, plan *replay.Plan, snap *trace.Snapshot) *figures.Replay {
	r := &figures.Replay{
		Source:                      source,
		Settings:                    o.Config.Text,
		Policy:                      string(o.Config.Policy),
		DeviceMemory:                o.DeviceTotal,
		Allowed:                     res.Allowed,
		Ops:                         res.Done,
		Stats:                       res.Stats,
		PeakOp:                      res.Extra.PeakOp,
		PeakAllocatedAtPeakReserved: res.Extra.AllocatedAtPeak,
		LargestFree:                 res.LargestFree,
		LowerBound:                  uint64(res.Extra.LiveBytesPeak),
	}
	if plan != nil {
		r.Truncated = plan.Truncated
		reasons := make([]string, 0, len(plan.Skipped))
		for k := range plan.Skipped {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		for _, k := range reasons {
			r.Skipped = append(r.Skipped, figures.Skip{Reason: k, Count: plan.Skipped[k]})
		}
	}
	if tl := res.Timeline; tl != nil {
		for i := range tl.Allocated {
			r.Timeline = append(r.Timeline, figures.Point{Op: i * tl.Stride,
				Allocated: tl.Allocated[i], Reserved: tl.Reserved[i], Active: tl.Active[i]})
		}
	}
	if res.OOM != nil {
		r.OOM = buildOOM(res, plan, snap)
	}
	if c := res.Cap; c != nil && c.Device > 0 && r.DeviceMemory == 0 && res.DeviceTotal == c.Device {
		r.DeviceMemory = c.Device // the card the recording's out-of-memory errors show
	}
	if c := res.Cap; c.Capped() {
		r.InferredCap = &figures.InferredCap{Low: c.Low, High: c.High, From: c.From()}
	}
	r.Inexact = res.Inexact
	if d := res.Divergence; d != nil {
		r.Divergence = &figures.Divergence{Op: d.Op, Event: d.Event, Recorded: d.Recorded, Replayed: d.Replayed, Cause: d.Cause, WhatIf: d.WhatIf}
	}
	for _, o := range res.OOMs {
		if o == res.OOM {
			r.OOMs = append(r.OOMs, r.OOM)
			continue
		}
		r.OOMs = append(r.OOMs, &figures.OOM{OpIndex: o.OpIndex, Size: o.Size, Rounded: o.Rounded,
			AllocSize: o.AllocSize, Stream: o.Stream, DeviceTotal: o.DeviceTotal, DeviceFree: o.DeviceFree,
			Allowed: o.Allowed, Allocated: o.Allocated, Reserved: o.Reserved, Recorded: o.Recorded,
			PrivatePools: o.PrivatePools})
	}
	for _, p := range res.Pools {
		r.Pools = append(r.Pools, p.String())
	}
	if a := res.Addressing; a != nil { // a recorded trace: say where its addresses came from
		r.Addresses = &figures.Addresses{Segments: a.Mallocs, ModelledFrom: a.ModelledFrom,
			Recorded: a.Hinted, Matched: a.Matched, Predicted: a.Predicted}
	}
	return r
}

// hole is a segment with free bytes in it.
type hole struct {
	seg  int
	free uint64
}

func buildOOM(res *replay.Result, plan *replay.Plan, snap *trace.Snapshot) *figures.OOM {
	o := res.OOM
	out := &figures.OOM{
		OpIndex: o.OpIndex, Size: o.Size, Rounded: o.Rounded, AllocSize: o.AllocSize, Stream: o.Stream,
		DeviceTotal: o.DeviceTotal, DeviceFree: o.DeviceFree, Allowed: o.Allowed,
		Allocated: o.Allocated, Reserved: o.Reserved, LargestFree: res.LargestFree, PrivatePools: o.PrivatePools,
	}
	active := res.Stats.ActiveBytes[alloc.All].Current
	if d := o.Reserved - active; d > 0 {
		out.CachedFree = uint64(d)
	}
	// the segments holding the largest holes, worst first
	var holes []hole
	for i, s := range res.Segments {
		var free uint64
		for _, b := range s.Blocks {
			if b.State == alloc.BlockInactive {
				free += b.Size
			}
		}
		if free > 0 {
			holes = append(holes, hole{i, free})
		}
	}
	sort.SliceStable(holes, func(i, j int) bool { return holes[i].free > holes[j].free })
	for _, h := range holes[:min(len(holes), 5)] {
		out.Segments = append(out.Segments, segmentMaps(res.Segments[h.seg:h.seg+1])...)
	}
	if plan != nil && snap != nil && len(snap.Stacks) > 0 && res.OOMOp >= 0 && res.OOMOp < len(plan.Stack) {
		out.Frames = stackLines(snap, plan.Stack[res.OOMOp])
		out.PinFrames = pinFrames(res, plan, snap, holes[:min(len(holes), 5)])
	}
	return out
}

// pinFrames returns the stacks that allocated the blocks keeping the
// segments with the largest holes from being released, most bytes first.
func pinFrames(res *replay.Result, plan *replay.Plan, snap *trace.Snapshot, holes []hole) [][]string {
	stackOf := map[uint32]int32{} // allocation id → stack of its latest alloc before the OOM
	for i, op := range plan.Ops[:res.OOMOp] {
		if op.Kind == alloc.OpAlloc {
			stackOf[op.ID] = plan.Stack[i]
		}
	}
	bytes := map[int32]uint64{}
	for _, h := range holes {
		for _, b := range res.Segments[h.seg].Blocks {
			if st, ok := stackOf[b.ID]; ok && b.State != alloc.BlockInactive && st >= 0 {
				bytes[st] += b.Size
			}
		}
	}
	stacks := make([]int32, 0, len(bytes))
	for st := range bytes {
		stacks = append(stacks, st)
	}
	sort.Slice(stacks, func(i, j int) bool {
		if bytes[stacks[i]] != bytes[stacks[j]] {
			return bytes[stacks[i]] > bytes[stacks[j]]
		}
		return stacks[i] < stacks[j]
	})
	var out [][]string
	for _, st := range stacks[:min(len(stacks), 3)] {
		out = append(out, stackLines(snap, st))
	}
	return out
}

func stackLines(snap *trace.Snapshot, idx int32) []string {
	if idx < 0 || int(idx) >= len(snap.Stacks) {
		return nil
	}
	var lines []string
	for _, f := range snap.Stacks[idx] {
		lines = append(lines, f.Name+" ("+f.Filename+":"+strconv.Itoa(f.Line)+")")
	}
	return lines
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
func peakSites(plan *replay.Plan, snap *trace.Snapshot, n int) []figures.Site {
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
	return sitesOf(snap, func(yield func(st int32, size uint64)) {
		for _, i := range live {
			yield(plan.Stack[i], plan.Ops[i].Size)
		}
	})
}

// sitesOf groups the allocations each yields (its stack, its size) by
// stack, most bytes first; nil when none has a stack.
func sitesOf(snap *trace.Snapshot, each func(yield func(st int32, size uint64))) []figures.Site {
	by := map[int32]*siteSum{}
	each(func(st int32, size uint64) {
		if st < 0 || int(st) >= len(snap.Stacks) {
			st = -1
		}
		s := by[st]
		if s == nil {
			s = &siteSum{}
			by[st] = s
		}
		s.bytes += int64(size)
		s.count++
	})
	return sitesOfSums(snap, func(yield func(st int32, bytes uint64, count int)) {
		for st, s := range by {
			yield(st, uint64(s.bytes), s.count)
		}
	})
}

// sitesOfSums is sitesOf of allocations summed by stack: each yields
// every stack's bytes and count (-1: those without a stack).
func sitesOfSums(snap *trace.Snapshot, each func(yield func(st int32, bytes uint64, count int))) []figures.Site {
	var sites []figures.Site
	stacked := false
	each(func(st int32, bytes uint64, count int) {
		stacked = stacked || st >= 0
		sites = append(sites, figures.Site{Frames: strings.Join(stackLines(snap, st), "\n"), Bytes: bytes, Count: count})
	})
	if !stacked {
		return nil
	}
	slices.SortFunc(sites, func(x, y figures.Site) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Frames, y.Frames))
	})
	return sites
}
