#!/usr/bin/env python3
"""Compare gpumem's categories at the peak of allocated memory with
torch.profiler's, on the recordings record.py made, as a Markdown table
(docs/categories.md and README.md show it).

Usage: python3 compare.py GPUMEM DIR   (DIR holds PROGRAM.pickle.gz and
PROGRAM.profiler.json.gz; the repository keeps them in
internal/categories/testdata/profiler)

The profiler has no buffer or workspace category and splits temporaries
into temporary and autograd_detail: buffers count as its parameters,
autograd_detail as temporaries, and gpumem's workspace is compared with
its unknown (allocations that are no tensor).
"""
import gzip
import json
import subprocess
import sys

ROWS = ["parameter", "optimizer_state", "gradient", "activation", "temporary", "input", "workspace", "unknown"]


def main():
    gpumem, d = sys.argv[1], sys.argv[2]
    print("| program | category | gpumem MiB | profiler MiB | gpumem − profiler |")
    print("|---|---|--:|--:|--:|")

    def rel(a, b):
        if b == 0:
            return "(profiler: none)"
        return f"{(a - b) / 2**20:+.1f} MiB ({100 * (a - b) / b:+.1f}%)"

    for p in ["gpt", "ckpt", "leak", "resnet"]:
        out = subprocess.run([gpumem, "replay", f"{d}/{p}.pickle.gz", "-o", "json"], check=True,
                             capture_output=True, text=True).stdout
        doc = json.loads(out)
        ours = dict(doc["categories"])
        ours["parameter"] += ours.pop("buffer")
        peak = doc["memory_stats"]["allocated_bytes.all.peak"]
        rec = json.load(gzip.open(f"{d}/{p}.profiler.json.gz", "rt"))
        prof = dict(rec["profiler"]["at_peak"])
        prof["temporary"] += prof.pop("autograd_detail")
        prof["workspace"] = 0
        assert sum(ours.values()) == peak == rec["profiler"]["peak_total"], p
        for c in ROWS:
            a, b = ours.get(c, 0), prof.get(c, 0)
            if a == 0 and b == 0:
                continue
            print(f"| {p} | {c} | {a / 2**20:.1f} | {b / 2**20:.1f} | {rel(a, b)} |")
        print(f"| {p} | **unknown share of the peak ({peak / 2**20:.1f} MiB)** | {100 * ours['unknown'] / peak:.1f}% | "
              f"{100 * prof['unknown'] / peak:.1f}% | |")


if __name__ == "__main__":
    main()
