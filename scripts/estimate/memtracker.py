"""The anchor: torch's own MemTracker under FakeTensorMode on one program
of programs.py, the way torchtitan's memory estimator runs it (built on the
meta device, moved with to_empty, weights re-tied). Prints its peak as JSON.

MemTracker tracks one iteration: a second call of the root module raises
NotImplementedError unless reset_mod_stats() clears the module statistics
first. torchtitan's estimator calls it after each step; here every call of
the root module (each step's forward, each micro-batch of gradient
accumulation, each token of a generate loop) starts with it. The reset
clears only the per-module statistics: the peak MemTracker reports is of
every tensor it saw, over all steps.

On a machine without a GPU the fake CUDA tensors' backward asks CUDA's
device guard (a driver) for the current stream: there it borrows gpumem
estimate's driver-free guard (internal/estimate/gpumem_estimate_torch.py),
which changes nothing MemTracker counts.
usage: memtracker.py NAME"""
import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

import programs  # noqa: E402

if not torch.cuda.is_available():
    sys.path.insert(0, os.path.join(here, "..", "..", "internal", "estimate"))
    import gpumem_estimate_torch  # noqa: E402

    gpumem_estimate_torch.no_cuda_guard(torch)
    import torch._subclasses.fake_tensor as ft  # noqa: E402

    ft.init_gpu_context = lambda device: None  # it would create a real CUDA tensor

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

    cls = type(model)

    def call(self, *a, **k):
        mt.reset_mod_stats()  # a new iteration for MemTracker's module statistics
        return cls.__call__(self, *a, **k)

    model.__class__ = type(cls.__name__, (cls,), {"__call__": call})
    err = None
    with mt:
        try:
            for i in range(steps):
                step(model, opt, i)
        except torch.OutOfMemoryError as e:  # not raised in fake mode: there is no card to fill
            err = str(e)
    peak = mt.get_tracker_snapshot("peak")
total = 0
for dev, d in peak.items():
    if torch.device(dev).type == "cuda":
        total = max(total, d.get("Total", 0))
print(json.dumps({"name": name, "memtracker_peak": total, "oom": err, "seconds": time.time() - t0}), flush=True)
if not torch.cuda.is_available():
    os._exit(0)  # the borrowed guard's tables do not survive the interpreter's teardown
