package pickle

import (
	"github.com/gpumem/gpumem/pkg/trace/model"

	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// Values for building pickles in tests.
type (
	pdict []pkv // keeps key order, like a Python dict
	pkv   struct {
		k string
		v any
	}
	ptuple []any
	praw   []byte // opcodes written as they are
)

// pickleOf writes v as protocol 4 without memoizing, ending with STOP.
func pickleOf(v any) []byte {
	return append(encode([]byte{opProto, 4}, v), opStop)
}

func encode(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, opNone)
	case bool:
		if v {
			return append(b, opNewTrue)
		}
		return append(b, opNewFalse)
	case int:
		return encodeInt(b, int64(v))
	case int64:
		return encodeInt(b, v)
	case uint64:
		b = append(b, opLong1, 9)
		b = binary.LittleEndian.AppendUint64(b, v)
		return append(b, 0)
	case float64:
		b = append(b, opBinFloat)
		return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
	case string:
		b = append(b, opBinUnicode)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		return append(b, v...)
	case praw:
		return append(b, v...)
	case ptuple:
		b = append(b, opMark)
		for _, x := range v {
			b = encode(b, x)
		}
		return append(b, opTuple)
	case []any:
		b = append(b, opEmptyList)
		if len(v) == 0 {
			return b
		}
		b = append(b, opMark)
		for _, x := range v {
			b = encode(b, x)
		}
		return append(b, opAppends)
	case pdict:
		b = append(b, opEmptyDict)
		if len(v) == 0 {
			return b
		}
		b = append(b, opMark)
		for _, kv := range v {
			b = encode(encode(b, kv.k), kv.v)
		}
		return append(b, opSetItems)
	}
	panic("pickleOf: unsupported type")
}

func encodeInt(b []byte, n int64) []byte {
	if n == int64(int32(n)) {
		b = append(b, opBinInt)
		return binary.LittleEndian.AppendUint32(b, uint32(n))
	}
	b = append(b, opLong1, 8)
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}

func event(action string, addr, size int) pdict {
	return pdict{{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0},
		{"time_us", 1000}, {"compile_context", "N/A"}, {"frames", []any{}}}
}

func snapshotOf(events ...any) pdict {
	return pdict{{"segments", []any{}}, {"device_traces", []any{events}}}
}

func decode(b []byte) (*model.Snapshot, error) {
	return Read(bytes.NewReader(b), "", int64(len(b)))
}

func TestCraftedSnapshot(t *testing.T) {
	frame := pdict{{"filename", "a.py"}, {"line", 3}, {"name", "f"}, {"fx_node_op", "call"}}
	ev := event("alloc", 4096, 512)
	ev[6].v = []any{frame, frame}
	oom := pdict{{"action", "oom"}, {"device_free", 77}, {"size", 1 << 20}, {"stream", -1}}
	snap := pdict{
		{"future_key", []any{pdict{{"x", 1}}, ptuple{1, 2}}},
		{"segments", []any{pdict{
			{"device", 1}, {"address", 4096}, {"total_size", 2 << 20}, {"allocated_size", 512},
			{"active_size", 512}, {"requested_size", 512}, {"stream", 7}, {"segment_type", "large"},
			{"segment_pool_id", ptuple{1, 5}}, {"is_expandable", true}, {"frames", []any{frame}},
			{"blocks", []any{
				pdict{{"address", 4096}, {"size", 512}, {"requested_size", 500}, {"state", "active_allocated"}, {"frames", []any{frame, frame}}},
				pdict{{"address", 4608}, {"size", 2<<20 - 512}, {"state", "active_pending_free"}},
			}},
		}}},
		{"device_traces", []any{[]any{}, []any{ev, oom, event("free_requested", 4096, 512)}}},
		{"allocator_settings", pdict{{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
			{"max_split_size", 1 << 30}, {"garbage_collection_threshold", 0.8}, {"expandable_segments", true},
			{"roundup_power2_divisions", pdict{{"1", 2}, {"64", 4}, {"32768", 8}}}}},
		{"external_annotations", []any{pdict{{"stage", "START"}, {"name", "fwd"}, {"device", 1}, {"time_us", 99}, {"n", 3}}}},
	}
	s, err := decode(pickleOf(snap))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Traces) != 2 || len(s.Traces[0]) != 0 || len(s.Traces[1]) != 3 {
		t.Fatalf("traces: %v", s.Traces)
	}
	e := s.Traces[1]
	want := model.Event{Action: model.ActionAlloc, Stack: e[0].Stack, Addr: 4096, Size: 512, TimeUS: 1000}
	if e[0] != want || e[0].Stack < 0 || len(s.Stacks[e[0].Stack]) != 2 {
		t.Errorf("event 0: %+v", e[0])
	}
	if want := (model.Event{Action: model.ActionOOM, Stack: -1, Addr: 77, Size: 1 << 20, Stream: math.MaxUint64}); e[1] != want {
		t.Errorf("oom event: got %+v, want %+v", e[1], want)
	}
	seg := s.Segments[0]
	if seg.Device != 1 || seg.Small || seg.PoolID != [2]int64{1, 5} || !seg.Expandable || seg.Stream != 7 || len(seg.Blocks) != 2 {
		t.Errorf("segment: %+v", seg)
	}
	if b := seg.Blocks[0]; b.State != model.BlockAllocated || b.RequestedSize != 500 || b.Stack != e[0].Stack {
		t.Errorf("block 0: %+v (want the event's stack %d)", b, e[0].Stack)
	}
	if b := seg.Blocks[1]; b.State != model.BlockPendingFree || b.Stack != -1 {
		t.Errorf("block 1: %+v", b)
	}
	if len(s.Stacks) != 2 || s.Stacks[seg.Stack][0] != (model.Frame{Filename: "a.py", Line: 3, Name: "f"}) {
		t.Errorf("stacks: %v (segment stack %d)", s.Stacks, seg.Stack)
	}
	st := s.Settings
	wantRound := [16]int{0: 2, 6: 4, 15: 8}
	if !st.Present || st.AllocConf != "expandable_segments:True" || st.MaxSplitSize != 1<<30 ||
		st.GCThreshold != 0.8 || !st.ExpandableSegments || st.RoundupPower2Divisions != wantRound {
		t.Errorf("settings: %+v", st)
	}
	a := s.Annotations
	if len(a) != 1 || a[0].Device != 1 || a[0].TimeUS != 99 || a[0].Fields["stage"] != "START" ||
		a[0].Fields["name"] != "fwd" || a[0].Fields["n"] != "3" || len(a[0].Fields) != 3 {
		t.Errorf("annotations: %+v", a)
	}
}

