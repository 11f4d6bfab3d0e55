package exporter

import "github.com/gpumem/gpumem/internal/probe"

// ProcessMemory is one process's memory on one GPU: what NVML says it
// uses, against what its caching allocator has reserved (from its spool
// record). The rest is memory outside the caching allocator: the CUDA
// context, NCCL's buffers, cuBLAS and cuDNN workspaces (about 0.5 GB for
// an idle torch process on an H200).
type ProcessMemory struct {
	GPU  int    `json:"gpu"` // NVML's index
	PID  uint32 `json:"pid"`
	Name string `json:"name"` // "" when unknown
	Used uint64 `json:"used_memory_bytes" jsonschema:"description=NVML's used memory of the process (0 when the driver cannot attribute memory)"`
	// Reserved is null when the process does not publish to the spool.
	Reserved *uint64 `json:"allocator_reserved_bytes" jsonschema:"description=reserved_bytes.all.current of the process's caching allocator; null when it does not publish to the spool"`
	// Rest is Used − Reserved; null without Reserved, or when NVML could
	// not attribute memory to the process.
	Rest *int64 `json:"rest_bytes" jsonschema:"description=used − allocator reserved: CUDA context and libraries (NCCL and library workspaces)\\, not the caching allocator"`
}

// Reconcile sets each process on sys's GPUs beside its spool record,
// matched by pid, and by GPU UUID when the record has one (a process may
// hold a context on several GPUs; its allocator's stats are of one). The
// processes are in sys's order; the list is empty, not nil, when there
// are none.
func Reconcile(sys *probe.System, recs []Record) []ProcessMemory {
	out := []ProcessMemory{}
	if sys == nil {
		return out
	}
	for _, g := range sys.GPUs {
		for _, p := range g.Processes {
			pm := ProcessMemory{GPU: g.Index, PID: p.PID, Name: p.Name, Used: p.UsedMemory}
			for _, rec := range recs {
				if uint32(rec.PID) != p.PID || (rec.UUID != "" && rec.UUID != g.UUID) {
					continue
				}
				r := uint64(min(rec.MemoryStats["reserved_bytes.all.current"], 1<<62)) // no real card is larger
				pm.Reserved = &r
				if p.UsedMemory > 0 {
					rest := int64(p.UsedMemory) - int64(r)
					pm.Rest = &rest
				}
				break
			}
			out = append(out, pm)
		}
	}
	return out
}

// SpoolMemory reads the spool folder dir and sets each GPU process of
// sys beside its allocator's stats; warnings say what could not be read
// (a spool it cannot read leaves every process without stats).
func SpoolMemory(sys *probe.System, dir string) ([]ProcessMemory, []string) {
	recs, malformed, err := ReadSpool(dir)
	var warnings []string
	if err != nil {
		warnings = append(warnings, err.Error())
	}
	for _, m := range malformed {
		warnings = append(warnings, "skipping "+m.Error())
	}
	return Reconcile(sys, recs), warnings
}
