package replay

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// A replay under the recorded settings must do on the device what the
// recording did: the same segment allocs, frees, maps and unmaps in the
// same ops, the same out-of-memory errors, and end with the snapshot's
// segments. Run compares the two as cheaply as it can (the allocator logs
// its device calls, a few per thousand ops, and the checker reads them
// after each batch of ops) and reports the first difference as a
// Divergence.

// DeviceEvent is one device event of the recording, or (after) the event
// right after one, which the cap reads (inferCapFrom).
type DeviceEvent struct {
	// Op is the index in Plan.Ops of the op it happened in: the allocation
	// that asked for the segment or whose retry released it, the
	// allocation that failed, or the empty_cache op of a release run.
	Op     int32
	Event  int32 // index in the device's trace
	Action trace.Action
	// after: not a device event, the one right after a device event
	after bool
	// stream is the index of the event's stream among the trace's (its
	// streams are only compared)
	stream uint32
	// Addr and Size of the segment or range; for an out-of-memory, Size is
	// the rounded request and Addr the device's free memory.
	Addr, Size uint64
}

// Recorded are the recording's device events, each at its op: what a
// replay under the recorded settings must do again (see Divergence); and,
// marked, the event right after each, which the cap reads. The plan keeps
// them packed: each call unpacks a copy.
func (p *Plan) Recorded() []DeviceEvent { return p.recorded.all() }

// SegmentRange is a segment's address and size.
type SegmentRange struct{ Address, Size uint64 }

// blockEnd is one block of the snapshot's final segments: where it is,
// how large, and whether it is free (inactive) or in use.
type blockEnd struct {
	Address, Size uint64
	Free          bool
}

// Divergence is where a replay first did something its recording did not.
type Divergence struct {
	// Op is the index in Plan.Ops where it happened; len(Plan.Ops) when
	// every op agreed but the final segments differ.
	Op int
	// Event is the index in the device's trace of the first recorded event
	// there, -1 when the recording has none.
	Event int
	// Recorded and Replayed say what each did there; Cause the likely reason.
	Recorded, Replayed, Cause string
	// WhatIf: the replay left the recording because it asked another
	// question than the recording answered (other settings or cap than the
	// recorded ones, or a given card too small to hold what the recording
	// cached): expected, and nothing to warn about.
	WhatIf bool
	short  bool // the replay ran short of memory where the recording did not
}

// Describe is the one-line account for people.
func (d *Divergence) Describe() string {
	where := "at operation " + units.FormatCount(int64(d.Op))
	if d.Event >= 0 {
		where += " (trace event " + units.FormatCount(int64(d.Event)) + ")"
	}
	return fmt.Sprintf("the replay left its recording %s: the recording %s, the replay %s; %s",
		where, d.Recorded, d.Replayed, d.Cause)
}

// isDevice says whether action is a device event: a segment event or an
// out-of-memory.
func isDevice(action trace.Action) bool {
	switch action {
	case trace.ActionSegmentAlloc, trace.ActionSegmentFree, trace.ActionSegmentMap, trace.ActionSegmentUnmap, trace.ActionOOM:
		return true
	}
	return false
}

// noteDevice keeps e, the trace's event i, when it is a device event of
// the recording or the event right after one (what the cap reads), at
// the op the plan emits next: the one it belongs to (see DeviceEvent.Op).
func (b *builder) noteDevice(i int, e *trace.Event) {
	dev := isDevice(e.Action)
	if dev || b.afterDevice {
		if e.Stream != b.lastStream || len(b.streams) == 0 {
			k, ok := b.streams[e.Stream]
			if !ok {
				if b.streams == nil {
					b.streams = map[uint64]uint32{}
				}
				k = uint32(len(b.streams))
				b.streams[e.Stream] = k
			}
			b.lastStream, b.lastStreamIdx = e.Stream, k
		}
		p := b.p
		p.recorded.add(DeviceEvent{Op: int32(p.Len()), Event: int32(i), Action: e.Action, after: !dev,
			stream: b.lastStreamIdx, Addr: e.Addr, Size: e.Size})
	}
	b.afterDevice = dev
}