// memoized builds a snapshot whose trace holds one event dict twice,
// the second time fetched from the memo; real snapshots never do that.
func memoized() []byte {
	b := []byte{opProto, 4, opEmptyDict, opMark}
	b = encode(b, "segments")
	b = encode(b, []any{})
	b = encode(b, "device_traces")
	b = append(b, opEmptyList, opEmptyList, opMark, opEmptyDict, opBinPut, 0, opMark)
	for _, kv := range []pkv{{"action", "alloc"}, {"addr", 512}, {"size", 2}} {
		b = encode(encode(b, kv.k), kv.v)
	}
	return append(b, opSetItems, opBinGet, 0, opAppends, opAppend, opSetItems, opStop)
}

func TestBadInput(t *testing.T) {
	ok := pickleOf(snapshotOf(event("alloc", 512, 2)))
	if _, err := decode(ok); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	huge := func(op byte, n int) []byte {
		b := []byte{opProto, 4, op}
		b = binary.LittleEndian.AppendUint64(b, math.MaxUint64>>1)
		return append(b[:3+n], 'x', opStop)
	}
	cases := []struct {
		name string
		in   []byte
		off  int64 // -2: any
		msg  string
		// msgNoSize, if set, is expected instead of msg when the size
		// is not given, so only the sane caps bound lengths.
		msgNoSize string
	}{
		{"empty", nil, 0, "empty input", ""},
		{"text file", []byte("segments,device_traces\n1,2\n"), 0, "not a pickle", ""},
		{"protocol 1", []byte{opProto, 1, opNone, opStop}, 0, "unsupported pickle protocol 1", ""},
		{"protocol 6", []byte{opProto, 6, opNone, opStop}, 0, "unsupported pickle protocol 6", ""},
		{"global", []byte{opProto, 4, 'c', 'o', 's', '\n'}, 2, "GLOBAL (0x63)", ""},
		{"reduce", append(pickleOf(1)[:7], 'R', opStop), 7, "REDUCE", ""},
		{"top int", pickleOf(5), -1, "top-level value is a int", ""},
		{"no segments", pickleOf(pdict{{"device_traces", []any{}}}), 2, `no "segments" key`, ""},
		{"segments not list", pickleOf(pdict{{"segments", 3}}), -1, `"segments" is a int`, ""},
		{"trace not list", pickleOf(pdict{{"segments", []any{}}, {"device_traces", []any{7}}}), -2, "device_traces[0] is a int", ""},
		{"unknown action", pickleOf(snapshotOf(event("alloc", 512, 2), event("teleport", 512, 2))), -2, `unknown event action "teleport"`, ""},
		{"missing size", pickleOf(snapshotOf(pdict{{"action", "alloc"}, {"addr", 1}})), -2, `alloc event dict has no "size" key`, ""},
		{"negative size", pickleOf(snapshotOf(event("alloc", 512, -2))), -2, `event "size" is negative (-2)`, ""},
		{"string addr", pickleOf(snapshotOf(pdict{{"action", "alloc"}, {"addr", "x"}, {"size", 1}})), -2, `event "addr" is a str, want an int`, ""},
		{"bad state", pickleOf(pdict{{"segments", []any{pdict{{"address", 1}, {"total_size", 1}, {"blocks", []any{
			pdict{{"address", 1}, {"size", 1}, {"state", "melted"}}}}}}}}), -2, `block "state" has unknown value "melted"`, ""},
		{"frame without line", pickleOf(snapshotOf(pdict{{"action", "alloc"}, {"addr", 1}, {"size", 1},
			{"frames", []any{pdict{{"filename", "a"}, {"name", "b"}}}}})), -2, `frame dict has no "line" key`, ""},
		{"mixed list", pickleOf(snapshotOf(event("alloc", 512, 2), 5)), -2, "mixes event dicts", ""},
		{"memoized event reused", memoized(), -2, "event dict fetched again", ""},
		{"huge BINUNICODE8", huge(opBinUnicode8, 8), 2, "runs past the end", "longer than the limit"},
		{"huge BINUNICODE", huge(opBinUnicode, 4), 2, "runs past the end", "longer than the limit"},
		{"huge FRAME", huge(opFrame, 8), 2, "FRAME of", "longer than the limit"},
		{"huge BINBYTES8", huge(opBinBytes8, 8), 2, "runs past the end", "longer than the limit"},
		{"huge LONG4", huge(opLong4, 4), 2, "LONG4", ""},
		{"negative LONG4", []byte{opProto, 4, opLong4, 0xff, 0xff, 0xff, 0xff, opStop}, 2, "negative length", ""},
		{"memo miss", []byte{opProto, 4, opBinGet, 3, opStop}, 2, "memo key 3 missing", ""},
		{"memo index too big", []byte{opProto, 4, opNone, opLongBinPut, 0xff, 0xff, 0xff, 0x7f, opStop}, 3, "memo index", ""},
		{"setitems on list", []byte{opProto, 4, opEmptyList, opMark, opNone, opNone, opSetItems, opStop}, 6, "SETITEMS on a list", ""},
		{"appends without mark", []byte{opProto, 4, opEmptyList, opAppends, opStop}, 3, "APPENDS without MARK", ""},
		{"append underflow", []byte{opProto, 4, opEmptyList, opMark, opNone, opAppend, opStop}, 5, "APPEND needs 2 values", ""},
		{"stop on empty", []byte{opProto, 4, opStop}, 2, "STOP needs 1 value", ""},
		{"no stop", []byte{opProto, 4, opNone}, 3, "unexpected end of data", ""},
		{"odd setitems", []byte{opProto, 4, opEmptyDict, opMark, opNone, opSetItems, opStop}, 5, "odd number", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, size := range []int64{int64(len(c.in)), -1} {
				s, err := Read(bytes.NewReader(c.in), "", size)
				if err == nil {
					t.Fatalf("size %d: no error, got %+v", size, s)
				}
				fe, ok := errors.AsType[*FormatError](err)
				if !ok {
					t.Fatalf("size %d: %T %v, want *FormatError", size, err, err)
				}
				msg := c.msg
				if size < 0 && c.msgNoSize != "" {
					msg = c.msgNoSize
				}
				if !strings.Contains(fe.Msg, msg) {
					t.Errorf("size %d: %q does not mention %q", size, err, msg)
				}
				if c.off != -2 && fe.Offset != c.off && size >= 0 {
					t.Errorf("size %d: offset %d, want %d (%v)", size, fe.Offset, c.off, err)
				}
				if c.off == -2 && fe.Offset < 0 {
					t.Errorf("size %d: no offset in %v", size, err)
				}
			}
		})
	}
}

