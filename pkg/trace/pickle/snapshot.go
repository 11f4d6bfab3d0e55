package pickle

import (
	"github.com/gpumem/gpumem/pkg/trace/internal/limits"
	"github.com/gpumem/gpumem/pkg/trace/model"

	"fmt"
	"math/bits"
	"strconv"
)

// Strings the decoder interns first, so their ids are these constants.
// model.Action names come first, in model.Action order.
const (
	sAlloc = iota
	sFreeRequested
	sFreeCompleted
	sSegmentAlloc
	sSegmentFree
	sSegmentMap
	sSegmentUnmap
	sOOM
	sSnapshot
	sAction
	sAddr
	sDeviceFree
	sSize
	sStream
	sTimeUS
	sFrames
	sFilename
	sLine
	sName
	sAddress
	sRequestedSize
	sState
	sDevice
	sTotalSize
	sAllocatedSize
	sActiveSize
	sSegmentType
	sSegmentPoolID
	sIsExpandable
	sBlocks
	sSegments
	sDeviceTraces
	sAllocatorSettings
	sExternalAnnotations
	sAllocConf
	sMaxSplitSize
	sGCThreshold
	sExpandableSegments
	sRoundup
	sActiveAllocated
	sActivePendingFree
	sActiveAwaitingFree
	sInactive
	sSmall
	numKnown
)

var wellKnown = [numKnown]string{
	"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
	"segment_map", "segment_unmap", "oom", "snapshot",
	"action", "addr", "device_free", "size", "stream", "time_us", "frames",
	"filename", "line", "name", "address", "requested_size", "state", "device",
	"total_size", "allocated_size", "active_size", "segment_type",
	"segment_pool_id", "is_expandable", "blocks", "segments", "device_traces",
	"allocator_settings", "external_annotations", "PYTORCH_CUDA_ALLOC_CONF",
	"max_split_size", "garbage_collection_threshold", "expandable_segments",
	"roundup_power2_divisions", "active_allocated", "active_pending_free",
	"active_awaiting_free", "inactive", "small",
}

// wellKnownID maps each wellKnown string to its id; decoders start
// from a copy.
var wellKnownID = func() map[string]uint32 {
	m := make(map[string]uint32, len(wellKnown))
	for i, s := range wellKnown {
		m[s] = uint32(i)
	}
	return m
}()

// field reads values of one dict for messages that name the dict, key
// and offset.
type field struct {
	d    *decoder
	what string // "event", "segment", ...
	off  int64
	key  uint32
}

func (f field) errorf(format string, args ...any) error {
	return &FormatError{Offset: f.off, Msg: fmt.Sprintf("%s %s ", f.what, limits.Quote(f.d.strs[f.key])) + fmt.Sprintf(format, args...)}
}

func (f field) uint(v val) (uint64, error) {
	switch {
	case v.k == kInt && int64(v.n) >= 0, v.k == kUint:
		return v.n, nil
	case v.k == kInt:
		return 0, f.errorf("is negative (%d)", int64(v.n))
	}
	return 0, f.errorf("is a %s, want an int", v.k)
}

// bits accepts any 64-bit integer; stream handles are opaque.
func (f field) bits(v val) (uint64, error) {
	if v.k == kInt || v.k == kUint {
		return v.n, nil
	}
	return 0, f.errorf("is a %s, want an int", v.k)
}

func (f field) int(v val) (int64, error) {
	if v.k == kInt {
		return int64(v.n), nil
	}
	return 0, f.errorf("is a %s, want an int", v.k)
}

func (f field) str(v val) (string, error) {
	if v.k == kStr {
		return f.d.strs[v.n], nil
	}
	return "", f.errorf("is a %s, want a str", v.k)
}

func (f field) bool(v val) (bool, error) {
	if v.k == kBool || v.k == kInt {
		return v.n != 0, nil
	}
	return false, f.errorf("is a %s, want a bool", v.k)
}

func (f field) stack(v val) (int32, error) {
	switch v.k {
	case kEmpty, kNone:
		return -1, nil
	case kStack:
		return int32(v.n), nil
	}
	return 0, f.errorf("is a %s, want a list of frame dicts", v.k)
}

func missing(what string, off int64, key int) error {
	return &FormatError{Offset: off, Msg: fmt.Sprintf("%s dict has no %q key", what, wellKnown[key])}
}

// eventFields gathers an event dict's fields one pair at a time: toEvent
// over a dict's pairs, fastEvent as it reads them.
type eventFields struct {
	ev                           model.Event
	haveAddr, haveFree, haveSize bool
	devFree                      uint64
}

