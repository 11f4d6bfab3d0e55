package pipeline

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/categories"
	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/replay"
)

// sitesPerCategory is how many sites the report names per category.
const sitesPerCategory = 3

// addCategories sums cls's categories at the peak of allocated memory and
// puts them in the report. A trace records requests, not the blocks the
// allocator handed out, so the sizes come from the replay: one stepped
// replay finds the operation after which allocated memory first peaked,
// another stopped there lists the blocks then live. Nothing is added when
// cls is nil or the replay ended in an out-of-memory.
// A replay package option to stop a packed plan after op n would spare
// a lean replay the unpacked copy.
func (r *Run) addCategories(cls *categories.Result) error {
	if cls == nil || r.res == nil || r.res.OOM != nil || r.plan.Len() == 0 {
		return nil
	}
	r.cls = cls
	// a streamed plan keeps its operations packed; the replay stopped at
	// the peak needs them, unpacked in a copy for the time it takes
	plan := r.plan
	if plan.Ops == nil {
		c := *plan
		c.Materialize()
		plan = &c
	}
	o := r.opts
	o.Points, o.Check = len(plan.Ops), false
	full, err := replay.Run(plan, o)
	if err != nil || full.Timeline == nil || full.Timeline.Stride != 1 {
		return replayErr("replaying "+r.Report.Source+" for its categories", err)
	}
	peak := 0
	for i, a := range full.Timeline.Allocated {
		if a > full.Timeline.Allocated[peak] {
			peak = i
		}
	}
	upto := *plan
	upto.Ops = plan.Ops[:peak+1]
	o.Points = 0
	res, err := replay.Run(&upto, o)
	if err != nil {
		return replayErr("replaying "+r.Report.Source+" to its peak", err)
	}
	opOf := map[uint32]int{} // allocation id → the op that made it
	for i, op := range upto.Ops {
		if op.Kind == alloc.OpAlloc {
			opOf[op.ID] = i
		}
	}
	var at [categories.NumCategories]uint64
	type key struct {
		c    categories.Category
		site string
	}
	sites := map[key]*figures.Site{}
	names := map[int32]string{}
	var total, kept uint64
	for _, s := range res.Segments {
		for _, b := range s.Blocks {
			if b.State != alloc.BlockAllocated {
				continue
			}
			total += b.Size
			var blk *categories.Block
			if i, ok := opOf[b.ID]; ok && i < len(plan.Event) {
				blk = cls.Lookup(plan.Event[i], b.Address)
			} else {
				blk = cls.Lookup(-1, b.Address)
			}
			c, name := categories.Unknown, "(no stack)"
			if blk != nil {
				c = blk.Category
				name = r.siteOf(blk, names)
			}
			at[c] += b.Size
			if blk != nil && blk.KeptPastStep() {
				kept += b.Size
			}
			k := key{c, name}
			if sites[k] == nil {
				sites[k] = &figures.Site{Frames: name}
			}
			sites[k].Bytes += b.Size
			sites[k].Count++
		}
	}
	fc := &figures.Categories{Op: peak, Total: total, Method: cls.Method, Steps: cls.Steps,
		Remedies: categories.Remedies(at, kept, 8), KeptPastStep: kept}
	for c := categories.Category(0); c < categories.NumCategories; c++ {
		share := figures.CategoryShare{Name: c.String(), Bytes: at[c]}
		for k, s := range sites {
			if k.c == c {
				share.Sites = append(share.Sites, *s)
			}
		}
		slices.SortFunc(share.Sites, func(x, y figures.Site) int {
			return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Frames, y.Frames))
		})
		share.Sites = share.Sites[:min(len(share.Sites), sitesPerCategory)]
		fc.Shares = append(fc.Shares, share)
	}
	r.Report.Categories = fc
	return nil
}

// siteOf names blk's allocation site: its top user frames or, when it has
// none, its category and the phase it was born in.
func (r *Run) siteOf(blk *categories.Block, names map[int32]string) string {
	if blk.Stack >= 0 && r.snap != nil {
		name, ok := names[blk.Stack]
		if !ok {
			name = siteName(r.snap, blk.Stack, DefaultSiteDepth)
			names[blk.Stack] = name
		}
		if name != "(no stack)" {
			return name
		}
	}
	return noStackName(r.cls, blk)
}

// noStackName names an allocation with no Python frame by its phase and
// category, such as "(no stack) backward, no Python frame (autograd
// engine): activation".
func noStackName(cls *categories.Result, blk *categories.Block) string {
	phase := blk.Phase.String()
	if blk.Phase == categories.Backward && cls != nil && cls.Stacks {
		phase = "backward, no Python frame (autograd engine)"
	}
	return fmt.Sprintf("(no stack) %s: %s", phase, blk.Category)
}
