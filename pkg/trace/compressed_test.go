package trace

import (
	"bytes"
	"compress/gzip"
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
