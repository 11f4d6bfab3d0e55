package trace

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/pkg/trace/internal/limits"
	"github.com/gpumem/gpumem/pkg/trace/model"
)

// textMagic starts the header line of every version of the text format.
const textMagic = "# gpumem-trace"

// TextHeader is the first line of a text trace this package writes.
const TextHeader = textMagic + " v1"

// maxTextDevice bounds device numbers, so a "device" line cannot make the
// reader allocate a huge trace list.
const maxTextDevice = 1023

// maxFields bounds the fields of one line.
const maxFields = 24

// textParser holds the state of ReadText.
type textParser struct {
	in     *lines
	snap   *Snapshot
	device int
	seg    *Segment // segment the next "block" line belongs to
	fields [][]byte

	mem       memBudget
	segLines  []int // line of each segment
	unaligned int   // line of the first block event off model.MinBlock, 0 if none
	segEvents bool  // the trace has segment events
}

// Costs of what a text trace builds, for memBudget.
const (
	eventCost = 40
	segCost   = 128
	blockCost = 40
)

func (p *textParser) tooBig() error {
	return p.in.errorf("the trace needs %s", limits.TooMuch(p.mem.size, p.in.read, "many short lines?"))
}

// ReadText reads a gpumem text trace (docs/trace-format.md). name is used
// in error messages. Malformed input gives a *LineError naming the line.
//
// A text trace holds events, allocator settings and, optionally, the
// segments present when it ended; it holds no stack traces or
// annotations, so events and blocks read from it have Stack -1.
func ReadText(r io.Reader, name string, size int64) (*Snapshot, error) {
	p := &textParser{
		in:     newLines(r, name),
		snap:   &Snapshot{Settings: Settings{MaxSplitSize: -1}},
		fields: make([][]byte, 0, maxFields),
		mem:    memBudget{size: size},
	}
	line, err := p.in.next()
	if err == io.EOF {
		return nil, &LineError{File: name, Msg: "empty file, want a " + TextHeader + " header"}
	}
	if err != nil {
		return nil, err
	}
	line = bytes.TrimPrefix(line, []byte(utf8BOM))
	if !bytes.HasPrefix(line, []byte(textMagic)) {
		return nil, p.in.errorf("missing header, want %q", TextHeader)
	}
	if v := string(bytes.TrimSpace(line[len(textMagic):])); v != "v1" {
		return nil, p.in.errorf("unsupported version %s, want v1", limits.Quote(v))
	}
	for {
		line, err := p.in.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := p.line(line); err != nil {
			return nil, err
		}
	}
	p.finishSegment()
	if i, msg := model.CheckOverlap(p.snap.Segments); i >= 0 {
		return nil, &LineError{File: name, Line: p.segLines[i], Msg: msg}
	}
	if p.unaligned > 0 && (len(p.snap.Segments) > 0 || p.segEvents) {
		// Replaying a trace with segments places blocks at offsets in
		// them, which must be multiples of model.MinBlock.
		return nil, &LineError{File: name, Line: p.unaligned,
			Msg: fmt.Sprintf("block address is not a multiple of %d, which a trace with segments requires", model.MinBlock)}
	}
	return p.snap, nil
}

// split breaks a line into fields separated by blanks; a field starting
// with '#' starts a comment.
func (p *textParser) split(line []byte) error {
	p.fields = p.fields[:0]
	for {
		i := 0
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		line = line[i:]
		if len(line) == 0 || line[0] == '#' {
			return nil
		}
		i = 0
		for i < len(line) && line[i] != ' ' && line[i] != '\t' {
			i++
		}
		if len(p.fields) == maxFields {
			return p.in.errorf("more than %d fields", maxFields)
		}
		p.fields = append(p.fields, line[:i])
		line = line[i:]
	}
}

// args returns the positional arguments after the keyword (at least want,
// at most most) and the key=value attributes after those. usage is the
// rest of the line's syntax, after the keyword.
func (p *textParser) args(want, most int, usage string) (pos, attrs [][]byte, err error) {
	f := p.fields[1:]
	n := 0
	for n < len(f) && n < most && bytes.IndexByte(f[n], '=') < 0 {
		n++
	}
	if n < want || n < len(f) && bytes.IndexByte(f[n], '=') < 0 {
		return nil, nil, p.in.errorf("want %q", string(p.fields[0])+usage)
	}
	return f[:n], f[n:], nil
}