// Every proper prefix of a real snapshot must fail cleanly.
func TestTruncated(t *testing.T) {
	data, err := os.ReadFile("../../../testdata/pytorch/seed_frag.pickle")
	if err != nil {
		t.Fatal(err)
	}
	step := 1
	if testing.Short() {
		step = 37
	}
	for n := 0; n < len(data); n += step {
		sizes := []int64{int64(n)}
		if n%7 == 0 {
			sizes = append(sizes, -1) // the unknown-size path, on a sample
		}
		for _, size := range sizes {
			_, err := Read(bytes.NewReader(data[:n]), "", size)
			if err == nil {
				t.Fatalf("prefix of %d bytes (size %d): no error", n, size)
			}
			if _, ok := errors.AsType[*FormatError](err); !ok {
				t.Fatalf("prefix of %d bytes: %T %v, want *FormatError", n, err, err)
			}
		}
	}
}

// A size larger than the data (a file that shrank) must not confuse
// the bounds checks.
func TestSizeLargerThanData(t *testing.T) {
	data := pickleOf(snapshotOf(event("alloc", 512, 2)))
	if _, err := Read(bytes.NewReader(data), "", int64(len(data))+1000); err != nil {
		t.Fatal(err)
	}
	_, err := Read(bytes.NewReader(data[:len(data)-1]), "", int64(len(data)))
	if fe, ok := errors.AsType[*FormatError](err); !ok || !strings.Contains(fe.Msg, "unexpected end") {
		t.Fatalf("got %v, want unexpected end of data", err)
	}
}

