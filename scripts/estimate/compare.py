"""Compares, per program, what PyTorch reported on the GPU (NAME.real.json)
with gpumem estimate's figures (NAME.est.json) and MemTracker's peak under
fake mode (NAME.mt.json), as a Markdown table. MemTracker reports one peak
(the live tensors' bytes): it is set against the real max_memory_allocated
and against max_memory_reserved.
usage: compare.py DIR NAME..."""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def mib(n):
    return "failed" if n is None else f"{n / 2**20:.1f}"


def diff(est, real):
    if est is None or not real:
        return ""
    d = (est - real) / real * 100
    return "exact" if est == real else f"{d:+.2f} %"


d = sys.argv[1]
print("| program | real max allocated (MiB) | estimate | Δ | MemTracker | Δ "
      "| real max reserved (MiB) | estimate | Δ | MemTracker | Δ | OOM real / estimate / MemTracker |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for n in sys.argv[2:]:
    r = load(os.path.join(d, n + ".real.json"))
    e = load(os.path.join(d, n + ".est.json"))
    m = load(os.path.join(d, n + ".mt.json"))
    if r is None:
        print(f"| {n} | real run failed |||||||||||")
        continue
    ra, rr = r["max_memory_allocated"], r["max_memory_reserved"]
    ea = er = None
    if e is not None:
        ea, er = e["peak_allocated_bytes"], e["peak_reserved_bytes"]
    mt = m["memtracker_peak"] if m else None
    oom_r = "yes" if r.get("oom") else "no"
    oom_e = "n/a" if e is None else ("yes" if e.get("ooms") else "no")
    oom_m = "n/a" if m is None else ("yes" if m.get("oom") else "no")
    cells = [n, mib(ra), mib(ea), diff(ea, ra), mib(mt), diff(mt, ra),
             mib(rr), mib(er), diff(er, rr), mib(mt), diff(mt, rr), f"{oom_r} / {oom_e} / {oom_m}"]
    print("| " + " | ".join(cells) + " |")
