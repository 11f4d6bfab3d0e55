package report

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostileText is what an input file can put in a name or a stack frame:
// ESC sequences (clear the screen, set the window title), CR, NUL, a
// newline and a right-to-left override.
const hostileText = "evil\x1b[2J\x1b]0;owned\x07\rfile\x00\n::error::forged\u202eyp.txt"

// checkHumanText fails if out holds a control character other than a
// newline, or a bidi control, or a line that a hostile name started.
func checkHumanText(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			t.Errorf("%s: %U at byte %d: %q", what, r, i, out[max(0, i-20):min(len(out), i+20)])
			return
		}
	}
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8", what)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "::error") {
			t.Errorf("%s: a forged line %q", what, l)
		}
	}
}

// Names and frames from input files reach the table and Markdown reports
// escaped: no control character, no bidi override, no forged line.
func TestHostileNamesEscaped(t *testing.T) {
	r := fragmentationOOM()
	r.Source = hostileText + ".pickle"
	r.OOM.Frames = []string{hostileText + ":12", "train.py:3"}
	r.OOM.PinFrames = [][]string{{hostileText}}
	for name, render := range map[string]func(*bytes.Buffer) error{
		"table":    func(b *bytes.Buffer) error { return Table(b, r, Options{}) },
		"markdown": func(b *bytes.Buffer) error { return Markdown(b, r, Options{}) },
	} {
		var b bytes.Buffer
		if err := render(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), `\x1b[2J`) {
			t.Errorf("%s: the escaped name is missing", name)
		}
		checkHumanText(t, name, b.String())
	}
}
