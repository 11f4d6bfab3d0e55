package main

import (
	"sort"
	"strconv"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/report"
	"github.com/gpumem/gpumem/pkg/trace"
)

// buildReport turns a replay's result into the data every renderer reads.
// plan and snap may be nil (workloads have neither).
func buildReport(source string, o replay.Options, res *replay.Result, plan *replay.Plan, snap *trace.Snapshot) *report.Replay {
	r := &report.Replay{
		Source:                      source,
		Settings:                    o.Config.Text,
		Policy:                      string(o.Config.Policy),
		DeviceMemory:                o.DeviceTotal,
		Allowed:                     res.Allowed,
		Ops:                         res.Done,
		Stats:                       res.Stats.Map(),
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
			r.Skipped = append(r.Skipped, report.Skip{Reason: k, Count: plan.Skipped[k]})
		}
	}
	if tl := res.Timeline; tl != nil {
		for i := range tl.Allocated {
			r.Timeline = append(r.Timeline, report.Point{Op: i * tl.Stride,
				Allocated: tl.Allocated[i], Reserved: tl.Reserved[i], Active: tl.Active[i]})
		}
	}
	if res.OOM != nil {
		r.OOM = buildOOM(res, plan, snap)
	}
	for _, o := range res.OOMs {
		if o == res.OOM {
			r.OOMs = append(r.OOMs, r.OOM)
			continue
		}
		r.OOMs = append(r.OOMs, &report.OOM{OpIndex: o.OpIndex, Size: o.Size, Rounded: o.Rounded,
			AllocSize: o.AllocSize, Stream: o.Stream, DeviceTotal: o.DeviceTotal, DeviceFree: o.DeviceFree,
			Allowed: o.Allowed, Allocated: o.Allocated, Reserved: o.Reserved, Recorded: o.Recorded,
			PrivatePools: o.PrivatePools})
	}
	for _, p := range res.Pools {
		r.Pools = append(r.Pools, p.String())
	}
	return r
}

// hole is a segment with free bytes in it.
type hole struct {
	seg  int
	free uint64
}

func buildOOM(res *replay.Result, plan *replay.Plan, snap *trace.Snapshot) *report.OOM {
	o := res.OOM
	out := &report.OOM{
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
