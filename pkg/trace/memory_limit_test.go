package trace

import (
	"errors"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// endless is a stream that repeats a header and then a line for ever, as
// a decompressed bomb or `yes | gpumem replay -` does.
type endless struct {
	head, line string
	pos        int
	read       int64
	stop       int64 // fail after this many bytes (a test's safety net)
}

var errEndless = errors.New("the reader did not stop")

func (e *endless) Read(p []byte) (int, error) {
	if e.stop > 0 && e.read > e.stop {
		return 0, errEndless
	}
	n := 0
	for n < len(p) {
		s := e.line
		if e.read == 0 && e.head != "" {
			s = e.head
		}
		c := copy(p[n:], s[e.pos:])
		n += c
		e.pos += c
		if e.pos == len(s) {
			e.pos = 0
			if s == e.head {
				e.head = ""
			}
		}
	}
	e.read += int64(n)
	return n, nil
}

// withMemoryLimit sets the process's soft memory limit for a test.
func withMemoryLimit(t *testing.T, n int64) {
	old := debug.SetMemoryLimit(n)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

// An endless stream of valid lines, whose size is never known, is refused
// once the reader holds half the process's memory limit: its memory does
// not grow with what it has read.
func TestReadersCappedByMemoryLimit(t *testing.T) {
	const limit = 256 << 20
	withMemoryLimit(t, limit)
	pad := strings.Repeat("0", 100)
	for _, c := range []struct {
		name string
		in   *endless
		read Reader
	}{
		{"text", &endless{head: "# gpumem-trace v1\n", line: "alloc 0x7f0000000000 512 t=1 # " + pad + "\nfree 0x7f0000000000 t=2 # " + pad + "\n"}, ReadText},
		{"rmm", &endless{head: "Thread,Time,Action,Pointer,Size,Stream,Note\n", line: "1,00:00:01.5,allocate,0x7f5e1a000000,1024,0x0," + pad + "\n1,00:00:01.5,free,0x7f5e1a000000,1024,0x0," + pad + "\n"}, ReadRMM},
	} {
		c.in.stop = 2 * limit
		_, err := c.read(c.in, c.name, -1)
		if err == nil || !strings.Contains(err.Error(), "memory limit") {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		// the cap is 128 MiB of held structures; each event holds 40 bytes
		// for about 130 bytes of input, so a reader bounded by its input
		// alone would have read past 400 MiB
		if c.in.read > 3*limit/2 {
			t.Errorf("%s: read %d MiB before stopping", c.name, c.in.read>>20)
		}
		runtime.GC()
	}
}

var _ io.Reader = (*endless)(nil)
