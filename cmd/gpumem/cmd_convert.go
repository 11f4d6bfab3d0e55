package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/trace"
)

type convertOpts struct {
	invocation
	to     string
	device int
}

func newConvertCmd(a *app) *cobra.Command {
	o := &convertOpts{}
	cmd := &cobra.Command{
		Use:     "convert IN OUT",
		Short:   "Convert a trace to gpumem's text trace format",
		Long:    helpText("convert", "$FORMATS", trace.FormatList()),
		Example: helpText("convert.examples"),
		Args:    usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runConvert(a, o, args[0], args[1])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.to, "to", "text", "output format: text")
	fl.IntVar(&o.device, "device", -1, "write only this device's trace (default: all devices)")
	registerReadFlags(cmd)
	return cmd
}

func runConvert(a *app, o *convertOpts, in, out string) error {
	if o.to != "text" {
		return usageError{fmt.Errorf("--to: unknown format %q (want text)", o.to)}
	}
	if out != "-" {
		if err := fileout.NotAnInput(out, in); err != nil {
			return err
		}
	}
	snap, err := pipeline.OpenTrace(o.ctx, in, a.progress())
	if err != nil {
		return err
	}
	if o.device >= len(snap.Traces) {
		return usageError{fmt.Errorf("--device %d: %s has traces for %d devices", o.device, in, len(snap.Traces))}
	}
	if out == "-" {
		return trace.WriteText(a.stdout, snap, o.device)
	}
	if err := fileout.Write(o.ctx, out, []string{in}, func(w io.Writer) error { return trace.WriteText(w, snap, o.device) }); err != nil {
		return err
	}
	events := 0
	for d, tr := range snap.Traces {
		if o.device < 0 || d == o.device {
			events += len(tr)
		}
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s (%s events)\n", textsafe.Line(out), units.FormatCount(int64(events)))
	if len(snap.Stacks) > 0 || len(snap.Annotations) > 0 {
		fmt.Fprintln(a.stderr, "gpumem: note: stack traces and annotations are not carried by the text format")
	}
	return nil
}
