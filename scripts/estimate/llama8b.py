"""A Llama-3-8B-shaped training step (32 layers, hidden 4096, GQA 32/8 heads,
MLP 14336, vocab 128256, bf16, AdamW), built on the meta device and moved
with to_empty: the speed check of gpumem estimate (docs/estimate.md).
With --memtracker the same step runs under torch's MemTracker in fake mode
instead (as torchtitan's estimator runs it; on a machine without a GPU with
the emulator's driver-free device guard, as memtracker.py does).
scripts/estimate/speed.sh runs both and prints the ratio.
usage: llama8b.py [SEQ] [BATCH] [--memtracker]"""
import contextlib
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

mt = "--memtracker" in sys.argv
argv = [a for a in sys.argv[1:] if a != "--memtracker"]
seq = int(argv[0]) if len(argv) > 0 else 2048
batch = int(argv[1]) if len(argv) > 1 else 1
D, L, H, KV, FF, V = 4096, 32, 32, 8, 14336, 128256


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.q, self.k, self.v = nn.Linear(D, D, bias=False), nn.Linear(D, KV * 128, bias=False), nn.Linear(D, KV * 128, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.gate, self.up, self.down = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False), nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, H, 128).transpose(1, 2)
        k = self.k(h).view(b, t, KV, 128).transpose(1, 2).repeat_interleave(H // KV, dim=1)
        v = self.v(h).view(b, t, KV, 128).transpose(1, 2).repeat_interleave(H // KV, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


fake = tracker = contextlib.nullcontext()
if mt:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    if not torch.cuda.is_available():
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "internal", "estimate"))
        import gpumem_estimate_torch
        import torch._subclasses.fake_tensor as ft

        gpumem_estimate_torch.no_cuda_guard(torch)
        ft.init_gpu_context = lambda device: None
    fake = FakeTensorMode(allow_non_fake_inputs=True)
t0 = time.time()
with torch.device("meta"):
    model = Llama().to(torch.bfloat16)
with fake:
    model = model.to_empty(device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, V, (batch, seq), device="cuda")
    if mt:
        tracker = MemTracker()
        tracker.track_external(model, opt)
    t1 = time.time()
    with tracker:
        loss = F.cross_entropy(model(x).view(-1, V).float(), x.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    t2 = time.time()
if mt:
    peak = max(d.get("Total", 0) for dev, d in tracker.get_tracker_snapshot("peak").items()
               if torch.device(dev).type == "cuda")
    print(f"build {t1 - t0:.1f} s, step {t2 - t1:.1f} s, MemTracker peak {peak / 2**30:.2f} GiB", flush=True)
    os._exit(0)
print(f"build {t1 - t0:.1f} s, step {t2 - t1:.1f} s, peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
      f"peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")
