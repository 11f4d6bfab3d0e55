"""Extracts the segment sequences of H200 snapshots written by record.py
(run.sh's NAME.pickle) into pkg/alloc/testdata/emulated_addresses.json, the
data of TestSimEmulatedPrograms: per program, every cudaMalloc (size and
the address the driver gave) and cudaFree, in order, and where the
program's first kernel ran. That is the first allocation of its first step
(a randint or randn whose kernel runs right after): the model goes to the
card with .cuda() first, one host copy per parameter and buffer, no kernel.
And where the first cuBLAS handle was made, which maps 64 MiB of the
driver's own: just before the first 32 MiB allocation, its workspace
(Hopper's size), marked ["t", 67108864].
usage: segments.py OUT.json SNAPSHOT...  (SNAPSHOT named NAME.pickle)"""
import json
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(__file__))
import programs  # noqa: E402


def tensors(name):
    m = programs.PROGRAMS[name][0]()
    seen = {t.data_ptr() for t in list(m.parameters()) + list(m.buffers())}
    return len(seen)


out = []
for path in sys.argv[2:]:
    name = os.path.basename(path).removesuffix(".pickle")
    with open(path, "rb") as f:
        snap = pickle.load(f)
    first_step = tensors(name) + 1  # allocations before the first kernel
    ops, ids, allocs, marked, blas = [], {}, 0, False, False
    trace = snap["device_traces"][0]
    for i, e in enumerate(trace):
        a = e["action"]
        nxt = trace[i + 1] if i + 1 < len(trace) else {}
        if not blas and (a == "alloc" and e["size"] == 32 << 20 or
                         a == "segment_alloc" and nxt.get("action") == "alloc" and nxt.get("size") == 32 << 20):
            ops.append(["t", 64 << 20])
            blas = True
        if a == "alloc":
            allocs += 1
            if allocs == first_step + 1 and not marked:
                ops.append(["k"])
                marked = True
        elif a == "segment_alloc":
            ids[e["addr"]] = len(ids) + 1
            ops.append(["a", ids[e["addr"]], e["size"], e["addr"]])
        elif a == "segment_free":
            ops.append(["f", ids.pop(e["addr"])])
        elif a.startswith("segment_"):
            sys.exit(f"{path}: {a}: expandable segments are not cudaMalloc")
    out.append({"name": name, "ops": ops})
with open(sys.argv[1], "w") as f:
    json.dump({"note": "H200 (driver 580.159.04), PyTorch 2.11: segment sequences of scripts/estimate "
               "programs run for real (record.py --snapshot), extracted by scripts/estimate/segments.py; "
               "[\"k\"] marks the program's first kernel, [\"t\", SIZE] the driver's mapping at the first cuBLAS handle", "sequences": out}, f, separators=(",", ":"))
    f.write("\n")
