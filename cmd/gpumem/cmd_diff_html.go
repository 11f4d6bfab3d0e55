package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/output"
)

// diff --html: a page of both runs' timelines overlaid, with the table's
// figures and sites.

func diffHTMLFlag(cmd *cobra.Command, o *diffOpts) {
	cmd.Flags().StringVar(&o.html, "html", "", "also write a self-contained HTML page of both runs' timelines, aligned on their annotations, to `FILE`")
}

// timelinePoints is how many timeline points each replay keeps: those
// the page draws, none without it.
func (o *diffOpts) timelinePoints() int {
	if o.html == "" {
		return 0
	}
	return 2000
}

// writeHTML writes the page when --html asks for one; inputs are the
// traces, which it may not overwrite.
func (o *diffOpts) writeHTML(a *app, d *figures.Diff, inputs []string) error {
	if o.html == "" {
		return nil
	}
	return writeHTML(a, o.invocation, o.html, inputs, func(w io.Writer) error { return output.DiffHTML(w, d) })
}
