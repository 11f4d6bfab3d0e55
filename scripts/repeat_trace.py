#!/usr/bin/env python3
"""repeat_trace.py — a big snapshot made of a small one's trace repeated.

usage: repeat_trace.py IN.pickle OUT.pickle --events N

Writes IN's snapshot with each device trace's events repeated (same
addresses each time, times moved on) until the first non-empty trace
holds at least N events; the final segments are IN's. Made for the
private-pool fixtures (mempool_single: a MemPool made, used, deleted and
its cache emptied, so that each copy is a new pool lifetime at the old
one's addresses), to measure pool inference and replay on 1M-5M events
(scripts/bench_pools.sh).
"""
import argparse, pickle

p = argparse.ArgumentParser()
p.add_argument("inp")
p.add_argument("out")
p.add_argument("--events", type=int, required=True)
a = p.parse_args()
snap = pickle.load(open(a.inp, "rb"))
traces = snap["device_traces"]
one = next(t for t in traces if t)
reps = max(1, -(-a.events // len(one)))
for d, t in enumerate(traces):
    if not t:
        continue
    span = t[-1]["time_us"] - t[0]["time_us"] + 1
    out = []
    for r in range(reps):
        for e in t:
            e = dict(e)
            e["time_us"] += r * span
            out.append(e)
    traces[d] = out
with open(a.out, "wb") as f:
    pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
print(a.out, sum(len(t) for t in traces), "events,", reps, "copies")
