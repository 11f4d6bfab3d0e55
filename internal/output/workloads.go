package output

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpumem/gpumem/internal/workload"
)

// WorkloadList writes the built-in workloads, a name and a description a
// line (gpumem run --list).
func WorkloadList(w io.Writer, builtins []workload.Builtin) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, b := range builtins {
		fmt.Fprintf(tw, "%s\t%s\n", b.Name, b.Description)
	}
	return tw.Flush()
}