// set takes the value v of the well-known key k (k < numKnown); false
// when v is not what the key wants (fieldError says why). Later pairs
// override earlier ones, as in the dict.
func (f *eventFields) set(k uint64, v val) bool {
	isUint := v.k == kUint || v.k == kInt && int64(v.n) >= 0
	switch k {
	case sAction:
		if v.k != kStr || v.n > sSnapshot {
			return false
		}
		f.ev.Action = model.Action(v.n + 1)
		return true
	case sAddr:
		f.ev.Addr, f.haveAddr = v.n, true
	case sDeviceFree:
		f.devFree, f.haveFree = v.n, true
	case sSize:
		f.ev.Size, f.haveSize = v.n, true
	case sStream:
		f.ev.Stream = v.n
		isUint = v.k == kInt || v.k == kUint // any 64 bits: stream handles are opaque
	case sTimeUS:
		f.ev.TimeUS = int64(v.n)
		isUint = v.k == kInt
	case sFrames:
		switch v.k {
		case kEmpty, kNone:
		case kStack:
			f.ev.Stack = int32(v.n)
		default:
			return false
		}
		return true
	default:
		return true
	}
	return isUint
}

// fieldError is the error of a value set refused for key k.
func (d *decoder) fieldError(k uint64, v val, off int64) error {
	f := field{d, "event", off, uint32(k)}
	switch k {
	case sAction:
		return d.badAction(v, off)
	case sFrames:
		return f.errorf("is a %s, want a list of frame dicts", v.k)
	case sTimeUS:
		_, err := f.int(v)
		return err
	}
	_, err := f.uint(v)
	return err
}

// done checks the fields gathered and returns the event.
func (f *eventFields) done(off int64) (*model.Event, error) {
	ev := &f.ev
	if ev.Action == model.ActionOOM && f.haveFree {
		ev.Addr, f.haveAddr = f.devFree, true
	}
	switch {
	case !f.haveAddr && ev.Action == model.ActionOOM:
		return ev, missing("oom event", off, sDeviceFree)
	case !f.haveAddr:
		return ev, missing(ev.Action.String()+" event", off, sAddr)
	case !f.haveSize:
		return ev, missing(ev.Action.String()+" event", off, sSize)
	}
	if ev.Action != model.ActionOOM && ev.Action != model.ActionSnapshot {
		if ev.Addr%model.MinBlock != 0 || model.IsSegmentAction(ev.Action) {
			if msg := eventProblem(ev); msg != "" {
				return ev, &FormatError{Offset: off, Msg: msg}
			}
		}
	}
	return ev, nil
}

// toEvent converts the key/value pairs of a device_traces entry.
func (d *decoder) toEvent(p []val, off int64) (model.Event, error) {
	f := eventFields{ev: model.Event{Stack: -1}}
	for i := 0; i+1 < len(p); i += 2 {
		k, v := p[i], p[i+1]
		if k.k != kStr || k.n >= numKnown {
			continue
		}
		if !f.set(k.n, v) {
			return f.ev, d.fieldError(k.n, v, off)
		}
	}
	ev, err := f.done(off)
	return *ev, err
}

// eventProblem reports an address or size a replay cannot use. PyTorch's
// blocks and segments are aligned to model.MinBlock.
func eventProblem(e *model.Event) string {
	if model.IsSegmentAction(e.Action) {
		return model.CheckSegmentEvent(e)
	}
	if e.Addr%model.MinBlock != 0 {
		return fmt.Sprintf("%s address %#x is not a multiple of %d", e.Action, e.Addr, model.MinBlock)
	}
	return ""
}

func (d *decoder) badAction(v val, off int64) error {
	if v.k != kStr {
		return field{d, "event", off, sAction}.errorf("is a %s, want a str", v.k)
	}
	return &FormatError{Offset: off, Msg: fmt.Sprintf("unknown event action %s", limits.Quote(d.strs[v.n]))}
}

// toFrame converts a frame dict and returns its interned id.
func (d *decoder) toFrame(p []val, off int64) (int32, error) {
	var fr model.Frame
	var file, name uint32
	f := field{d: d, what: "frame", off: off}
	var have uint64
	for i := 0; i+1 < len(p); i += 2 {
		k, v := p[i], p[i+1]
		if k.k != kStr || k.n >= numKnown {
			continue
		}
		f.key = uint32(k.n)
		have |= 1 << k.n
		switch k.n {
		case sFilename, sName:
			if v.k != kStr {
				return 0, f.errorf("is a %s, want a str", v.k)
			}
			id := d.frameString(uint32(v.n))
			if k.n == sFilename {
				fr.Filename, file = d.strs[id], id
			} else {
				fr.Name, name = d.strs[id], id
			}
		case sLine:
			n, err := f.int(v)
			if err != nil {
				return 0, err
			}
			fr.Line = int(n)
		}
	}
	if want := uint64(1<<sFilename | 1<<sLine | 1<<sName); have&want != want {
		return 0, requiredKeys("frame", off, have, sFilename, sLine, sName)
	}
	return d.internFrame(fr, file, name), nil
}

