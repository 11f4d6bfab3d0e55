package main

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/progress"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// The files commands write besides stdout: --html reports, converted
// traces, baselines.

// writeHTML writes an HTML report to path, with a spinner on a terminal
// while write builds it, and says so on stderr.
func writeHTML(a *app, in invocation, path string, inputs []string, write func(io.Writer) error) error {
	if err := progress.During(a.progress(), "building the HTML report "+path, func() error { return fileout.Write(in.ctx, path, inputs, write) }); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s\n", textsafe.Line(path))
	return nil
}
