package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Files that are not regular files, as outputs and as inputs.

const tinyTrace = "# gpumem-trace v1\nalloc 0x7f0000000000 1048576\nalloc 0x7f0000100000 512\nfree 0x7f0000000000\n"

func tinyTraceFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "t.trace")
	if err := os.WriteFile(p, []byte(tinyTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readFIFO makes a FIFO and returns what is written into it until its
// writer closes it (or 20 s pass).
func readFIFO(t *testing.T) (path string, got <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no FIFOs:", err)
	}
	c := make(chan string, 1)
	go func() {
		// a writer that replaced the FIFO instead leaves this open
		// blocked for good: the caller waits 20 s at most
		r, err := os.Open(path)
		if err != nil {
			c <- err.Error()
			return
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		c <- string(b)
	}()
	timeout := make(chan string, 1)
	go func() {
		select {
		case s := <-c:
			timeout <- s
		case <-time.After(20 * time.Second):
			timeout <- "(nothing within 20 s)"
		}
	}()
	return path, timeout
}

// convert into a FIFO and --html into one write into it; the FIFO stays.
func TestOutputsIntoFIFO(t *testing.T) {
	in := tinyTraceFile(t)
	for _, args := range [][]string{
		{"convert", in},
		{"replay", in, "-o", "json", "--html"},
	} {
		fifo, got := readFIFO(t)
		if _, errs, code := gm(t, append(args, fifo)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		s := <-got
		if args[0] == "convert" && !strings.HasPrefix(s, "# gpumem-trace v1") || args[0] == "replay" && !strings.Contains(s, "<html") {
			t.Errorf("%v: the FIFO's reader got %.60q", args, s)
		}
		if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("%v: the FIFO is now %v", args, fi.Mode())
		}
	}
}
