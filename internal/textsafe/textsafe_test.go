package textsafe

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain frame.py:12", "plain frame.py:12"},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"\x1b[2J\x1b]0;pwned\x07", `\x1b[2J\x1b]0;pwned\a`},
		{"a\rb\nc\x00d\te", `a\rb\nc\x00d\te`},
		{"evil\u202egnp.exe", `evil\u202egnp.exe`},
		{"\u2066x\u2069", `\u2066x\u2069`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"del\x7f c1\u0085", `del\x7f c1\u0085`},
	} {
		if got := Line(c.in); got != c.want {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClipBounds(t *testing.T) {
	long := strings.Repeat("é", 1<<20)
	c := Clip(long, 64)
	if len(c) > 64+len(Ellipsis) || !strings.HasSuffix(c, Ellipsis) || !utf8.ValidString(c) {
		t.Errorf("Clip of 2 MB: %d bytes %q", len(c), c[:20])
	}
	if c := Clip("short", 64); c != "short" {
		t.Errorf("Clip cut %q", c)
	}
}

func TestGitHub(t *testing.T) {
	if got := GitHubData("50%\nnext\r"); got != "50%25%0Anext%0D" {
		t.Errorf("GitHubData = %q", got)
	}
	if got := GitHubProperty("a.pickle:1,2\n::error::x"); got != "a.pickle%3A1%2C2%0A%3A%3Aerror%3A%3Ax" {
		t.Errorf("GitHubProperty = %q", got)
	}
}

// FuzzLine: whatever goes in, what comes out is valid UTF-8 with no
// character Line should have escaped, and clean input is returned as is.
func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "a", "\x1b[31m", "\u202e", "\xff\xfe", "%\n:,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{Line(s), Line(Clip(s, 64)), GitHubData(s), GitHubProperty(s)} {
			if !utf8.ValidString(out) {
				t.Fatalf("%q: invalid UTF-8 out %q", s, out)
			}
			for _, r := range out {
				if unsafeRune(r) {
					t.Fatalf("%q: %U left in %q", s, r, out)
				}
			}
		}
		if clean(s) && Line(s) != s {
			t.Fatalf("clean %q changed", s)
		}
	})
}

// FuzzWriter: whatever goes in, cut into writes anywhere, what comes out
// holds no control (but tab, CR, LF) or bidi character, and is what one
// write of it gives.
func FuzzWriter(f *testing.F) {
	f.Add("<title>a\u202eb</title>", 3)
	f.Add("\x1b[2J\u2066x\u200f\n\t", 1)
	f.Add("\xe2\x80", 1)
	f.Fuzz(func(t *testing.T, s string, cut int) {
		var whole, parts bytes.Buffer
		w := NewWriter(&whole)
		w.Write([]byte(s))
		w.Flush()
		w = NewWriter(&parts)
		step := max(cut%7, 1)
		for i := 0; i < len(s); i += step {
			w.Write([]byte(s[i:min(i+step, len(s))]))
		}
		w.Flush()
		if whole.String() != parts.String() {
			t.Fatalf("%q in writes of %d: %q, in one: %q", s, step, parts.String(), whole.String())
		}
		for _, r := range whole.String() {
			if r != '\t' && r != '\n' && r != '\r' && unsafeRune(r) {
				t.Fatalf("%q: %U left in %q", s, r, whole.String())
			}
		}
	})
}

func TestWriterMarks(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	io.WriteString(w, "<title>gpumem replay of evil\xe2\x80")
	io.WriteString(w, "\xaefdp.pickle\x1b</title>\n")
	w.Flush()
	if want := "<title>gpumem replay of evil[U+202E]fdp.pickle[U+001B]</title>\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

// TestPrintable8 checks the word test Writer skips plain text with: every
// byte value at every place of a word of printable bytes.
func TestPrintable8(t *testing.T) {
	base := []byte("abcdefgh")
	for pos := range 8 {
		for v := range 256 {
			w := bytes.Clone(base)
			w[pos] = byte(v)
			x := uint64(0)
			for k := 7; k >= 0; k-- {
				x = x<<8 | uint64(w[k])
			}
			if got, want := printable8(x), v >= 0x20 && v <= 0x7e; got != want {
				t.Fatalf("printable8(%q) = %v, want %v", w, got, want)
			}
		}
	}
}

// TestWriterLong marks what a long run of plain text hides, at every
// place in a word.
func TestWriterLong(t *testing.T) {
	for at := range 17 {
		in := []byte(strings.Repeat("A", 24))
		in[at] = 0x1b
		var b bytes.Buffer
		w := NewWriter(&b)
		w.Write(in)
		w.Flush()
		want := strings.Repeat("A", at) + "[U+001B]" + strings.Repeat("A", 23-at)
		if b.String() != want {
			t.Fatalf("escape at %d: got %q, want %q", at, b.String(), want)
		}
	}
}
