// Package limits holds the bounds every trace reader applies to its
// input, so that a hostile or corrupt file yields a short error instead
// of gigabytes of memory or output.
package limits

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"unicode/utf8"

	"github.com/gpumem/gpumem/internal/textsafe"
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
// runtime's overhead, an input under 64 MB stays under 512 MiB. Whatever
// the input's size, a reader holds at most Cap: a compressed file or a
// stream, whose size is only known as it is read, cannot make it hold
// more.
func Memory(size, read int64) int64 {
	if size < 0 {
		size = read
	}
	return min(64<<20+2*size, Cap())
}

// Cap is the most a reader may hold whatever its input: half the
// process's soft memory limit (debug.SetMemoryLimit, or GOMEMLIMIT;
// gpumem sets it from --max-memory), the other half being left to what
// is built from the trace and to the collector. Without a limit there is
// no cap.
func Cap() int64 {
	l := debug.SetMemoryLimit(-1) // -1 reads the limit without changing it
	if l == math.MaxInt64 {
		return math.MaxInt64
	}
	return l / 2
}

// TooMuch says how a reader that needs more than Memory(size, read)
// failed, for its error message: past the cap, or out of proportion to
// its input, when why (a likely cause) follows.
func TooMuch(size, read int64, why string) string {
	if m := Memory(size, read); m == Cap() {
		return fmt.Sprintf("more than %d MiB of memory, the most a trace may take under gpumem's memory limit (--max-memory)", m>>20)
	}
	return fmt.Sprintf("more than %d MiB of memory for %d bytes of input (%s)", Memory(size, read)>>20, read, why)
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
