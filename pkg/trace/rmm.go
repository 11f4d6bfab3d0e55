package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem/pkg/trace/internal/limits"
)

// RMM log columns. Columns are found by name, in any order; others are
// ignored, as RMM's own log parser does.
const (
	rmmAction  = "Action"
	rmmPointer = "Pointer"
	rmmSize    = "Size"
	rmmStream  = "Stream" // optional: the default stream if absent
	rmmTime    = "Time"   // optional
)

// ReadRMM reads a log written by RAPIDS RMM's logging_resource_adaptor: a
// CSV file with the header Thread,Time,Action,Pointer,Size,Stream and one
// row per call. name is used in error messages; malformed input gives a
// *LineError naming the line.
//
// Rows become events of device 0 in file order: "allocate" an alloc,
// "free" (or the older "deallocate") a free_requested and free_completed
// pair, "allocate failure" an oom of the requested size. Pointer is hex
// with a 0x prefix, "(nil)" or decimal; Stream is hex (std::hex), with or
// without the prefix. Zero-byte allocations, which RMM answers with a null
// pointer, and frees of null pointers are dropped. Time of day
// (HH:MM:SS.ffffff) becomes microseconds since the log's first midnight;
// a plain number is read as seconds since the epoch.
//
// An RMM log records no segments and no allocator settings, so a replay
// derives every segment itself, with no address hints.
func ReadRMM(r io.Reader, name string, size int64) (*Snapshot, error) {
	in := &lineLimit{r: r, name: name}
	cr := csv.NewReader(in)
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	lineErr := func(line int, format string, args ...any) error {
		return &LineError{File: name, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	readErr := func(err error) error {
		if le, ok := errors.AsType[*LineError](err); ok {
			return le
		}
		if pe, ok := errors.AsType[*csv.ParseError](err); ok {
			return lineErr(pe.Line, "%v", pe.Err)
		}
		return fmt.Errorf("%s: %w", name, err)
	}

	header, err := cr.Read()
	if err == io.EOF {
		return nil, lineErr(0, "empty file, want a CSV header with columns %s, %s and %s", rmmAction, rmmPointer, rmmSize)
	}
	if err != nil {
		return nil, readErr(err)
	}
	col := map[string]int{rmmAction: -1, rmmPointer: -1, rmmSize: -1, rmmStream: -1, rmmTime: -1}
	for i, h := range header {
		h = strings.TrimSpace(h)
		if i == 0 {
			h = strings.TrimPrefix(h, utf8BOM)
		}
		if j, ok := col[h]; ok && j < 0 {
			col[h] = i
		}
	}
	for _, c := range []string{rmmAction, rmmPointer, rmmSize} {
		if col[c] < 0 {
			return nil, lineErr(1, "missing column %s (the header is %s)", c, limits.Quote(strings.Join(header, ",")))
		}
	}

	var events []Event
	var clock rmmClock
	mem := memBudget{size: size}
	add := func(line int, es ...Event) error {
		if !grow(&mem, &events, len(es), eventCost, in.read) {
			return lineErr(line, "the log needs %s", limits.TooMuch(size, in.read, "many short lines?"))
		}
		events = append(events, es...)
		return nil
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, readErr(err)
		}
		line, _ := cr.FieldPos(0)
		field := func(c string) string {
			if i := col[c]; i >= 0 {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		e := Event{Stack: -1}
		ptr, ok := rmmPointerValue(field(rmmPointer))
		if !ok {
			return nil, lineErr(line, "bad %s %s", rmmPointer, limits.Quote(field(rmmPointer)))
		}
		if e.Size, ok = parseUint([]byte(field(rmmSize))); !ok {
			return nil, lineErr(line, "bad %s %s", rmmSize, limits.Quote(field(rmmSize)))
		}
		if s := field(rmmStream); s != "" {
			if e.Stream, ok = parseHex([]byte(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"))); !ok {
				return nil, lineErr(line, "bad %s %s", rmmStream, limits.Quote(s))
			}
		}
		if t := field(rmmTime); t != "" {
			if e.TimeUS, ok = clock.parse(t); !ok {
				return nil, lineErr(line, "bad %s %s (want HH:MM:SS.ffffff or seconds since the epoch)", rmmTime, limits.Quote(t))
			}
		}
		switch a := field(rmmAction); a {
		case "allocate":
			if e.Size == 0 {
				continue
			}
			if ptr == 0 {
				return nil, lineErr(line, "allocate of %d bytes returned a null pointer", e.Size)
			}
			e.Action, e.Addr = ActionAlloc, ptr
			if err := add(line, e); err != nil {
				return nil, err
			}
		case "free", "deallocate":
			if ptr == 0 {
				continue
			}
			e.Action, e.Addr = ActionFreeRequested, ptr
			done := e
			done.Action = ActionFreeCompleted
			if err := add(line, e, done); err != nil {
				return nil, err
			}
		case "allocate failure":
			e.Action = ActionOOM
			if err := add(line, e); err != nil {
				return nil, err
			}
		default:
			return nil, lineErr(line, "unknown %s %s (want allocate, allocate failure or free)", rmmAction, limits.Quote(a))
		}
	}
	return &Snapshot{Traces: [][]Event{events}}, nil
}

// rmmPointerValue reads a %p pointer: 0x-prefixed hex, "(nil)", or decimal.
func rmmPointerValue(s string) (uint64, bool) {
	if s == "(nil)" || s == "nil" {
		return 0, true
	}
	return parseUint([]byte(s))
}

// rmmClock turns RMM's time-of-day stamps into a monotonic count: a stamp
// more than 12 hours earlier than the last one is taken to be on the next
// day (stamps of different threads may be slightly out of order).
type rmmClock struct {
	last int64
	day  int64
}

const usPerDay = 24 * 3600 * 1_000_000

func (c *rmmClock) parse(s string) (int64, bool) {
	hms, frac, hasFrac := strings.Cut(s, ".")
	var us int64
	if hasFrac {
		if len(frac) == 0 || len(frac) > 9 {
			return 0, false
		}
		f, ok := parseUint([]byte(frac))
		if !ok {
			return 0, false
		}
		for i := len(frac); i < 6; i++ {
			f *= 10
		}
		for i := len(frac); i > 6; i-- {
			f /= 10
		}
		us = int64(f)
	}
	if !strings.Contains(hms, ":") {
		// seconds since the epoch, as older RMM documentation shows
		sec, ok := parseUint([]byte(hms))
		if !ok || sec > 1<<40 {
			return 0, false
		}
		return int64(sec)*1_000_000 + us, true
	}
	parts := strings.Split(hms, ":")
	if len(parts) != 3 {
		return 0, false
	}
	var v [3]int64
	for i, p := range parts {
		n, ok := parseUint([]byte(p))
		if !ok || len(p) > 2 || n > 60 || i == 0 && n > 23 || i == 1 && n > 59 {
			return 0, false
		}
		v[i] = int64(n)
	}
	t := ((v[0]*60+v[1])*60+v[2])*1_000_000 + us
	if t+c.day < c.last-usPerDay/2 {
		c.day += usPerDay
	}
	c.last = t + c.day
	return c.last, true
}
