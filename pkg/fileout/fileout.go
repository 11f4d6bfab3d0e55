// Package fileout writes output files so that a reader never sees half of
// one: data goes to a temporary file beside the target, which replaces the
// target only once it is complete and synced. A failed write, a full disk
// or an interrupt leaves the target as it was and no temporary file behind.
// It also refuses to write over a file that is one of the command's inputs,
// and gives long reads a way to stop when the user interrupts.
package fileout

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File is an output file being written; Commit puts it in place, Abort
// throws it away. Exactly one of them should be called (Abort after
// Commit does nothing, so `defer f.Abort()` is the usual pattern).
type File struct {
	*os.File
	path string
	done bool
}

// Create starts writing path. It fails at once if path names one of
// inputs (the same file, by device and inode, however it is spelled), so
// `replay x.pickle --html x.pickle` cannot destroy the trace.
func Create(path string, inputs ...string) (*File, error) {
	if err := NotAnInput(path, inputs...); err != nil {
		return nil, err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, unwrapPath(err))
	}
	return &File{File: tmp, path: path}, nil
}

// Commit syncs the data and renames it over the target. The file keeps
// the target's permissions if it existed, else gets 0644 (not
// CreateTemp's 0600: reports are shared).
func (f *File) Commit() error {
	if f.done {
		return errors.New(f.path + ": already closed")
	}
	f.done = true
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		mode := os.FileMode(0o644)
		if fi, serr := os.Stat(f.path); serr == nil {
			mode = fi.Mode().Perm()
		}
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), f.path)
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
	os.Remove(f.Name())
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
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Commit()
}

// ErrIsInput is returned for an output path that is one of the inputs.
var ErrIsInput = errors.New("is also an input: refusing to overwrite it")

// NotAnInput fails with ErrIsInput when path names one of inputs, for
// commands that check their output paths before doing any work.
func NotAnInput(path string, inputs ...string) error {
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
