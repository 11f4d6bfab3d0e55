package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// readGeneral decodes data as Read does, but every dict the general way.
func readGeneral(data []byte) (*model.Snapshot, error) {
	d := newDecoder(bytes.NewReader(data), int64(len(data)))
	d.general = true
	return d.decode()
}

// streamAll decodes data with Stream and puts each device's events back
// into Traces, as Read has them; with a sink of Event and again with one
// of Events, which must read the same.
func streamAll(data []byte) (*model.Snapshot, error) {
	s, err := streamWith(data, false)
	r, rerr := streamWith(data, true)
	if fmt.Sprint(err) != fmt.Sprint(rerr) || !reflect.DeepEqual(s, r) {
		return nil, fmt.Errorf("Stream to Events (%v) differs from Stream to Event (%v)", rerr, err)
	}
	return s, err
}

// streamWith is streamAll with a sink of Event, or of Events (runs).
func streamWith(data []byte, runs bool) (*model.Snapshot, error) {
	var lists [][]model.Event
	add := func(list int, evs ...model.Event) {
		if list == len(lists) {
			lists = append(lists, nil)
		}
		lists[list] = append(lists[list], evs...)
	}
	sink := Sink{Event: func(list int, e *model.Event) error { add(list, *e); return nil }}
	if runs {
		sink = Sink{Events: func(list int, evs []model.Event) error { add(list, evs...); return nil }}
	}
	s, ids, err := Stream(bytes.NewReader(data), "", int64(len(data)), sink)
	if err != nil {
		return nil, err
	}
	for d, id := range ids {
		if id < 0 {
			s.Traces[d] = []model.Event{}
		} else {
			s.Traces[d] = lists[id]
		}
	}
	return s, nil
}

// memoPickle writes a snapshot as CPython's pickler does: protocol 4,
// every dict, list and new string memoized, repeated strings fetched with
// BINGET or LONG_BINGET, lists appended in batches of 1000.
func memoPickle(devices [][]pdict) []byte {
	b := []byte{opProto, 4}
	memo := map[string]int{}
	n := 0
	put := func() { b = append(b, opMemoize); n++ }
	str := func(s string) {
		if i, ok := memo[s]; ok {
			if i < 256 {
				b = append(b, opBinGet, byte(i))
			} else {
				b = append(b, opLongBinGet)
				b = binary.LittleEndian.AppendUint32(b, uint32(i))
			}
			return
		}
		if len(s) < 256 {
			b = append(b, opShortBinUnicode, byte(len(s)))
		} else {
			b = append(b, opBinUnicode)
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		}
		b = append(b, s...)
		memo[s] = n
		put()
	}
	var value func(v any)
	dict := func(d pdict) {
		b = append(b, opEmptyDict)
		put()
		b = append(b, opMark)
		for _, kv := range d {
			str(kv.k)
			value(kv.v)
		}
		b = append(b, opSetItems)
	}
	list := func(items []any) {
		b = append(b, opEmptyList)
		put()
		for i := 0; i < len(items); i += 1000 {
			b = append(b, opMark)
			for _, it := range items[i:min(i+1000, len(items))] {
				value(it)
			}
			b = append(b, opAppends)
		}
	}
	value = func(v any) {
		switch v := v.(type) {
		case string:
			str(v)
		case pdict:
			dict(v)
		case []any:
			list(v)
		default:
			b = encode(b, v)
		}
	}
	traces := make([]any, len(devices))
	for i, evs := range devices {
		items := make([]any, len(evs))
		for j, e := range evs {
			items[j] = e
		}
		traces[i] = items
	}
	dict(pdict{{"segments", []any{}}, {"device_traces", traces},
		{"allocator_settings", pdict{{"PYTORCH_CUDA_ALLOC_CONF", ""}, {"max_split_size", -1}}}})
	return append(b, opStop)
}

func ptEvent(action string, addr, size int, frames []any) pdict {
	return pdict{{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0},
		{"time_us", 1_700_000_000_000_000 + addr}, {"compile_context", "N/A"}, {"user_metadata", ""}, {"frames", frames}}
}

// A trace long enough that the memo packs many pages, with the shapes the
// fast path leaves to the general one mixed in: frames, an event split
// over two SETITEMS, a long string.
func synthetic() []byte {
	var dev0, dev1 []pdict
	frame := pdict{{"filename", "train.py"}, {"line", 7}, {"name", "step"}}
	for i := range 5000 {
		addr := 512 * (i%300 + 1)
		var frames []any
		if i%97 == 0 {
			frames = []any{frame}
		}
		dev0 = append(dev0, ptEvent("alloc", addr, 512, frames), ptEvent("free_requested", addr, 512, nil), ptEvent("free_completed", addr, 512, nil))
		if i%5 == 0 {
			dev1 = append(dev1, ptEvent("alloc", addr, 1024, nil))
		}
	}
	dev0[10] = append(dev0[10], pkv{"user_metadata", string(bytes.Repeat([]byte("x"), 300))})
	return memoPickle([][]pdict{dev0, {}, dev1})
}

