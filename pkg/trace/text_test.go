package trace

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace/internal/limits"
	"github.com/gpumem/gpumem/pkg/trace/model"
)

func readText(t *testing.T, text string) *Snapshot {
	t.Helper()
	s, err := ReadText(strings.NewReader(text), "t.trace", -1)
	if err != nil {
		t.Fatalf("ReadText: %v", err)
	}
	return s
}

func TestReadText(t *testing.T) {
	s := readText(t, `# gpumem-trace v1
# a comment, then a blank line

setting alloc_conf expandable_segments:True
setting expandable_segments true
alloc 0x7f0000000000 512 stream=0x10 t=1700000000000000   # trailing comment
alloc 4096 1024
free_requested 0x7f0000000000 512 stream=0x10
free_completed 0x7f0000000000
	free   4096	 1024
segment_alloc 0x7f0000200000 2097152
segment_free 0x7f0000200000 2097152
segment_map 0x7f0000400000 2097152
segment_unmap 0x7f0000400000 2097152
oom 1073741824 device_free=4096 stream=7
empty_cache
snapshot
device 2
alloc 0x200 2
segment 0x7f0000000000 2097152 stream=0x10 pool=1,2 small expandable
block 0x7f0000000000 512 active_allocated requested=500
block 0x7f0000000200 512 active_pending_free
block 0x7f0000000400 2096128 inactive
`)
	want0 := []Event{
		{Action: ActionAlloc, Stack: -1, Addr: 0x7f0000000000, Size: 512, Stream: 0x10, TimeUS: 1700000000000000},
		{Action: ActionAlloc, Stack: -1, Addr: 4096, Size: 1024},
		{Action: ActionFreeRequested, Stack: -1, Addr: 0x7f0000000000, Size: 512, Stream: 0x10},
		{Action: ActionFreeCompleted, Stack: -1, Addr: 0x7f0000000000},
		{Action: ActionFreeRequested, Stack: -1, Addr: 4096, Size: 1024},
		{Action: ActionFreeCompleted, Stack: -1, Addr: 4096, Size: 1024},
		{Action: ActionSegmentAlloc, Stack: -1, Addr: 0x7f0000200000, Size: 2 << 20},
		{Action: ActionSegmentFree, Stack: -1, Addr: 0x7f0000200000, Size: 2 << 20},
		{Action: ActionSegmentMap, Stack: -1, Addr: 0x7f0000400000, Size: 2 << 20},
		{Action: ActionSegmentUnmap, Stack: -1, Addr: 0x7f0000400000, Size: 2 << 20},
		{Action: ActionOOM, Stack: -1, Addr: 4096, Size: 1 << 30, Stream: 7},
		{Action: ActionEmptyCache, Stack: -1},
		{Action: ActionSnapshot, Stack: -1},
	}
	if len(s.Traces) != 3 || len(s.Traces[1]) != 0 {
		t.Fatalf("got %d traces, want 3 with device 1 empty", len(s.Traces))
	}
	if !reflect.DeepEqual(s.Traces[0], want0) {
		t.Errorf("device 0 events:\n got %+v\nwant %+v", s.Traces[0], want0)
	}
	if want := []Event{{Action: ActionAlloc, Stack: -1, Addr: 0x200, Size: 2}}; !reflect.DeepEqual(s.Traces[2], want) {
		t.Errorf("device 2 events: got %+v, want %+v", s.Traces[2], want)
	}
	wantSettings := Settings{Present: true, AllocConf: "expandable_segments:True", MaxSplitSize: -1, ExpandableSegments: true}
	if s.Settings != wantSettings {
		t.Errorf("settings: got %+v, want %+v", s.Settings, wantSettings)
	}
	wantSeg := Segment{
		Device: 2, Address: 0x7f0000000000, TotalSize: 2 << 20, AllocatedSize: 512, ActiveSize: 1024,
		RequestedSize: 500, Stream: 0x10, Small: true, PoolID: [2]int64{1, 2}, Expandable: true, Stack: -1,
		Blocks: []Block{
			{Address: 0x7f0000000000, Size: 512, RequestedSize: 500, State: BlockAllocated, Stack: -1},
			{Address: 0x7f0000000200, Size: 512, State: BlockPendingFree, Stack: -1},
			{Address: 0x7f0000000400, Size: 2096128, State: BlockInactive, Stack: -1},
		},
	}
	if len(s.Segments) != 1 || !reflect.DeepEqual(s.Segments[0], wantSeg) {
		t.Errorf("segments:\n got %+v\nwant [%+v]", s.Segments, wantSeg)
	}
}

