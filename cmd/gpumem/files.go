package main

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// The files commands write besides stdout: --html reports, converted
// traces, baselines.

// writeHTML writes an HTML report to path and says so on stderr.
func writeHTML(a *app, in invocation, path string, inputs []string, write func(io.Writer) error) error {
	if err := fileout.Write(in.ctx, path, inputs, write); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s\n", textsafe.Line(path))
	return nil
}
