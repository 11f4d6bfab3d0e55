// Package textsafe makes text that came from input files safe to show a
// person. Stack frames, file names, case names and values quoted in errors
// come from other people's machines: raw, an ESC sequence could clear the
// screen or set the window title, a CR or newline could forge a line (a
// fake "::error" annotation in CI), a NUL could cut a log, and a bidi
// override could make text read differently from what it is.
//
// Line replaces every such character with a visible escape; Clip bounds a
// length on a rune boundary; GitHubData and GitHubProperty
// escape workflow-command text as GitHub documents it.
package textsafe

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Line returns s with every control character (C0 including tab and
// newline, DEL, C1), every bidirectional formatting character and every
// byte of invalid UTF-8 replaced by a Go-style escape (\x1b, \n, \u202e),
// so the result is one line that shows what it holds.
func Line(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// clean reports whether s needs no escaping: printable ASCII, or UTF-8
// with no rune Line would escape.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			return false
		}
		if c >= 0x80 {
			for _, r := range s[i:] {
				if r == utf8.RuneError || unsafeRune(r) {
					return false
				}
			}
			return true
		}
	}
	return true
}

// unsafeRune reports control and bidi formatting characters.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, // arabic letter mark, LRM, RLM
		r >= 0x202a && r <= 0x202e, // LRE, RLE, PDF, LRO, RLO
		r >= 0x2066 && r <= 0x2069, // LRI, RLI, FSI, PDI
		r == 0x2028, r == 0x2029:   // line and paragraph separators
		return true
	}
	return false
}

// Ellipsis marks text that Clip cut short.
const Ellipsis = "…"

// Clip returns at most max bytes of s, cut on a rune boundary, with
// Ellipsis appended when anything was cut. It does not escape.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}

// GitHubData escapes the message of a GitHub Actions workflow command
// ("::error title=T::DATA"): %, CR and LF, so the data cannot end the
// command or start another one. Control characters are then escaped by
// Line, which leaves the %-escapes alone.
func GitHubData(s string) string {
	s = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
	return Line(s)
}

// GitHubProperty escapes a property value of a workflow command (title,
// file): GitHubData's escapes plus ':' and ','.
func GitHubProperty(s string) string {
	s = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
	return Line(s)
}

// FirstLine is Line of s's first line: an error message whose library
// added lines (cobra's suggestions) prints as one.
func FirstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return Line(s)
}