func (p *textParser) line(line []byte) error {
	if err := p.split(line); err != nil {
		return err
	}
	if len(p.fields) == 0 {
		return nil
	}
	if a, ok := textActions[string(p.fields[0])]; ok {
		return p.event(a)
	}
	switch string(p.fields[0]) {
	case "device":
		pos, _, err := p.args(1, 1, " N")
		if err != nil {
			return err
		}
		d, ok := parseUint(pos[0])
		if !ok || d > maxTextDevice {
			return p.in.errorf("bad device %s (want 0 to %d)", limits.Quote(pos[0]), maxTextDevice)
		}
		p.device = int(d)
		p.finishSegment()
		p.trace()
		return nil
	case "setting":
		return p.setting()
	case "segment":
		return p.segment()
	case "block":
		return p.block()
	}
	return p.in.errorf("unknown keyword %s", limits.Quote(p.fields[0]))
}

// trace returns the current device's event list, creating it.
func (p *textParser) trace() *[]Event {
	for len(p.snap.Traces) <= p.device {
		p.snap.Traces = append(p.snap.Traces, nil)
	}
	return &p.snap.Traces[p.device]
}

// textActions maps event keywords to actions; "free" is both halves.
var textActions = map[string]Action{
	"alloc":          ActionAlloc,
	"free":           ActionFreeRequested,
	"free_requested": ActionFreeRequested,
	"free_completed": ActionFreeCompleted,
	"segment_alloc":  ActionSegmentAlloc,
	"segment_free":   ActionSegmentFree,
	"segment_map":    ActionSegmentMap,
	"segment_unmap":  ActionSegmentUnmap,
	"oom":            ActionOOM,
	"snapshot":       ActionSnapshot,
	"empty_cache":    ActionEmptyCache,
}

func (p *textParser) event(a Action) error {
	kw := p.fields[0]
	var pos, attrs [][]byte
	var err error
	e := Event{Action: a, Stack: -1}
	switch a {
	case ActionAlloc, ActionSegmentAlloc, ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap:
		pos, attrs, err = p.args(2, 2, " ADDR SIZE")
	case ActionFreeRequested, ActionFreeCompleted:
		pos, attrs, err = p.args(1, 2, " ADDR [SIZE]")
	case ActionOOM:
		pos, attrs, err = p.args(1, 1, " SIZE")
	default:
		pos, attrs, err = p.args(0, 0, "")
	}
	if err != nil {
		return err
	}
	if a == ActionOOM {
		if e.Size, err = p.uint(pos[0], "size"); err != nil {
			return err
		}
	} else if len(pos) > 0 {
		if e.Addr, err = p.uint(pos[0], "address"); err != nil {
			return err
		}
		if len(pos) > 1 {
			if e.Size, err = p.uint(pos[1], "size"); err != nil {
				return err
			}
		}
	}
	for _, at := range attrs {
		k, v, _ := bytes.Cut(at, []byte("="))
		switch {
		case string(k) == "stream":
			e.Stream, err = p.uint(v, "stream")
		case string(k) == "t":
			t, ok := parseInt(v)
			if !ok {
				return p.in.errorf("bad time %s", limits.Quote(v))
			}
			e.TimeUS = t
		case string(k) == "device_free" && a == ActionOOM:
			e.Addr, err = p.uint(v, "device_free")
		default:
			return p.in.errorf("%s: unknown attribute %s", kw, limits.Quote(k))
		}
		if err != nil {
			return err
		}
	}
	switch {
	case model.IsSegmentAction(a):
		if msg := model.CheckSegmentEvent(&e); msg != "" {
			return p.in.errorf("%s", msg)
		}
		p.segEvents = true
	case model.IsBlockAction(a) && e.Addr%model.MinBlock != 0 && p.unaligned == 0:
		p.unaligned = p.in.n
	}
	tr := p.trace()
	n := 1
	if string(kw) == "free" {
		n = 2
	}
	if !grow(&p.mem, tr, n, eventCost, p.in.read) {
		return p.tooBig()
	}
	*tr = append(*tr, e)
	if n == 2 {
		e.Action = ActionFreeCompleted
		*tr = append(*tr, e)
	}
	return nil
}

