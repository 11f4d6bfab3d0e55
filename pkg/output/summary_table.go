package output

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem/pkg/probe"
	"github.com/gpumem/gpumem/pkg/report"
	"github.com/gpumem/gpumem/pkg/textsafe"
)

// summaryTable writes the device table, then the allocator's summary.
func summaryTable(w io.Writer, s *Summary, o Options) error {
	if s.System != nil {
		if err := probe.WriteTable(w, s.System, o.Color); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if s.Ranks != nil {
		fmt.Fprintf(w, "Allocator (%s backend) after ", s.Backend)
		return ranksText(w, s.Ranks, Options{Color: o.Color}, false)
	}
	fmt.Fprintf(w, "Allocator (%s backend) after %s\n\n", s.Backend, textsafe.Line(s.Allocator.Source))
	return report.Table(w, s.Allocator, report.Options{Color: o.Color})
}

// Devices writes the device table alone (summary --watch); redraw first
// clears a terminal, so that each table replaces the last.
func Devices(w io.Writer, sys *probe.System, o Options, redraw bool) error {
	if redraw {
		fmt.Fprint(w, "\033[H\033[2J")
	}
	return probe.WriteTable(w, sys, o.Color)
}
