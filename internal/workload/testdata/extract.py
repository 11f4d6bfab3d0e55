#!/usr/bin/env python3
"""Extract the alloc/free sequence of a PyTorch memory snapshot.

    python3 testdata/extract.py ../../testdata/pytorch/seed_frag.pickle | gzip -9n > testdata/seed_frag.seq.gz

Each line is "alloc SIZE STREAM" or "free N", N counting allocations from 0
in the order they were made. A block counts as freed at free_completed,
which is when the allocator gets it back.
"""
import pickle
import sys

snap = pickle.load(open(sys.argv[1], "rb"))
ordinal = {}
n = 0
for e in snap["device_traces"][0]:
    if e["action"] == "alloc":
        ordinal[e["addr"]] = n
        print("alloc", e["size"], e["stream"])
        n += 1
    elif e["action"] == "free_completed":
        print("free", ordinal.pop(e["addr"]))
