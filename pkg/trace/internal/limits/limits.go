// Package limits holds the bounds every trace reader applies to its
// input, so that a hostile or corrupt file yields a short error instead
// of gigabytes of memory or output.
package limits

import (
	"strconv"
	"unicode/utf8"

	"github.com/gpumem/gpumem/pkg/textsafe"
)

// MaxLine bounds a line of a text trace (gpumem text, RMM CSV).
const MaxLine = 64 << 10

// MaxQuote is how many bytes of an offending input value an error
// message quotes.
const MaxQuote = 64

// Memory returns the bytes a reader may hold for an input of size bytes
// (-1 if unknown: then read is the number of bytes read so far). Real
// snapshots need about 1.1 bytes per input byte, text traces less; the
// fixed part lets small inputs of unusual shape through. With the Go
// runtime's overhead, an input under 64 MB stays under 512 MiB.
func Memory(size, read int64) int64 {
	if size < 0 {
		size = read
	}
	return 64<<20 + 2*size
}

// Quote returns b as a Go string literal for an error message: control
// characters and invalid UTF-8 escaped, at most MaxQuote bytes of it and
// at most 2*MaxQuote bytes of literal (an escape takes up to 4), followed
// by "…" if it was cut.
func Quote[T string | []byte](b T) string {
	n := min(len(b), MaxQuote)
	for {
		for n > 0 && n < len(b) && !utf8.RuneStart(b[n]) {
			n--
		}
		q := strconv.Quote(string(b[:n]))
		if len(q) <= 2*MaxQuote || n == 0 {
			if n < len(b) {
				q += "…"
			}
			return q
		}
		n /= 2
	}
}

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut
// with "…".
func Truncate(s string, n int) string { return textsafe.Clip(s, n) }
