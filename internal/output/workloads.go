package output

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpumem/gpumem/internal/workload"
)

// WorkloadList writes the built-in workloads (gpumem run --list): a name
// and a description a line, and under each its parameters, name=default
// (no default: the help says what is used), with their constraints.
func WorkloadList(w io.Writer, builtins []workload.Builtin) error {
	width := 0
	for _, b := range builtins {
		width = max(width, len(b.Name))
	}
	for i, b := range builtins {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%-*s  %s\n", width, b.Name, b.Description)
		if len(b.Params) == 0 {
			fmt.Fprintln(w, "  no parameters")
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, p := range b.Params {
			name := p.Name
			if p.Default != "" {
				name += "=" + p.Default
			}
			fmt.Fprintf(tw, "  --param %s\t%s\n", name, p.Help)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
