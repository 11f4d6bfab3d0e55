package report

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
)

// TorchOOMMessage is the message of the torch.OutOfMemoryError PyTorch
// raises for o on the given device (spec §6.5). The per-process part, which
// needs NVML, is left out. Free cached bytes of private pools count as
// allocated in private pools, as PyTorch counts them.
func TorchOOMMessage(device int, o *figures.OOM) string {
	allowed := ""
	if o.Allowed > 0 {
		allowed = units.FormatSizeTorch(o.Allowed) + " allowed; "
	}
	priv := int64(o.PrivatePools)
	privMsg := ""
	if priv > 0 {
		privMsg = "with " + units.FormatSizeTorch(uint64(priv)) + " allocated in private pools (e.g., CUDA Graphs), "
	}
	unallocated := uint64(0)
	if o.Reserved > o.Allocated+priv {
		unallocated = uint64(o.Reserved - o.Allocated - priv)
	}
	return fmt.Sprintf("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "+
		"%sOf the allocated memory %s is allocated by PyTorch, %sand %s is reserved by PyTorch but unallocated. "+
		"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "+
		"See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
		units.FormatSizeTorch(o.AllocSize), device, units.FormatSizeTorch(o.DeviceTotal), units.FormatSizeTorch(o.DeviceFree),
		allowed, units.FormatSizeTorch(uint64(max(o.Allocated+priv, 0))), privMsg, units.FormatSizeTorch(unallocated))
}
