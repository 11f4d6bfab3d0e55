# Two ranks of DDP (gpumem estimate --nproc 2, ranks_test.go): an MLP of
# known parameter sizes; rank R trains on 64 * (R + 1) rows, so rank 1
# needs more memory.
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
device = torch.device("cuda", local)
# weights 1 MiB, 4 MiB, 1 MiB; biases 4096, 4096, 1024 bytes
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 256)).to(device)
ddp = DDP(model, device_ids=[local])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(64 * (rank + 1), 256, device=device)
    ddp(x).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
objs = [None] * dist.get_world_size()
dist.all_gather_object(objs, {"rank": rank})  # emulated: this rank's object in every slot
print(f"rank {rank} of {dist.get_world_size()} ok, gathered {objs}", flush=True)
dist.destroy_process_group()
