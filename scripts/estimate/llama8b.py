"""A Llama-3-8B-shaped training step (32 layers, hidden 4096, GQA 32/8 heads,
MLP 14336, vocab 128256, bf16, AdamW), built on the meta device and moved
with to_empty: the speed check of gpumem estimate (docs/estimate.md).
usage: llama8b.py [SEQ] [BATCH]
(llama8b_memtracker.py runs the same step under MemTracker.)"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

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


def step(model, opt, x):
    loss = F.cross_entropy(model(x).view(-1, V).float(), x.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main():
    seq = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    t0 = time.time()
    with torch.device("meta"):
        model = Llama().to(torch.bfloat16)
    model = model.to_empty(device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, V, (batch, seq), device="cuda")
    t1 = time.time()
    step(model, opt, x)
    t2 = time.time()
    a, r = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    print(f"build {t1 - t0:.1f} s, step {t2 - t1:.1f} s, peak allocated {a / 2**30:.2f} GiB ({a} B), "
          f"peak reserved {r / 2**30:.2f} GiB ({r} B)")


if __name__ == "__main__":
    main()
