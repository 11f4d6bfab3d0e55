"""Compares, per program and rank, what PyTorch reported on the GPU
(NAME.BACKEND.N.real.jsonl, from dist_run.sh) with gpumem estimate --nproc
N's figures (NAME.est.N.json, its -o json, in ESTDIR, default DIR), as a
Markdown table. The H200's of docs/estimate.md are in scripts/estimate/h200_dist.
usage: dist_compare.py DIR [--est ESTDIR] NAME..."""
import json
import os
import sys


def real(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    d = json.loads(line)
                    out[d["rank"]] = d
    except OSError:
        pass
    return out


def mib(n):
    return f"{n / 2**20:.1f}"


def diff(est, real):
    if est == real:
        return "exact"
    if abs(est - real) * 10000 < real:  # under 0.01 %: the bytes
        return f"{est - real:+d} B"
    return f"{(est - real) / real * 100:+.2f} %"


d = sys.argv[1]
names = sys.argv[2:]
est_dir = d
if names[:1] == ["--est"]:
    est_dir, names = names[1], names[2:]
print("| program | real run | rank | real max allocated (MiB) | estimate | Δ | real max reserved (MiB) | estimate | Δ |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for n in names:
    for backend, nproc in (("gloo", 2), ("nccl", 1), ("nccl", 2)):
        r = real(os.path.join(d, f"{n}.{backend}.{nproc}.real.jsonl"))
        if not r:
            continue
        try:
            with open(os.path.join(est_dir, f"{n}.est.{nproc}.json")) as f:
                e = {k["rank"]: k for k in json.load(f)["ranks"]}
        except (OSError, ValueError, KeyError):
            e = {}
        for rank in sorted(r):
            ra, rr = r[rank]["max_memory_allocated"], r[rank]["max_memory_reserved"]
            k = e.get(rank)
            if k is None:
                print(f"| {n} | {backend}, {nproc} | {rank} | {mib(ra)} | failed | | {mib(rr)} | failed | |")
                continue
            ea, er = k["peak_allocated_bytes"], k["peak_reserved_bytes"]
            print(f"| {n} | {backend}, {nproc} | {rank} | {mib(ra)} | {mib(ea)} | {diff(ea, ra)} | {mib(rr)} | {mib(er)} | {diff(er, rr)} |")