// inferCap infers the plan's cap from its Recorded, reserved0 being what
// the device held before the first event, frees the garbage collection
// watch's count before each of them (nil: none kept), and sets it.
func (p *Plan) inferCap(s trace.Settings, reserved0 uint64, frees []int32) {
	rec := &p.recorded
	var emptyCache func(int) bool
	if p.entering != nil {
		emptyCache = func(k int) bool { return p.entering[int(rec.get(k).Event)] }
	}
	if c := inferCapFrom(rec, s, reserved0, frees, emptyCache); c != nil {
		c.Event = int(rec.get(c.Event).Event)
		p.Cap = c
	}
}

// keptFrees is what the garbage collection watch of settings s counted
// before each event of p.Recorded, following every event of the trace;
// nil without a watch.
func (p *Plan) keptFrees(s trace.Settings, events []trace.Event) []int32 {
	gc := newGCWatch(s)
	if gc == nil {
		return nil
	}
	frees := make([]int32, 0, p.recorded.len())
	rec := p.recorded.cursor()
	for i := range events {
		if r := rec.peek(); r != nil && int(r.Event) == i {
			frees = append(frees, int32(gc.free))
			rec.next()
		}
		e := &events[i]
		gc.see(e.Action, e.Addr, e.Size)
	}
	return frees
}

// noteSnapshot keeps what the snapshot says beyond the events: its final
// segments, its settings and the cap its events show.
func (p *Plan) noteSnapshot(snap *trace.Snapshot, device int, events []trace.Event) {
	// what the device held at the first event: the end less what the
	// events added (a truncated trace, or expandable pages mapped before)
	var added int64
	for _, e := range events {
		switch e.Action {
		case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
			added += int64(e.Size)
		case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
			added -= int64(e.Size)
		}
	}
	reserved0 := p.noteFinal(snap, device, added)
	p.noteStart(reserved0)
	p.finalAt = len(p.Ops)
	p.inferCap(snap.Settings, reserved0, p.keptFrees(snap.Settings, events))
}

// noteFinal keeps the snapshot's final segments and settings, and returns
// what the device held at the first event, added being the reserved bytes
// the trace's segment events added.
func (p *Plan) noteFinal(snap *trace.Snapshot, device int, added int64) uint64 {
	p.HasFinal = len(snap.Segments) > 0
	p.expandable = snap.Settings.ExpandableSegments
	var final int64
	for _, s := range snap.Segments {
		if s.Device == device {
			p.expandable = p.expandable || s.Expandable
			p.Final = append(p.Final, SegmentRange{s.Address, s.TotalSize})
			final += int64(s.TotalSize)
			for _, b := range s.Blocks {
				p.finalBlocks = append(p.finalBlocks, blockEnd{b.Address, b.Size, b.State == trace.BlockInactive})
			}
		}
	}
	if snap.Settings.Present {
		st := snap.Settings
		p.settings = &st
	}
	return uint64(max(final-added, 0))
}

// comparable says whether the trace records what a replay can be held to:
// segment events or final segments. RMM logs and bare text traces do not.
func (p *Plan) comparable() bool {
	if p == nil {
		return false
	}
	return p.HasFinal || p.recorded.device
}

// call is a device event of either side, in a form both share.
type call struct {
	kind       trace.Action
	addr, size uint64
}

func cmpCall(a, b call) int {
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.addr, b.addr); c != 0 {
		return c
	}
	return cmp.Compare(a.size, b.size)
}

var callAction = map[alloc.DeviceCallKind]trace.Action{
	alloc.DeviceMalloc: trace.ActionSegmentAlloc, alloc.DeviceFree: trace.ActionSegmentFree,
	alloc.DeviceMap: trace.ActionSegmentMap, alloc.DeviceUnmap: trace.ActionSegmentUnmap,
}

