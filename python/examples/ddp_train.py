"""A small DDP training job for `gpumem record -- torchrun --nproc_per_node 2`.

Each rank trains a few steps of a small MLP with its own batch size (rank
R uses 64 * (R + 1) rows, so the ranks' peaks differ and one is the worst),
rank 1 sends itself SIGUSR1 at step 4 (under gpumem record, a snapshot on
demand), then prints its torch.cuda.max_memory_reserved() and
max_memory_allocated() for scripts/ddp_check.sh to compare with the replay:

    rank 1 max_memory_reserved 123456 max_memory_allocated 98765
"""

import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(),
        torch.nn.Linear(4096, 4096), torch.nn.GELU(),
        torch.nn.Linear(4096, 1024),
    ).cuda()
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    rows = 64 * (rank + 1)
    for step in range(8):
        x = torch.randn(rows, 1024, device="cuda")
        loss = ddp(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 4 and rank == 1 and signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
            os.kill(os.getpid(), signal.SIGUSR1)  # under gpumem record: a snapshot now
    torch.cuda.synchronize()
    print(f"rank {rank} max_memory_reserved {torch.cuda.max_memory_reserved()} "
          f"max_memory_allocated {torch.cuda.max_memory_allocated()}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