func TestReadTextEmptyBody(t *testing.T) {
	s := readText(t, "# gpumem-trace v1\r\n")
	if len(s.Traces) != 0 || len(s.Segments) != 0 || s.Settings.Present {
		t.Errorf("got %+v, want an empty snapshot", s)
	}
}

func TestReadTextErrors(t *testing.T) {
	const h = "# gpumem-trace v1\n"
	for _, c := range []struct{ in, want string }{
		{"", "t.trace: empty file, want a # gpumem-trace v1 header"},
		{"alloc 1 2\n", `t.trace:1: missing header, want "# gpumem-trace v1"`},
		{"# gpumem-trace v2\n", `t.trace:1: unsupported version "v2", want v1`},
		{h + "alloc 0x10\n", `t.trace:2: want "alloc ADDR SIZE"`},
		{h + "\nalloc 0x10", `t.trace:3: want "alloc ADDR SIZE"`}, // truncated last line
		{h + "alloc 0x10 12 13\n", `t.trace:2: want "alloc ADDR SIZE"`},
		{h + "alloc 0xZZ 12\n", `t.trace:2: bad address "0xZZ"`},
		{h + "alloc 16 -1\n", `t.trace:2: bad size "-1"`},
		{h + "alloc 16 18446744073709551616\n", `t.trace:2: bad size "18446744073709551616"`},
		{h + "alloc 16 1 stream=q\n", `t.trace:2: bad stream "q"`},
		{h + "alloc 16 1 t=1.5\n", `t.trace:2: bad time "1.5"`},
		{h + "alloc 16 1 color=red\n", `t.trace:2: alloc: unknown attribute "color"`},
		{h + "alloc 16 1 device_free=3\n", `t.trace:2: alloc: unknown attribute "device_free"`},
		{h + "free\n", `t.trace:2: want "free ADDR [SIZE]"`},
		{h + "oom\n", `t.trace:2: want "oom SIZE"`},
		{h + "empty_cache 3\n", `t.trace:2: want "empty_cache"`},
		{h + "malloc 1 2\n", `t.trace:2: unknown keyword "malloc"`},
		{h + "device x\n", `t.trace:2: bad device "x" (want 0 to 1023)`},
		{h + "device 1024\n", `t.trace:2: bad device "1024" (want 0 to 1023)`},
		{h + "setting colour blue\n", `t.trace:2: unknown setting "colour"`},
		{h + "setting\n", `t.trace:2: want "setting NAME VALUE"`},
		{h + "setting max_split_size 1mb\n", `t.trace:2: setting max_split_size: bad number "1mb"`},
		{h + "setting max_split_size\n", `t.trace:2: setting max_split_size: want one value`},
		{h + "setting garbage_collection_threshold NaN\n", `t.trace:2: setting garbage_collection_threshold: bad number "NaN"`},
		{h + "setting expandable_segments yes\n", `t.trace:2: setting expandable_segments: want true or false, not "yes"`},
		{h + "setting roundup_power2_divisions 1 2\n", `t.trace:2: setting roundup_power2_divisions: want 16 values`},
		{h + "setting alloc_conf a b\n", `t.trace:2: setting alloc_conf: want one value without blanks`},
		{h + "block 0x10 512 inactive\n", `t.trace:2: block outside a segment`},
		{h + "segment 0x10\n", `t.trace:2: want "segment ADDR SIZE [ATTR...]"`},
		{h + "segment 0x10 20 pool=1\n", `t.trace:2: bad pool "1" (want A,B)`},
		{h + "segment 0x10 20 huge\n", `t.trace:2: segment: unknown attribute "huge"`},
		{h + "segment 0x200 512\nblock 0x200 512 busy\n", `t.trace:3: bad block state "busy" (want inactive, active_allocated or active_pending_free)`},
		{h + "segment 0x200 512\nblock 0x200 512 inactive why=1\n", `t.trace:3: block: unknown attribute "why"`},
		// what a replay needs to rebuild segments (issue #12 item 8)
		{h + "segment 0x200 1000\n", `t.trace:2: segment size 1000 is not a positive multiple of 512`},
		{h + "segment 0x10 512\n", `t.trace:2: segment address 0x10 is not a multiple of 512`},
		{h + "segment 0x200 0\n", `t.trace:2: segment size 0 is not a positive multiple of 512`},
		{h + "segment 0xfffffffffffffe00 1024\n", `t.trace:2: segment at 0xfffffffffffffe00 of 1024 bytes runs past the end of the address space`},
		{h + "segment 0x200 1024\nblock 0x400 1024 inactive\n", `t.trace:3: block at 0x400 of 1024 bytes lies outside its segment 0x200-0x600`},
		{h + "segment 0x200 1024\nblock 0x200 100 inactive\n", `t.trace:3: block size 100 is not a positive multiple of 512`},
		{h + "segment 0x200 1024\nblock 0x300 512 inactive\n", `t.trace:3: block address 0x300 is not a multiple of 512`},
		{h + "segment 0x200 2048\nblock 0x400 512 inactive\nblock 0x200 512 inactive\n", `t.trace:4: block at 0x200 is out of address order or overlaps the previous one`},
		{h + "segment 0x200 1024\nsegment 0x400 1024\n", `t.trace:3: segment at 0x400 overlaps the segment at 0x200 of 1024 bytes (device 0)`},
		{h + "segment_free 0x200 1000\n", `t.trace:2: segment_free size 1000 is not a positive multiple of 512`},
		{h + "alloc 0x10 512\nsegment_alloc 0x200 1024\n", `t.trace:2: block address is not a multiple of 512, which a trace with segments requires`},
		// long values are quoted in short, control characters escaped
		{h + "alloc 0x" + strings.Repeat("z", 1000) + " 1\n", `t.trace:2: bad address "0x` + strings.Repeat("z", 62) + `"…`},
		{h + "alloc 1\x1b[2J 1\n", `t.trace:2: bad address "1\x1b[2J"`},
		{h + strings.Repeat("x ", 30) + "\n", "t.trace:2: more than 24 fields"},
		{h + strings.Repeat("x", limits.MaxLine+10), "t.trace:2: line longer than 65536 bytes"},
	} {
		_, err := ReadText(strings.NewReader(c.in), "t.trace", -1)
		if _, ok := errors.AsType[*LineError](err); !ok || err.Error() != c.want {
			t.Errorf("%.40q:\n got %T %v\nwant %s", c.in, err, err, c.want)
		}
	}
}

