package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/progress"
	"github.com/gpumem/gpumem/pkg/trace"
)

// progressFrom is the trace size from which reading it shows a progress
// bar: smaller ones read in well under a second.
const progressFrom = 64 << 20

// phased is a progress writer for a read that is one pass of several:
// its bar says what the pass does ("planning", not "reading").
type phased struct {
	io.Writer
	verb string
}

// inPhase is w for a pass that verb describes; nil stays nil.
func inPhase(w io.Writer, verb string) io.Writer {
	if w == nil {
		return nil
	}
	if p, ok := w.(phased); ok {
		w = p.Writer
	}
	return phased{w, verb}
}

// phaseOf is the writer and the verb of a read's bar.
func phaseOf(w io.Writer) (io.Writer, string) {
	if p, ok := w.(phased); ok {
		return p.Writer, p.verb
	}
	return w, "reading"
}

// Stdin is the trace path that reads standard input.
const Stdin = "-"

type stdinKey struct{}

// stdin is standard input, and the record of the paths that can be read
// only once (see readsOnce) and have been.
type stdin struct {
	r    io.Reader
	mu   sync.Mutex
	read map[string]bool
}

// WithStdin gives the commands run under ctx r as standard input: the
// trace path "-" reads it. Without it, "-" is refused. It also starts
// the record of the pipes read under ctx: one is read once.
func WithStdin(ctx context.Context, r io.Reader) context.Context {
	return context.WithValue(ctx, stdinKey{}, &stdin{r: r, read: map[string]bool{}})
}

// readsOnce says whether path can be read only once: standard input, or
// anything that is not a regular file (a pipe such as <(cat x) or
// /dev/stdin, a FIFO, a device). Such a path is read once, into memory,
// never streamed in several passes as a big file is.
func readsOnce(path string) bool {
	if path == Stdin {
		return true
	}
	fi, err := os.Stat(path)
	return err == nil && !fi.Mode().IsRegular()
}

// readingOnce records that path, which can be read only once, is being
// read, or fails if it already was under ctx (a second read would find
// it empty, or wait for good for a writer that has gone).
func readingOnce(ctx context.Context, path string) error {
	in, _ := ctx.Value(stdinKey{}).(*stdin)
	if in == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.read[path] {
		return fmt.Errorf("%s: a pipe can be read only once, and this one already was (save it to a file to use it twice)", path)
	}
	in.read[path] = true
	return nil
}

type readLimitsKey struct{}

// ReadLimits bound reading a trace, besides the process's memory limit
// (which the trace readers also keep to).
type ReadLimits struct {
	// MaxWindow is the largest zstd window accepted; 0 means
	// trace.DefaultMaxWindow.
	MaxWindow uint64
}

// WithReadLimits gives the commands run under ctx the limits l.
func WithReadLimits(ctx context.Context, l ReadLimits) context.Context {
	return context.WithValue(ctx, readLimitsKey{}, l)
}

func maxWindow(ctx context.Context) uint64 {
	if l, ok := ctx.Value(readLimitsKey{}).(ReadLimits); ok && l.MaxWindow > 0 {
		return l.MaxWindow
	}
	return trace.DefaultMaxWindow
}

// OpenTrace reads a trace in any format, gzip- or zstd-compressed or not;
// path "-" is standard input (see WithStdin). With progress set, a big
// file shows a progress bar there, cleared when done. A file that cannot
// be read is an Input error; once ctx is done, reading stops with ctx's
// error.
func OpenTrace(ctx context.Context, path string, progress io.Writer) (*trace.Snapshot, error) {
	snap, err := openTrace(ctx, path, progress)
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, &Error{Kind: Input, Err: err}
	}
	return snap, nil
}

func openTrace(ctx context.Context, path string, progress io.Writer) (snap *trace.Snapshot, err error) {
	err = readTrace(ctx, path, progress, func(r io.Reader, name, compression string, size int64) error {
		snap, err = trace.OpenDecompressed(r, name, compression, size)
		return err
	})
	return snap, err
}

// readTrace opens path as OpenTrace does and hands read its decompressed
// contents, the name to use in errors, the compression ("" for none) and
// the size (-1 when not known).
func readTrace(ctx context.Context, path string, pw io.Writer, read func(r io.Reader, name, compression string, size int64) error) error {
	var raw io.Reader
	size := int64(-1)
	name := path
	if readsOnce(path) {
		if err := readingOnce(ctx, path); err != nil {
			return err
		}
	}
	if path == Stdin {
		in, _ := ctx.Value(stdinKey{}).(*stdin)
		if in == nil || in.r == nil {
			return errors.New("-: standard input is not available")
		}
		raw, name = in.r, "standard input"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		raw = f
	}
	if pw != nil && size >= progressFrom {
		// the bar counts the bytes read from the file, compressed or not
		w, verb := phaseOf(pw)
		bar := progress.Bytes(w, verb, path, size)
		defer bar.Done()
		raw = bar.Reader(raw)
	}
	dec, compression, closeDecoder, err := trace.DecompressWindow(raw, name, maxWindow(ctx))
	if err != nil {
		return err
	}
	defer closeDecoder()
	if compression != "" {
		size = -1
	}
	// The decoders stop at their next read after an interrupt.
	return read(fileout.Reader(ctx, dec), name, compression, size)
}

// DeviceError is a device index the trace has no events for.
type DeviceError struct {
	Path          string
	Device, Count int // the index asked for; how many devices the trace has
}

func (e *DeviceError) Error() string {
	return fmt.Sprintf("--device %d: %s has traces for devices 0 to %d", e.Device, e.Path, e.Count-1)
}

// openDevice opens a trace that must hold events for device: a trace
// without any is an Input error, a device out of range a *DeviceError.
func openDevice(ctx context.Context, path string, device int, progress io.Writer) (*trace.Snapshot, error) {
	snap, err := OpenTrace(ctx, path, progress)
	if err != nil {
		return nil, err
	}
	if err := checkDevice(path, snap, device); err != nil {
		return nil, err
	}
	return snap, nil
}

// checkDevice checks that snap, read from path, holds events and a trace
// for device.
func checkDevice(path string, snap *trace.Snapshot, device int) error {
	if len(snap.Traces) == 0 {
		return noTrace(path)
	}
	if device < 0 || device >= len(snap.Traces) {
		return &Error{Kind: Usage, Err: &DeviceError{Path: path, Device: device, Count: len(snap.Traces)}}
	}
	return nil
}

func noTrace(path string) error {
	return &Error{Kind: Input, Err: fmt.Errorf("%s: the snapshot holds no allocation trace (record it with torch.cuda.memory._record_memory_history)", path)}
}
