"""What the CUDA context and the libraries' handles take of a card outside
the caching allocator: torch.cuda.mem_get_info's total less its free less
memory_reserved, after CUDA starts (a one-element tensor), after the first
cuBLAS matmul, after the first cuDNN convolution. Prints JSON.
usage: context_probe.py"""
import json

import torch
import torch.nn.functional as F


def point(label):
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"step": label, "total": total, "free": free, "reserved": torch.cuda.memory_reserved(),
            "outside_allocator": total - free - torch.cuda.memory_reserved()}


out = {"device": torch.cuda.get_device_name(0), "total_memory": torch.cuda.get_device_properties(0).total_memory,
       "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "points": []}
x = torch.ones(1, device="cuda")
out["points"].append(point("cuda started (one tensor)"))
a = torch.randn(1024, 1024, device="cuda")
b = a @ a
out["points"].append(point("first matmul (cuBLAS handle)"))
c = F.conv2d(torch.randn(8, 64, 56, 56, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda"), padding=1)
out["points"].append(point("first conv2d (cuDNN handle)"))
with torch.autocast("cuda", dtype=torch.bfloat16):
    q = torch.randn(4, 8, 512, 64, device="cuda")
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
out["points"].append(point("first bf16 SDPA"))
print(json.dumps(out))