// Stream and the fast path give what the general decoder does.
func TestStreamMatchesRead(t *testing.T) {
	files, _ := filepath.Glob("../../../testdata/pytorch/*.pickle")
	more, _ := filepath.Glob("testdata/*.pickle")
	files = append(files, more...)
	inputs := map[string][]byte{"synthetic": synthetic()}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(f)] = data
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			want, err := readGeneral(data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Read(bytes.NewReader(data), "", int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Error("Read differs from the general decoder")
			}
			streamed, err := streamAll(data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(streamed, want) {
				t.Error("Stream differs from the general decoder")
			}
		})
	}
}

func TestSyntheticEvents(t *testing.T) {
	s, err := Read(bytes.NewReader(synthetic()), "", -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Traces) != 3 || len(s.Traces[0]) != 15000 || len(s.Traces[1]) != 0 || len(s.Traces[2]) != 1000 {
		t.Fatalf("traces of %d devices, %v events", len(s.Traces), []int{len(s.Traces[0])})
	}
	e := s.Traces[0][14999]
	if e.Action != model.ActionFreeCompleted || e.Addr != 512*(4999%300+1) || e.TimeUS != 1_700_000_000_000_000+int64(e.Addr) {
		t.Errorf("last event %+v", e)
	}
	if e := s.Traces[0][97*3]; e.Stack < 0 || fmt.Sprint(s.Stacks[e.Stack]) != "[{train.py 7 step}]" {
		t.Errorf("event with frames: %+v", e)
	}
}

// A sink's error stops the decoding.
func TestStreamSinkError(t *testing.T) {
	stop := fmt.Errorf("enough")
	n := 0
	_, _, err := Stream(bytes.NewReader(synthetic()), "x.pickle", -1, Sink{Event: func(int, *model.Event) error {
		if n++; n == 10 {
			return stop
		}
		return nil
	}})
	if n != 10 || err == nil || !errors.Is(err, stop) {
		t.Errorf("after %d events: %v", n, err)
	}
}

// Events takes the events in runs, an APPENDS's at a time, and its
// error stops the decoding as Event's does.
func TestStreamEventsRuns(t *testing.T) {
	calls, n := 0, 0
	stop := fmt.Errorf("enough")
	_, _, err := Stream(bytes.NewReader(synthetic()), "x.pickle", -1, Sink{Events: func(_ int, evs []model.Event) error {
		if len(evs) == 0 || len(evs) > eventBatch {
			t.Fatalf("a run of %d events", len(evs))
		}
		calls++
		if n += len(evs); n >= 5000 {
			return stop
		}
		return nil
	}})
	if !errors.Is(err, stop) || calls*10 > n { // (some of its events are read one at a time)
		t.Errorf("%d events in %d calls: %v", n, calls, err)
	}
}

// A packed memo page reads as it was, and is unpacked when written again:
// of kinds alone, of small payloads (wide), not of a wider one.
func TestMemoPacking(t *testing.T) {
	d := newDecoder(bytes.NewReader(nil), 0)
	d.op = 1 << 30
	n := (packLag + 3) * memoPageLen
	wide := memoPageLen + 1
	for i := range n {
		v := val{k: kGone}
		switch {
		case i == 3:
			v = val{k: kEmpty}
		case i == 5:
			v = val{kStr, sAlloc} // payload 0: packs
		case i == wide:
			v = val{kStr, sFreeRequested} // a small payload: page 1 packs wide
		case i == wide+1:
			v = val{kInt, 1<<wideBits - 1}
		case i == 2*memoPageLen+1:
			v = val{kInt, 1 << wideBits} // too wide: page 2 stays as it is
		}
		if err := d.put(uint64(i), v); err != nil {
			t.Fatal(err)
		}
	}
	if d.memo[0] != nil || d.packed[0] == nil || d.memo[1] != nil || d.wide[1] == nil || d.memo[2] == nil {
		t.Fatalf("page 0 packed %v, page 1 wide %v, page 2 unpacked %v", d.packed[0] != nil, d.wide[1] != nil, d.memo[2] != nil)
	}
	for i, want := range map[int]val{5: {kStr, sAlloc}, 3: {k: kEmpty}, 4: {k: kGone}, wide: {kStr, sFreeRequested},
		wide + 1: {kInt, 1<<wideBits - 1}, wide + 2: {k: kGone}, 2*memoPageLen + 1: {kInt, 1 << wideBits}} {
		if v := d.unpack(d.memoEntry(uint64(i))); v != want {
			t.Errorf("slot %d = %v, want %v", i, v, want)
		}
	}
	for _, i := range []int{7, wide + 5} {
		if err := d.put(uint64(i), val{kInt, 42}); err != nil {
			t.Fatal(err)
		}
	}
	if d.memo[0] == nil || d.unpack(d.memoEntry(7)) != (val{kInt, 42}) || d.unpack(d.memoEntry(5)) != (val{kStr, sAlloc}) {
		t.Error("a write to a packed page lost it")
	}
	if d.memo[1] == nil || d.wide[1] != nil || d.unpack(d.memoEntry(uint64(wide+5))) != (val{kInt, 42}) ||
		d.unpack(d.memoEntry(uint64(wide))) != (val{kStr, sFreeRequested}) || d.unpack(d.memoEntry(uint64(wide+1))) != (val{kInt, 1<<wideBits - 1}) {
		t.Error("a write to a wide page lost it")
	}
}

