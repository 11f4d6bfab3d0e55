package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/gpumem/gpumem/pkg/trace/internal/limits"
)

// LineError reports malformed input in a line-oriented trace: a gpumem
// text trace or an RMM log.
type LineError struct {
	File string // "" if not known
	Line int    // 1-based; 0 when the error is about the input as a whole
	Msg  string
}

func (e *LineError) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
	case e.File != "":
		return e.File + ": " + e.Msg
	case e.Line > 0:
		return "line " + strconv.Itoa(e.Line) + ": " + e.Msg
	}
	return e.Msg
}

// lines reads a text input line by line with a bounded buffer.
type lines struct {
	br   *bufio.Reader
	name string
	n    int   // number of the line last returned
	read int64 // bytes read so far
}

func newLines(r io.Reader, name string) *lines {
	return &lines{br: bufio.NewReaderSize(r, limits.MaxLine), name: name}
}

// next returns the next line without its line ending; the slice is valid
// until the next call. It returns io.EOF after the last line.
func (l *lines) next() ([]byte, error) {
	b, err := l.br.ReadSlice('\n')
	if len(b) == 0 && err == io.EOF {
		return nil, io.EOF
	}
	l.n++
	l.read += int64(len(b))
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, l.errorf("line longer than %d bytes", limits.MaxLine)
	case err != nil && err != io.EOF:
		return nil, fmt.Errorf("%s: %w", l.name, err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r")), nil
}

func (l *lines) errorf(format string, args ...any) error {
	return &LineError{File: l.name, Line: l.n, Msg: fmt.Sprintf(format, args...)}
}

// lineLimit passes a reader through, failing on a line longer than
// limits.MaxLine, for a parser (encoding/csv) that would buffer it whole.
type lineLimit struct {
	r    io.Reader
	name string
	line int   // newlines seen
	run  int   // bytes since the last newline
	read int64 // bytes read so far
}

func (l *lineLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.read += int64(n)
	for b := p[:n]; len(b) > 0; {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.run += len(b)
			break
		}
		l.run += i
		if l.run > limits.MaxLine {
			break
		}
		l.line++
		l.run = 0
		b = b[i+1:]
	}
	if l.run > limits.MaxLine {
		return 0, &LineError{File: l.name, Line: l.line + 1, Msg: fmt.Sprintf("line longer than %d bytes", limits.MaxLine)}
	}
	return n, err
}

// memBudget bounds the memory a text reader holds in what it builds
// (event lists, segments), relative to the input size (limits.Memory):
// a short line can make a 40- or 120-byte struct.
type memBudget struct {
	held int64 // bytes of slice capacity held
	size int64 // input size, -1 if unknown
}

// grow makes room for more elements of cost bytes each in *s, or
// reports false if that would pass the budget; read is the number of
// input bytes read so far. The old and new arrays both count while the
// elements are copied, so the budget also bounds the peak.
func grow[T any](b *memBudget, s *[]T, more int, cost int64, read int64) bool {
	n, c := len(*s), cap(*s)
	if n+more <= c {
		return true
	}
	newCap := max(n+more, 2*c, 64)
	if c >= 1<<16 {
		newCap = max(n+more, c+c/4)
	}
	grow := int64(newCap) * cost
	if b.held+grow > limits.Memory(b.size, read) {
		return false
	}
	ns := make([]T, n, newCap)
	copy(ns, *s)
	*s = ns
	b.held += grow - int64(c)*cost
	return true
}

// parseUint reads a decimal number or a hexadecimal one with a 0x prefix.
func parseUint(b []byte) (uint64, bool) {
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		return parseHex(b[2:])
	}
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// parseHex reads hex digits with no prefix.
func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}

// parseInt reads a decimal number with an optional sign.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg || len(b) > 0 && b[0] == '+' {
		b = b[1:]
	}
	if len(b) > 1 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		return 0, false
	}
	u, ok := parseUint(b)
	switch {
	case !ok:
		return 0, false
	case neg && u <= 1<<63:
		return -int64(u), true
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}