// withoutStacks returns s with every stack index cleared, as the text
// format does not carry them.
func withoutStacks(s *Snapshot) *Snapshot {
	c := *s
	c.Stacks, c.Annotations = nil, nil
	c.Traces = make([][]Event, len(s.Traces))
	for d, tr := range s.Traces {
		c.Traces[d] = make([]Event, len(tr))
		for i, e := range tr {
			e.Stack = -1
			c.Traces[d][i] = e
		}
	}
	c.Segments = make([]Segment, len(s.Segments))
	for i, seg := range s.Segments {
		seg.Stack = -1
		seg.Blocks = slices.Clone(seg.Blocks)
		if len(seg.Blocks) == 0 {
			seg.Blocks = nil
		}
		for j := range seg.Blocks {
			seg.Blocks[j].Stack = -1
		}
		c.Segments[i] = seg
	}
	return &c
}

// TestTextRoundTrip converts every PyTorch fixture to text and back: the
// events, segments and settings must come back unchanged.
func TestTextRoundTrip(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/pytorch/*.pickle")
	more, _ := filepath.Glob("pickle/testdata/*.pickle")
	paths = append(paths, more...)
	if len(paths) < 5 {
		t.Fatalf("found only %d fixtures", len(paths))
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			orig, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			var text bytes.Buffer
			if err := WriteText(&text, orig, -1); err != nil {
				t.Fatal(err)
			}
			back, err := ReadText(bytes.NewReader(text.Bytes()), p, -1)
			if err != nil {
				t.Fatal(err)
			}
			want := withoutStacks(orig)
			if len(want.Segments) == 0 {
				want.Segments = nil
			}
			if !eventsEqual(back.Traces, want.Traces) {
				t.Errorf("events differ after the round trip")
			}
			if !reflect.DeepEqual(back.Segments, want.Segments) {
				t.Errorf("segments differ after the round trip")
			}
			if back.Settings != want.Settings {
				t.Errorf("settings: got %+v, want %+v", back.Settings, want.Settings)
			}
			var again bytes.Buffer
			if err := WriteText(&again, back, -1); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Bytes(), text.Bytes()) {
				t.Errorf("writing the read-back trace gives different text")
			}
			n := 0
			for _, tr := range orig.Traces {
				n += len(tr)
			}
			fi, _ := os.Stat(p)
			t.Logf("%d events, %d segments: %d bytes of text from %d of pickle", n, len(orig.Segments), text.Len(), fi.Size())
		})
	}
}

func TestWriteText(t *testing.T) {
	s := &Snapshot{Traces: [][]Event{
		{
			{Action: ActionAlloc, Addr: 0x100, Size: 512, Stream: 0x20, TimeUS: 5},
			{Action: ActionFreeRequested, Addr: 0x100, Size: 512, Stream: 0x20, TimeUS: 6},
			{Action: ActionFreeCompleted, Addr: 0x100, Size: 512, Stream: 0x20, TimeUS: 6},
			{Action: ActionFreeRequested, Addr: 0x200, Size: 1},
			{Action: ActionFreeCompleted, Addr: 0x200, Size: 1, TimeUS: 9},
			{Action: ActionEmptyCache},
			{Action: ActionOOM, Size: 1 << 20, Addr: 77},
		},
		{{Action: ActionAlloc, Addr: 1, Size: 2}},
	}}
	var b strings.Builder
	if err := WriteText(&b, s, 0); err != nil {
		t.Fatal(err)
	}
	want := `# gpumem-trace v1
device 0
alloc 0x100 512 stream=0x20 t=5
free 0x100 512 stream=0x20 t=6
free_requested 0x200 1
free_completed 0x200 1 t=9
empty_cache
oom 1048576 device_free=77
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	for _, c := range []struct {
		s      *Snapshot
		device int
		want   string
	}{
		{s, 2, "no trace for device 2 (the snapshot has 2)"},
		{&Snapshot{Traces: [][]Event{{{Action: 0}}}}, 0, "device 0 event 0: unknown action 0"},
		{&Snapshot{Settings: Settings{Present: true, AllocConf: "a b"}}, -1, `alloc_conf "a b" holds blanks or '#', which the text format cannot carry`},
		{&Snapshot{Segments: []Segment{{Device: 5000}}}, -1, "segment 0: device 5000 is out of the text format's range 0 to 1023"},
		{&Snapshot{Segments: []Segment{{Blocks: []Block{{State: 9}}}}}, -1, "segment 0: bad block state 9"},
	} {
		err := WriteText(&strings.Builder{}, c.s, c.device)
		if err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %s", err, c.want)
		}
	}
}

func FuzzReadText(f *testing.F) {
	f.Add([]byte("# gpumem-trace v1\nalloc 0x10 512 stream=1 t=2\nfree 0x10 512\nempty_cache\noom 5 device_free=1\n"))
	f.Add([]byte("# gpumem-trace v1\nsetting roundup_power2_divisions 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n" +
		"setting garbage_collection_threshold 0.5\nsetting max_split_size -1\ndevice 1\n" +
		"segment 0x0 1024 pool=0,1 small\nblock 0x0 512 active_allocated requested=3\nblock 0x200 512 inactive\n"))
	f.Add([]byte("# gpumem-trace v1\r\nsegment_alloc 1 2\nsegment_free 1 2 # c\n\n"))
	f.Add([]byte("# gpumem-trace v1\nsegment 0x200 2048\nblock 0x200 512 active_allocated\nblock 0x600 1024 inactive\n" +
		"segment 0x1000 512 device=1\nalloc 0x800 512\nsegment_free 0x1000 512\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			return
		}
		s, err := ReadText(bytes.NewReader(data), "f", int64(len(data)))
		if err != nil {
			if _, ok := errors.AsType[*LineError](err); !ok {
				t.Fatalf("%T %v, want *LineError", err, err)
			}
			checkMessage(t, err.Error())
			return
		}
		checkSegments(t, s)
		// whatever reads must write and read back the same
		var b bytes.Buffer
		if err := WriteText(&b, s, -1); err != nil {
			t.Fatalf("WriteText: %v", err)
		}
		back, err := ReadText(&b, "again", -1)
		if err != nil {
			t.Fatalf("reading written text: %v", err)
		}
		if !eventsEqual(back.Traces, s.Traces) {
			t.Fatalf("events differ after a round trip")
		}
	})
}

// eventsEqual compares traces, taking a nil list as an empty one.
func eventsEqual(a, b [][]Event) bool {
	return slices.EqualFunc(a, b, func(x, y []Event) bool { return slices.Equal(x, y) })
}

// TestPythonWriter checks python/gpumem_trace_writer.py against this
// reader: its conversions of the fixtures must read back as the pickles
// do, and its hand-logging API must write what it says.
func TestPythonWriter(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	writer := filepath.Join("..", "..", "python", "gpumem_trace_writer.py")
	paths, _ := filepath.Glob("../../testdata/pytorch/*.pickle")
	paths = append(paths, "pickle/testdata/seed_frag_segments.pickle")
	for _, p := range paths {
		out := filepath.Join(t.TempDir(), "out.trace")
		if b, err := exec.Command("python3", writer, p, out).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", p, err, b)
		}
		got, err := readTextFile(out)
		if err != nil {
			t.Fatal(err)
		}
		orig, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		want := withoutStacks(orig)
		if !eventsEqual(got.Traces, want.Traces) || len(got.Segments) != len(want.Segments) ||
			len(want.Segments) > 0 && !reflect.DeepEqual(got.Segments, want.Segments) || got.Settings != want.Settings {
			t.Errorf("%s: the Python writer's text reads back differently", p)
		}
	}

	cmd := exec.Command("python3", "-c", `
import sys
sys.path.insert(0, sys.argv[1])
from gpumem_trace_writer import TraceWriter
w = TraceWriter(sys.stdout)
w.comment("by hand")
w.alloc(0x7F0000000000, 1 << 20, stream=7, t=5)
w.free(0x7F0000000000)
w.oom(1 << 40, device_free=3)
w.empty_cache()
`, filepath.Dir(writer))
	b, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadText(bytes.NewReader(b), "hand.trace", -1)
	if err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	want := []Event{
		{Action: ActionAlloc, Stack: -1, Addr: 0x7f0000000000, Size: 1 << 20, Stream: 7, TimeUS: 5},
		{Action: ActionFreeRequested, Stack: -1, Addr: 0x7f0000000000},
		{Action: ActionFreeCompleted, Stack: -1, Addr: 0x7f0000000000},
		{Action: ActionOOM, Stack: -1, Addr: 3, Size: 1 << 40},
		{Action: ActionEmptyCache, Stack: -1},
	}
	if len(s.Traces) != 1 || !slices.Equal(s.Traces[0], want) {
		t.Errorf("got %+v\nwant %+v", s.Traces, want)
	}
}

func readTextFile(path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadText(f, path, -1)
}

// maxFuzzInput caps what the fuzzers feed the readers, so that each
// execution is quick.
const maxFuzzInput = 8 << 10

// checkMessage verifies that an error is one short line: it quotes at
// most a prefix of the input, with control characters escaped.
func checkMessage(t *testing.T, msg string) {
	t.Helper()
	if len(msg) > 300 || strings.ContainsFunc(msg, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		t.Fatalf("error of %d bytes, or with control characters: %.400q", len(msg), msg)
	}
}

// checkSegments verifies that a replay can rebuild the snapshot's
// segments: the reader must have rejected anything else.
func checkSegments(t *testing.T, s *Snapshot) {
	t.Helper()
	for i := range s.Segments {
		if msg := model.CheckSegment(&s.Segments[i]); msg != "" {
			t.Fatalf("segment %d: %s", i, msg)
		}
	}
	if i, msg := model.CheckOverlap(s.Segments); i >= 0 {
		t.Fatalf("segment %d: %s", i, msg)
	}
	segments := len(s.Segments) > 0
	for _, tr := range s.Traces {
		for _, e := range tr {
			segments = segments || model.IsSegmentAction(e.Action)
		}
	}
	for d, tr := range s.Traces {
		for i, e := range tr {
			if model.IsSegmentAction(e.Action) && model.CheckSegmentEvent(&e) != "" ||
				segments && model.IsBlockAction(e.Action) && e.Addr%model.MinBlock != 0 {
				t.Fatalf("device %d event %d: %+v", d, i, e)
			}
		}
	}
}
