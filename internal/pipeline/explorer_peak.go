package pipeline

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// With the HTML report, the replay that makes the report steps through
// the ops for the explorer too (replay.RunSteps), rather than a second
// replay in Detail. Until the end it does not know the peak, where the
// page's segment map starts and whose segments and allocation sites the
// report shows, so it keeps them as they stood after the last op that
// raised the reserved peak: the block list the allocator copies at such
// an op (alloc.BlockSteps.KeepPeaks), and the sites' sums through an
// undo log (siteTrack). It shows every op of the plan: a replay that
// ends otherwise (an out-of-memory) or whose packer asks for the ops
// again leaves its explorer to Detail's replay.

// explored is the explorer a run stepped through as it made its report.
type explored struct {
	sink figures.ExplorerSink // finished, unless again
	// again: the sink asked for the ops again (ErrExplorerAgain), for
	// Detail's replay to hand them to it
	again bool
	peak  []figures.SegmentMap
	sites []figures.Site
}

// peakTrack keeps what the explorer takes at the peak while the peak is
// not yet known.
type peakTrack struct {
	op     int                // the last op that raised the peak, -1 none
	list   []figures.BlockRec // the block list after it
	copied int                // blocks copied at peaks so far
	sites  siteTrack
	over   bool // the copies passed their budget: the stepping stopped
}

// step follows op i's change bc, live the allocations after it.
func (t *peakTrack) step(i int, bc *alloc.BlockChange, live *liveSet) {
	if bc.Peak {
		t.sites.peak()
	}
	if bc.PeakList == nil {
		return
	}
	t.op = i
	t.list = records(t.list[:0], bc.PeakList, live)
	// a list copied at every op that raises the peak costs the list's
	// length each: a trace whose peak keeps rising for long, with many
	// blocks live, is left to Detail's replay
	t.copied += len(bc.PeakList)
	t.over = t.copied > 4*(i+1)+peakCopySlack
}

// peakCopySlack is how many blocks the copies at peaks may take beyond 4
// an op (a variable for the tests).
var peakCopySlack = 1 << 16

// siteSum is what the allocations of one stack hold.
type siteSum struct {
	bytes int64
	count int
}

// siteDelta is an allocation made (n 1) or freed (n -1), of size bytes.
type siteDelta struct {
	stack int32
	n     int32
	size  int64
}

// siteTrack follows the allocations made and not yet freed, summed per
// stack (cur, by stack+1), and keeps the sums as they stood at the last
// peak: the changes since in an undo log, folded into a copy of the sums
// (atPeak) once it outgrows them, after which there is nothing to log
// until the next peak. Memory and time per change stay bounded by the
// number of stacks.
type siteTrack struct {
	cur, atPeak []siteSum
	undo        []siteDelta
	logging     bool // undo holds the changes since the peak; else atPeak is it
}

// add counts an allocation of size bytes at stack made (n 1) or freed
// (n -1): the sign is n's, not size's, as an allocation may be empty.
func (t *siteTrack) add(stack int32, n int32, size int64) {
	k := int(stack) + 1
	for k >= len(t.cur) {
		t.cur = append(t.cur, siteSum{})
	}
	c := &t.cur[k]
	c.bytes += int64(n) * size
	c.count += int(n)
	if t.logging {
		t.undo = append(t.undo, siteDelta{stack, n, size})
		if len(t.undo) > len(t.cur)+1024 {
			t.fold()
		}
	}
}

// peak marks the sums now as the peak's.
func (t *siteTrack) peak() { t.undo, t.logging = t.undo[:0], true }

// fold makes atPeak the sums at the peak: cur less the changes since.
func (t *siteTrack) fold() {
	t.atPeak = append(t.atPeak[:0], t.cur...)
	for _, d := range t.undo {
		c := &t.atPeak[int(d.stack)+1]
		c.bytes -= int64(d.n) * d.size
		c.count -= int(d.n)
	}
	t.undo, t.logging = t.undo[:0], false
}

// exploreStepped replays r's plan under o (r's options, perhaps with an
// Observe of its own) through replay.RunSteps, making both the report's
// result and the explorer, packed by a sink of pack. Once the report is built, finish completes
// the explorer: the explorer when the replay showed every op (the sink
// alone when it asks for the ops again); nil otherwise, for Detail to
// step through a replay of its own.
func (r *Run) exploreStepped(o replay.Options, pack figures.ExplorerPacker, clk *clock, cls *categories.Result) (res *replay.Result, finish func() (*explored, error), err error) {
	plan := r.plan
	s := &stepOpts{device: r.device, plan: plan, o: r.opts, snap: r.snap, clock: clk, cls: cls}
	sink := pack()
	x := startExplorer(sink, s, shown{n: plan.Len(), peakOp: -1, oomOp: -1})
	x.bs.KeepPeaks()
	x.peak = &peakTrack{op: -1}
	stepped := 0
	res, err = replay.RunSteps(plan, o, &replay.Stepper{Blocks: &x.bs, KeyGap: minKeyGap, After: func(st *replay.BlockStep) bool {
		x.step(st)
		stepped++
		return !x.peak.over
	}})
	x.bs.Free()
	if err != nil {
		return nil, nil, err
	}
	t := x.peak
	if t.over || stepped != plan.Len() || res.OOM != nil || res.SeedOOM || res.Done != plan.Len() || t.op != res.Extra.PeakOp ||
		res.Done == 0 || min(res.Extra.PeakOp+1, plan.Len()) <= 0 { // the last: Detail shows no explorer
		return res, nil, nil
	}
	return res, func() (*explored, error) {
		x.e.PeakOp = res.Extra.PeakOp
		x.end()
		r.finishHead(x.e, nil)
		sink.First(min(max(1, t.op+1), x.n), t.list)
		if err := sink.Finish(); err == figures.ErrExplorerAgain {
			return &explored{sink: sink, again: true}, nil
		} else if err != nil {
			return nil, fmt.Errorf("stepping through %s: %w", r.Report.Source, err)
		}
		ex := &explored{sink: sink, peak: segmentMapsOf(t.list)}
		if r.snap != nil {
			if t.sites.logging {
				t.sites.fold()
			}
			ex.sites = sitesOfSums(r.snap, func(yield func(st int32, bytes uint64, count int)) {
				for k, c := range t.sites.atPeak {
					if c.count > 0 {
						yield(int32(k-1), uint64(c.bytes), c.count)
					}
				}
			})
		}
		return ex, nil
	}, nil
}

// segmentMapsOf is segmentMaps of the segments whose blocks are list.
func segmentMapsOf(list []figures.BlockRec) []figures.SegmentMap {
	out := []figures.SegmentMap{}
	for _, b := range list {
		if b.First || len(out) == 0 {
			out = append(out, figures.SegmentMap{Address: b.Address, Size: b.SegSize})
		}
		st := figures.Free
		switch b.State {
		case figures.StateAllocated:
			st = figures.Allocated
		case figures.StatePending:
			st = figures.Pending
		}
		m := &out[len(out)-1]
		m.Blocks = append(m.Blocks, figures.Block{Size: b.Size, State: st})
	}
	return out
}
