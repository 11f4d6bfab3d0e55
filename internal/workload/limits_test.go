package workload

import (
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// parseLim parses and materialises src within lim.
func parseLim(src string, lim Limits) (*Workload, error) {
	w, err := open("t.wl", strings.NewReader(src), nil, lim)
	if err != nil {
		return nil, err
	}
	return w, w.Materialize()
}

// Every limit stops a hostile script with an error naming the limit and,
// where one statement is at fault, its line.
func TestLimits(t *testing.T) {
	small := Limits{Ops: 1000, Live: 100, Memory: 20000, OpsHint: "raise it with --max-ops"}
	tests := []struct{ name, src, want string }{
		{"operations", "repeat 1000000000000 {\n  alloc x 1MiB\n  free x\n}",
			"t.wl:2: more than 1000 operations (the limit; raise it with --max-ops)"},
		{"operations completing frees", "alloc z 1\n" + strings.Repeat("alloc a 1\nrecord_stream a 1\nfree a\n", 250),
			"t.wl: at the end: more than 1000 operations (the limit; raise it with --max-ops)"},
		{"steps", "repeat 1000000000000 {\n  let a = 1\n}",
			"t.wl:1: more than 16000 steps (the limit; raise it with --max-ops)"},
		{"steps of long expressions", "repeat 1000000000000 {\n  let a = " + strings.Repeat("1+", 999) + "1\n}",
			"t.wl:2: more than 16000 steps (the limit; raise it with --max-ops)"},
		{"live buffers", "repeat 16000000 {\n  alloc x[i] 1\n}", "t.wl:2: more than 100 live buffers (the limit)"},
		{"long names", "repeat 100 {\n  alloc x" + strings.Repeat("[i]", 200) + " 1\n}",
			"t.wl:2: more than 20000 bytes of buffer names and phases (the limit)"},
		{"phases", "repeat 1000000 {\n  phase p\n}", "t.wl:2: more than 20000 bytes of buffer names and phases (the limit)"},
		{"nested repeats", strings.Repeat("repeat 1 {\n", 65) + strings.Repeat("}\n", 65),
			"t.wl:65: more than 64 nested repeat blocks (the limit)"},
		{"nested parentheses", "alloc a " + strings.Repeat("(", 65) + "1" + strings.Repeat(")", 65),
			"t.wl:1: alloc a: more than 64 nested parentheses, calls and minus signs (the limit)"},
		{"minus signs", "let a = " + strings.Repeat("-", 65) + "1",
			"t.wl:1: let a: more than 64 nested parentheses, calls and minus signs (the limit)"},
		{"line", "alloc a " + strings.Repeat("1", 70000), "t.wl:1: more than 65536 bytes in a line (the limit)"},
		{"script", "alloc a 1\n" + strings.Repeat("# a comment of some length\n", 40000) + "free a\n",
			"t.wl:38837: more than 1048576 bytes in a script (the limit)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseLim(tt.src, small)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v, want %s", err, tt.want)
			}
			var le *LimitError
			if !errors.As(err, &le) {
				t.Errorf("%T is not a *LimitError", err)
			}
		})
	}
}

// Within the limits the same scripts run: the limits bound, they do not
// change results.
func TestLimitsAllow(t *testing.T) {
	lim := Limits{Ops: 1000, Live: 100, Memory: 20000}
	for _, src := range []string{
		"repeat 500 {\n  alloc x 1MiB\n  free x\n}",                    // 1000 operations
		"repeat 100 {\n  alloc x[i] 1\n}",                              // 100 live
		strings.Repeat("repeat 1 {\n", 64) + strings.Repeat("}\n", 64), // 64 deep
		"alloc a " + strings.Repeat("(", 63) + "1" + strings.Repeat(")", 63),
	} {
		if _, err := parseLim(src, lim); err != nil {
			t.Errorf("%.40q: %v", src, err)
		}
	}
	// Zero fields take the defaults.
	if _, err := parseLim("repeat 2000 {\n  alloc x[i] 1\n}", Limits{Memory: 1 << 20}); err != nil {
		t.Errorf("default operations and live buffers: %v", err)
	}
	// A script of exactly the byte limit, without a final newline.
	src := "alloc a 1\n" + strings.Repeat(strings.Repeat("#", 999)+"\n", 1000) + strings.Repeat("#", maxScript-10-1000*1000-10) + "\nalloc b 1"
	if len(src) != maxScript {
		t.Fatalf("test script of %d bytes", len(src))
	}
	if w, err := parseLim(src, DefaultLimits); err != nil || len(w.Ops) != 2 {
		t.Errorf("script of %d bytes: %v", maxScript, err)
	}
}

