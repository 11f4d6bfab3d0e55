//go:build unix

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"syscall"
	"unsafe"
)

// A plain snapshot pickle streamed for the report is read in place: its
// decoder walks a window of the file mapped into memory
// (pickle.Windower), moved along as it goes, where read() copies each
// byte from the page cache into the decoder's buffer first (the kernel's
// copy was 5-7% of `replay -o json`'s CPU at 1M and 10M events). Only
// the window is mapped at a time, as big as the copy's buffer was, so the
// resident set holds no more of the file than before. A file cut short
// while it is mapped faults on its missing pages (SIGBUS): readMapped
// turns that into an error (debug.SetPanicOnFault), not a crash. A read
// that draws a progress bar (a big file, on a terminal) reads as before.

// mapWindow is the least a window maps: the copy's buffer's size
// (pickle's bufSize), which larger windows did not beat.
const mapWindow = 256 << 10

// errFileChanged is a mapped file's fault: it was cut short as it was
// read.
var errFileChanged = errors.New("the file changed (it was cut short) while it was read")

// mappedFile is a regular file read a mapped window at a time.
type mappedFile struct {
	ctx   context.Context
	f     *os.File
	size  int64
	page  int64
	least int64  // the least a window maps (mapWindow; tests make it a page)
	win   []byte // the current mapping, nil when none
	off   int64  // for Read: the next offset
}

// openMapped opens path to be read in place, or says why not (ok false):
// not a regular file, empty, or compressed (its first byte is not a
// pickle's PROTO opcode, 0x80, so that the usual way says what it is).
func openMapped(ctx context.Context, path string) (m *mappedFile, ok bool) {
	if path == Stdin {
		return nil, false
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	fi, err := f.Stat()
	var head [1]byte
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		f.Close()
		return nil, false
	}
	if n, _ := f.ReadAt(head[:], 0); n != 1 || head[0] != 0x80 {
		f.Close()
		return nil, false
	}
	return &mappedFile{ctx: ctx, f: f, size: fi.Size(), page: int64(os.Getpagesize()), least: mapWindow}, true
}

// Window maps the file from off on, at least n bytes of it or to its end
// (pickle.Windower); the bytes of the window before are no longer valid.
func (m *mappedFile) Window(off int64, n int) ([]byte, error) {
	if err := m.ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.unmap(); err != nil {
		return nil, err
	}
	if off >= m.size {
		return nil, io.EOF
	}
	start := off &^ (m.page - 1)
	length := min(max(int64(n)+off-start, m.least), m.size-start)
	b, err := syscall.Mmap(int(m.f.Fd()), start, int(length), syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", m.f.Name(), err)
	}
	m.win = b
	if start+length == m.size {
		return b[off-start:], io.EOF
	}
	return b[off-start:], nil
}

// Read reads as a file does from where the last Read ended (a reader
// that does not know windows).
func (m *mappedFile) Read(p []byte) (int, error) {
	if err := m.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := m.f.ReadAt(p, m.off)
	m.off += int64(n)
	return n, err
}

// maps says whether addr lies in the current window: a fault anywhere
// else is a bug, and stays a panic.
func (m *mappedFile) maps(addr uintptr) bool {
	if len(m.win) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&m.win[0]))
	return addr >= start && addr-start < uintptr(len(m.win))
}

func (m *mappedFile) unmap() error {
	if m.win == nil {
		return nil
	}
	err := syscall.Munmap(m.win)
	m.win = nil
	return err
}

// Close unmaps the window and closes the file.
func (m *mappedFile) Close() error {
	err := m.unmap()
	return errors.Join(err, m.f.Close())
}

// readMapped calls read with m, turning a fault on its mapping (the file
// cut short) into errFileChanged.
func readMapped(m *mappedFile, read func(r io.Reader) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok && m.maps(f.Addr()) {
				err = fmt.Errorf("%s: %w", m.f.Name(), errFileChanged)
				return
			}
			panic(r)
		}
	}()
	return read(m)
}
