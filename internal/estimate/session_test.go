package estimate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

func newTestSession(t *testing.T, total uint64, trace *bytes.Buffer) *Session {
	t.Helper()
	o := alloc.Options{Config: alloc.DefaultConfig(), Device: alloc.Sim(total), DeviceTotal: total, Check: true}
	var s *Session
	var err error
	if trace != nil {
		s, err = NewSession(o, "", trace)
	} else {
		s, err = NewSession(o, "", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// serve runs requests through a session and returns its replies.
func serve(t *testing.T, s *Session, requests ...string) []string {
	t.Helper()
	var out bytes.Buffer
	if err := s.Serve(strings.NewReader(strings.Join(requests, "\n")+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

// The replies follow PyTorch's allocator: a small request takes a 2 MiB
// segment, a large one under 10 MiB a 20 MiB segment, and empty_cache
// returns the segments no block uses.
func TestSessionFollowsTheAllocator(t *testing.T) {
	var trace bytes.Buffer
	s := newTestSession(t, 1<<30, &trace)
	rep := serve(t, s,
		"a 1 4000 0",    // small: 4096 B in a new 2 MiB segment
		"a 2 1048580 0", // large: 1049088 B in a new 20 MiB segment
		"f 2",
		"s",
		"e",
		"m",
		"p",
		"q")
	if len(rep) != 6 {
		t.Fatalf("want 6 replies, got %q", rep)
	}
	if !strings.HasPrefix(rep[0], "k ") || !strings.HasSuffix(rep[0], " 1 segment_alloc:"+strings.Fields(rep[0])[1]+":2097152") {
		t.Errorf("small allocation: %q", rep[0])
	}
	if !strings.HasSuffix(rep[1], ":20971520") {
		t.Errorf("large allocation: %q", rep[1])
	}
	for _, want := range []string{`"allocated_bytes.all.current":4096`, `"reserved_bytes.all.current":23068672`, `"allocated_bytes.all.peak":1053184`} {
		if !strings.Contains(rep[2], want) {
			t.Errorf("memory_stats lacks %s: %s", want, rep[2])
		}
	}
	if !strings.HasPrefix(rep[3], "k 0 1 segment_free:") {
		t.Errorf("empty_cache: %q", rep[3])
	}
	if rep[4] != "j [1071644672,1073741824]" {
		t.Errorf("mem_get_info: %q", rep[4])
	}
	if rep[5] != `j {"allocated_op":2,"reserved_op":2}` {
		t.Errorf("peaks: %q", rep[5])
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# gpumem-trace v1", "segment_alloc ", "alloc ", "free ", "segment_free ", "empty_cache", "segment "} {
		if !strings.Contains(trace.String(), want) {
			t.Errorf("trace lacks %q:\n%s", want, trace.String())
		}
	}
}

func TestSessionOutOfMemory(t *testing.T) {
	s := newTestSession(t, 64<<20, nil)
	rep := serve(t, s, "a 1 104857600 0", "q")
	if !strings.HasPrefix(rep[0], "o ") || !strings.Contains(rep[0], "CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 has a total capacity of 64.00 MiB") {
		t.Errorf("reply: %q", rep[0])
	}
	if len(s.OOMs) != 1 || s.OOMs[0].Size != 104857600 {
		t.Errorf("OOMs: %+v", s.OOMs)
	}
}

func TestSessionFraction(t *testing.T) {
	s := newTestSession(t, 1<<30, nil)
	rep := serve(t, s, "x 0.5", "a 1 600000000 0", "x 0.9", "q")
	if rep[0] != "k 0" || !strings.HasPrefix(rep[1], "o ") || !strings.Contains(rep[1], "512.00 MiB allowed") {
		t.Errorf("a fraction before the first allocation caps the card: %q", rep)
	}
	if !strings.HasPrefix(rep[2], "E gpumem estimate: set_per_process_memory_fraction after the first") {
		t.Errorf("a fraction after it is refused: %q", rep[2])
	}
}

func TestSessionRefusesBadRequests(t *testing.T) {
	for _, req := range []string{"", "a 1", "a x 1 0", "f 99", "zz", "a 1 -5 0", "x"} {
		s := newTestSession(t, 1<<30, nil)
		var out bytes.Buffer
		if err := s.Serve(strings.NewReader(req+"\n"), &out); err == nil {
			t.Errorf("%q: no error", req)
		}
	}
}

// The request pipe is open to the script (fd 4): whatever is written to
// it ends the estimate with an error, never a panic, and the replica
// stays consistent (Check).
func FuzzSession(f *testing.F) {
	f.Add("a 1 4000 0\na 2 1048580 0\nf 2\ns\ne\nm\np\nq\n")
	f.Add("x 0.5\na 1 600000000 0\nx 0.9\ng\nr\n")
	f.Add("a 1 18446744073709551615 0\nf 1\nf 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		s := newTestSession(t, 1<<30, &bytes.Buffer{})
		var out bytes.Buffer
		_ = s.Serve(strings.NewReader(in), &out)
		if err := s.Allocator().Check(); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	})
}

// A card whose usable part is its total less the CUDA context: mem_get_info
// and the out-of-memory message give the total, as on the card, and the
// usable bytes less the reserved as free.
func TestSessionCardLessContext(t *testing.T) {
	const total, usable = 1 << 30, 1<<30 - 100<<20
	o := alloc.Options{Config: alloc.DefaultConfig(), Device: alloc.Sim(usable), DeviceTotal: total, Check: true}
	s, err := NewSession(o, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	rep := serve(t, s, "m", "a 1 1000000000 0", "q")
	if rep[0] != "j [968884224,1073741824]" {
		t.Errorf("mem_get_info: %q", rep[0])
	}
	if !strings.HasPrefix(rep[1], "o ") || !strings.Contains(rep[1], "GPU 0 has a total capacity of 1024.00 MiB of which 924.00 MiB is free") {
		t.Errorf("out of memory: %q", rep[1])
	}
}
