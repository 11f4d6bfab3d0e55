package trace

import (
	"bytes"
	"compress/gzip"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// FuzzOpenCompressed reads any bytes as a possibly compressed trace, as
// every command does, under a memory limit: a frame asking for a big
// window, a stream that expands a lot or a corrupt one ends in an error
// naming the file, never a panic or memory out of bounds.
func FuzzOpenCompressed(f *testing.F) {
	const text = "# gpumem-trace v1\nalloc 0x10 512\nfree 0x10\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(text))
	zw.Close()
	f.Add(gz.Bytes())
	enc, _ := zstd.NewWriter(nil)
	f.Add(enc.EncodeAll([]byte(text), nil))
	f.Add(enc.EncodeAll([]byte(strings.Repeat("free 0x10\n", 100000)), nil))
	f.Add(zstdFrame(29, []byte(text)))
	f.Add(zstdFrame(20, []byte(text)))
	old := debug.SetMemoryLimit(256 << 20)
	defer debug.SetMemoryLimit(old)
	f.Fuzz(func(t *testing.T, data []byte) {
		// a small window keeps each run fast; the limit is what is tested
		r, compression, done, err := DecompressWindow(bytes.NewReader(data), "f.zst", 1<<20)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.zst: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		defer done()
		_, err = OpenDecompressed(r, "f.zst", compression, -1)
		if err != nil && !strings.HasPrefix(err.Error(), "f.zst") {
			t.Fatalf("error %q does not name the file", err)
		}
	})
}
