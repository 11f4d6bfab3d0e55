package textsafe

import (
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"
)

// Writer passes a document through to another writer with every control
// character but tab, CR and LF, and every bidirectional formatting
// character, replaced by a visible [U+202E]: for an HTML page, whose
// text (its <title>, a file name in a table, a frame in a tooltip, a
// string in its script's data) then cannot read differently from what
// it holds. The marker has no backslash, so that it stays as it is in a
// JSON or JavaScript string too, where \u202e would turn back into the
// character. A rune cut between two writes is held until the next one;
// Flush writes what is held at the end.
type Writer struct {
	w    io.Writer
	held []byte // the start of a rune cut at the end of the last write
	out  []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p, escaped; it reports len(p) written on success.
func (v *Writer) Write(p []byte) (int, error) {
	in := p
	if len(v.held) > 0 {
		in = append(v.held, p...)
		v.held = nil
	}
	out := v.out[:0]
	start := 0 // of the run of bytes to copy as they are
	for i := 0; i < len(in); {
		for i+8 <= len(in) && printable8(binary.LittleEndian.Uint64(in[i:])) {
			i += 8 // most of a page: its data in base64
		}
		if i == len(in) {
			break
		}
		c := in[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
				out = append(append(out, in[start:i]...), marker(rune(c))...)
				start = i + 1
			}
			i++
			continue
		}
		if !utf8.FullRune(in[i:]) {
			out = append(out, in[start:i]...)
			v.held = append([]byte(nil), in[i:]...)
			start = len(in)
			break
		}
		r, n := utf8.DecodeRune(in[i:])
		if r != utf8.RuneError && unsafeRune(r) {
			out = append(append(out, in[start:i]...), marker(r)...)
			start = i + n
		}
		i += n
	}
	if start == 0 && len(out) == 0 && len(v.held) == 0 {
		out = in // nothing to mark: no copy (a page's data can be megabytes)
	} else {
		out = append(out, in[start:]...)
		v.out = out
	}
	if _, err := v.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// printable8 reports whether the eight bytes of w are all printable ASCII
// (0x20 to 0x7e): none is below 0x20 (a byte's borrow sets its top bit
// only then, in a word of bytes below 0x80) and none above 0x7e (a byte
// plus one sets its top bit only then).
func printable8(w uint64) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	return (w-0x20*ones)&^w&tops|((w+ones)|w)&tops == 0
}

// Flush writes the bytes of a rune cut short at the end, as they are.
func (v *Writer) Flush() error {
	if len(v.held) == 0 {
		return nil
	}
	_, err := v.w.Write(v.held)
	v.held = nil
	return err
}

func marker(r rune) string { return fmt.Sprintf("[U+%04X]", r) }
