package workload

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

func TestParse(t *testing.T) {
	const (
		A  = alloc.OpAlloc
		F  = alloc.OpFree
		RS = alloc.OpRecordStream
		FC = alloc.OpFreeComplete
		EC = alloc.OpEmptyCache
	)
	tests := []struct {
		name, src string
		want      []alloc.Op
	}{
		{"empty", "# nothing\n\n   \n", nil},
		{"units", "alloc a 2MiB\nalloc b 3 KB\nalloc c 1.5GiB\nalloc d 7B\nalloc e 1kib", []alloc.Op{
			{Kind: A, ID: 0, Size: 2 << 20}, {Kind: A, ID: 1, Size: 3000},
			{Kind: A, ID: 2, Size: 3 << 29}, {Kind: A, ID: 3, Size: 7}, {Kind: A, ID: 4, Size: 1024}}},
		{"arithmetic", "let h = 768\nalloc x 4*h*(1+2) - 8/2 % 3\nalloc y (2+2)MiB", []alloc.Op{
			{Kind: A, ID: 0, Size: 4*768*3 - 1}, {Kind: A, ID: 1, Size: 4 << 20}}},
		{"functions", "alloc x max(3, 5) + min(1, 2) + align(1000, 512)", []alloc.Op{
			{Kind: A, Size: 5 + 1 + 1024}}},
		{"ids reused smallest first", "alloc a 1\nalloc b 1\nalloc c 1\nfree b a\nalloc d 2\nalloc e 2\nalloc f 2", []alloc.Op{
			{Kind: A, ID: 0, Size: 1}, {Kind: A, ID: 1, Size: 1}, {Kind: A, ID: 2, Size: 1},
			{Kind: F, ID: 1}, {Kind: F, ID: 0},
			{Kind: A, ID: 0, Size: 2}, {Kind: A, ID: 1, Size: 2}, {Kind: A, ID: 3, Size: 2}}},
		{"streams", "alloc a 1MiB stream=1\nfree a", []alloc.Op{
			{Kind: A, ID: 0, Stream: 1, Size: 1 << 20}, {Kind: F, ID: 0, Stream: 1}}},
		{"record_stream defers completion", "alloc a 1MiB\nrecord_stream a stream=2\nfree a\nalloc b 1MiB\nalloc c 1", []alloc.Op{
			{Kind: A, ID: 0, Size: 1 << 20}, {Kind: RS, ID: 0, Stream: 2}, {Kind: F, ID: 0},
			{Kind: FC, ID: 0}, {Kind: A, ID: 0, Size: 1 << 20}, {Kind: A, ID: 1, Size: 1}}},
		{"record_stream then empty_cache", "alloc a 1\nrecord_stream a 3\nfree a\nempty_cache", []alloc.Op{
			{Kind: A, Size: 1}, {Kind: RS, Stream: 3}, {Kind: F}, {Kind: FC}, {Kind: EC}}},
		{"record_stream at end", "alloc a 1\nrecord_stream a stream=1\nfree a", []alloc.Op{
			{Kind: A, Size: 1}, {Kind: RS, Stream: 1}, {Kind: F}, {Kind: FC}}},
		{"record_stream own stream is plain", "alloc a 1\nrecord_stream a stream=0\nfree a\nalloc b 1", []alloc.Op{
			{Kind: A, Size: 1}, {Kind: RS}, {Kind: F}, {Kind: A, Size: 1}}},
		{"repeat with index", "repeat 3 {\n  alloc t[i] (i+1)KiB\n}\nrepeat 3 as k {\n free t[2-k]\n}", []alloc.Op{
			{Kind: A, ID: 0, Size: 1024}, {Kind: A, ID: 1, Size: 2048}, {Kind: A, ID: 2, Size: 3072},
			{Kind: F, ID: 2}, {Kind: F, ID: 1}, {Kind: F, ID: 0}}},
		{"nested repeat", "repeat 2 as a {\nrepeat 2 as b {\nalloc m[a][b] 1\n}\n}\nfree m[1][0]", []alloc.Op{
			{Kind: A, ID: 0, Size: 1}, {Kind: A, ID: 1, Size: 1}, {Kind: A, ID: 2, Size: 1}, {Kind: A, ID: 3, Size: 1},
			{Kind: F, ID: 2}}},
		{"empty_cache and comments", "alloc a 1 # one byte\nfree a\nempty_cache # done", []alloc.Op{
			{Kind: A, Size: 1}, {Kind: F}, {Kind: EC}}},
		{"crlf", "alloc a 1\r\nfree a\r\n", []alloc.Op{{Kind: A, Size: 1}, {Kind: F}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Parse("t.wl", strings.NewReader(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Ops) != len(tt.want) {
				t.Fatalf("got %d ops %v, want %d %v", len(w.Ops), w.Ops, len(tt.want), tt.want)
			}
			for i := range w.Ops {
				if w.Ops[i] != tt.want[i] {
					t.Errorf("op %d = %+v, want %+v", i, w.Ops[i], tt.want[i])
				}
			}
		})
	}
}

func TestParsePhasesAndHeader(t *testing.T) {
	src := "description a test  # not this\nlimit 8GiB\nphase warm up\nalloc a 1\nphase main\nfree a\nphase end\n"
	w, err := Parse("t.wl", strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if w.Description != "a test" || w.Limit != 8<<30 || w.Name != "t.wl" {
		t.Errorf("header = %q %d %q", w.Description, w.Limit, w.Name)
	}
	want := []Phase{{"warm up", 0}, {"main", 1}, {"end", 2}}
	if len(w.Phases) != len(want) {
		t.Fatalf("phases = %v, want %v", w.Phases, want)
	}
	for i := range want {
		if w.Phases[i] != want[i] {
			t.Errorf("phase %d = %v, want %v", i, w.Phases[i], want[i])
		}
	}
}

func TestParseRandSeeded(t *testing.T) {
	src := "seed 42\nrepeat 20 {\nalloc t[i] rand(1MiB, 8MiB)\n}\n"
	a, err := Parse("t.wl", strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Parse("t.wl", strings.NewReader(src))
	c, _ := Parse("t.wl", strings.NewReader(strings.Replace(src, "42", "43", 1)))
	differ := false
	for i := range a.Ops {
		if a.Ops[i] != b.Ops[i] {
			t.Fatalf("same seed, op %d differs: %v vs %v", i, a.Ops[i], b.Ops[i])
		}
		if s := a.Ops[i].Size; s < 1<<20 || s > 8<<20 {
			t.Errorf("size %d outside [1MiB, 8MiB]", s)
		}
		differ = differ || a.Ops[i] != c.Ops[i]
	}
	if !differ {
		t.Error("seeds 42 and 43 gave the same sizes")
	}
}

func TestParseParams(t *testing.T) {
	src := "param n = 2\nparam size = 1KiB\nrepeat n {\nalloc t[i] size\n}\n"
	w, err := ParseWith("t.wl", strings.NewReader(src), map[string]string{"n": "5"})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Ops) != 5 || w.Ops[0].Size != 1024 {
		t.Errorf("ops = %v, want 5 allocations of 1024", w.Ops)
	}
	for _, p := range []map[string]string{{"m": "1"}, {"n": "two"}} {
		if _, err := ParseWith("t.wl", strings.NewReader(src), p); err == nil {
			t.Errorf("params %v: no error", p)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"alloc a 1\nalloc a 2", "t.wl:2: buffer a is already allocated"},
		{"free a", "t.wl:1: free of a, which is not allocated"},
		{"alloc a 1\nfree a\nfree a", "t.wl:3: free of a, which is not allocated"},
		{"record_stream a stream=1", "t.wl:1: record_stream of a, which is not allocated"},
		{"alloc a 2XB", `t.wl:1: alloc a: unknown unit "XB" in 2XB`},
		{"alloc a 2 XB", `t.wl:1: alloc a: unexpected "XB" (options: stream=N)`},
		{"\n\nalloc a MiB", "t.wl:3: alloc a: unit MiB needs a number before it"},
		{"alloc a 1.5", "t.wl:1: alloc a: fractional number 1.5 needs a unit"},
		{"alloc a 1.1B", "t.wl:1: alloc a: 1.1B is not a whole number of bytes"},
		{"alloc a 1..2MiB", "malformed number 1..2"},
		{"alloc a 0", "t.wl:1: alloc a: size 0 out of range"},
		{"alloc a 2-3", "size -1 out of range"},
		{"alloc a 2PB", `unknown unit "PB"`},
		{"alloc a 1/0", "t.wl:1: alloc a: division by zero"},
		{"alloc a 9223372036854775807*2", "arithmetic overflow"},
		{"alloc a 99999999999999999999", "number 99999999999999999999 out of range"},
		{"alloc a x", "t.wl:1: alloc a: undefined variable x"},
		{"alloc a", "alloc a: expression missing at end of line"},
		{"alloc a (1", `expected ")" at end of line`},
		{"alloc a 1 stream=-1", "stream -1 out of range"},
		{"alloc a 1 colour=2", `unexpected "colour"`},
		{"alloc a rand(5, 1)", "rand(5, 1): high bound below low bound"},
		{"alloc a rand(5)", "rand takes 2 arguments, not 1"},
		{"alloc a 1 $", "unexpected character '$'"},
		{"frob a", `t.wl:1: unknown statement "frob"`},
		{"= 3", `expected a statement, found "="`},
		{"let MiB = 3", "MiB is a unit, not a variable name"},
		{"let rand = 3", "rand is a function, not a variable name"},
		{"let x 3", `let x: expected "=", found "3"`},
		{"repeat 3\nalloc a 1", `repeat: expected "{" at end of line`},
		{"repeat 3 {\nalloc a 1", "t.wl:1: repeat block not closed with }"},
		{"}", "t.wl:1: } without repeat"},
		{"repeat 2 {\nalloc a 1\n}", "t.wl:2: buffer a is already allocated"},
		{"repeat -1 {\n}", "repeat count -1 is negative"},
		{"repeat 2 {\nparam x = 1\n}", "t.wl:2: param inside repeat"},
		{"param x = 1\nparam x = 2", "t.wl:2: param x declared twice"},
		{"phase", "phase needs a name"},
		{"free", "free needs a buffer name"},
		{"record_stream a", "record_stream a: needs stream=N"},
		{"empty_cache now", `empty_cache: unexpected "now"`},
		{"alloc t[1 1", `expected "]", found "1"`},
		{"alloc a " + strings.Repeat("1", 70000), "t.wl:1: more than 65536 bytes in a line (the limit)"},
	}
	for _, tt := range tests {
		_, err := Parse("t.wl", strings.NewReader(tt.src))
		if err == nil {
			t.Errorf("%q: no error, want %q", tt.src, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %q, want it to contain %q", tt.src, err, tt.want)
		}
		var perr *Error
		if !errors.As(err, &perr) {
			t.Errorf("%q: error %T is not an *Error", tt.src, err)
		}
	}
}

// FuzzParse runs scripts under small limits, so that each execution takes
// at most milliseconds: hostile input must end in an error of one short
// line naming the script, never a panic, a hang or gigabytes.
func FuzzParse(f *testing.F) {
	f.Add("seed 42\nphase forward\nlet h = 768\nalloc x 4*h*1024\nalloc y 2MiB stream=1\nrecord_stream y stream=2\nfree x\nrepeat 10 {\n  alloc tmp[i] rand(1MiB, 8MiB)\n  free tmp[i]\n}\nfree y\nempty_cache\n")
	f.Add("param n = 3\nrepeat n as k {\nalloc a[k][k+1] (k+1)*1.5KiB\n}\nfree a[0][1]\n")
	f.Add("alloc a 1\nrecord_stream a 1\nfree a\nalloc b align(max(1, 2), 512)\n")
	f.Add("\uFEFFrepeat 1000000000000 {\n  alloc x[i][i] 1MiB\n  phase p\n}\n")
	f.Add("repeat 99999999999999999999 {\nrepeat 9223372036854775807 {\nlet a = -(-(1))\n}\n}\n")
	f.Add("alloc a 1 \x00\x1b[31m\xff")
	lim := Limits{Ops: 1 << 10, Live: 1 << 8, Memory: 64 << 10}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 1<<10 {
			return // longer scripts exercise nothing new, only slowly
		}
		w, err := open("f.wl", strings.NewReader(src), nil, lim)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "f.wl:") || len(msg) > 300 || strings.ContainsFunc(msg, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				t.Fatalf("error not one short line naming the script: %q", msg)
			}
			return
		}
		// Streaming makes the operations that materialising keeps.
		var streamed []alloc.Op
		b := w.prog.builder(func(ops []alloc.Op) error { streamed = append(streamed, ops...); return nil })
		b.noPhases = true
		if err := w.prog.run(b); err != nil {
			t.Fatalf("second run: %v", err)
		}
		n := w.Len()
		if err := w.Materialize(); err != nil {
			t.Fatalf("materialising: %v", err)
		}
		if len(w.Ops) != n || !slices.Equal(streamed, w.Ops) {
			t.Fatalf("streamed %d ops, counted %d, materialised %d, not the same", len(streamed), n, len(w.Ops))
		}
		if _, err := checkOps(w.Ops); err != nil {
			t.Fatalf("ill-formed ops from %q: %v", src, err)
		}
		for _, p := range w.Phases {
			if p.Op < 0 || p.Op > len(w.Ops) {
				t.Fatalf("phase %v outside the %d ops", p, len(w.Ops))
			}
		}
	})
}