func (p *textParser) uint(b []byte, what string) (uint64, error) {
	n, ok := parseUint(b)
	if !ok {
		return 0, p.in.errorf("bad %s %s", what, limits.Quote(b))
	}
	return n, nil
}

func (p *textParser) setting() error {
	if len(p.fields) < 2 {
		return p.in.errorf("want %q", "setting NAME VALUE")
	}
	st := &p.snap.Settings
	if !st.Present {
		*st = Settings{Present: true, MaxSplitSize: -1}
	}
	name, vals := string(p.fields[1]), p.fields[2:]
	one := func() ([]byte, error) {
		if len(vals) != 1 {
			return nil, p.in.errorf("setting %s: want one value", name)
		}
		return vals[0], nil
	}
	switch name {
	case "alloc_conf":
		if len(vals) > 1 {
			return p.in.errorf("setting alloc_conf: want one value without blanks")
		}
		st.AllocConf = ""
		if len(vals) == 1 {
			st.AllocConf = string(vals[0])
		}
	case "max_split_size":
		v, err := one()
		if err != nil {
			return err
		}
		n, ok := parseInt(v)
		if !ok {
			return p.in.errorf("setting max_split_size: bad number %s", limits.Quote(v))
		}
		st.MaxSplitSize = n
	case "garbage_collection_threshold":
		v, err := one()
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return p.in.errorf("setting garbage_collection_threshold: bad number %s", limits.Quote(v))
		}
		st.GCThreshold = f
	case "expandable_segments":
		v, err := one()
		if err != nil {
			return err
		}
		switch string(v) {
		case "true":
			st.ExpandableSegments = true
		case "false":
			st.ExpandableSegments = false
		default:
			return p.in.errorf("setting expandable_segments: want true or false, not %s", limits.Quote(v))
		}
	case "roundup_power2_divisions":
		if len(vals) != len(st.RoundupPower2Divisions) {
			return p.in.errorf("setting roundup_power2_divisions: want %d values", len(st.RoundupPower2Divisions))
		}
		for i, v := range vals {
			n, ok := parseInt(v)
			if !ok || n < math.MinInt32 || n > math.MaxInt32 {
				return p.in.errorf("setting roundup_power2_divisions: bad number %s", limits.Quote(v))
			}
			st.RoundupPower2Divisions[i] = int(n)
		}
	default:
		return p.in.errorf("unknown setting %s", limits.Quote(name))
	}
	return nil
}

// segment reads "segment ADDR SIZE [device=D] [stream=S] [pool=A,B] [small] [expandable]".
func (p *textParser) segment() error {
	p.finishSegment()
	const usage = "segment ADDR SIZE [ATTR...]"
	if len(p.fields) < 3 {
		return p.in.errorf("want %q", usage)
	}
	s := Segment{Device: p.device, Stack: -1}
	var err error
	if s.Address, err = p.uint(p.fields[1], "address"); err != nil {
		return err
	}
	if s.TotalSize, err = p.uint(p.fields[2], "size"); err != nil {
		return err
	}
	for _, at := range p.fields[3:] {
		k, v, hasValue := bytes.Cut(at, []byte("="))
		switch {
		case !hasValue && string(k) == "small":
			s.Small = true
		case !hasValue && string(k) == "expandable":
			s.Expandable = true
		case string(k) == "stream":
			s.Stream, err = p.uint(v, "stream")
		case string(k) == "device":
			d, ok := parseUint(v)
			if !ok || d > maxTextDevice {
				return p.in.errorf("bad device %s (want 0 to %d)", limits.Quote(v), maxTextDevice)
			}
			s.Device = int(d)
		case string(k) == "pool":
			a, b, ok := bytes.Cut(v, []byte(","))
			x, ok1 := parseInt(a)
			y, ok2 := parseInt(b)
			if !ok || !ok1 || !ok2 {
				return p.in.errorf("bad pool %s (want A,B)", limits.Quote(v))
			}
			s.PoolID = [2]int64{x, y}
		default:
			return p.in.errorf("segment: unknown attribute %s", limits.Quote(at))
		}
		if err != nil {
			return err
		}
	}
	if msg := model.CheckSegment(&s); msg != "" {
		return p.in.errorf("%s", msg)
	}
	if !grow(&p.mem, &p.snap.Segments, 1, segCost, p.in.read) {
		return p.tooBig()
	}
	p.snap.Segments = append(p.snap.Segments, s)
	p.segLines = append(p.segLines, p.in.n)
	p.seg = &p.snap.Segments[len(p.snap.Segments)-1]
	return nil
}

