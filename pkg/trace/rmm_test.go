package trace

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// rmmLog is what logging_resource_adaptor writes (format from
// rmm:cpp/src/mr/detail/logging_resource_adaptor_impl.cpp).
const rmmLog = `Thread,Time,Action,Pointer,Size,Stream
140001,23:59:59.999990,allocate,0x7f5e1a000000,1024,0x0
140001,23:59:59.999999,allocate,0x7f5e1a000400,256,0x55d0
140002,00:00:00.000005,free,0x7f5e1a000000,1024,0x0
140002,00:00:00.000007,allocate failure,(nil),17179869184,0
140001,00:00:01.5,allocate,(nil),0,0
140001,00:00:01.5,free,(nil),0,0
`

func TestReadRMM(t *testing.T) {
	s, err := ReadRMM(strings.NewReader(rmmLog), "rmm.csv", -1)
	if err != nil {
		t.Fatal(err)
	}
	const day = 24 * 3600 * 1_000_000
	want := []Event{
		{Action: ActionAlloc, Stack: -1, Addr: 0x7f5e1a000000, Size: 1024, TimeUS: day - 10},
		{Action: ActionAlloc, Stack: -1, Addr: 0x7f5e1a000400, Size: 256, Stream: 0x55d0, TimeUS: day - 1},
		{Action: ActionFreeRequested, Stack: -1, Addr: 0x7f5e1a000000, Size: 1024, TimeUS: day + 5},
		{Action: ActionFreeCompleted, Stack: -1, Addr: 0x7f5e1a000000, Size: 1024, TimeUS: day + 5},
		{Action: ActionOOM, Stack: -1, Size: 16 << 30, TimeUS: day + 7},
	}
	if len(s.Traces) != 1 || !reflect.DeepEqual(s.Traces[0], want) {
		t.Errorf("got %+v\nwant %+v", s.Traces, want)
	}
	if len(s.Segments) != 0 || s.Settings.Present {
		t.Errorf("an RMM log has no segments or settings, got %+v", s)
	}
}

// TestReadRMMColumns checks that columns are found by name: reordered,
// extra, and without the optional Thread, Time and Stream; the older
// "deallocate" action and epoch-seconds times; a byte order mark and CRLF.
func TestReadRMMColumns(t *testing.T) {
	in := utf8BOM + "Size, Extra ,Pointer,Action,Time\r\n" +
		"512,x,0x10,allocate,1712345678.25\r\n" +
		"512,y,16,deallocate,1712345679\r\n"
	s, err := ReadRMM(strings.NewReader(in), "r.csv", -1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Action: ActionAlloc, Stack: -1, Addr: 16, Size: 512, TimeUS: 1712345678_250000},
		{Action: ActionFreeRequested, Stack: -1, Addr: 16, Size: 512, TimeUS: 1712345679_000000},
		{Action: ActionFreeCompleted, Stack: -1, Addr: 16, Size: 512, TimeUS: 1712345679_000000},
	}
	if !reflect.DeepEqual(s.Traces[0], want) {
		t.Errorf("got %+v\nwant %+v", s.Traces[0], want)
	}
}

func TestReadRMMErrors(t *testing.T) {
	const h = "Thread,Time,Action,Pointer,Size,Stream\n"
	for _, c := range []struct{ in, want string }{
		{"", "r.csv: empty file, want a CSV header with columns Action, Pointer and Size"},
		{"Thread,Time,Action,Size,Stream\n", `r.csv:1: missing column Pointer (the header is "Thread,Time,Action,Size,Stream")`},
		{"Pointer,Size\n", `r.csv:1: missing column Action (the header is "Pointer,Size")`},
		{h + "1,10:00:00.0,allocate,0x10,12x,0\n", `r.csv:2: bad Size "12x"`},
		{h + "1,10:00:00.0,allocate,0x10,-5,0\n", `r.csv:2: bad Size "-5"`},
		{h + "1,10:00:00.0,allocate,0xq,12,0\n", `r.csv:2: bad Pointer "0xq"`},
		{h + "1,10:00:00.0,allocate,0x10,12,0xzz\n", `r.csv:2: bad Stream "0xzz"`},
		{h + "1,10:00:61.0,allocate,0x10,12,0\n", `r.csv:2: bad Time "10:00:61.0" (want HH:MM:SS.ffffff or seconds since the epoch)`},
		{h + "1,noon,allocate,0x10,12,0\n", `r.csv:2: bad Time "noon" (want HH:MM:SS.ffffff or seconds since the epoch)`},
		{h + "\n1,10:00:00.0,reallocate,0x10,12,0\n", `r.csv:3: unknown Action "reallocate" (want allocate, allocate failure or free)`},
		{h + "1,10:00:00.0,allocate,(nil),12,0\n", `r.csv:2: allocate of 12 bytes returned a null pointer`},
		{h + "1,10:00:00.0,allocate,0x10,12,0\n1,10:00:00.1,free,0x10", `r.csv:3: wrong number of fields`}, // truncated
		{h + "1,10:00:00.0,\"allocate,0x10,12,0\n", `r.csv:2: extraneous or missing " in quoted-field`},
	} {
		_, err := ReadRMM(strings.NewReader(c.in), "r.csv", -1)
		if _, ok := errors.AsType[*LineError](err); !ok || err.Error() != c.want {
			t.Errorf("%.50q:\n got %T %v\nwant %s", c.in, err, err, c.want)
		}
	}
}

func FuzzReadRMM(f *testing.F) {
	f.Add([]byte(rmmLog))
	f.Add([]byte("Action,Pointer,Size\nallocate,1,2\nfree,1,2\n"))
	f.Add([]byte("Size,Pointer,Action,Time\n5,0x1,allocate,1.5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			return
		}
		s, err := ReadRMM(bytes.NewReader(data), "f", int64(len(data)))
		if err != nil {
			if _, ok := errors.AsType[*LineError](err); !ok {
				t.Fatalf("%T %v, want *LineError", err, err)
			}
			checkMessage(t, err.Error())
			return
		}
		if len(s.Traces) != 1 {
			t.Fatalf("%d traces, want 1", len(s.Traces))
		}
		for i, e := range s.Traces[0] {
			if e.Action != ActionAlloc && e.Action != ActionFreeRequested && e.Action != ActionFreeCompleted && e.Action != ActionOOM || e.Stack != -1 {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
	})
}

func TestReadRMMLongLine(t *testing.T) {
	// encoding/csv buffers a whole line: one of 200 MB took 1.3 GB.
	in := "Action,Pointer,Size\nallocate,0x" + strings.Repeat("0", 1<<20) + ",512\n"
	var err error
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = ReadRMM(strings.NewReader(in), "r.csv", int64(len(in)))
	runtime.ReadMemStats(&after)
	if err == nil || err.Error() != "r.csv:2: line longer than 65536 bytes" || after.TotalAlloc-before.TotalAlloc > 512<<10 {
		t.Errorf("allocated %d KiB, error %v", (after.TotalAlloc-before.TotalAlloc)>>10, err)
	}
}
