package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compressed traces are read transparently: Decompress recognises gzip
// and zstd by their magic bytes, whatever the file is called, and streams
// the decompressed bytes, so a large snapshot is never held twice.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// DefaultMaxWindow is the largest zstd window Decompress accepts: what
// zstd's own command line accepts without --memory. A decoder holds a
// window of history, so a small frame declaring a huge window would
// otherwise cost that much memory (and time) to decode.
const DefaultMaxWindow = 128 << 20

// WindowError is a zstd stream whose frames need a window larger than
// the decoder was allowed.
type WindowError struct{ Max uint64 }

func (e *WindowError) Error() string {
	return fmt.Sprintf("zstd: the stream needs a window larger than %d MiB, the most allowed", e.Max>>20)
}

// Decompress returns a reader of r's decompressed bytes and the
// compression's name ("gzip", "zstd"), or r itself and "" when r is not
// compressed. The returned close function frees the decoder. A zstd
// window over DefaultMaxWindow is refused (see DecompressWindow).
func Decompress(r io.Reader, name string) (out io.Reader, compression string, close func(), err error) {
	return DecompressWindow(r, name, DefaultMaxWindow)
}

// DecompressWindow is Decompress accepting zstd windows of up to
// maxWindow bytes (at least 1 KiB); a larger one fails the read with a
// *WindowError.
func DecompressWindow(r io.Reader, name string, maxWindow uint64) (out io.Reader, compression string, close func(), err error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	head, _ := br.Peek(len(zstdMagic))
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gzip: ") { // the reader's own errors say it
				err = fmt.Errorf("gzip: %w", err)
			}
			return nil, "", nil, fmt.Errorf("%s: %w", name, err)
		}
		return zr, "gzip", func() { zr.Close() }, nil
	case bytes.HasPrefix(head, zstdMagic):
		// one goroutine: the decoder keeps pace with a decoder reading
		// it and holds no more than a window in memory
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(max(maxWindow, zstd.MinWindowSize)))
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: zstd: %w", name, err)
		}
		return windowReader{zr, max(maxWindow, zstd.MinWindowSize)}, "zstd", zr.Close, nil
	}
	return br, "", func() {}, nil
}

// windowReader names the window limit in the error of a frame past it.
type windowReader struct {
	r   io.Reader
	max uint64
}

func (w windowReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		err = &WindowError{Max: w.max}
	}
	return n, err
}