// block reads "block ADDR SIZE STATE [requested=N]".
func (p *textParser) block() error {
	if p.seg == nil {
		return p.in.errorf("block outside a segment")
	}
	pos, attrs, err := p.args(3, 3, " ADDR SIZE STATE [requested=N]")
	if err != nil {
		return err
	}
	b := Block{Stack: -1}
	if b.Address, err = p.uint(pos[0], "address"); err != nil {
		return err
	}
	if b.Size, err = p.uint(pos[1], "size"); err != nil {
		return err
	}
	switch string(pos[2]) {
	case "inactive":
		b.State = BlockInactive
	case "active_allocated":
		b.State = BlockAllocated
	case "active_pending_free":
		b.State = BlockPendingFree
	default:
		return p.in.errorf("bad block state %s (want inactive, active_allocated or active_pending_free)", limits.Quote(pos[2]))
	}
	for _, at := range attrs {
		k, v, _ := bytes.Cut(at, []byte("="))
		if string(k) != "requested" {
			return p.in.errorf("block: unknown attribute %s", limits.Quote(k))
		}
		if b.RequestedSize, err = p.uint(v, "requested size"); err != nil {
			return err
		}
	}
	if msg := model.CheckNextBlock(p.seg, &b); msg != "" {
		return p.in.errorf("%s", msg)
	}
	if !grow(&p.mem, &p.seg.Blocks, 1, blockCost, p.in.read) {
		return p.tooBig()
	}
	p.seg.Blocks = append(p.seg.Blocks, b)
	return nil
}

// finishSegment derives the current segment's totals from its blocks.
func (p *textParser) finishSegment() {
	s := p.seg
	if s == nil {
		return
	}
	p.seg = nil
	for _, b := range s.Blocks {
		if b.State == BlockInactive {
			continue
		}
		s.ActiveSize += b.Size
		s.RequestedSize += b.RequestedSize
		if b.State == BlockAllocated {
			s.AllocatedSize += b.Size
		}
	}
}