// checker compares a replay of a plan's ops with its recording as the
// replay runs, after each batch of ops (see batch), keeping only what it
// has not compared yet: the allocator's device log is drained after each
// batch, and the recording's events are read in order from the plan.
type checker struct {
	p   *Plan
	rec *recCursor
	// the replay's device calls, out-of-memory errors it went past and
	// the one that stopped it (oomOp, -1 when none), not compared yet
	rep      []alloc.DeviceCall
	survived []survivor
	oomOp    int
	oomSize  uint64
	r, l     []call
	// found: the first op whose calls differ, with each side's calls
	found *found
}

// survivor is an out-of-memory the replay went past: its op and the
// rounded request.
type survivor struct {
	op   int
	size uint64
}

// found is where the replay first left its recording.
type found struct {
	op, event int
	r, l      []call
}

// newChecker starts comparing a replay of p on a: it starts a's device
// log.
func newChecker(p *Plan, a *alloc.Allocator) (*checker, error) {
	if err := a.LogDevice(); err != nil {
		return nil, err
	}
	return &checker{p: p, rec: p.recorded.cursor(), oomOp: -1}, nil
}

// batch compares what the replay on a did in a batch of ops that started
// at op base and ended in res; a nil checker compares nothing.
func (c *checker) batch(a *alloc.Allocator, base int, res alloc.Result) {
	if c == nil || c.found != nil {
		return
	}
	c.rep = a.DrainDeviceLog(c.rep)
	for _, s := range res.Survived {
		c.survived = append(c.survived, survivor{s.OpIndex, s.Rounded})
	}
	end := base + res.Done
	if res.OOM != nil {
		// the failing op, whose release steps ran
		c.oomOp, c.oomSize = res.OOM.OpIndex, res.OOM.Rounded
		end = c.oomOp + 1
	}
	c.compare(min(end, c.p.Len()))
}

// compare compares the ops before end.
func (c *checker) compare(end int) {
	skip := func() { // the events kept for the cap alone
		for e := c.rec.peek(); e != nil && e.after; e = c.rec.peek() {
			c.rec.next()
		}
	}
	rep, survived := c.rep, c.survived
	for {
		skip()
		// the next op either side did something in
		op := end
		if e := c.rec.peek(); e != nil {
			op = min(op, int(e.Op))
		}
		if len(rep) > 0 {
			op = min(op, rep[0].Op)
		}
		if c.oomOp >= 0 {
			op = min(op, c.oomOp)
		}
		if len(survived) > 0 {
			op = min(op, survived[0].op)
		}
		if op >= end {
			break
		}
		r, l := c.r[:0], c.l[:0]
		event := -1
		for e := c.rec.peek(); e != nil && int(e.Op) == op; e = c.rec.peek() {
			if event < 0 {
				event = int(e.Event)
			}
			r = append(r, call{e.Action, pageAddr(e.Action, e.Addr), e.Size})
			c.rec.next()
			skip()
		}
		for len(rep) > 0 && rep[0].Op == op {
			k := callAction[rep[0].Kind]
			l = append(l, call{k, pageAddr(k, rep[0].Addr), rep[0].Size})
			rep = rep[1:]
		}
		if op == c.oomOp {
			l = append(l, call{trace.ActionOOM, 0, c.oomSize})
			c.oomOp = -1
		}
		for len(survived) > 0 && survived[0].op == op {
			l = append(l, call{trace.ActionOOM, 0, survived[0].size})
			survived = survived[1:]
		}
		c.r, c.l = r, l
		// within one op the order of releases is not a difference
		slices.SortFunc(r, cmpCall)
		slices.SortFunc(l, cmpCall)
		if !slices.Equal(r, l) {
			c.found = &found{op, event, slices.Clone(r), slices.Clone(l)}
			break
		}
	}
	// what is left belongs to ops not run yet
	c.rep = append(c.rep[:0], rep...)
	c.survived = append(c.survived[:0], survived...)
}

