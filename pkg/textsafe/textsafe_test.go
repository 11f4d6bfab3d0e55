package textsafe

import (
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
