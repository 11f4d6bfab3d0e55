package limits

import (
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", `"abc"`},
		{"a\x1b[2J\n", `"a\x1b[2J\n"`},
		{strings.Repeat("x", 100), `"` + strings.Repeat("x", MaxQuote) + `"…`},
		{strings.Repeat("é", 40), `"` + strings.Repeat("é", MaxQuote/2) + `"…`},
		// escapes take 4 bytes each: the literal stays short
		{strings.Repeat("\xe1", 64), `"` + strings.Repeat(`\xe1`, 16) + `"…`},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%.20q) = %s, want %s", c.in, got, c.want)
		}
		if got := Quote([]byte(c.in)); got != c.want {
			t.Errorf("Quote([]byte(%.20q)) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"aé", 2, "a…"}, // never splits a rune
	} {
		if got := Truncate(c.in, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
