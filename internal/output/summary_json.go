package output

import (
	"io"

	"github.com/gpumem/gpumem/internal/exporter"
	"github.com/gpumem/gpumem/internal/probe"
	"github.com/gpumem/gpumem/internal/report"
)

// SummaryJSON is the document of summary -o json: the probe's devices,
// their processes against their allocators, and the replay report's
// document of the allocator; for a job's ranks, the
// worst rank's, and "ranks" as replay prints them. The keys are in
// alphabetical order, as they were when this was a map.
type SummaryJSON struct {
	Stamp
	Allocator report.Document `json:"allocator"`
	Devices   probe.System    `json:"devices"`
	// Processes are the devices' processes, each against its caching
	// allocator's reserved bytes.
	Processes []exporter.ProcessMemory `json:"processes"`
	Ranks     *RanksDocument           `json:"ranks,omitempty"`
}

func summaryJSON(w io.Writer, s *Summary, _ Options) error {
	doc := SummaryJSON{Stamp: stamp(), Devices: probe.System{GPUs: []probe.GPU{}}, Processes: s.Processes}
	if doc.Processes == nil {
		doc.Processes = []exporter.ProcessMemory{}
	}
	if s.System != nil {
		doc.Devices = *probe.ForJSON(s.System)
	}
	a, err := report.NewDocument(s.Allocator)
	if err != nil {
		return err
	}
	doc.Allocator = *a
	if s.Ranks != nil {
		if doc.Ranks, err = newRanksDocument(s.Ranks); err != nil {
			return err
		}
	}
	return writeJSON(w, doc, true)
}
