package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpumem/gpumem/pkg/fileout"
	"github.com/gpumem/gpumem/pkg/textsafe"
)

// The files commands write besides stdout: --html reports, converted
// traces, baselines.

// writeFile writes path through a temporary file beside it that replaces
// path only once complete (pkg/fileout): a failed write, a full disk or an
// interrupt leaves path as it was and nothing else behind. A path that is
// one of the inputs is refused, so `replay x.pickle --html x.pickle`
// cannot destroy the trace.
func writeFile(ctx context.Context, path string, inputs []string, write func(io.Writer) error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	err := fileout.Write(path, inputs, func(f io.Writer) error {
		w := bufio.NewWriterSize(fileout.Writer(ctx, f), 1<<20)
		if err := write(w); err != nil {
			return err
		}
		return w.Flush()
	})
	if errors.Is(err, fileout.ErrIsInput) {
		return usageError{err}
	}
	return err
}

// writeHTML writes an HTML report to path and says so on stderr.
func writeHTML(a *app, in invocation, path string, inputs []string, write func(io.Writer) error) error {
	if err := writeFile(in.ctx, path, inputs, write); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s\n", textsafe.Line(path))
	return nil
}

// checkOutput refuses, before any work, an output path that is one of the
// inputs ("" = no output).
func checkOutput(path string, inputs ...string) error {
	if path == "" {
		return nil
	}
	if err := fileout.NotAnInput(path, inputs...); err != nil {
		return usageError{err}
	}
	return nil
}
