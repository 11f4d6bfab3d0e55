package replay

import "github.com/gpumem/gpumem/pkg/alloc"

// twin is the placement check's second replay (placementReplay) run
// beside the first, batch by batch, so that a streamed plan's op log is
// unpacked once, not twice: each batch the first replay ran goes to it
// while it is still in the cache. It starts after the first batch when
// the check is sure to replay (the device modelled a segment and a
// decision could already have gone otherwise, alloc.PlacementTies, and
// the other placement, watched, already went otherwise), else never: the
// check then replays afterwards, if it must. It runs exactly
// the ops the second replay would, in the same batches, and stops where
// it would, at its own out-of-memory; if the first replay stops at one,
// the check does not run and what the twin did is dropped.
type twin struct {
	p    *Plan
	o    Options // the second replay's
	a    *alloc.Allocator
	off  bool // not started, and never will be
	done bool // stopped: out of memory (oom) or failed (err)
	oom  bool
	err  error
}

// twinResult is what a twin ended with: the second replay's statistics,
// whether it ran out of memory, its error.
type twinResult struct {
	stats alloc.Stats
	oom   bool
	err   error
}

// newTwin is the twin of a replay of p under o, or nil where the
// placement check would not replay it or its plan is not streamed.
func newTwin(p *Plan, o Options) *twin {
	if p == nil || p.log == nil || o.NoDivergence {
		return nil
	}
	dev, ok := alloc.SimOtherPlacement(o.Device)
	if !ok {
		return nil
	}
	o.Device, o.Points, o.Check, o.NoDivergence, o.Observe = dev, 0, false, true, nil
	return &twin{p: p, o: o}
}

// step hands the twin ops from op index base, which the first replay, on
// a, has just run without an out-of-memory.
func (t *twin) step(a *alloc.Allocator, ops []alloc.Op, base int) {
	if t == nil || t.off || t.done {
		return
	}
	if t.a == nil {
		ad, ok := a.Addressing()
		if base != 0 || !ok || ad.ModelledFrom < 0 || !a.PlacementTies() || a.OtherPlacementAgrees() {
			t.off = true
			return
		}
		if !t.start() {
			return
		}
	}
	res, err := t.a.Run(ops, base, nil)
	switch {
	case err != nil:
		t.err, t.done = err, true
	case res.OOM != nil:
		t.oom, t.done = true, true
	}
}

// start makes the second replay's allocator as run does, seeds included.
func (t *twin) start() bool {
	a, _, failed, err := seeded(t.o, t.p, t.p.Seeds)
	switch {
	case err != nil:
		t.err, t.done = err, true
		return false
	case failed != nil: // run's seedOOM: an out-of-memory before the first op
		a.Close()
		t.oom, t.done = true, true
		return false
	}
	t.a = a
	return true
}

// result is what the twin ended with; nil when it never started.
func (t *twin) result() *twinResult {
	if t == nil || (t.a == nil && !t.done) {
		return nil
	}
	r := &twinResult{oom: t.oom, err: t.err}
	if t.a != nil {
		r.stats = t.a.Stats()
	}
	return r
}

// close lets the twin's allocator go.
func (t *twin) close() {
	if t != nil && t.a != nil {
		t.a.Close()
		t.a = nil
	}
}
