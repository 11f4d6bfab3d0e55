package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// A gzip or zstd trace reads as the trace inside, whatever its name.
func TestOpenCompressed(t *testing.T) {
	const text = "# gpumem-trace v1\nalloc 0x10 512\nalloc 0x20 1024\nfree 0x10\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(text))
	zw.Close()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zst := enc.EncodeAll([]byte(text), nil)
	var gzJunk bytes.Buffer
	zw = gzip.NewWriter(&gzJunk)
	zw.Write([]byte("hello\n"))
	zw.Close()

	dir := t.TempDir()
	for name, body := range map[string][]byte{"a.trace.gz": gz.Bytes(), "a.zst": zst, "noext": zst, "b.gz": gz.Bytes()} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		snap, err := Open(p)
		if err != nil || len(snap.Traces) != 1 || len(snap.Traces[0]) != 4 {
			t.Errorf("%s: got %+v, %v", name, snap, err)
		}
	}
	_, err = OpenReader(bytes.NewReader(gzJunk.Bytes()), "junk.gz", -1)
	if err == nil || !strings.HasPrefix(err.Error(), "junk.gz: gzip-compressed, but not a trace inside") {
		t.Errorf("compressed junk: got %v", err)
	}
	_, err = OpenReader(bytes.NewReader(zst[:len(zst)-4]), "cut.zst", -1)
	if err == nil {
		t.Errorf("a truncated zstd stream read without error")
	}
}

// zstdFrame is a zstd frame of raw blocks holding data whose header
// declares a window of 1<<windowLog bytes, as a hostile file can: a
// few bytes that would make a decoder reserve the whole window.
func zstdFrame(windowLog int, data []byte) []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	for len(data) > 0 {
		n := min(len(data), 1<<16)
		last := 0
		if n == len(data) {
			last = 1
		}
		h := n<<3 | last // a raw block
		f = append(f, byte(h), byte(h>>8), byte(h>>16))
		f = append(f, data[:n]...)
		data = data[n:]
	}
	return f
}

// A frame declaring a window over the limit is refused with a
// *WindowError before any memory is reserved for it; one within reads.
func TestZstdWindowCapped(t *testing.T) {
	const text = "# gpumem-trace v1\nalloc 0x10 512\nfree 0x10\n"
	_, err := OpenReader(bytes.NewReader(zstdFrame(29, []byte(text))), "big-window.zst", -1)
	var we *WindowError
	if !errors.As(err, &we) || we.Max != DefaultMaxWindow || !strings.HasPrefix(err.Error(), "big-window.zst: zstd: the stream needs a window larger than 128 MiB") {
		t.Fatalf("a 512 MiB window: err %v", err)
	}
	snap, err := OpenReader(bytes.NewReader(zstdFrame(20, []byte(text))), "small-window.zst", -1)
	if err != nil || len(snap.Traces) != 1 {
		t.Fatalf("a 1 MiB window: %v", err)
	}
	// DecompressWindow lowers (or raises) the limit
	r, _, done, err := DecompressWindow(bytes.NewReader(zstdFrame(20, []byte(text))), "x.zst", 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, err := io.ReadAll(r); !errors.As(err, &we) || we.Max != 64<<10 {
		t.Fatalf("a 1 MiB window over a 64 KiB limit: err %v", err)
	}
}