// The examples of issue #12 end quickly with an error, holding little
// memory, under the default limits.
func TestLimitsHostileExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of work")
	}
	for _, tt := range []struct{ src, want string }{
		{"repeat 16000000 {\n  alloc x[i] 1\n}", "t.wl:2: more than 1048576 live buffers (the limit)"},
		{"repeat 1000000000000 {\n  alloc x 1MiB\n  free x\n}", "t.wl:2: more than 16777216 operations (the limit)"},
	} {
		start := time.Now()
		_, err := open("t.wl", strings.NewReader(tt.src), nil, DefaultLimits)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: error %v, want %s", tt.src, err, tt.want)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("%.20q: %v, %d MiB obtained from the system", tt.src, time.Since(start), ms.Sys>>20)
		if ms.Sys > 512<<20 {
			t.Errorf("%q: the process obtained %d MiB", tt.src, ms.Sys>>20)
		}
	}
}

func TestByteOrderMark(t *testing.T) {
	w, err := Parse("t.wl", strings.NewReader("\uFEFFalloc a 1MiB\nfree a\n"))
	if err != nil || len(w.Ops) != 2 {
		t.Fatalf("script with a byte-order mark: %v", err)
	}
	// Only at the start: elsewhere it is a stray character.
	_, err = Parse("t.wl", strings.NewReader("alloc a 1\n\uFEFFfree a\n"))
	if err == nil || err.Error() != `t.wl:2: unexpected character '\ufeff'` {
		t.Errorf("byte-order mark on line 2: %v", err)
	}
}

// Errors quote a short prefix of what is wrong, control characters
// escaped, never the whole of a long input.
func TestErrorsQuoteShortly(t *testing.T) {
	long := strings.Repeat("x", 60000)
	tests := []struct{ src, want string }{
		{"alloc a 1 \x00rest", `t.wl:1: unexpected character '\x00'`},
		{"alloc a 1 \x1b[31m", `t.wl:1: unexpected character '\x1b'`},
		{"alloc a 1 \xff", `t.wl:1: unexpected byte 0xff (not UTF-8)`},
		{long + " 1", `t.wl:1: unknown statement "` + long[:40] + `"...`},
		{"alloc a 1 " + long, `t.wl:1: alloc a: unexpected "` + long[:40] + `"... (options: stream=N)`},
		{"alloc a " + strings.Repeat("9", 60000), "t.wl:1: alloc a: number " + strings.Repeat("9", 60) + "... out of range"},
		{"free " + long, "t.wl:1: free of " + long[:60] + "..., which is not allocated"},
	}
	for _, tt := range tests {
		_, err := Parse("t.wl", strings.NewReader(tt.src))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%.30q: error %v, want %s", tt.src, err, tt.want)
		}
	}
	_, err := ParseWith("t.wl", strings.NewReader("param n = 1"), map[string]string{"n": "1\x00" + long})
	if err == nil || len(err.Error()) > 200 || strings.ContainsRune(err.Error(), 0) {
		t.Errorf("bad parameter value: error %q", err)
	}
}

// Replay streams a script's operations in batches and reports exactly
// what replaying them all at once does, out-of-memory included.
func TestReplayStreams(t *testing.T) {
	src := `seed 7
phase warm
alloc w 100MiB
repeat 3000 as s {
  phase step
  repeat 10 {
    alloc t[i] rand(1KiB, 40MiB) stream=s%3
  }
  record_stream t[3] stream=5
  free t[0] t[1] t[2] t[3] t[4]
  alloc keep[s] 1MiB
  alloc big rand(1MiB, 600MiB)
  free t[5] t[6] t[7] t[8] t[9] big
}
empty_cache
`
	for _, o := range []replay.Options{
		{Points: 2000},
		{Points: 2000, Device: alloc.Sim(3 << 30), DeviceTotal: 3 << 30}, // out of memory after several batches
		{Points: 10, Config: alloc.Config{ExpandableSegments: true}},
	} {
		w, err := open("t.wl", strings.NewReader(src), nil, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		if w.Ops != nil || w.Len() <= 3*batchOps {
			t.Fatalf("Open made %d ops of %d: want none, of more than 3 batches", len(w.Ops), w.Len())
		}
		got, err := w.Replay(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Materialize(); err != nil {
			t.Fatal(err)
		}
		want, err := replay.RunOps(w.Ops, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		if o.Device != nil && (want.OOM == nil || want.OOMOp < batchOps) {
			t.Fatalf("out of memory at %d: want one after the first batch", want.OOMOp)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("options %+v: streamed replay %+v\nwant %+v", o, got, want)
		}
	}
}
