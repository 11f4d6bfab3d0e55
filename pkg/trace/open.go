package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Format is a trace file format.
type Format uint8

// Trace formats Open understands.
const (
	FormatUnknown Format = iota
	FormatPickle         // a PyTorch snapshot pickle (torch.cuda.memory._dump_snapshot)
	FormatText           // gpumem's text trace (docs/trace-format.md)
	FormatRMM            // an RMM logging_resource_adaptor CSV log
)

// String returns a short name for the format.
func (f Format) String() string {
	switch f {
	case FormatPickle:
		return "pytorch-pickle"
	case FormatText:
		return "gpumem-text"
	case FormatRMM:
		return "rmm-csv"
	}
	return "unknown"
}

// sniffLen is how much of a file DetectFormat needs to see.
const sniffLen = 4096

// DetectFormat guesses a trace's format from its first bytes (up to
// 4 KiB): the pickle PROTO opcode, the text trace's header line, or a CSV
// header line with an Action column.
func DetectFormat(head []byte) Format {
	switch {
	case len(head) > 0 && head[0] == 0x80:
		return FormatPickle
	case bytes.HasPrefix(head, []byte(textMagic)):
		return FormatText
	}
	line, _, _ := bytes.Cut(bytes.TrimPrefix(head, []byte(utf8BOM)), []byte("\n"))
	for col := range bytes.SplitSeq(line, []byte(",")) {
		if string(bytes.TrimSpace(col)) == "Action" {
			return FormatRMM
		}
	}
	return FormatUnknown
}

// Open reads the trace in the named file, whatever its format (see
// DetectFormat). Malformed input gives a *FormatError (pickles) or a
// *LineError (text formats) that names the file.
func Open(path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return OpenReader(f, path, size)
}

// OpenReader is Open for a stream already open: name is used in errors,
// size is its length in bytes, or -1 if unknown.
func OpenReader(r io.Reader, path string, size int64) (*Snapshot, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(sniffLen)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch DetectFormat(head) {
	case FormatPickle:
		s, err := ReadPickle(br, size)
		if err != nil {
			if fe, ok := errors.AsType[*FormatError](err); ok {
				fe.File = path
				return nil, fe
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	case FormatText:
		return ReadText(br, path)
	case FormatRMM:
		return ReadRMM(br, path)
	}
	switch {
	case len(head) == 0:
		return nil, fmt.Errorf("%s: empty file", path)
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return nil, fmt.Errorf("%s: gzip-compressed; decompress it first", path)
	}
	return nil, fmt.Errorf("%s: unknown trace format (want a PyTorch snapshot pickle, a gpumem text trace or an RMM log CSV)", path)
}

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

const utf8BOM = "\xef\xbb\xbf"

// maxLine bounds a line of a text trace, so that a file with no newlines
// cannot make the reader buffer all of it.
const maxLine = 64 << 10

// lines reads a text input line by line with a bounded buffer.
type lines struct {
	br   *bufio.Reader
	name string
	n    int // number of the line last returned
}

func newLines(r io.Reader, name string) *lines {
	return &lines{br: bufio.NewReaderSize(r, maxLine), name: name}
}

// next returns the next line without its line ending; the slice is valid
// until the next call. It returns io.EOF after the last line.
func (l *lines) next() ([]byte, error) {
	b, err := l.br.ReadSlice('\n')
	if len(b) == 0 && err == io.EOF {
		return nil, io.EOF
	}
	l.n++
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, l.errorf("line longer than %d bytes", maxLine)
	case err != nil && err != io.EOF:
		return nil, fmt.Errorf("%s: %w", l.name, err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r")), nil
}

func (l *lines) errorf(format string, args ...any) error {
	return &LineError{File: l.name, Line: l.n, Msg: fmt.Sprintf(format, args...)}
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
