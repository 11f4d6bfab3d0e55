package estimate

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// h200Context is what the CUDA context took of the H200 before the first
// allocation: mem_get_info's total less its free less memory_reserved
// after a one-element tensor (scripts/estimate/context_probe.py, PyTorch
// 2.11.0+cu130). cuBLAS's first matmul took 66 MiB more outside the
// allocator and cuDNN's first convolution 8 MiB more; those are not
// subtracted.
const h200Context = 648871936

// nominal is a capacity of NVIDIA's specifications (GB read as GiB, as
// the H200's 141 GB compare with what it reports: 139.8 GiB).
func nominal(gib uint64) uint64 { return gib << 30 }

// cards are the GPUs --gpu names, with what torch.cuda reports on them.
// Only the H200's total and context were measured (Card.Measured); the
// others' totals are NVIDIA's nominal capacities and their usable bytes
// that less the H200's context (docs/estimate.md, "cards").
var cards = map[string]Card{
	// torch.cuda.mem_get_info()[1] on the H200 of the shared fixtures
	// (device_total_bytes of every *.truth.json), PyTorch 2.11
	"H200": {Name: "NVIDIA H200", Total: 150109880320, Usable: 150109880320 - h200Context, Capability: "9.0",
		Multiprocs: 132, Scratch: "h200", Measured: true},
	"H100-80GB": {Name: "NVIDIA H100 80GB HBM3", Total: nominal(80), Capability: "9.0", Multiprocs: 132},
	"H100-SXM":  {Name: "NVIDIA H100 80GB HBM3", Total: nominal(80), Capability: "9.0", Multiprocs: 132},
	"H100-PCIE": {Name: "NVIDIA H100 PCIe", Total: nominal(80), Capability: "9.0", Multiprocs: 114},
	"H100-NVL":  {Name: "NVIDIA H100 NVL", Total: nominal(94), Capability: "9.0", Multiprocs: 132},
	"A100-40GB": {Name: "NVIDIA A100-SXM4-40GB", Total: nominal(40), Capability: "8.0", Multiprocs: 108},
	"A100-80GB": {Name: "NVIDIA A100-SXM4-80GB", Total: nominal(80), Capability: "8.0", Multiprocs: 108},
	"L4":        {Name: "NVIDIA L4", Total: nominal(24), Capability: "8.9", Multiprocs: 58},
	"L40S":      {Name: "NVIDIA L40S", Total: nominal(48), Capability: "8.9", Multiprocs: 142},
	"A10G":      {Name: "NVIDIA A10G", Total: nominal(24), Capability: "8.6", Multiprocs: 80},
	"RTX-4090":  {Name: "NVIDIA GeForce RTX 4090", Total: nominal(24), Capability: "8.9", Multiprocs: 128},
	"B200":      {Name: "NVIDIA B200", Total: nominal(180), Capability: "10.0", Multiprocs: 148},
}

func init() {
	for k, c := range cards {
		if !c.Measured {
			c.Usable = c.Total - h200Context
			cards[k] = c
		}
	}
}

// CardNames lists the names --gpu takes.
func CardNames() string {
	names := make([]string, 0, len(cards))
	for n := range cards {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Settings are an estimate's card and allocator settings, resolved.
type Settings struct {
	Options
}

// NewSettings resolves a card name or size, the PYTORCH_CUDA_ALLOC_CONF
// string, a memory fraction and --nproc (0: one process, not torchrun's).
func NewSettings(gpu, deviceMemory, conf string, fraction float64, nproc int) (Settings, error) {
	var s Settings
	c, ok := cards[strings.ReplaceAll(strings.ToUpper(gpu), "_", "-")]
	if !ok {
		return s, fmt.Errorf("--gpu: unknown card %q (known: %s; or give --device-memory)", gpu, CardNames())
	}
	if deviceMemory != "" {
		n, err := units.ParseSize(deviceMemory)
		if err != nil {
			return s, fmt.Errorf("--device-memory: %w", err)
		}
		if n < 1<<20 {
			return s, fmt.Errorf("--device-memory: %s is less than 1 MiB", deviceMemory)
		}
		c.Total, c.Usable = n, 0 // a size: all of it usable
		c.Name += " (" + deviceMemory + ")"
	}
	cfg, err := alloc.ParseConfig(conf)
	if err != nil {
		return s, fmt.Errorf("--alloc-conf: %w", err)
	}
	if strings.ContainsAny(conf, " \t\n\r#") {
		return s, fmt.Errorf("--alloc-conf: %q: blanks and '#' are not allowed", conf)
	}
	if err := setup.CheckFraction(fraction); err != nil {
		return s, fmt.Errorf("--memory-fraction: %w", err)
	}
	if nproc < 0 || nproc > MaxProcs {
		return s, fmt.Errorf("--nproc: %d: want 1 to %d ranks", nproc, MaxProcs)
	}
	s.Options = Options{Card: c, AllocConf: conf, Config: cfg, Fraction: fraction, NProc: nproc}
	return s, nil
}
