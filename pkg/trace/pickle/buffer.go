package pickle

import (
	"encoding/binary"
	"fmt"
	"io"
)

// need makes n bytes available at d.buf[d.pos:].
func (d *decoder) need(n int) error {
	if len(d.buf)-d.pos >= n {
		return nil
	}
	return d.fill(n)
}

// Windower is an input the decoder reads in place, a window at a time,
// instead of copying it into a buffer of its own: a memory-mapped file,
// whose bytes the read() of a copy would pay for a second time.
type Windower interface {
	// Window returns the input's bytes from offset off on: at least n of
	// them, or all there are when fewer are left, and io.EOF with them
	// when they reach the end. They are valid until the next call.
	Window(off int64, n int) ([]byte, error)
}

func (d *decoder) fill(n int) error {
	if w, ok := d.r.(Windower); ok {
		return d.fillWindow(w, n)
	}
	if len(d.raw) < bufSize && d.rerr == nil && (n > len(d.raw) || d.base+int64(d.pos) > 0) {
		// More than the first buffer's worth: the input is not small.
		d.raw = make([]byte, max(n, min(4*len(d.raw), bufSize)))
	}
	rem := copy(d.raw, d.buf[d.pos:])
	d.base += int64(d.pos)
	d.pos = 0
	d.buf = d.raw[:rem]
	if d.rerr == nil {
		m, err := io.ReadAtLeast(d.r, d.raw[rem:], n-rem)
		d.buf = d.raw[:rem+m]
		if err != nil {
			d.rerr = err
		}
	}
	if len(d.buf) >= n {
		return nil
	}
	if d.rerr == io.EOF || d.rerr == io.ErrUnexpectedEOF {
		return d.errorf("unexpected end of data")
	}
	return fmt.Errorf("reading pickle at byte %d: %w", d.base+int64(len(d.buf)), d.rerr)
}

// fillWindow is fill for an input read in place: the window moves to the
// current position, which the bytes before it then no longer hold.
func (d *decoder) fillWindow(w Windower, n int) error {
	if d.rerr == nil {
		off := d.base + int64(d.pos)
		b, err := w.Window(off, n)
		d.raw, d.buf, d.base, d.pos = b, b, off, 0
		if err != nil {
			d.rerr = err
		}
	}
	if len(d.buf)-d.pos >= n {
		return nil
	}
	if d.rerr == io.EOF {
		return d.errorf("unexpected end of data")
	}
	return fmt.Errorf("reading pickle at byte %d: %w", d.base+int64(len(d.buf)), d.rerr)
}

// checkLen bounds a length declared by the input by the bytes left and
// by limit (maxSkip if negative).
func (d *decoder) checkLen(n uint64, limit int64, what string) (int, error) {
	if limit < 0 {
		limit = maxSkip
	}
	if left := d.left(); left >= 0 && n > uint64(left) {
		return 0, d.errorf("%s of %d bytes runs past the end of the data (%d bytes left)", what, n, left)
	}
	if n > uint64(limit) {
		return 0, d.errorf("%s of %d bytes is longer than the limit of %d", what, n, limit)
	}
	return int(n), nil
}

// left is the number of input bytes after the current position, or -1.
func (d *decoder) left() int64 {
	if d.size < 0 {
		return -1
	}
	return max(d.size-d.base-int64(d.pos), 0)
}

// readLen reads an n-byte little-endian length.
func (d *decoder) readLen(n int) (uint64, error) {
	if err := d.need(n); err != nil {
		return 0, err
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	switch n {
	case 1:
		return uint64(b[0]), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	}
	return binary.LittleEndian.Uint64(b), nil
}

// payload returns the next n bytes, n at most bufSize. The slice is
// only valid until the next read.
func (d *decoder) payload(n int) ([]byte, error) {
	if err := d.need(n); err != nil {
		return nil, err
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

// skip discards n bytes.
func (d *decoder) skip(n int) error {
	for n > 0 {
		if d.pos == len(d.buf) {
			if err := d.fill(1); err != nil {
				return err
			}
		}
		k := min(n, len(d.buf)-d.pos)
		d.pos += k
		n -= k
	}
	return nil
}