// eachField calls set for each well-known key of dict p (what, at off),
// with f naming that key for errors, then checks that the required keys
// were there. Unknown keys are skipped: newer PyTorch versions add some.
//
// set must not call eachField: both would use d.fld.
func (d *decoder) eachField(p []val, what string, off int64, required []int, set func(f *field, key int, v val) error) error {
	f := &d.fld
	*f = field{d: d, what: what, off: off}
	var have uint64
	for i := 0; i < len(p); i += 2 {
		k, v := p[i], p[i+1]
		if k.k != kStr || k.n >= numKnown {
			continue
		}
		f.key = uint32(k.n)
		have |= 1 << k.n
		if err := set(f, int(k.n), v); err != nil {
			return err
		}
	}
	for _, key := range required {
		if have&(1<<key) == 0 {
			return missing(what, off, key)
		}
	}
	return nil
}

// A block or segment dict is read by a loop over its pairs with one
// switch: these dicts take the general path (thousands of them in a real
// snapshot's segments part), where eachField's call of a closure per
// pair, and the struct the closure's capture moves to the heap, cost more
// than the reading.

// requiredKeys reports the first of the keys dict what (at off)
// requires that have lacks, as eachField does; nil if none.
func requiredKeys(what string, off int64, have uint64, required ...int) error {
	for _, key := range required {
		if have&(1<<key) == 0 {
			return missing(what, off, key)
		}
	}
	return nil
}

// toBlock converts a block dict of a segment.
func (d *decoder) toBlock(p []val, off int64) (model.Block, error) {
	b := model.Block{Stack: -1}
	f := field{d: d, what: "block", off: off}
	var have uint64
	for i := 0; i+1 < len(p); i += 2 {
		k, v := p[i], p[i+1]
		if k.k != kStr || k.n >= numKnown {
			continue
		}
		f.key = uint32(k.n)
		have |= 1 << k.n
		var err error
		switch k.n {
		case sAddress:
			b.Address, err = f.uint(v)
		case sSize:
			b.Size, err = f.uint(v)
		case sRequestedSize:
			b.RequestedSize, err = f.uint(v)
		case sFrames:
			b.Stack, err = f.stack(v)
		case sState:
			err = blockState(f, v, &b.State)
		}
		if err != nil {
			return b, err
		}
	}
	if want := uint64(1<<sAddress | 1<<sSize); have&want != want {
		return b, requiredKeys("block", off, have, sAddress, sSize)
	}
	return b, nil
}

// blockState reads a block's state.
func blockState(f field, v val, st *model.BlockState) error {
	s, err := f.str(v)
	if err != nil {
		return err
	}
	switch v.n {
	case sInactive:
		*st = model.BlockInactive
	case sActiveAllocated:
		*st = model.BlockAllocated
	case sActivePendingFree, sActiveAwaitingFree:
		*st = model.BlockPendingFree
	default:
		return f.errorf("has unknown value %s", limits.Quote(s))
	}
	return nil
}

// toSegment converts a segment dict, blocks included.
func (d *decoder) toSegment(p []val, off int64) (model.Segment, error) {
	s := model.Segment{Stack: -1}
	f := field{d: d, what: "segment", off: off}
	var have uint64
	for i := 0; i+1 < len(p); i += 2 {
		k, v := p[i], p[i+1]
		if k.k != kStr || k.n >= numKnown {
			continue
		}
		f.key = uint32(k.n)
		have |= 1 << k.n
		var err error
		switch k.n {
		case sDevice:
			var n int64
			n, err = f.int(v)
			s.Device = int(n)
		case sAddress:
			s.Address, err = f.uint(v)
		case sTotalSize:
			s.TotalSize, err = f.uint(v)
		case sAllocatedSize:
			s.AllocatedSize, err = f.uint(v)
		case sActiveSize:
			s.ActiveSize, err = f.uint(v)
		case sRequestedSize:
			s.RequestedSize, err = f.uint(v)
		case sStream:
			s.Stream, err = f.bits(v)
		case sSegmentType:
			var t string
			t, err = f.str(v)
			s.Small = t == "small"
		case sSegmentPoolID:
			s.PoolID, err = d.poolID(f, v)
		case sIsExpandable:
			s.Expandable, err = f.bool(v)
		case sFrames:
			s.Stack, err = f.stack(v)
		case sBlocks:
			s.Blocks, err = d.blockList(f, v)
		}
		if err != nil {
			return s, err
		}
	}
	if want := uint64(1<<sAddress | 1<<sTotalSize | 1<<sBlocks); have&want != want {
		return s, requiredKeys("segment", off, have, sAddress, sTotalSize, sBlocks)
	}
	if msg := model.CheckSegment(&s); msg != "" {
		return s, &FormatError{Offset: off, Msg: msg}
	}
	return s, nil
}

