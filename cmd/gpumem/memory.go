package main

import (
	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/units"
)

// The memory budget. Commands that read traces take --max-memory (and
// --zstd-max-window). Before such a command runs, the budget becomes
// the Go runtime's soft memory limit, less a tenth of headroom
// (debug.SetMemoryLimit: the collector works harder as the heap nears
// it, and the trace readers hold at most half of it), and a watchdog
// samples the process's resident memory every pollMemory: past the
// budget, it cancels the command's context with errOutOfMemory, and the
// command stops as it does at an interrupt (readers at their next read,
// replays between batches of operations). gpumem then prints one error
// line and exits 2, where the runtime would have crashed with a stack
// dump once the machine ran out.

// registerReadFlags registers the flags that bound what reading a trace
// may cost, on a command that reads traces; applyReadFlags reads them.
func registerReadFlags(cmd *cobra.Command) {
	var maxMemory, zstdWindow units.Size
	fl := cmd.Flags()
	fl.Var(&maxMemory, "max-memory", "the most memory gpumem may use, e.g. 8GiB; a trace that needs more is refused (default 4GiB, or 3/4 of the machine's or container's memory if less)")
	fl.Var(&zstdWindow, "zstd-max-window", "the largest zstd window a compressed trace may use, as zstd's --memory (default 128MiB)")
}

// applyReadFlags sets up the budget and the read limits of cmd when it
// has the flags: the watchdog, the soft memory limit, the zstd window.
func (a *app) applyReadFlags(cmd *cobra.Command) {
	f := cmd.Flags().Lookup("max-memory")
	if f == nil || a.mem == nil {
		return
	}
	n := int64(*f.Value.(*units.Size))
	if n == 0 {
		n = membudget.Default()
	}
	a.mem.Start(n)
	if w := cmd.Flags().Lookup("zstd-max-window"); w != nil {
		cmd.SetContext(pipeline.WithReadLimits(cmd.Context(), pipeline.ReadLimits{MaxWindow: uint64(*w.Value.(*units.Size))}))
	}
}
