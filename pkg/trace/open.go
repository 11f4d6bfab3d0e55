package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpumem/gpumem/pkg/trace/pickle"
)

// Reader reads one trace format from r. name is used in errors, which
// name it; size is the input's length in bytes, -1 if unknown.
type Reader func(r io.Reader, name string, size int64) (*Snapshot, error)

// Format is a trace format Open understands.
type Format struct {
	Name      string                 // short name, such as "pytorch-pickle"
	Desc      string                 // what it is, for help text
	WrittenBy string                 // what writes it, for docs
	Magic     string                 // how Sniff recognises it, for docs
	Sniff     func(head []byte) bool // whether the first bytes (up to 4 KiB) are this format
	Read      Reader
}

// Formats lists the trace formats Open reads, in the order it tries them.
// Help text and docs/trace-format.md are made from it (FormatList,
// FormatTable).
var Formats = []Format{
	{
		Name:      "pytorch-pickle",
		Desc:      "a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot, gpumem record)",
		WrittenBy: "`torch.cuda.memory._dump_snapshot`, `gpumem record`",
		Magic:     "first byte `0x80` (pickle protocol 2+)",
		Sniff:     func(head []byte) bool { return len(head) > 0 && head[0] == 0x80 },
		Read:      pickle.Read,
	},
	{
		Name:      "gpumem-text",
		Desc:      "a gpumem text trace (docs/trace-format.md)",
		WrittenBy: "`gpumem convert`, `python/gpumem_trace_writer.py`, any program",
		Magic:     "first line starts with `" + textMagic + "` (after an optional UTF-8 byte-order mark)",
		Sniff: func(head []byte) bool {
			return bytes.HasPrefix(bytes.TrimPrefix(head, []byte(utf8BOM)), []byte(textMagic))
		},
		Read: ReadText,
	},
	{
		Name:      "rmm-csv",
		Desc:      "an RMM logging_resource_adaptor CSV log",
		WrittenBy: "RAPIDS RMM `logging_resource_adaptor`",
		Magic:     "first line is a CSV header with an `Action` column",
		Sniff:     sniffRMM,
		Read:      ReadRMM,
	},
}

// sniffRMM looks for an Action column in the first line.
func sniffRMM(head []byte) bool {
	line, _, _ := bytes.Cut(bytes.TrimPrefix(head, []byte(utf8BOM)), []byte("\n"))
	for col := range bytes.SplitSeq(line, []byte(",")) {
		if string(bytes.TrimSpace(col)) == rmmAction {
			return true
		}
	}
	return false
}

// FormatList names the formats in a sentence for help text: "a ..., a ...
// or an ...".
func FormatList() string {
	var b strings.Builder
	for i, f := range Formats {
		switch {
		case i == 0:
		case i == len(Formats)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(f.Desc)
	}
	return b.String()
}

// FormatTable is the Markdown table of formats in docs/trace-format.md.
func FormatTable() string {
	var b strings.Builder
	b.WriteString("| format | name | how it is recognised | written by |\n| --- | --- | --- | --- |\n")
	for _, f := range Formats {
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", f.Desc, f.Name, f.Magic, f.WrittenBy)
	}
	return b.String()
}

// sniffLen is how much of a file Detect needs to see.
const sniffLen = 4096

// Detect returns the format of a trace whose first bytes (up to 4 KiB)
// are head, or nil if none matches.
func Detect(head []byte) *Format {
	for i := range Formats {
		if Formats[i].Sniff(head) {
			return &Formats[i]
		}
	}
	return nil
}

// Open reads the trace in the named file, whatever its format (see
// Formats). Malformed input gives a *pickle.FormatError (pickles) or a
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
// size is its length in bytes, or -1 if unknown. A gzip or zstd stream is
// decompressed as it is read (see Decompress).
func OpenReader(r io.Reader, path string, size int64) (*Snapshot, error) {
	r, compression, closeDecoder, err := Decompress(r, path)
	if err != nil {
		return nil, err
	}
	defer closeDecoder()
	if compression != "" {
		size = -1 // the decompressed length is not known ahead
	}
	return OpenDecompressed(r, path, compression, size)
}

// OpenDecompressed is OpenReader for a stream that Decompress has already
// decompressed: compression is what it was ("" for none), for errors.
func OpenDecompressed(r io.Reader, path, compression string, size int64) (*Snapshot, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(sniffLen)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f := Detect(head); f != nil {
		return f.Read(br, path, size)
	}
	switch {
	case len(head) == 0:
		return nil, fmt.Errorf("%s: empty file", path)
	case compression != "":
		return nil, fmt.Errorf("%s: %s-compressed, but not a trace inside (want %s)", path, compression, FormatList())
	}
	return nil, fmt.Errorf("%s: unknown trace format (want %s)", path, FormatList())
}

// ReadPickle decodes a PyTorch snapshot pickle (see package pickle).
func ReadPickle(r io.Reader, name string, size int64) (*Snapshot, error) {
	return pickle.Read(r, name, size)
}

// StreamPickle decodes a PyTorch snapshot pickle, handing the events of
// its device traces to sink instead of keeping them (see pickle.Stream).
func StreamPickle(r io.Reader, name string, size int64, sink PickleSink) (*Snapshot, []int, error) {
	return pickle.Stream(r, name, size, sink)
}

const utf8BOM = "\xef\xbb\xbf"
