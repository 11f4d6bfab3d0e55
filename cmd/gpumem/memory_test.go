package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// zstdLines writes a zstd file holding a text trace of n bytes of
// alloc/free lines: a small file that expands a lot.
func zstdLines(t *testing.T, n int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bomb.zst")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("0", 100)
	chunk := []byte(strings.Repeat("alloc 0x7f0000000000 512 t=1 # "+pad+"\nfree 0x7f0000000000 t=2 # "+pad+"\n", 4096))
	w.Write([]byte("# gpumem-trace v1\n"))
	for written := 0; written < n; written += len(chunk) {
		w.Write(chunk)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// A compressed trace that expands past --max-memory is refused with one
// line, however small the file: the readers' memory is bounded by the
// budget, not by the decompressed size. Which check stops it first, the
// reader's or the watchdog's, depends on what the replay keeps per event;
// both name the flag.
func TestCompressedBombRefused(t *testing.T) {
	bomb := zstdLines(t, 512<<20)
	if fi, _ := os.Stat(bomb); fi.Size() > 1<<20 {
		t.Fatalf("the bomb is %d bytes", fi.Size())
	}
	stdout, errs, code := gm(t, "replay", bomb, "-o", "json", "--max-memory", "256MiB")
	if code != exitUsage || stdout != "" || strings.Count(errs, "gpumem: error:") != 1 ||
		!strings.Contains(errs, "(--max-memory)") || strings.Contains(errs, "goroutine") {
		t.Fatalf("exit %d, stdout %d bytes, stderr:\n%s", code, len(stdout), errs)
	}
}

// Past its budget a command stops with one error line and a hint, never
// the runtime's crash: the watchdog sees the process's memory.
func TestOutOfMemoryBudget(t *testing.T) {
	_, errs, code := gm(t, "replay", pytorchFixture("seed_frag.pickle"), "--max-memory", "1MiB")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if code != exitUsage || len(lines) != 2 || !strings.HasPrefix(lines[0], "gpumem: error: out of memory: ") ||
		!strings.HasPrefix(lines[1], "gpumem: hint: ") || !strings.Contains(lines[1], "--max-memory") {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
	// the soft limit is restored for the commands that follow
	if _, errs, code := gm(t, "replay", pytorchFixture("seed_frag.pickle"), "-o", "json"); code != 0 {
		t.Fatalf("the next replay: exit %d: %s", code, errs)
	}
}

// A zstd frame asking for a window over --zstd-max-window is refused
// with a hint naming the flag; the flag raises the limit.
func TestZstdWindowFlag(t *testing.T) {
	// a frame of raw blocks declaring a 256 MiB window
	text := "# gpumem-trace v1\nalloc 0x7f0000000000 512\n"
	frame := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, (28 - 10) << 3}, byte(len(text)<<3|1), byte(len(text)>>5), 0)
	frame = append(frame, text...)
	p := filepath.Join(t.TempDir(), "window.zst")
	os.WriteFile(p, frame, 0o644)
	_, errs, code := gm(t, "replay", p, "-o", "json")
	if code != exitUsage || !strings.Contains(errs, "window larger than 128 MiB") || !strings.Contains(errs, "gpumem: hint: ") || !strings.Contains(errs, "--zstd-max-window") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if _, errs, code := gm(t, "replay", p, "-o", "json", "--zstd-max-window", "256MiB"); code != 0 {
		t.Fatalf("--zstd-max-window 256MiB: exit %d: %s", code, errs)
	}
}
