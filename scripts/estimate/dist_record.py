"""Runs one program of dist_programs.py as a torchrun rank and prints what
torch.cuda reported on it, as JSON: for real (torchrun on GPUs), and the
same file under `gpumem estimate --nproc N`.
usage: dist_record.py NAME [--snapshot PREFIX] [--backend nccl|gloo]
(the snapshot goes to PREFIX.rankR.pickle)"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import dist_programs  # noqa: E402

name = sys.argv[1]
args = sys.argv[2:]
snap = args[args.index("--snapshot") + 1] if "--snapshot" in args else None
backend = args[args.index("--backend") + 1] if "--backend" in args else "nccl"
build, wrap, optimizer, step, steps = dist_programs.PROGRAMS[name]
local = int(os.environ.get("LOCAL_RANK", "0"))
# ranks beyond the GPUs share them (gloo only: NCCL refuses two ranks on one GPU)
torch.cuda.set_device(local % torch.cuda.device_count())
if snap:
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
dist.init_process_group(backend)
rank = dist.get_rank()
torch.manual_seed(0)
t0 = time.time()
model = wrap(build().cuda())
opt = optimizer(model)
for i in range(steps):
    step(model, opt, i)
torch.cuda.synchronize()
out = {
    "name": name, "rank": rank, "world_size": dist.get_world_size(), "backend": backend,
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "memory_stats": torch.cuda.memory_stats(),
    "seconds": time.time() - t0,
}
if snap:
    torch.cuda.memory._dump_snapshot(f"{snap}.rank{rank}.pickle")
print(json.dumps(out), flush=True)
dist.barrier()
dist.destroy_process_group()
