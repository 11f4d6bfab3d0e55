package output

import (
	"github.com/gpumem/gpumem/internal/exporter"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/probe"
)

// Summary is what gpumem summary shows: the GPUs, each process's memory
// against its caching allocator's, and the allocator after a workload or
// trace.
type Summary struct {
	System *probe.System // nil when no GPU could be probed
	// Processes are System's processes beside their allocators' reserved
	// bytes from the spool folder Spool (package exporter).
	Processes []exporter.ProcessMemory
	Spool     string
	Backend   string // the allocator's backend: sim or cuda
	Allocator *figures.Replay
	// Ranks are the ranks of a job (summary --trace over several), nil
	// for one trace or a workload; Allocator is then the worst rank.
	Ranks *figures.Ranks
}

// SummaryFormats are the formats of gpumem summary.
var SummaryFormats = &Registry[*Summary]{Kind: "The report of `summary` (the GPUs, then the allocator)", Formats: []Format[*Summary]{
	{Table, "the device table, each process's NVML memory against its allocator's, then the allocator's summary (for ranks, the rank table and the worst rank's) (summary_table.go)", RenderFunc[*Summary](summaryTable)},
	{JSON, "`devices`, `processes` (each process's NVML memory against its allocator's) and `allocator` (the replay report's JSON; for ranks, the worst, and `ranks` as replay prints them) in one document (summary_json.go)", RenderFunc[*Summary](summaryJSON)},
}}