// WriteText writes s as a gpumem text trace: its settings, then for each
// device its events and final segments. device selects one device; a
// negative device writes all of them. Stack traces and annotations are
// not written.
func WriteText(w io.Writer, s *Snapshot, device int) error {
	first, last := device, device
	if device < 0 {
		first, last = 0, len(s.Traces)-1
	} else if device >= len(s.Traces) {
		return fmt.Errorf("no trace for device %d (the snapshot has %d)", device, len(s.Traces))
	}
	if last > maxTextDevice {
		return fmt.Errorf("device %d is out of the text format's range 0 to %d", last, maxTextDevice)
	}
	for i, seg := range s.Segments {
		if seg.Device < 0 || seg.Device > maxTextDevice {
			return fmt.Errorf("segment %d: device %d is out of the text format's range 0 to %d", i, seg.Device, maxTextDevice)
		}
		for _, b := range seg.Blocks {
			if b.State > BlockPendingFree {
				return fmt.Errorf("segment %d: bad block state %d", i, b.State)
			}
		}
	}
	if strings.ContainsAny(s.Settings.AllocConf, " \t\n\r#") {
		return fmt.Errorf("alloc_conf %q holds blanks or '#', which the text format cannot carry", s.Settings.AllocConf)
	}

	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(TextHeader + "\n")
	if st := s.Settings; st.Present {
		if st.AllocConf != "" {
			fmt.Fprintf(bw, "setting alloc_conf %s\n", st.AllocConf)
		}
		fmt.Fprintf(bw, "setting max_split_size %d\n", st.MaxSplitSize)
		fmt.Fprintf(bw, "setting garbage_collection_threshold %s\n", strconv.FormatFloat(st.GCThreshold, 'g', -1, 64))
		fmt.Fprintf(bw, "setting expandable_segments %t\n", st.ExpandableSegments)
		bw.WriteString("setting roundup_power2_divisions")
		for _, d := range st.RoundupPower2Divisions {
			fmt.Fprintf(bw, " %d", d)
		}
		bw.WriteString("\n")
	}
	var buf []byte
	for d := first; d <= last; d++ {
		fmt.Fprintf(bw, "device %d\n", d)
		var events []Event
		if d < len(s.Traces) {
			events = s.Traces[d]
		}
		for i := 0; i < len(events); i++ {
			e := events[i]
			name := ""
			switch e.Action {
			case ActionFreeRequested:
				name = "free_requested"
				if i+1 < len(events) && sameFree(e, events[i+1]) {
					name = "free"
					i++
				}
			case ActionEmptyCache:
				name = "empty_cache"
			default:
				if e.Action < ActionAlloc || e.Action > ActionSnapshot {
					return fmt.Errorf("device %d event %d: unknown action %d", d, i, e.Action)
				}
				name = e.Action.String()
			}
			buf = appendEvent(buf[:0], name, e)
			bw.Write(buf)
		}
		for i := range s.Segments {
			if s.Segments[i].Device == d {
				buf = appendSegment(buf[:0], &s.Segments[i], false)
				bw.Write(buf)
			}
		}
	}
	// segments of devices with no trace list say their device themselves
	for i := range s.Segments {
		if d := s.Segments[i].Device; d >= len(s.Traces) && (device < 0 || d == device) {
			buf = appendSegment(buf[:0], &s.Segments[i], true)
			bw.Write(buf)
		}
	}
	return bw.Flush()
}

// sameFree reports whether b is the free_completed that goes with the
// free_requested a, with nothing else differing, so one "free" line
// carries both.
func sameFree(a, b Event) bool {
	b.Action = ActionFreeRequested
	return a == b
}

func appendEvent(b []byte, name string, e Event) []byte {
	b = append(b, name...)
	switch e.Action {
	case ActionOOM:
		b = append(b, ' ')
		b = strconv.AppendUint(b, e.Size, 10)
		if e.Addr != 0 {
			b = append(b, " device_free="...)
			b = strconv.AppendUint(b, e.Addr, 10)
		}
	case ActionSnapshot, ActionEmptyCache:
		// no arguments; PyTorch records address and size 0
	default:
		b = appendHex(append(b, ' '), e.Addr)
		b = append(b, ' ')
		b = strconv.AppendUint(b, e.Size, 10)
	}
	if e.Stream != 0 {
		b = appendHex(append(b, " stream="...), e.Stream)
	}
	if e.TimeUS != 0 {
		b = append(b, " t="...)
		b = strconv.AppendInt(b, e.TimeUS, 10)
	}
	return append(b, '\n')
}

func appendSegment(b []byte, s *Segment, withDevice bool) []byte {
	b = appendHex(append(b, "segment "...), s.Address)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.TotalSize, 10)
	if withDevice {
		b = append(b, " device="...)
		b = strconv.AppendInt(b, int64(s.Device), 10)
	}
	if s.Stream != 0 {
		b = appendHex(append(b, " stream="...), s.Stream)
	}
	if s.PoolID != [2]int64{} {
		b = append(b, " pool="...)
		b = strconv.AppendInt(b, s.PoolID[0], 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, s.PoolID[1], 10)
	}
	if s.Small {
		b = append(b, " small"...)
	}
	if s.Expandable {
		b = append(b, " expandable"...)
	}
	b = append(b, '\n')
	for _, bl := range s.Blocks {
		b = appendHex(append(b, "block "...), bl.Address)
		b = append(b, ' ')
		b = strconv.AppendUint(b, bl.Size, 10)
		b = append(b, ' ')
		b = append(b, bl.State.String()...)
		if bl.RequestedSize != 0 {
			b = append(b, " requested="...)
			b = strconv.AppendUint(b, bl.RequestedSize, 10)
		}
		b = append(b, '\n')
	}
	return b
}

func appendHex(b []byte, n uint64) []byte {
	return strconv.AppendUint(append(b, "0x"...), n, 16)
}
