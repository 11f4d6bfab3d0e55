# Two ranks that differ (ranks_test.go): rank R holds (R + 1) MiB; rank 1
# then exits with status 3.
import sys

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
x = torch.empty((rank + 1) << 20, dtype=torch.uint8, device="cuda")
dist.barrier()
if rank == 1:
    sys.exit(3)
