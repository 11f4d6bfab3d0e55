#!/usr/bin/env python3
"""Record one small training program twice over at once: as a CUDA memory
snapshot (torch.cuda.memory._record_memory_history with Python stacks) and
under torch.profiler with profile_memory=True, record_shapes=True,
with_stack=True. Writes, into OUTDIR:

  PROGRAM.pickle        the snapshot (what gpumem reads)
  PROGRAM.profiler.json the profiler's memory categories: bytes per category
                        at the peak of its memory timeline, its peak total,
                        torch.cuda's allocated_bytes.all.peak, and per tensor
                        allocation (time, address, bytes, category) so that a
                        block can be matched with its profiler category.

Usage: python3 record.py PROGRAM OUTDIR
PROGRAM: gpt | resnet | ckpt | leak (see docs/categories.md)

scripts/categories/run.sh records all four; gpumem's comparison is
`go test ./internal/categories -run Profiler -v`.
"""
import gzip
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

DEV = "cuda:0"


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A GPT-2-like decoder built from torch.nn."""

    def __init__(self, vocab=8192, d=512, heads=8, layers=6, seq=512, checkpoint=False):
        super().__init__()
        self.checkpoint = checkpoint
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gpt_program(checkpoint=False, leak=False):
    vocab, seq, batch = 8192, 512, 8
    layers = 4 if leak else 6
    model = GPT(vocab=vocab, seq=seq, layers=layers, checkpoint=checkpoint).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    kept = []  # the leak: evaluation losses kept with their graphs

    def step(i):
        x = torch.randint(0, vocab, (batch, seq), generator=g).to(DEV)
        y = torch.randint(0, vocab, (batch, seq), generator=g).to(DEV)
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if leak:
            xe = torch.randint(0, vocab, (2, seq), generator=g).to(DEV)
            kept.append(model(xe, xe))  # no torch.no_grad(): the graph stays
        return loss

    return step, 4 if leak else 3


def resnet_program():
    import torchvision

    model = torchvision.models.resnet18(num_classes=100).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)

    def step(i):
        x = torch.randn(32, 3, 160, 160, generator=g).to(DEV)
        y = torch.randint(0, 100, (32,), generator=g).to(DEV)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, 3


PROGRAMS = {
    "gpt": lambda: gpt_program(),
    "ckpt": lambda: gpt_program(checkpoint=True),
    "leak": lambda: gpt_program(leak=True),
    "resnet": resnet_program,
}


def profiler_categories(prof):
    """The profiler's memory timeline: per-category bytes at its peak, and
    every tensor allocation with its category."""
    from torch.profiler import _memory_profiler as mp

    tl = mp.MemoryProfileTimeline(prof._memory_profile())
    names = ["(column 0)"] + [None] * len(mp._CATEGORY_TO_INDEX)
    for c, i in mp._CATEGORY_TO_INDEX.items():
        names[i + 1] = "unknown" if c is None else c.name.lower()
    times, sizes = tl._coalesce_timeline(DEV)
    totals = [sum(row) for row in sizes]
    peak = max(range(len(totals)), key=lambda i: totals[i])
    at_peak = {names[j]: int(v) for j, v in enumerate(sizes[peak]) if j > 0}
    tensors = []
    device = torch.device(DEV)
    for t, action, (key, version), numbytes in tl.timeline:
        if key.device != device:
            continue
        cat = tl.categories.get(key, version) if isinstance(key, mp.TensorKey) else None
        ptr = getattr(getattr(key, "storage", None), "ptr", None)
        tensors.append([int(t), action.name, ptr, int(getattr(key, "id", -1)), int(version), int(numbytes),
                        "unknown" if cat is None else cat.name.lower()])
    return {
        "columns": names[1:],
        "peak_time_us": int(times[peak]),
        "peak_total": int(totals[peak]),
        "at_peak": at_peak,
        "timeline_points": len(times),
        "tensors": tensors,
    }


def main():
    name, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=500000, context="all", stacks="python")
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step, steps = PROGRAMS[name]()
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    snap = os.path.join(outdir, name + ".pickle")
    torch.cuda.memory._dump_snapshot(snap)
    torch.cuda.memory._record_memory_history(enabled=None)
    t1 = time.time()
    out = {
        "program": name,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "allocated_bytes.all.peak": stats["allocated_bytes.all.peak"],
        "reserved_bytes.all.peak": stats["reserved_bytes.all.peak"],
        "run_seconds": round(t1 - t0, 2),
    }
    try:
        out["profiler"] = profiler_categories(prof)
    except Exception as e:  # keep the snapshot; say why the profiler's view is missing
        out["profiler_error"] = repr(e)
        try:
            path = os.path.join(outdir, name + ".timeline.json")
            prof.export_memory_timeline(path, device=DEV)
        except Exception as e2:
            out["export_error"] = repr(e2)
    out["post_seconds"] = round(time.time() - t1, 2)
    with gzip.open(os.path.join(outdir, name + ".profiler.json.gz"), "wt") as f:
        json.dump(out, f)
    summary = {k: v for k, v in out.items() if k != "profiler"}
    if "profiler" in out:
        summary["at_peak"] = out["profiler"]["at_peak"]
        summary["peak_total"] = out["profiler"]["peak_total"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