// divergence is the first divergence of the replay, which ended in res
// under cfg (card: the caller gave the card's size), once every batch was
// compared.
func (c *checker) divergence(res *Result, cfg alloc.Config, card bool) *Divergence {
	p := c.p
	var d *Divergence
	switch f := c.found; {
	case f != nil:
		cs, short := cause(f.r, f.l, res)
		d = &Divergence{Op: f.op, Event: f.event, Recorded: describeCalls(f.r), Replayed: describeCalls(f.l),
			Cause: p.settingsCause(res, cfg) + cs, short: short}
	case res.OOMOp >= 0 || !p.HasFinal || p.Len() != p.finalAt:
		return nil // the replay stopped before the end the snapshot shows
	default:
		d = p.divergeFinal(res, cfg)
	}
	if d != nil {
		d.WhatIf = p.settingsCause(res, cfg) != "" || card && d.short
	}
	return d
}

// pageAddr is the address a call is compared at. Expandable segments'
// pages live in address ranges reserved without a hint, which a replay
// cannot get where the recording did: their maps are compared by size.
// An out-of-memory has none.
func pageAddr(k trace.Action, addr uint64) uint64 {
	if k == trace.ActionSegmentMap || k == trace.ActionSegmentUnmap || k == trace.ActionOOM {
		return 0
	}
	return addr
}

// divergeFinal compares the replay's segments with the snapshot's.
func (p *Plan) divergeFinal(res *Result, cfg alloc.Config) *Divergence {
	want := slices.Clone(p.Final)
	got := make([]SegmentRange, len(res.Segments))
	for i, s := range res.Segments {
		got[i] = SegmentRange{s.Address, s.TotalSize}
	}
	if p.expandable { // by size only, as their maps (see pageAddr)
		for i := range want {
			want[i].Address = 0
		}
		for i := range got {
			got[i].Address = 0
		}
	}
	byAddr := func(a, b SegmentRange) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Size, b.Size))
	}
	slices.SortFunc(want, byAddr)
	slices.SortFunc(got, byAddr)
	if slices.Equal(want, got) {
		return p.divergeBlocks(res, cfg)
	}
	d := &Divergence{Op: p.Len(), Event: -1, Recorded: "ended with " + describeSegments(want),
		Replayed: "with " + describeSegments(got)}
	first := func(a, b []SegmentRange) string { // the first segment of a missing from b
		for _, s := range a {
			if _, ok := slices.BinarySearchFunc(b, s, byAddr); !ok {
				return fmt.Sprintf("%s at %#x", units.FormatBytes(int64(s.Size)), s.Address)
			}
		}
		return ""
	}
	var diff []string
	if s := first(want, got); s != "" {
		diff = append(diff, "the snapshot's segment of "+s+" is not in the replay")
	}
	if s := first(got, want); s != "" {
		diff = append(diff, "the replay's segment of "+s+" is not in the snapshot")
	}
	d.Cause = p.settingsCause(res, cfg) + strings.Join(diff, " and ") +
		": every device call agreed, so the trace misses events the snapshot's segments reflect"
	if p.Truncated {
		d.Cause += " (or the state before the trace's first event was not fully rebuilt)"
	}
	return d
}

