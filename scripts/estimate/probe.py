"""What PyTorch allocates beyond the tensors a program sees, on a real GPU:
each step's allocator events (from the memory history), printed as JSON
lines. The rules of docs/estimate.md come from its output.
usage: probe.py"""
import json

import torch
import torch.nn.functional as F

torch.cuda.memory._record_memory_history(max_entries=1_000_000)
seen = 0


def events(label):
    global seen
    tr = torch.cuda.memory._snapshot()["device_traces"][0]
    new = [(e["action"], e["size"], e["stream"]) for e in tr[seen:]]
    seen = len(tr)
    print(json.dumps({"step": label, "events": new, "reserved": torch.cuda.memory_reserved(),
                      "allocated": torch.cuda.memory_allocated()}))


a = torch.randn(1024, 1024, device="cuda")
b = torch.randn(1024, 1024, device="cuda")
events("inputs fp32")
c = a @ b
events("first fp32 mm")
d = a @ b
events("second fp32 mm")
del c, d
events("freed")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    e = a @ b
torch.cuda.synchronize()
events("fp32 mm on a second stream")
ab, bb = a.bfloat16(), b.bfloat16()
events("bf16 casts")
f = ab @ bb
events("first bf16 mm")
l = torch.nn.Linear(1024, 1024).cuda()
events("linear params")
y = l(a)
events("first linear (addmm)")
x = torch.randn(8, 64, 56, 56, device="cuda", requires_grad=True)
w = torch.randn(64, 64, 3, 3, device="cuda", requires_grad=True)
events("conv inputs")
o = F.conv2d(x, w, padding=1)
events("first conv2d")
o.sum().backward()
events("conv2d backward")
q = torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
events("sdpa inputs")
att = F.scaled_dot_product_attention(q, q, q, is_causal=True)
events("sdpa forward")
att.sum().backward()
events("sdpa backward")
