# A bias gradient's reduction (see kernels_test.go): its staging buffer and
# semaphores are allocated and freed inside the kernel.
import torch

g = torch.randn(4096, 512, device="cuda")
torch.cuda.reset_peak_memory_stats()
a0 = torch.cuda.memory_stats()["allocation.all.allocated"]
b = g.sum(0, keepdim=True)
n = torch.cuda.memory_stats()["allocation.all.allocated"] - a0
print(f"peak {torch.cuda.max_memory_allocated()} allocations {n}")