// An error names the file and the byte.
func TestReadFileErrors(t *testing.T) {
	_, err := readFile("testdata/does-not-exist.pickle")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	_, err = readFile("testdata/gen_golden.py")
	fe, ok := errors.AsType[*FormatError](err)
	if !ok || fe.File != "testdata/gen_golden.py" || fe.Offset != 0 ||
		!strings.HasPrefix(err.Error(), "testdata/gen_golden.py: byte 0: not a pickle") {
		t.Errorf("python file: %v", err)
	}
}

func TestDecodeLong(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want val
	}{
		{nil, val{kInt, 0}},
		{[]byte{0xff}, val{kInt, math.MaxUint64}},
		{[]byte{0x80}, val{kInt, uint64(0xffffffffffffff80)}},
		{[]byte{0x80, 0x00}, val{kInt, 128}},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0x80}, val{kInt, 1 << 63}}, // -2^63
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0x80, 0}, val{kUint, 1 << 63}},
		{[]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, val{kInt, 1}}, // redundant zero bytes
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0, 1}, val{k: kBig}},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff}, val{k: kBig}},
	} {
		if got := decodeLong(c.in); got != c.want {
			t.Errorf("decodeLong(% x) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// A writer other than CPython's pickler may use opcodes the fixtures do
// not: one SETITEM per key, DICT/LIST/TUPLE built from a MARK, bytes,
// LONG4, BINUNICODE8.
func TestRareOpcodes(t *testing.T) {
	str8 := func(s string) praw {
		b := binary.LittleEndian.AppendUint64([]byte{opBinUnicode8}, uint64(len(s)))
		return append(b, s...)
	}
	var b []byte
	b = append(b, opProto, 2, opMark)
	b = encode(b, "segments")
	b = append(b, opMark, opMark)
	b = encode(b, str8("address"))
	b = append(b, opLong4, 3, 0, 0, 0, 0x00, 0x10, 0x00) // 4096
	b = encode(b, "total_size")
	b = encode(b, 8192)
	b = encode(b, "blocks")
	b = append(b, opMark, opList)
	b = encode(b, "segment_pool_id")
	b = append(b, opBinInt1, 0, opBinInt2, 7, 0, opTuple2)
	b = encode(b, "junk")
	b = append(b, opShortBinBytes, 3, 'a', 'b', 'c', opBinBytes, 1, 0, 0, 0, 'z', opEmptyTuple, opTuple3)
	b = encode(b, "more")
	b = append(b, opNone, opTuple1, opNewTrue, opNewFalse, opTuple3)
	b = append(b, opDict, opList) // the segment dict, then the segments list
	b = encode(b, "device_traces")
	b = append(b, opEmptyList, opEmptyList, opEmptyDict)
	for _, kv := range []pkv{{"action", "segment_map"}, {"addr", 4096}, {"size", 8192},
		{"stream", 3}, {"time_us", int64(1) << 40}} {
		b = append(encode(encode(b, kv.k), kv.v), opSetItem)
	}
	b = append(b, opAppend, opAppend, opDict, opStop)

	s, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := model.Event{Action: model.ActionSegmentMap, Stack: -1, Addr: 4096, Size: 8192, Stream: 3, TimeUS: 1 << 40}
	if len(s.Traces) != 1 || len(s.Traces[0]) != 1 || s.Traces[0][0] != want {
		t.Errorf("traces: %+v, want [[%+v]]", s.Traces, want)
	}
	if len(s.Segments) != 1 {
		t.Fatalf("segments: %+v", s.Segments)
	}
	if seg := s.Segments[0]; seg.Address != 4096 || seg.TotalSize != 8192 || seg.PoolID != [2]int64{0, 7} || len(seg.Blocks) != 0 {
		t.Errorf("segment: %+v", seg)
	}
}

// readFile decodes the snapshot pickle in the named file.
func readFile(path string) (*model.Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, path, -1)
}
