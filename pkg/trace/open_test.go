package trace

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace/pickle"
)

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		head string
		want string // format name, "" for none
	}{
		{"\x80\x04\x95", "pytorch-pickle"},
		{"# gpumem-trace v1\n", "gpumem-text"},
		{"# gpumem-trace v9\n", "gpumem-text"}, // ReadText reports the version
		{utf8BOM + "# gpumem-trace v1\n", "gpumem-text"},
		{"Thread,Time,Action,Pointer,Size,Stream\n1,2", "rmm-csv"},
		{utf8BOM + "Size, Action ,Pointer", "rmm-csv"},
		{"Thread,Time\nAction", ""},
		{"# gpumem\n", ""},
		{"", ""},
	} {
		got := ""
		if f := Detect([]byte(c.head)); f != nil {
			got = f.Name
		}
		if got != c.want {
			t.Errorf("%q: got %q, want %q", c.head, got, c.want)
		}
	}
}

// The docs' table of formats is made from Formats: go test -run
// TestFormatDocs -update rewrites it.
func TestFormatDocs(t *testing.T) {
	const path = "../../docs/trace-format.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "| format |")
	end := strings.Index(doc[max(start, 0):], "\n\n")
	if start < 0 || end < 0 {
		t.Fatalf("%s: no table of formats", path)
	}
	end += start + 1
	if doc[start:end] == FormatTable() {
		return
	}
	if !*update {
		t.Fatalf("%s: the table of formats is out of date; run go test ./pkg/trace -run TestFormatDocs -update\ngot:\n%s\nwant:\n%s", path, doc[start:end], FormatTable())
	}
	if err := os.WriteFile(path, []byte(doc[:start]+FormatTable()+doc[end:]), 0o644); err != nil {
		t.Fatal(err)
	}
}

var update = flag.Bool("update", false, "rewrite the docs' table of formats")

func TestFormatList(t *testing.T) {
	got := FormatList()
	for _, f := range Formats {
		if !strings.Contains(got, f.Desc) {
			t.Errorf("FormatList() = %q lacks %q", got, f.Desc)
		}
	}
	if n := strings.Count(got, " or "); n != 1 {
		t.Errorf("FormatList() = %q: want one \"or\"", got)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pk, err := Open("../../testdata/pytorch/seed_frag.pickle")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../../testdata/pytorch/seed_frag.pickle")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := pickle.Read(f, "seed_frag.pickle", -1)
	if err != nil {
		t.Fatal(err)
	}
	if !eventsEqual(pk.Traces, want.Traces) || len(pk.Segments) != len(want.Segments) || len(pk.Stacks) != len(want.Stacks) {
		t.Errorf("Open and pickle.Read disagree on the pickle")
	}

	txt, err := Open(write("a.trace", "# gpumem-trace v1\nalloc 0x10 512\n"))
	if err != nil || len(txt.Traces) != 1 || len(txt.Traces[0]) != 1 {
		t.Errorf("text: got %+v, %v", txt, err)
	}
	// a byte-order mark, as Windows editors write (issue #12 item 10)
	bom, err := Open(write("bom.trace", utf8BOM+"# gpumem-trace v1\nalloc 0x10 512\n"))
	if err != nil || len(bom.Traces) != 1 || len(bom.Traces[0]) != 1 {
		t.Errorf("text with a BOM: got %+v, %v", bom, err)
	}
	csv, err := Open(write("a.csv", rmmLog))
	if err != nil || len(csv.Traces) != 1 || len(csv.Traces[0]) != 5 {
		t.Errorf("rmm: got %+v, %v", csv, err)
	}

	for _, c := range []struct{ name, body, want string }{
		{"bad.trace", "# gpumem-trace v1\n\nfree\n", "bad.trace:3: want \"free ADDR [SIZE]\""},
		{"bad.csv", "Thread,Action,Pointer,Size\n1,allocate,0x10,x\n", "bad.csv:2: bad Size \"x\""},
		{"bad.pickle", "\x80\x04K", "bad.pickle: byte "},
		{"empty", "", "empty: empty file"},
		{"gz", "\x1f\x8b\x08\x00", "gz: gzip: unexpected EOF"},
		{"gzhead", "\x1f\x8b\x09\x00\x00\x00\x00\x00\x00\x00", "gzhead: gzip: invalid header"},
		{"junk", "hello\n", "junk: unknown trace format (want " + FormatList() + ")"},
	} {
		p := write(c.name, c.body)
		_, err := Open(p)
		if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, c.want)) || strings.Count(err.Error(), "gzip: ") > 1 {
			t.Errorf("%s: got %v, want %s...", c.name, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
}

func TestLineErrorText(t *testing.T) {
	for _, c := range []struct {
		e    LineError
		want string
	}{
		{LineError{"f", 3, "bad"}, "f:3: bad"},
		{LineError{"f", 0, "bad"}, "f: bad"},
		{LineError{"", 3, "bad"}, "line 3: bad"},
		{LineError{"", 0, "bad"}, "bad"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestParseNumbers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"18446744073709551615", 1<<64 - 1, true}, {"18446744073709551616", 0, false},
		{"0x0", 0, true}, {"0xFFFFffffFFFFffff", 1<<64 - 1, true}, {"0x10000000000000000", 0, false},
		{"0x", 0, false}, {"", 0, false}, {"+1", 0, false}, {"1_0", 0, false},
	} {
		if got, ok := parseUint([]byte(c.in)); got != c.want || ok != c.ok {
			t.Errorf("parseUint(%q) = %d, %t; want %d, %t", c.in, got, ok, c.want, c.ok)
		}
	}
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"-9223372036854775808", -1 << 63, true}, {"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 0, false}, {"-0x10", 0, false}, {"+5", 5, true}, {"-", 0, false},
	} {
		if got, ok := parseInt([]byte(c.in)); got != c.want || ok != c.ok {
			t.Errorf("parseInt(%q) = %d, %t; want %d, %t", c.in, got, ok, c.want, c.ok)
		}
	}
}