func (d *decoder) poolID(f field, v val) ([2]int64, error) {
	var id [2]int64
	if v.k != kTuple || v.n&0xffffffff != 2 {
		return id, f.errorf("is a %s, want a tuple of 2 ints", v.k)
	}
	start := v.n >> 32
	for i := range id {
		n, err := f.int(d.tuples[start+uint64(i)])
		if err != nil {
			return id, err
		}
		id[i] = n
	}
	return id, nil
}

func (d *decoder) blockList(f field, v val) ([]model.Block, error) {
	switch v.k {
	case kEmpty:
		return nil, nil
	case kList:
		items := d.conts[v.n].items
		// A block dict fetched from the memo is copied each time.
		d.mem += int64(len(items)) * blockCost
		if err := d.checkMem(); err != nil {
			return nil, err
		}
		out := make([]model.Block, len(items))
		for i, it := range items {
			if it.k != kBlock {
				return nil, f.errorf("holds a %s, want block dicts", it.k)
			}
			out[i] = d.blocks[it.n]
		}
		return out, nil
	}
	return nil, f.errorf("is a %s, want a list of block dicts", v.k)
}

// items returns the elements of a list value, or an error naming key.
func (d *decoder) items(v val, key int) ([]val, error) {
	switch v.k {
	case kEmpty:
		return nil, nil
	case kList:
		return d.conts[v.n].items, nil
	}
	return nil, &FormatError{Offset: -1, Msg: fmt.Sprintf("%q is a %s, want a list", wellKnown[key], v.k)}
}

// offOf is the offset where a container value started, or -1.
func (d *decoder) offOf(v val) int64 {
	if v.k == kDict || v.k == kList {
		return d.conts[v.n].off
	}
	return -1
}

// snapshot maps the top-level value to a model.Snapshot.
func (d *decoder) snapshot(top val) (*model.Snapshot, error) {
	s := &model.Snapshot{Settings: model.Settings{MaxSplitSize: -1}}
	var err error
	switch top.k {
	case kList, kEmpty:
		// A bare list of segments, as torch.cuda.memory_snapshot() gives.
		s.Segments, err = d.segments(top)
	case kDict:
		var haveSegments bool
		p := d.conts[top.n].items
		for i := 0; i < len(p); i += 2 {
			k, v := p[i], p[i+1]
			if k.k != kStr {
				continue
			}
			switch k.n {
			case sSegments:
				s.Segments, err = d.segments(v)
				haveSegments = true
			case sDeviceTraces:
				s.Traces, err = d.traceLists(v)
			case sAllocatorSettings:
				s.Settings, err = d.settings(v)
			case sExternalAnnotations:
				s.Annotations, err = d.annotations(v)
			}
			if err != nil {
				return nil, err
			}
		}
		if !haveSegments {
			return nil, &FormatError{Offset: d.offOf(top), Msg: `snapshot dict has no "segments" key`}
		}
	default:
		return nil, &FormatError{Offset: -1, Msg: fmt.Sprintf("top-level value is a %s, want a snapshot dict or a list of segments", top.k)}
	}
	if err != nil {
		return nil, err
	}
	s.Stacks = d.stacks
	return s, nil
}

func (d *decoder) segments(v val) ([]model.Segment, error) {
	items, err := d.items(v, sSegments)
	if err != nil {
		return nil, err
	}
	d.mem += int64(len(items)) * segCost
	if err := d.checkMem(); err != nil {
		return nil, err
	}
	out := make([]model.Segment, len(items))
	for i, it := range items {
		if it.k != kSegment {
			return nil, &FormatError{Offset: d.offOf(v), Msg: fmt.Sprintf("segments[%d] is a %s, want a segment dict", i, it.k)}
		}
		out[i] = d.segs[it.n]
	}
	if i, msg := model.CheckOverlap(out); i >= 0 {
		return nil, &FormatError{Offset: d.segOff[items[i].n], Msg: msg}
	}
	return out, nil
}

