"""The anchor: torch's own MemTracker under FakeTensorMode on one program
of programs.py, the way torchtitan's memory estimator runs it (built on the
meta device, moved with to_empty, weights re-tied). Prints its peak as JSON.
usage: memtracker.py NAME (on a machine with a GPU: fake CUDA tensors need one)"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

import programs  # noqa: E402

name = sys.argv[1]
build, optimizer, step, steps, setup, _conf = programs.PROGRAMS[name]
t0 = time.time()
with torch.device("meta"):
    model = build()
with FakeTensorMode(allow_non_fake_inputs=True):
    model = model.to_empty(device="cuda")
    if isinstance(model, programs.GPT):
        model.head.weight = model.wte.weight
    opt = optimizer(model)
    mt = MemTracker()
    if opt is not None:
        mt.track_external(model, opt)
    else:
        mt.track_external(model)
    with mt:
        for i in range(steps):
            step(model, opt, i)
    peak = mt.get_tracker_snapshot("peak")
total = 0
for dev, d in peak.items():
    if torch.device(dev).type == "cuda":
        total = max(total, d.get("Total", 0))
print(json.dumps({"name": name, "memtracker_peak": total, "seconds": time.time() - t0}))
