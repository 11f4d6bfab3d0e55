// Package fileout writes output files so that a reader never sees half of
// one: data goes to a temporary file beside the target, which replaces the
// target only once it is complete and synced. A failed write, a full disk
// or an interrupt leaves the target as it was and no temporary file behind.
//
// Only a regular file or a missing path is replaced so. A character
// device, FIFO or terminal (/dev/null, /dev/stdout, a named pipe) is
// written into directly, as a shell's ">" would: replacing it would put a
// regular file in its place (as root, in place of the system's
// /dev/null). A symlink is followed: the file it points to is replaced
// and the link kept, and a link into /proc/self/fd or /dev/fd is written
// through. Folders, block devices and dangling links are refused.
//
// It also refuses to write over a file that is one of the command's inputs,
// and gives long reads a way to stop when the user interrupts.
package fileout

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File is an output file being written; Commit puts it in place, Abort
// throws it away. Exactly one of them should be called (Abort after
// Commit does nothing, so `defer f.Abort()` is the usual pattern).
type File struct {
	*os.File
	path   string // as the caller named it, for messages
	target string // what the temporary file replaces
	direct bool   // written into, not replaced (a device, a FIFO)
	done   bool
}

// Create starts writing path. It fails at once if path names one of
// inputs (the same file, by device and inode, however it is spelled), so
// `replay x.pickle --html x.pickle` cannot destroy the trace.
func Create(path string, inputs ...string) (*File, error) {
	if err := NotAnInput(path, inputs...); err != nil {
		return nil, err
	}
	target, direct, err := placeOf(path)
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if direct {
		// O_APPEND: a regular file reached through /dev/stdout is written
		// after what the process's standard output already holds
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, unwrapPath(err))
		}
		return &File{File: f, path: path, direct: true}, nil
	}
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, unwrapPath(err))
	}
	return &File{File: tmp, path: path, target: target}, nil
}

// placeOf says where the data for path goes: target is path with its
// symlinks resolved, to be replaced by a rename, unless direct, when it
// is to be opened and written into (a device, FIFO or terminal, or a file
// reached through a /proc or /dev/fd link).
func placeOf(path string) (target string, direct bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, false, nil
	}
	if err != nil {
		return "", false, unwrapPath(err)
	}
	link := fi.Mode()&os.ModeSymlink != 0
	if link {
		if fi, err = os.Stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", false, unwritable("a dangling symlink: refusing to write through it")
			}
			return "", false, unwrapPath(err)
		}
		if fi.Mode().IsRegular() && !throughFD(path) {
			if target, err = filepath.EvalSymlinks(path); err != nil {
				return "", false, unwrapPath(err)
			}
			return target, false, nil
		}
	}
	if err := checkKind(fi.Mode()); err != nil {
		return "", false, err
	}
	// a regular file here was reached through /proc or /dev/fd
	return path, link || !fi.Mode().IsRegular(), nil
}

// checkKind accepts what can be written: a regular file, a character
// device (a terminal, /dev/null), a FIFO or a socket.
func checkKind(m fs.FileMode) error {
	switch {
	case m.IsRegular(), m&os.ModeNamedPipe != 0, m&os.ModeSocket != 0,
		m&os.ModeDevice != 0 && m&os.ModeCharDevice != 0:
		return nil
	case m.IsDir():
		return unwritable("is a folder")
	case m&os.ModeDevice != 0:
		return unwritable("is a block device: refusing to write into it")
	}
	return unwritable(fmt.Sprintf("is not a regular file (%v): refusing to write into it", m.Type()))
}

// ErrUnwritable is (errors.Is) the error for an output path that cannot
// be written: a folder, a block device, a dangling link.
var ErrUnwritable = errors.New("cannot be written")

type unwritable string

func (u unwritable) Error() string        { return string(u) }
func (u unwritable) Is(target error) bool { return target == ErrUnwritable }

// throughFD says whether a chain of symlinks from path passes through
// /proc or /dev/fd, whose links name open files rather than paths.
func throughFD(path string) bool {
	for range 40 {
		to, err := os.Readlink(path)
		if err != nil {
			return false
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(path), to)
		}
		if strings.HasPrefix(to, "/proc/") || strings.HasPrefix(to, "/dev/fd/") {
			return true
		}
		path = to
	}
	return false
}

// Commit syncs the data and renames it over the target. The file keeps
// the target's permissions if it existed, else gets 0644 (not
// CreateTemp's 0600: reports are shared). A file written into directly
// (a device, a FIFO) is closed.
func (f *File) Commit() error {
	if f.done {
		return errors.New(f.path + ": already closed")
	}
	f.done = true
	if f.direct {
		if err := f.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, unwrapPath(err))
		}
		return nil
	}
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	mode := os.FileMode(0o644)
	if err == nil {
		// the target may have changed while the data was written: replace
		// a regular file or nothing, never a device or FIFO put there since
		if fi, serr := os.Lstat(f.target); serr == nil {
			if !fi.Mode().IsRegular() {
				err = errors.New("is no longer a regular file: not replaced")
			}
			mode = fi.Mode().Perm()
		}
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), f.target)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", f.path, unwrapPath(err))
	}
	return nil
}

// Abort removes the temporary file; the target is untouched.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	if !f.direct {
		os.Remove(f.Name())
	}
}

// Write creates path, lets write fill it through a buffer that fails once
// ctx is done, and commits it if write returns nil; otherwise (an error,
// a full disk, an interrupt) nothing changes on disk.
func Write(ctx context.Context, path string, inputs []string, write func(io.Writer) error) error {
	f, err := Create(path, inputs...)
	if err != nil {
		return err
	}
	defer f.Abort()
	w := bufio.NewWriterSize(Writer(ctx, f), 1<<20)
	if err := write(w); err != nil {
		return f.named(err)
	}
	if err := w.Flush(); err != nil {
		return f.named(err)
	}
	return f.Commit()
}

// named makes a write error name the file the caller asked for, not the
// temporary file ("writing r.html: no space left on device").
func (f *File) named(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == f.Name() {
		return fmt.Errorf("writing %s: %w", f.path, pe.Err)
	}
	return err
}

// ErrIsInput is returned for an output path that is one of the inputs.
var ErrIsInput = errors.New("is also an input: refusing to overwrite it")

// NotAnInput fails with ErrIsInput when path names one of inputs, for
// commands that check their output paths before doing any work. It also
// fails for a path that cannot be written (a folder, a block device, a
// dangling link), so that no work is done for nothing.
func NotAnInput(path string, inputs ...string) error {
	if path != "" {
		if _, _, err := placeOf(path); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	out, err := os.Stat(path)
	if err != nil {
		return nil // a new file is no input
	}
	for _, in := range inputs {
		if fi, err := os.Stat(in); err == nil && os.SameFile(fi, out) {
			return fmt.Errorf("%s %w", path, ErrIsInput)
		}
	}
	return nil
}

// unwrapPath drops the *PathError's own copy of the temporary name so the
// message names the file the user asked for.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// Reader returns r, which fails with ctx's error once ctx is done: a
// decoder reading through it stops at its next read after an interrupt.
func Reader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Writer returns w, which fails with ctx's error once ctx is done: a long
// write stops at its next call after an interrupt, and Write then throws
// the temporary file away.
func Writer(ctx context.Context, w io.Writer) io.Writer { return ctxWriter{ctx, w} }

type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
