# Two ranks of FSDP2 (gpumem estimate --nproc 2, ranks_test.go): two
# 1001x1000 fp32 weights, whose 1001 rows shard unevenly (501 and 500,
# padded to 501 on both ranks).
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

dist.init_process_group("nccl")
torch.cuda.set_device(dist.get_rank())
model = torch.nn.Sequential(torch.nn.Linear(1000, 1001, bias=False), torch.nn.Linear(1001, 1000, bias=False)).cuda()
fully_shard(model[0])
fully_shard(model[1])
fully_shard(model)
print(f"sharded {torch.cuda.memory_allocated()}", flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(2):
    x = torch.randn(8, 1000, device="cuda")
    model(x).sum().backward()
    before = torch.cuda.memory_allocated()
    opt.step()
    if step == 0:  # AdamW's two states a parameter, sharded as it is
        print(f"states {torch.cuda.memory_allocated() - before}", flush=True)
    opt.zero_grad()
print(f"after {torch.cuda.memory_allocated()}", flush=True)
dist.destroy_process_group()
