package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Compressed traces are read transparently: Decompress recognises gzip
// and zstd by their magic bytes, whatever the file is called, and streams
// the decompressed bytes, so a large snapshot is never held twice.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// Decompress returns a reader of r's decompressed bytes and the
// compression's name ("gzip", "zstd"), or r itself and "" when r is not
// compressed. The returned close function frees the decoder.
func Decompress(r io.Reader, name string) (out io.Reader, compression string, close func(), err error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	head, _ := br.Peek(len(zstdMagic))
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		return zr, "gzip", func() { zr.Close() }, nil
	case bytes.HasPrefix(head, zstdMagic):
		// one goroutine: the decoder keeps pace with a decoder reading
		// it and holds no more than a window in memory
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: zstd: %w", name, err)
		}
		return zr, "zstd", zr.Close, nil
	}
	return br, "", func() {}, nil
}
