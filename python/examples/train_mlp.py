#!/usr/bin/env python3
"""A small training run on CUDA, for trying `gpumem record` on a real GPU.

    gpumem record --snapshot s.pickle -- python3 python/examples/train_mlp.py [--steps N] [--stats FILE] [--oom]

Trains an MLP with AdamW on random data for a few steps with changing batch
sizes (so the caching allocator splits, caches and reuses blocks), then
prints torch.cuda.max_memory_reserved() and max_memory_allocated(), and
with --stats writes torch.cuda.memory_stats() as JSON, to compare with
`gpumem replay s.pickle -o json`. --oom ends the run with an allocation
larger than the card, to try the dump at an out-of-memory error.
"""

import argparse
import json

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--stats", help="write torch.cuda.memory_stats() here as JSON")
    p.add_argument("--oom", action="store_true", help="end with an out-of-memory error")
    args = p.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = nn.Sequential(
        nn.Linear(1024, args.hidden), nn.GELU(),
        nn.Linear(args.hidden, args.hidden), nn.GELU(),
        nn.Linear(args.hidden, args.hidden), nn.GELU(),
        nn.Linear(args.hidden, 10),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [256, 512, 384, 1024, 768, 128, 2048, 640]
    for step in range(args.steps):
        bs = batches[step % len(batches)]
        x = torch.randn(bs, 1024, device=dev)
        y = torch.randint(0, 10, (bs,), device=dev)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} batch {bs} loss {loss.item():.4f}", flush=True)
    torch.cuda.synchronize()
    print(f"max_memory_reserved {torch.cuda.max_memory_reserved()}")
    print(f"max_memory_allocated {torch.cuda.max_memory_allocated()}", flush=True)
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)
    if args.oom:
        free, total = torch.cuda.mem_get_info()
        torch.empty(total * 2, dtype=torch.uint8, device=dev)


if __name__ == "__main__":
    main()