// divergeBlocks compares the blocks of the replay's final segments with
// the snapshot's, once the segments agree: a block placed elsewhere than
// the program's (another pool, another split) changes the statistics
// without a device call of its own, and would otherwise pass unseen.
// Expandable segments and a truncated trace's rebuilt start are not
// compared (their blocks are not placed where the recording's were).
func (p *Plan) divergeBlocks(res *Result, cfg alloc.Config) *Divergence {
	if p.expandable || p.Truncated || len(p.finalBlocks) == 0 {
		return nil
	}
	var got []blockEnd
	for _, s := range res.Segments {
		for _, b := range s.Blocks {
			got = append(got, blockEnd{b.Address, b.Size, b.State == alloc.BlockInactive})
		}
	}
	want := slices.Clone(p.finalBlocks)
	byAddr := func(a, b blockEnd) int { return cmp.Compare(a.Address, b.Address) }
	slices.SortFunc(want, byAddr)
	slices.SortFunc(got, byAddr)
	if slices.Equal(want, got) {
		return nil
	}
	where := func(bs []blockEnd, i int) string {
		if i >= len(bs) {
			return "nothing"
		}
		state := "in use"
		if bs[i].Free {
			state = "free"
		}
		return fmt.Sprintf("a block of %s at %#x, %s", units.FormatBytes(int64(bs[i].Size)), bs[i].Address, state)
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	return &Divergence{Op: p.Len(), Event: -1, Recorded: "ended with " + where(want, i),
		Replayed: "with " + where(got, i),
		Cause: p.settingsCause(res, cfg) + "every device call agreed, but an allocation was placed elsewhere than the program's " +
			"(another pool or another split): figures that count blocks may differ from PyTorch's"}
}

// settingsCause names the settings that differ from the recording's, as
// the first part of a cause; "" when they agree or are not known.
func (p *Plan) settingsCause(res *Result, cfg alloc.Config) string {
	diff := p.configDiff(cfg)
	if !p.capAgrees(res.Allowed) {
		diff = append(diff, "the memory cap")
	}
	if len(diff) == 0 {
		return ""
	}
	return "recorded under other settings (" + strings.Join(diff, ", ") + " differ), so expected; "
}

// followsSettings says whether a replay under cfg and a cap of allowed
// bytes (0: none) runs under the recording's settings and cap, known.
func (p *Plan) followsSettings(cfg alloc.Config, allowed uint64) bool {
	return p != nil && p.settings != nil && len(p.configDiff(cfg)) == 0 && p.capAgrees(allowed)
}

// capAgrees: a cap of allowed bytes (0: none) is one the recording shows.
func (p *Plan) capAgrees(allowed uint64) bool {
	c := p.Cap
	return c.Capped() == (allowed != 0) && (!c.Capped() || allowed >= c.Low && allowed <= c.High)
}

// configDiff names the settings of cfg that differ from the recording's;
// none when they agree or the recording's are not known.
func (p *Plan) configDiff(cfg alloc.Config) []string {
	var diff []string
	if cfg.Policy != "" && cfg.Policy != alloc.PolicyPyTorch {
		diff = append(diff, "policy "+string(cfg.Policy))
	}
	if s := p.settings; s != nil {
		if cfg.ExpandableSegments != s.ExpandableSegments {
			diff = append(diff, "expandable_segments")
		}
		if want := uint64(max(s.MaxSplitSize, 0)); cfg.MaxSplitSize != want {
			diff = append(diff, "max_split_size_mb")
		}
		if cfg.GCThreshold != s.GCThreshold {
			diff = append(diff, "garbage_collection_threshold")
		}
		for i, d := range s.RoundupPower2Divisions {
			if cfg.RoundupPower2Divisions[i] != uint32(max(d, 0)) {
				diff = append(diff, "roundup_power2_divisions")
				break
			}
		}
	}
	return diff
}

// cause guesses why one op's device calls differ; short: the replay ran
// short of memory where the recording did not (released its cache or ran
// out).
func cause(r, l []call, res *Result) (why string, short bool) {
	count := func(cs []call, kinds ...trace.Action) int {
		n := 0
		for _, c := range cs {
			if slices.Contains(kinds, c.kind) {
				n++
			}
		}
		return n
	}
	releases := []trace.Action{trace.ActionSegmentFree, trace.ActionSegmentUnmap}
	gets := []trace.Action{trace.ActionSegmentAlloc, trace.ActionSegmentMap}
	rRel, lRel := count(r, releases...), count(l, releases...)
	rOOM, lOOM := count(r, trace.ActionOOM), count(l, trace.ActionOOM)
	switch {
	case rOOM > lOOM:
		return "the recording ran out of memory here and the replay did not: the program probably ran under a memory cap " +
			"(set_per_process_memory_fraction) or on a fuller card", false
	case lOOM > rOOM:
		return "the replay ran out of memory here and the recording did not: its card or cap is smaller than the recording's", true
	case rRel > 0 && lRel == 0:
		if res.Allowed > 0 {
			return "the recording released cached segments here and the replay did not: the program probably ran under a lower cap than the replay's, or called empty_cache", false
		}
		return "the recording released cached segments here and the replay did not: the program probably ran under a memory cap " +
			"(set_per_process_memory_fraction) or called empty_cache", false
	case lRel > 0 && rRel == 0:
		return "the replay released cached segments here and the recording did not: it runs under a tighter cap or a smaller card than the recording", true
	}
	only := func(cs []call, kinds []trace.Action) []call {
		var out []call
		for _, c := range cs {
			if slices.Contains(kinds, c.kind) {
				out = append(out, c)
			}
		}
		return out
	}
	if !slices.Equal(only(r, releases), only(l, releases)) {
		return "both released cached segments here, but not the same ones: the caps differ " +
			"(garbage collection releases down to its threshold × the cap), or the caches did", false
	}
	rGet, lGet := only(r, gets), only(l, gets)
	switch {
	case len(rGet) > 0 && len(rGet) == len(lGet):
		sizes := func(cs []call) []uint64 {
			out := make([]uint64, len(cs))
			for i, c := range cs {
				out[i] = c.size
			}
			slices.Sort(out)
			return out
		}
		if slices.Equal(sizes(rGet), sizes(lGet)) {
			return "the replay's addresses left the recording (an address the recording got was taken or not offered): " +
				"best fit now breaks ties between equal blocks differently", false
		}
		return "the segments differ in size: recorded under other rounding or segment-size settings", false
	case len(rGet) > len(lGet):
		return "the recording asked the device for memory where the replay found a cached block: the caches differ " +
			"(other settings, or an earlier free that completed at another point)", false
	case len(lGet) > len(rGet):
		return "the replay asked the device for memory where the recording found a cached block: the caches differ " +
			"(other settings, or an earlier free that completed at another point)", false
	}
	return "the device calls differ: the caches differ", false
}

// describeCalls says what one side did in an op, e.g. "released 53 cached
// segments (1.31 GiB), then allocated a 1.54 GiB segment at 0x7f…".
func describeCalls(cs []call) string {
	if len(cs) == 0 {
		return "did nothing on the device"
	}
	var parts []string
	for _, k := range []trace.Action{trace.ActionSegmentFree, trace.ActionSegmentUnmap} {
		n, bytes := 0, uint64(0)
		for _, c := range cs {
			if c.kind == k {
				n++
				bytes += c.size
			}
		}
		verb := "released"
		if k == trace.ActionSegmentUnmap {
			verb = "unmapped"
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d cached segment%s (%s)", verb, n, plural(n, "", "s"), units.FormatBytes(int64(bytes))))
		}
	}
	for _, c := range cs {
		switch c.kind {
		case trace.ActionSegmentAlloc:
			parts = append(parts, fmt.Sprintf("allocated a %s segment at %#x", units.FormatBytes(int64(c.size)), c.addr))
		case trace.ActionSegmentMap:
			parts = append(parts, fmt.Sprintf("mapped %s at %#x", units.FormatBytes(int64(c.size)), c.addr))
		case trace.ActionOOM:
			parts = append(parts, fmt.Sprintf("ran out of memory (a request of %s)", units.FormatBytes(int64(c.size))))
		}
	}
	return strings.Join(parts, ", then ")
}

func describeSegments(s []SegmentRange) string {
	var total uint64
	for _, x := range s {
		total += x.Size
	}
	return fmt.Sprintf("%d segment%s (%s)", len(s), plural(len(s), "", "s"), units.FormatBytes(int64(total)))
}
