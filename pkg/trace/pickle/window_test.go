package pickle

import (
	"bytes"
	"io"
	"os"
	"reflect"
	"testing"
)

// sliceWindows is an input read in place (Windower), windows of at least
// least bytes over data.
type sliceWindows struct {
	data  []byte
	least int
}

func (s *sliceWindows) Window(off int64, n int) ([]byte, error) {
	if off >= int64(len(s.data)) {
		return nil, io.EOF
	}
	end := min(int(off)+max(n, s.least), len(s.data))
	b := bytes.Clone(s.data[off:end]) // a fresh copy: what a window before held is gone
	if end == len(s.data) {
		return b, io.EOF
	}
	return b, nil
}

func (s *sliceWindows) Read([]byte) (int, error) { panic("a Windower is not read") }

// A pickle read in place decodes as one read, whatever the windows'
// size; one cut short fails with the same error.
func TestWindowsReadAsRead(t *testing.T) {
	data, err := os.ReadFile("../../../testdata/pytorch/gpt2_varlen.pickle")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{len(data), len(data) / 2, len(data) / 3, 1000} {
		in := data[:n]
		want, werr := Read(bytes.NewReader(in), "x", int64(n))
		for _, least := range []int{1, 4096, 256 << 10} {
			got, gerr := Read(&sliceWindows{in, least}, "x", int64(n))
			if !reflect.DeepEqual(got, want) || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
				t.Errorf("%d bytes, windows of %d: %v, want %v", n, least, gerr, werr)
			}
		}
	}
}
