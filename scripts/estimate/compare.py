"""Compares, per program, what PyTorch reported on the GPU (NAME.real.json)
with gpumem estimate's figures (NAME.est.json) and MemTracker's peak under
fake mode (NAME.mt.json), as a Markdown table.
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
    return f"{n / 2**20:.1f}"


def diff(est, real):
    if not real:
        return "n/a"
    d = (est - real) / real * 100
    return "exact" if est == real else f"{d:+.2f} %"


d = sys.argv[1]
print("| program | real max allocated (MiB) | estimate | Δ | real max reserved (MiB) | estimate | Δ | MemTracker peak | Δ vs reserved | OOM real / estimate |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for n in sys.argv[2:]:
    r = load(os.path.join(d, n + ".real.json"))
    e = load(os.path.join(d, n + ".est.json"))
    m = load(os.path.join(d, n + ".mt.json"))
    if r is None:
        print(f"| {n} | real run failed |||||||||")
        continue
    ra, rr = r["max_memory_allocated"], r["max_memory_reserved"]
    if e is None:
        ea = er = None
    else:
        ea, er = e["peak_allocated_bytes"], e["peak_reserved_bytes"]
    mt = m["memtracker_peak"] if m else None
    oom_r = "yes" if r.get("oom") else "no"
    oom_e = "n/a" if e is None else ("yes" if e.get("ooms") else "no")
    cells = [n, mib(ra), mib(ea) if ea is not None else "failed", diff(ea, ra) if ea is not None else "",
             mib(rr), mib(er) if er is not None else "failed", diff(er, rr) if er is not None else "",
             mib(mt) if mt is not None else "failed", diff(mt, rr) if mt is not None else "", f"{oom_r} / {oom_e}"]
    print("| " + " | ".join(cells) + " |")