// A packed page like the one packed before it shares its bytes (a big
// trace's events all look alike); one unlike it does not, and a write to
// a page that shares unpacks that page alone.
func TestMemoPackedPagesShare(t *testing.T) {
	d := newDecoder(bytes.NewReader(nil), 0)
	d.op = 1 << 30
	n := (packLag + 4) * memoPageLen
	for i := range n {
		v := val{k: kGone}
		if i%2 == 1 || i == 2*memoPageLen+4 {
			v = val{k: kEmpty}
		}
		if err := d.put(uint64(i), v); err != nil {
			t.Fatal(err)
		}
	}
	pk := d.packed
	if pk[0] == nil || pk[1] == nil || pk[2] == nil || pk[3] == nil {
		t.Fatal("pages 0 to 3 not packed")
	}
	if &pk[0][0] != &pk[1][0] || &pk[1][0] == &pk[2][0] || &pk[2][0] == &pk[3][0] {
		t.Errorf("pages alike share, pages unlike do not: 0=1 %v, 1=2 %v, 2=3 %v", &pk[0][0] == &pk[1][0], &pk[1][0] == &pk[2][0], &pk[2][0] == &pk[3][0])
	}
	if err := d.put(memoPageLen+6, val{kInt, 42}); err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]val{6: {k: kGone}, 7: {k: kEmpty}, memoPageLen + 6: {kInt, 42}, memoPageLen + 7: {k: kEmpty}, 2*memoPageLen + 4: {k: kEmpty}} {
		if v := d.unpack(d.memoEntry(uint64(i))); v != want {
			t.Errorf("slot %d = %v, want %v", i, v, want)
		}
	}
	if d.memo[0] != nil || d.memo[1] == nil {
		t.Errorf("page 0 unpacked %v, page 1 unpacked %v: want the written one alone", d.memo[0] != nil, d.memo[1] != nil)
	}
}

// A key's memo slot written again between two event dicts: the keys the
// fast path remembers from one dict must not stand for the next. The
// second event stores its "N/A" value over the slot of "addr", so the
// third's BINGET of it fetches "N/A", a key of no field: the third event
// has no address, which both paths must say.
func TestFastKeysSeeSlotWrittenAgain(t *testing.T) {
	evs := []pdict{ptEvent("alloc", 512, 512, nil), ptEvent("alloc", 1024, 512, nil), ptEvent("alloc", 1536, 512, nil)}
	data := memoPickle([][]pdict{evs})
	const addrSlot, naSlot = 9, 14 // memoPickle's numbering of the first event's strings
	if !bytes.Contains(data, []byte{opShortBinUnicode, 4, 'a', 'd', 'd', 'r', opMemoize}) || bytes.Count(data, []byte{opBinGet, naSlot}) != 2 {
		t.Fatal("memoPickle lays the events out otherwise: update the slots")
	}
	second := bytes.Index(data, []byte{opBinGet, naSlot})
	data = slices.Concat(data[:second+2], []byte{opBinPut, addrSlot}, data[second+2:])
	_, want := readGeneral(data)
	if want == nil || !strings.Contains(want.Error(), `no "addr" key`) {
		t.Fatalf("the general decoder: %v, want the third event without an address", want)
	}
	if _, err := Read(bytes.NewReader(data), "", int64(len(data))); fmt.Sprint(err) != fmt.Sprint(want) {
		t.Errorf("Read: %v, want %v", err, want)
	}
	if _, err := streamAll(data); fmt.Sprint(err) != fmt.Sprint(want) {
		t.Errorf("Stream: %v, want %v", err, want)
	}
}
