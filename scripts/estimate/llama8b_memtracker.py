"""The speed anchor for gpumem estimate: the training step of llama8b.py
under torch's MemTracker in FakeTensorMode, the way torchtitan's memory
estimator runs it (built on the meta device, moved with to_empty). Prints
the times and MemTracker's peak in the same form as llama8b.py.
usage: llama8b_memtracker.py [SEQ] [BATCH] (needs a GPU: MemTracker's
fake CUDA tensors ask the driver for the device's properties)"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

import llama8b  # noqa: E402

seq = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1
t0 = time.time()
with torch.device("meta"):
    model = llama8b.Llama().to(torch.bfloat16)
with FakeTensorMode(allow_non_fake_inputs=True):
    model = model.to_empty(device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, llama8b.V, (batch, seq), device="cuda")
    t1 = time.time()
    mt = MemTracker()
    mt.track_external(model, opt)
    with mt:
        llama8b.step(model, opt, x)
    t2 = time.time()
    peak = max(d.get("Total", 0) for dev, d in mt.get_tracker_snapshot("peak").items()
               if torch.device(dev).type == "cuda")
print(f"build {t1 - t0:.1f} s, step {t2 - t1:.1f} s, memtracker peak {peak / 2**30:.2f} GiB ({peak} B)")
