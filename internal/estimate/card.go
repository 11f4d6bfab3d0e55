package estimate

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// cards are the GPUs --gpu names, with what torch.cuda reports on them,
// measured: only cards whose figures were read off a real one are here.
var cards = map[string]Card{
	// torch.cuda.mem_get_info()[1] on the H200 of the shared fixtures
	// (device_total_bytes of every *.truth.json), PyTorch 2.11
	"H200": {Name: "NVIDIA H200", Total: 150109880320, Capability: "9.0", Multiprocs: 132},
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
	c, ok := cards[strings.ToUpper(gpu)]
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
		c.Total = n
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
