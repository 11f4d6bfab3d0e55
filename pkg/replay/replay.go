package replay

import (
	"context"
	"errors"
	"slices"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// Options say how to replay.
type Options struct {
	Config alloc.Config
	// Device supplies memory; nil = an unlimited simulated device.
	Device alloc.Device
	// DeviceTotal is the card's size (the base of MemoryFraction); 0 = the
	// device's own.
	DeviceTotal    uint64
	MemoryFraction float64
	// Points is the most timeline points to keep; 0 = no timeline.
	Points int
	// Check runs the invariant checker after every operation.
	Check bool
	// Context, when set, stops a replay between batches of operations
	// once it is done (an interrupt); Run then returns its error.
	Context context.Context
	// RecordedCap replays under the cap the recording shows (Plan.Cap)
	// when no card size or memory fraction is given.
	RecordedCap bool
	// NoDivergence skips comparing the replay's device calls with the
	// recording's (Result.Divergence stays nil): a caller that reads only
	// the statistics saves the device log.
	NoDivergence bool
	// Stop, when above 0, replays only the plan's first Stop operations,
	// and compares nothing with the recording (as NoDivergence): the
	// state after an operation of interest, such as the peak, without
	// unpacking a streamed plan.
	Stop int
	// Observe, when set, is handed the operations Run or RunOps applied,
	// in order, as the allocator ran them (base is the index of ops[0];
	// event their Plan.Event, nil when the plan has none), with the
	// replay's timeline as it stands then (nil without Points): a pass
	// over a streamed plan beside the replay needs no unpacking of its
	// own. The placement check's second replay hands it nothing.
	// sizes is nil unless BlockSizes asks for it.
	Observe func(base int, ops []alloc.Op, event []int32, sizes []uint64, tl *alloc.Timeline)
	// BlockSizes, asked before each batch, says whether Observe wants
	// the size of the block each free (or free request) of the batch
	// freed (alloc.Allocator.RunSized, which costs a little per op). The
	// replay tells them where it can: a streamed plan's, not stepped
	// (RunSteps); elsewhere Observe gets nil.
	BlockSizes func() bool
}

// Result is what a replay ended with.
type Result struct {
	Stats alloc.Stats
	Extra alloc.Extra
	// OOM is the allocation that failed, nil if none; its OpIndex is the
	// failing op's Plan.Event (the index among alloc/free_completed events).
	OOM *alloc.OOM
	// OOMOp is the failing op's index in Plan.Ops, -1 if none.
	OOMOp int
	// OOMs lists every out-of-memory in order (OpIndex as OOM's): those
	// the recording had too, which the replay counted and went past
	// (Recorded), then the one that stopped it, if any (OOM itself).
	OOMs []*alloc.OOM
	// Pools are the private pools the plan inferred (Plan.Pools).
	Pools       []Pool
	Done        int // ops applied
	LargestFree uint64
	// Segments is the allocator's state at the end (after an OOM's release
	// steps, when one stopped the replay).
	Segments    []alloc.Segment
	Timeline    *alloc.Timeline
	Allowed     uint64
	DeviceTotal uint64
	// Cap is the inferred cap the replay ran under (Options.RecordedCap),
	// nil when it ran under none or the one given.
	Cap *Cap
	// Divergence is where the replay first did on the device something
	// its recording did not (see Plan.Recorded); nil when it followed the
	// recording to its end, or the trace records nothing to compare with.
	// Under other settings than the recorded ones a divergence is expected.
	Divergence *Divergence
	// placementSettled: no decision of the replay could have gone
	// otherwise on the simulated device's other placement
	// (alloc.Allocator.PlacementTies); false when unknown.
	placementSettled bool
	// otherAgrees: the simulated device's other placement, watched beside
	// this replay (alloc.Allocator.WatchOtherPlacement), answered every
	// call alike and kept the segments in the same order, so a replay on
	// it would have gone as this one did.
	otherAgrees bool
	// other is the placement check's second replay, when it ran beside
	// this one (twin); nil otherwise.
	other *twinResult
	// Addressing says how the simulated device chose segment addresses;
	// nil on a real device.
	Addressing *alloc.Addressing
	// SeedOOM: the OOM happened before the first op, while the state a
	// truncated trace starts in was rebuilt (it does not fit the card).
	SeedOOM bool
	// Inexact names the memory_stats keys the trace cannot settle, each
	// with the reason (see inexact); nil when it settles every one.
	Inexact map[string]string
}

// Run replays a plan's operations through a new allocator. It stops at the
// first out-of-memory the recording did not have; those it had are counted
// as PyTorch counted them and the replay goes on.
func Run(p *Plan, o Options) (*Result, error) {
	return RunSteps(p, o, nil)
}

// Stepper follows a replay op by op (RunSteps): the allocator's block
// list through Blocks (alloc.BlockSteps.Run, with the whole list as
// KeyGap says), and After, which sees each op applied with its change,
// the failing op's at an out-of-memory too, in one BlockStep rewritten
// for every op and valid only during the call (its At is nil). Once
// After returns false the replay goes on without following the ops. A
// Stepper serves one replay.
type Stepper struct {
	Blocks *alloc.BlockSteps
	KeyGap int
	After  func(s *BlockStep) bool
	off    bool
}

// RunSteps is Run, its replay stepped through s (nil: none): one replay
// gives both the result and what StepBlocks would have followed, on the
// same allocator (the placement check's second replay, when it runs, is
// not stepped).
func RunSteps(p *Plan, o Options, s *Stepper) (*Result, error) {
	r, err := runBeside(p.Ops, p.Event, p.Seeds, o, p, newTwin(p, o), s)
	if r != nil {
		r.Pools = p.Pools
		r.Inexact = inexact(p, r)
		if err == nil {
			err = placementCheck(p, o, r)
		}
		r.other = nil // read
	}
	return r, err
}

// RunOps replays ops; event maps op indexes to reported OOM indexes (nil =
// the op index itself).
func RunOps(ops []alloc.Op, event []int32, o Options) (*Result, error) {
	return run(ops, event, nil, o, nil)
}

// newAllocator makes the allocator a replay of p (nil: bare ops) runs on
// under o, and returns the cap it inferred from the recording, if any.
func newAllocator(o Options, p *Plan) (*alloc.Allocator, *Cap, error) {
	var inferred *Cap
	if o.RecordedCap && p != nil && p.Cap != nil && o.DeviceTotal == 0 && o.MemoryFraction == 0 && o.Config.MemoryFraction == 0 {
		inferred = p.Cap
	}
	ao := alloc.Options{
		Config: o.Config, Device: o.Device, DeviceTotal: o.DeviceTotal,
		MemoryFraction: o.MemoryFraction, Check: o.Check,
	}
	if inferred.Capped() {
		ao.Allowed = inferred.Low
	}
	if inferred != nil && inferred.Device > 0 {
		// a simulated card of the size the recording's own out-of-memory
		// errors show; a real GPU or a card given by size stays as it is
		if d, ok := alloc.SimWithCapacity(ao.Device, inferred.Device); ok {
			ao.Device, ao.DeviceTotal = d, inferred.Device
		}
	}
	a, err := alloc.New(ao)
	return a, inferred, err
}

// seeded makes the allocator of a replay of p under o (newAllocator) and
// lays seeds on it; failed is the seed that did not fit the card (an
// out-of-memory before the first op, the seeds after it not laid), nil
// when all did. On an error there is no allocator to close.
func seeded(o Options, p *Plan, seeds []*Seed) (a *alloc.Allocator, inferred *Cap, failed *Seed, err error) {
	a, inferred, err = newAllocator(o, p)
	if err != nil {
		return nil, nil, nil, err
	}
	follows := p.followsSettings(o.Config, a.Allowed())
	a.SetFollowsRecording(follows)
	if p != nil && watchesPlacement(o) && (!p.recorded.device || !follows) {
		// the placement check's second replay is needed only where the
		// other placement would not go as this one (placementCheck). A
		// replay of recorded addresses under the recorded settings
		// mostly follows them to the end and needs no check at all: it
		// does not pay for the other device's calls.
		if err := a.WatchOtherPlacement(); err != nil {
			a.Close()
			return nil, nil, nil, err
		}
	}
	for _, s := range seeds {
		if err := a.Seed(s.Address, s.Size, s.Stream, s.Small, s.Blocks); err != nil {
			if errors.Is(err, alloc.ErrOutOfMemory) {
				return a, inferred, s, nil
			}
			a.Close()
			return nil, nil, nil, err
		}
	}
	return a, inferred, nil, nil
}

// watchesPlacement: a replay of a plan under o has its placement checked
// (placementCheck, by Run) and watches the other placement for it. The
// check's own replay (NoDivergence) does not, nor one stopped early.
func watchesPlacement(o Options) bool {
	if o.NoDivergence || o.Stop > 0 {
		return false
	}
	_, ok := alloc.SimOtherPlacement(o.Device)
	return ok
}

// run replays ops; p, when not nil, is the plan they come from.
func run(ops []alloc.Op, event []int32, seeds []*Seed, o Options, p *Plan) (*Result, error) {
	return runBeside(ops, event, seeds, o, p, nil, nil)
}

// runBeside is run, handing each batch of a streamed plan's ops to tw
// (nil: none) too, for the placement check, and stepping them through st
// (nil: none).
func runBeside(ops []alloc.Op, event []int32, seeds []*Seed, o Options, p *Plan, tw *twin, st *Stepper) (*Result, error) {
	defer tw.close()
	a, inferred, failed, err := seeded(o, p, seeds)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	if failed != nil {
		// the state a truncated trace starts in does not fit this card: an
		// out-of-memory before the first op, not a failure
		return seedOOM(a, failed), nil
	}
	if o.Stop > 0 && o.Stop < len(ops) {
		ops = ops[:o.Stop]
		if len(event) > o.Stop {
			event = event[:o.Stop]
		}
	}
	// the replay is compared with its recording batch by batch
	var check *checker
	if !o.NoDivergence && o.Stop == 0 && p.comparable() {
		if check, err = newChecker(p, a); err != nil {
			return nil, err
		}
	}
	n := len(ops)
	if p != nil && p.log != nil {
		n = p.log.n
		if o.Stop > 0 {
			n = min(n, o.Stop)
		}
	}
	var tl *alloc.Timeline
	if o.Points > 0 && n > 0 {
		tl = alloc.NewTimeline(n, o.Points)
	}
	var res alloc.Result
	eventOf := func(op int) int { return int(event[op]) }
	if p != nil && p.log != nil {
		events := map[int]int32{} // of the out-of-memory ops
		res, err = p.log.run(o.Context, a, tl, events, n, tw, check, st, o.Observe, o.BlockSizes)
		eventOf = func(op int) int { return int(events[op]) }
	} else {
		var stack []int32
		if p != nil {
			stack = p.Stack
		}
		res, err = runBatches(o.Context, a, ops, 0, tl, check, st.of(event, stack))
		if event == nil {
			eventOf = nil
		}
		if err == nil && o.Observe != nil {
			ev := event
			if len(ev) < res.Done {
				ev = nil
			}
			o.Observe(0, ops[:res.Done], ev[:min(len(ev), res.Done)], nil, tl)
		}
	}
	if err != nil {
		return nil, err
	}
	r := finish(a, res, tl, eventOf)
	r.Cap = inferred
	r.placementSettled = !a.PlacementTies()
	r.otherAgrees = a.OtherPlacementAgrees()
	r.other = tw.result()
	if check != nil {
		r.Divergence = check.divergence(r, o.Config, o.DeviceTotal > 0)
	}
	return r, nil
}

// finish is the Result of a replay on a whose operations ended in res;
// eventOf maps op indexes to reported OOM indexes (nil = the op index).
func finish(a *alloc.Allocator, res alloc.Result, tl *alloc.Timeline, eventOf func(op int) int) *Result {
	r := &Result{
		Stats: a.Stats(), Extra: a.Extra(), OOM: res.OOM, OOMOp: -1, Done: res.Done,
		LargestFree: a.LargestFree(), Segments: a.Snapshot(), Timeline: tl,
		Allowed: a.Allowed(), DeviceTotal: a.DeviceTotal(),
	}
	for _, s := range res.Survived {
		if eventOf != nil {
			s.OpIndex = eventOf(s.OpIndex)
		}
		r.OOMs = append(r.OOMs, s)
	}
	if ad, ok := a.Addressing(); ok {
		r.Addressing = &ad
	}
	if r.OOM != nil {
		r.OOMOp = r.OOM.OpIndex
		if eventOf != nil {
			r.OOM.OpIndex = eventOf(r.OOMOp)
		}
		r.OOMs = append(r.OOMs, r.OOM)
		if tl != nil { // the timeline ends at the OOM
			k := (r.OOMOp + tl.Stride - 1) / tl.Stride
			tl.Truncate(k)
		}
	}
	return r
}

// ErrStopped is what a Stream's emit returns once the replay has stopped
// (an out-of-memory): the feed should stop making operations.
var ErrStopped = errors.New("replay stopped")

// Stream replays n operations that feed hands over in batches through
// emit, and returns what RunOps would for all of them at once: a long
// workload needs no memory for its operations. feed's own error ends the
// stream, unless it is ErrStopped.
func Stream(o Options, n int, feed func(emit func([]alloc.Op) error) error) (*Result, error) {
	a, _, err := newAllocator(o, nil)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	var tl *alloc.Timeline
	if o.Points > 0 && n > 0 {
		tl = alloc.NewTimeline(n, o.Points)
	}
	var total alloc.Result
	var runErr error // the allocator's (or the interrupt's), kept apart from feed's
	emit := func(ops []alloc.Op) error {
		if total.OOM != nil || runErr != nil {
			return ErrStopped
		}
		res, err := RunBatches(o.Context, a, ops, total.Done, tl)
		addRun(&total, res)
		if err != nil {
			runErr = err
		}
		if err != nil || res.OOM != nil {
			return ErrStopped
		}
		return nil
	}
	if err := feed(emit); runErr != nil {
		return nil, runErr
	} else if err != nil && !errors.Is(err, ErrStopped) {
		return nil, err
	}
	return finish(a, total, tl, nil), nil
}

// Batch is how many operations a replay hands the allocator at once when
// it must stay interruptible: about 5 ms of work, so an interrupt is
// answered at once while each cgo call still carries plenty.
const Batch = 1 << 16

// RunBatches runs ops on a from op index base, Batch at a time, checking
// ctx (nil = never done) between batches; it stops at an out-of-memory as
// a.Run does.
func RunBatches(ctx context.Context, a *alloc.Allocator, ops []alloc.Op, base int, tl *alloc.Timeline) (alloc.Result, error) {
	return runBatches(ctx, a, ops, base, tl, nil, nil)
}

// runBatches is RunBatches, handing each batch's result to check (nil:
// none) as it ends, and stepping the ops through st (nil: none).
func runBatches(ctx context.Context, a *alloc.Allocator, ops []alloc.Op, base int, tl *alloc.Timeline, check *checker, st *stepping) (alloc.Result, error) {
	if ctx == nil {
		res, err := st.run(a, ops, base, tl, 0)
		if err == nil {
			check.batch(a, base, res)
		}
		return res, err
	}
	var total alloc.Result
	for start := 0; start < len(ops); start += Batch {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := st.run(a, ops[start:min(start+Batch, len(ops))], base+start, tl, start)
		if err == nil {
			check.batch(a, base+start, res)
		}
		addRun(&total, res)
		if err != nil || res.OOM != nil {
			return total, err
		}
	}
	return total, nil
}

// addRun adds res, the result of the ops that follow total's, to total.
func addRun(total *alloc.Result, res alloc.Result) {
	total.Done += res.Done
	total.OOM = res.OOM
	total.Survived = append(total.Survived, res.Survived...)
}

// seedOOM is the result of a replay whose seeded start state ran out of
// memory while seed s was placed: the OOM is at op 0, asking for the
// segment, with the allocator as it stood.
func seedOOM(a *alloc.Allocator, s *Seed) *Result {
	st := a.Stats()
	free, total, _ := a.MemInfo()
	oom := &alloc.OOM{Size: s.Size, Rounded: s.Size, AllocSize: s.Size, Stream: s.Stream,
		DeviceFree: free, DeviceTotal: total, Allowed: a.Allowed(),
		Allocated: st.AllocatedBytes[alloc.All].Current, Reserved: st.ReservedBytes[alloc.All].Current}
	return &Result{Stats: st, Extra: a.Extra(), OOM: oom, OOMs: []*alloc.OOM{oom}, OOMOp: 0,
		LargestFree: a.LargestFree(), Segments: a.Snapshot(),
		Allowed: a.Allowed(), DeviceTotal: a.DeviceTotal(), SeedOOM: true}
}

// Step replays a plan one operation at a time, calling after(i, a) once
// op i has been applied, with a the allocator, to look at its state. It
// stops at the first out-of-memory (the failing op's after call sees the
// state after the release steps) or when after returns false.
func Step(p *Plan, o Options, after func(i int, a *alloc.Allocator) bool) error {
	return StepEach(p, o, func(i int, _ alloc.Op, _, _ int32, a *alloc.Allocator) bool { return after(i, a) })
}

// StepEach is Step for a plan whose operations may still be packed (a
// streamed plan, which it does not unpack): after also sees op i, its
// Event and its Stack (see Plan.Each).
func StepEach(p *Plan, o Options, after func(i int, op alloc.Op, event, stack int32, a *alloc.Allocator) bool) error {
	a, err := seededAllocator(o, p)
	if err != nil {
		return err
	}
	defer a.Close()
	i := 0
	err = p.Each(func(_ int, ops []alloc.Op, event, stack []int32) error {
		for j := range ops {
			res, err := a.Run(ops[j:j+1], i, nil)
			if err != nil {
				return err
			}
			if !after(i, ops[j], orDefault(event, j, 0), orDefault(stack, j, -1), a) || res.OOM != nil {
				return errStop{}
			}
			i++
		}
		return nil
	})
	if err == (errStop{}) {
		return nil
	}
	return err
}

// stepping is a Stepper at work on ops whose events and stacks are
// whole slices (not a packed log's batches): the ops' indexes into them.
type stepping struct {
	*Stepper
	event, stack []int32
	evBuf, stBuf []int32 // batchOf's, reused
}

// of is s at work on ops with events event and stacks stack; nil when s is.
func (s *Stepper) of(event, stack []int32) *stepping {
	if s == nil {
		return nil
	}
	return &stepping{Stepper: s, event: event, stack: stack}
}

// run is a.Run for ops, whose first is at off in st's events and stacks,
// stepped through st (nil: a.Run itself).
func (st *stepping) run(a *alloc.Allocator, ops []alloc.Op, base int, tl *alloc.Timeline, off int) (alloc.Result, error) {
	if st == nil {
		return a.Run(ops, base, tl)
	}
	end := off + len(ops)
	event, stack := batchOf(st.event, off, end, 0, &st.evBuf), batchOf(st.stack, off, end, -1, &st.stBuf)
	return st.Stepper.run(a, ops, base, tl, event, stack)
}

// run is a.Run for ops (the first op base; event and stack theirs, nil
// when none), stepBatch at a time, each op handed to After with its
// change.
func (s *Stepper) run(a *alloc.Allocator, ops []alloc.Op, base int, tl *alloc.Timeline, event, stack []int32) (alloc.Result, error) {
	var total alloc.Result
	var st BlockStep
	for lo := 0; lo < len(ops); lo += stepBatch {
		if s.off {
			res, err := a.Run(ops[lo:], base+lo, tl)
			addRun(&total, res)
			return total, err
		}
		res, err := s.Blocks.Run(a, ops[lo:min(len(ops), lo+stepBatch)], base+lo, s.KeyGap, tl)
		s.Blocks.Changes(func(j int, c *alloc.BlockChange) bool {
			k := lo + j
			// one field at a time: a multiple assignment copies the op
			// through a temporary, whose reread in 16-byte words stalls
			// on the stores just made (store forwarding)
			st.I = base + k
			st.Op = ops[k]
			st.Change = c
			st.Event, st.Stack = orDefault(event, k, 0), orDefault(stack, k, -1)
			s.off = !s.After(&st)
			return !s.off
		})
		addRun(&total, res)
		if err != nil || res.OOM != nil {
			return total, err
		}
	}
	return total, nil
}

// stepBatch is the most ops StepBlocks runs in one call into C: their
// changes, which after reads once the call is back, stay in the caches,
// and the buffer C writes them into stays small.
const stepBatch = 4096

// BlockStep is one op as StepBlocks hands it to its caller: op I of the plan,
// its event and stack (0 and -1 when the plan has none), its change of
// the block list, and At, the allocator just after the op at the ops
// StepBlocks pauses at (nil at the others).
type BlockStep struct {
	I            int
	Op           alloc.Op
	Event, Stack int32
	Change       *alloc.BlockChange
	At           *alloc.Allocator
}

// StepBlocks is StepEach for a caller that follows the allocator's block
// list after every op (the HTML explorer), without a call into C per op:
// the ops run in batches, each in one call (alloc.BlockSteps.Run, with
// bs following the list and giving the whole list as keyGap says), and
// after sees each op with its change, in one BlockStep rewritten for every op
// and valid only during the call. At the ops listed in pauses it also
// sees the allocator, in the state just after that op. It stops at the
// first out-of-memory, after the failing op, or when after returns false.
func StepBlocks(p *Plan, o Options, bs *alloc.BlockSteps, keyGap int, pauses []int, after func(s *BlockStep) bool) error {
	a, err := seededAllocator(o, p)
	if err != nil {
		return err
	}
	defer a.Close()
	pauses = slices.Sorted(slices.Values(pauses))
	next := 0 // the first of pauses not before the batch's first op
	i0 := 0   // the index of the batch's first op
	var st BlockStep
	err = p.Each(func(_ int, ops []alloc.Op, event, stack []int32) error {
		for lo := 0; lo < len(ops); {
			// a batch ends after a pause, or after stepBatch ops, or with ops
			for next < len(pauses) && pauses[next] < i0+lo {
				next++
			}
			hi, paused := min(len(ops), lo+stepBatch), false
			if next < len(pauses) && pauses[next]-i0 < hi {
				hi, paused = pauses[next]-i0+1, true
			}
			res, err := bs.Run(a, ops[lo:hi], i0+lo, keyGap, nil)
			stop := res.OOM != nil
			bs.Changes(func(j int, c *alloc.BlockChange) bool {
				k := lo + j
				st.I = i0 + k
				st.Op = ops[k] // not in a multiple assignment: see Stepper.run
				st.Change, st.At = c, nil
				st.Event, st.Stack = orDefault(event, k, 0), orDefault(stack, k, -1)
				if k == hi-1 && paused && err == nil {
					st.At = a
				}
				if !after(&st) {
					stop = true
					return false
				}
				return true
			})
			if err != nil {
				return err
			}
			if stop {
				return errStop{}
			}
			lo = hi
		}
		i0 += len(ops)
		return nil
	})
	if err == (errStop{}) {
		return nil
	}
	return err
}

// orDefault is s[i], or def when s is nil (a plan with no events or stacks).
func orDefault(s []int32, i int, def int32) int32 {
	if s == nil {
		return def
	}
	return s[i]
}

// seededAllocator is the allocator Run replays p on, with p's seeds in
// place, for the stepped replays: it follows the recording where Run's
// does (seeded), so that they replay alike.
func seededAllocator(o Options, p *Plan) (*alloc.Allocator, error) {
	a, _, err := newAllocator(o, p)
	if err != nil {
		return nil, err
	}
	a.SetFollowsRecording(p.followsSettings(o.Config, a.Allowed()))
	for _, s := range p.Seeds {
		if err := a.Seed(s.Address, s.Size, s.Stream, s.Small, s.Blocks); err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}
