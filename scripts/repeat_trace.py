#!/usr/bin/env python3
"""Repeat a PyTorch snapshot's trace into a long one, for benchmarks.

usage: repeat_trace.py SRC.pickle OUT.pickle [--events N] [--shift]

Device 0's events are written again and again until there are at least N
(default 1,000,000), as a program that runs the same step many times. The
addresses stay the same each time (a trace that ends where it began, such
as mempool_single's: each repetition's pools die and the next reuse their
addresses), unless --shift: then each repetition's addresses move past the
last one's, and the snapshot's final segments are listed once for each
repetition, moved with it (a trace that keeps segments, such as
graph_convnet's captured graphs, every copy of them alive at the end).
"""
import argparse, copy, pickle

p = argparse.ArgumentParser()
p.add_argument("src")
p.add_argument("out")
p.add_argument("--events", type=int, default=1_000_000)
p.add_argument("--shift", action="store_true")
a = p.parse_args()

snap = pickle.load(open(a.src, "rb"))
events = snap["device_traces"][0]
if not events:
    raise SystemExit(f"{a.src}: device 0 has no events")
reps = -(-a.events // len(events))
addrs = [e["addr"] for e in events] + [s["address"] + s["total_size"] for s in snap["segments"]]
span = (max(addrs) - min(addrs) + (1 << 30)) >> 30 << 30 if a.shift else 0
# Loaded once a repetition: fresh event dicts, as a program that runs the
# same step again records new ones. Their strings (keys, actions) are made
# the first repetition's again, as PyTorch's snapshot shares one string
# object per key and action through the whole trace: the pickler then
# writes each once and fetches it from the memo after, not once a
# repetition (a file half again as big, and a decoder that meets each
# repetition's keys at new memo slots).
blob = pickle.dumps(events, protocol=4)
strings = {}


def shared(x):
    return strings.setdefault(x, x) if isinstance(x, str) else x


out = []
for r in range(reps):
    rep = [{shared(k): shared(v) for k, v in e.items()} for e in pickle.loads(blob)]
    if span:
        for e in rep:
            e["addr"] += r * span
    out.extend(rep)
snap = dict(snap)
snap["device_traces"] = [out] + [[] for _ in snap["device_traces"][1:]]
if span:
    segs = []
    for r in range(reps):
        for s in snap["segments"]:
            s = copy.deepcopy(s)
            s["address"] += r * span
            for b in s.get("blocks", []):
                if "address" in b:
                    b["address"] += r * span
            segs.append(s)
    snap["segments"] = segs
with open(a.out, "wb") as f:
    pickle.dump(snap, f, protocol=4)
print(f"{a.out}: {len(out)} events, {reps} repetitions of {a.src}" + (f", {len(snap['segments'])} final segments" if span else ""))