func (d *decoder) traceLists(v val) ([][]model.Event, error) {
	items, err := d.items(v, sDeviceTraces)
	if err != nil {
		return nil, err
	}
	out := make([][]model.Event, len(items))
	if d.sink.Event != nil {
		d.lists = make([]int, len(items))
	}
	for i, it := range items {
		switch {
		case it.k == kEvents && d.sink.Event != nil:
			d.lists[i] = int(it.n)
		case it.k == kEvents:
			out[i] = d.traces[it.n]
		case it.k == kEmpty && d.sink.Event != nil:
			d.lists[i] = -1
		case it.k == kEmpty:
			out[i] = []model.Event{}
		default:
			return nil, &FormatError{Offset: d.offOf(v), Msg: fmt.Sprintf("device_traces[%d] is a %s, want a list of event dicts", i, it.k)}
		}
	}
	return out, nil
}

func (d *decoder) settings(v val) (model.Settings, error) {
	st := model.Settings{Present: true, MaxSplitSize: -1}
	if v.k != kDict {
		return st, &FormatError{Offset: -1, Msg: fmt.Sprintf("allocator_settings is a %s, want a dict", v.k)}
	}
	err := d.eachField(d.conts[v.n].items, "allocator_settings", d.offOf(v), nil, func(f *field, key int, v val) (err error) {
		switch key {
		case sAllocConf:
			st.AllocConf, err = f.str(v)
		case sMaxSplitSize:
			st.MaxSplitSize, err = f.int(v)
		case sGCThreshold:
			switch v.k {
			case kFloat:
				st.GCThreshold = floatOf(v)
			case kInt:
				st.GCThreshold = float64(int64(v.n))
			default:
				err = f.errorf("is a %s, want a float", v.k)
			}
		case sExpandableSegments:
			st.ExpandableSegments, err = f.bool(v)
		case sRoundup:
			err = d.roundup(*f, v, &st.RoundupPower2Divisions)
		}
		return err
	})
	return st, err
}

// roundup reads roundup_power2_divisions: a dict from interval start in
// MiB ("1", "2", ..., "32768") to divisions.
func (d *decoder) roundup(f field, v val, out *[16]int) error {
	if v.k == kEmpty {
		return nil
	}
	if v.k != kDict {
		return f.errorf("is a %s, want a dict", v.k)
	}
	p := d.conts[v.n].items
	for i := 0; i < len(p); i += 2 {
		ks, err := f.str(p[i])
		if err != nil {
			return err
		}
		mib, perr := strconv.ParseUint(ks, 10, 64)
		if perr != nil || mib == 0 || mib&(mib-1) != 0 || mib > 32768 {
			return f.errorf("has key %s, want a power of two from 1 to 32768", limits.Quote(ks))
		}
		n, err := f.int(p[i+1])
		if err != nil {
			return err
		}
		out[bits.TrailingZeros64(mib)] = int(n)
	}
	return nil
}

func (d *decoder) annotations(v val) ([]model.Annotation, error) {
	items, err := d.items(v, sExternalAnnotations)
	if err != nil {
		return nil, err
	}
	out := make([]model.Annotation, 0, len(items))
	for i, it := range items {
		if it.k != kDict {
			return nil, &FormatError{Offset: d.offOf(v), Msg: fmt.Sprintf("external_annotations[%d] is a %s, want a dict", i, it.k)}
		}
		a := model.Annotation{Fields: make(map[string]string)}
		f := field{d: d, what: "annotation", off: d.offOf(it)}
		p := d.conts[it.n].items
		for j := 0; j < len(p); j += 2 {
			k, v := p[j], p[j+1]
			if k.k != kStr {
				continue
			}
			f.key = uint32(k.n)
			switch {
			case k.n == sDevice:
				n, err := f.int(v)
				if err != nil {
					return nil, err
				}
				a.Device = int(n)
			case k.n == sTimeUS:
				if a.TimeUS, err = f.int(v); err != nil {
					return nil, err
				}
			default:
				if s, ok := d.scalarString(v); ok {
					a.Fields[d.strs[k.n]] = s
				}
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// scalarString formats a str, int, float, bool or None value.
func (d *decoder) scalarString(v val) (string, bool) {
	switch v.k {
	case kStr:
		return d.strs[v.n], true
	case kInt:
		return strconv.FormatInt(int64(v.n), 10), true
	case kUint:
		return strconv.FormatUint(v.n, 10), true
	case kFloat:
		return strconv.FormatFloat(floatOf(v), 'g', -1, 64), true
	case kBool:
		return strconv.FormatBool(v.n != 0), true
	case kNone:
		return "None", true
	}
	return "", false
}
