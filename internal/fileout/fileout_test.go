package fileout

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteCommits(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.html")
	if err := Write(context.Background(), p, nil, func(w io.Writer) error { _, err := io.WriteString(w, "<html>"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "<html>" {
		t.Fatalf("content %q", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	onlyFiles(t, dir, "r.html")
}

// A write that fails half way leaves the old file whole and no temporary.
func TestWriteFailureKeepsTarget(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.html")
	os.WriteFile(p, []byte("old report"), 0o600)
	boom := errors.New("disk full")
	err := Write(context.Background(), p, nil, func(w io.Writer) error {
		io.WriteString(w, "half a rep")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old report" {
		t.Fatalf("target changed to %q", b)
	}
	onlyFiles(t, dir, "r.html")
}

func TestRefusesInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "x.pickle")
	os.WriteFile(in, []byte("trace"), 0o644)
	// the same file spelled another way
	_, err := Create(filepath.Join(dir, ".", "x.pickle"), "unrelated", in)
	if !errors.Is(err, ErrIsInput) || !strings.Contains(err.Error(), "x.pickle") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(in); string(b) != "trace" {
		t.Fatal("input changed")
	}
	onlyFiles(t, dir, "x.pickle")
}

func TestCreateInMissingDir(t *testing.T) {
	_, err := Create(filepath.Join(t.TempDir(), "nope", "r.html"))
	if err == nil || !strings.Contains(err.Error(), "nope/r.html") || strings.Contains(err.Error(), ".tmp-") {
		t.Fatalf("err %v", err)
	}
}

func TestReaderStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := Reader(ctx, strings.NewReader(strings.Repeat("x", 100)))
	buf := make([]byte, 10)
	if n, err := r.Read(buf); n != 10 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	cancel()
	if _, err := r.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v", err)
	}
}

func onlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	es, _ := os.ReadDir(dir)
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("files %v, want %v", got, want)
	}
}

// An interrupt during a write leaves neither the file nor a temporary.
func TestWriterStopsAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	err := Write(context.Background(), filepath.Join(dir, "big.html"), nil, func(w io.Writer) error {
		cw := Writer(ctx, w)
		for i := 0; ; i++ {
			if i == 3 {
				cancel()
			}
			if _, err := io.WriteString(cw, "chunk"); err != nil {
				return err
			}
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	onlyFiles(t, dir)
}
