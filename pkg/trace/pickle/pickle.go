package pickle

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// FormatError reports input that is not a snapshot pickle this package
// can read, at a byte offset.
type FormatError struct {
	File   string // "" if not known
	Offset int64  // byte offset in the input, -1 if not known
	Msg    string
}

func (e *FormatError) Error() string {
	parts := make([]string, 0, 3)
	if e.File != "" {
		parts = append(parts, e.File)
	}
	if e.Offset >= 0 {
		parts = append(parts, "byte "+strconv.FormatInt(e.Offset, 10))
	}
	if e.Msg != "" {
		parts = append(parts, e.Msg)
	}
	return strings.Join(parts, ": ")
}

// Read decodes a snapshot pickle from r. name is used in errors; size
// is the number of bytes r holds, used to reject impossible lengths early
// and to set the memory budget, or -1 if unknown. Malformed input gives
// a *FormatError naming the file.
func Read(r io.Reader, name string, size int64) (*model.Snapshot, error) {
	d := newDecoder(r, size)
	s, err := d.decode()
	if err != nil {
		return nil, named(err, name)
	}
	return s, nil
}

// Sink takes what Stream reads as it reads it.
type Sink struct {
	// Event takes each event of the device traces; list numbers the event
	// lists in the order their first event is read. The event is only
	// valid during the call.
	Event func(list int, e *model.Event) error
	// Events, when set, takes the events instead of Event, a run of one
	// list's events at a time (those of an APPENDS, 1024 at most a call;
	// an event read by itself alone): one call a run instead of one an
	// event, which a big trace's millions of events make worth it. The
	// events are only valid during the call.
	Events func(list int, evs []model.Event) error
	// Segment, when set, sees each segment dict of the snapshot's
	// segments once it is read.
	Segment func(s *model.Segment) error
}

// Stream decodes a snapshot pickle as Read does, but hands each event of
// its device traces to sink as it is read, without keeping it: the
// snapshot's Traces have one nil list per device, and lists gives each
// device's list number (-1 for a device without events). A big trace
// then takes no memory for its events. An error of the sink's stops the
// decoding and is returned as it is.
func Stream(r io.Reader, name string, size int64, sink Sink) (s *model.Snapshot, lists []int, err error) {
	d := newDecoder(r, size)
	if sink.Events != nil {
		// an event read by itself, not in a run, goes to Events alone
		sink.Event = func(list int, e *model.Event) error {
			d.one[0] = *e
			return sink.Events(list, d.one[:])
		}
	}
	d.sink = sink
	s, err = d.decode()
	if err != nil {
		return nil, nil, named(err, name)
	}
	return s, d.lists, nil
}

// named puts the file's name in err.
func named(err error, name string) error {
	if fe, ok := errors.AsType[*FormatError](err); ok && fe.File == "" {
		fe.File = name
		return fe
	}
	if fe, ok := errors.AsType[*FormatError](err); ok {
		fe.File = name
		return fe
	}
	if name != "" {
		err = fmt.Errorf("%s: %w", name, err)
	}
	return err
}
