"""Runs one program of programs.py and prints what torch.cuda reported,
as JSON: for real on a GPU, and the same file under `gpumem estimate`.
usage: record.py NAME [--snapshot FILE]"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
name = sys.argv[1]
snap = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--snapshot" else None
import torch  # noqa: E402

import programs  # noqa: E402

build, optimizer, step, steps, setup, _conf = programs.PROGRAMS[name]
torch.manual_seed(0)
if snap:
    torch.cuda.memory._record_memory_history(max_entries=10_000_000)
if setup:
    setup()
t0 = time.time()
err = None
try:
    model = build().cuda()
    opt = optimizer(model)
    for i in range(steps):
        step(model, opt, i)
    torch.cuda.synchronize()
except torch.OutOfMemoryError as e:
    err = str(e)
out = {
    "name": name,
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "num_ooms": torch.cuda.memory_stats().get("num_ooms", 0),
    "oom": err,
    "seconds": time.time() - t0,
}
if snap:
    torch.cuda.memory._dump_snapshot(snap)
print(json.dumps(out))
