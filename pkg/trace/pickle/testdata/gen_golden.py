#!/usr/bin/env python3
"""Write a small JSON summary of each snapshot fixture, read with CPython's
pickle, for trace_test.go to compare the Go decoder against.

usage (from the repository root):
    python3 pkg/trace/pickle/testdata/gen_golden.py testdata/pytorch/*.pickle
"""
import json, os, pickle, sys

ACTIONS = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot"]
M64 = 1 << 64


def frames(fs):
    return [[f["filename"], f["line"], f["name"]] for f in fs or []]


def event(e):
    addr = e["device_free"] if e["action"] == "oom" and "device_free" in e else e["addr"]
    return {"action": e["action"], "addr": addr, "size": e["size"], "stream": e.get("stream", 0) % M64,
            "time_us": e.get("time_us", 0), "frames": frames(e.get("frames"))}


def main(paths):
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
    for path in paths:
        with open(path, "rb") as f:
            snap = pickle.load(f)
        if isinstance(snap, list):
            snap = {"segments": snap}
        stacks = set()
        segs = snap["segments"]
        blocks = [b for s in segs for b in s["blocks"]]
        for s in segs:
            stacks.add(tuple(map(tuple, frames(s.get("frames")))))
        for b in blocks:
            stacks.add(tuple(map(tuple, frames(b.get("frames")))))
        traces = []
        for t in snap.get("device_traces", []):
            counts = {a: 0 for a in ACTIONS}
            with_frames = 0
            for e in t:
                counts[e["action"]] += 1
                fs = frames(e.get("frames"))
                with_frames += bool(fs)
                stacks.add(tuple(map(tuple, fs)))
            evs = [event(e) for e in t]
            traces.append({
                "count": len(t), "actions": counts, "with_frames": with_frames,
                "sum_size": sum(e["size"] for e in evs) % M64,
                "sum_addr": sum(e["addr"] for e in evs) % M64,
                "sum_time_us": sum(e["time_us"] for e in evs) % M64,
                "first": evs[:3], "last": evs[-3:],
            })
        stacks.discard(())
        seg_summary = lambda s: {
            "device": s["device"], "address": s["address"], "total_size": s["total_size"],
            "allocated_size": s["allocated_size"], "active_size": s["active_size"],
            "requested_size": s["requested_size"], "stream": s["stream"] % M64,
            "small": s["segment_type"] == "small", "pool_id": list(s["segment_pool_id"]),
            "expandable": s["is_expandable"], "blocks": len(s["blocks"]),
            "frames": frames(s.get("frames"))}
        states = {}
        for b in blocks:
            states[b["state"]] = states.get(b["state"], 0) + 1
        st = snap.get("allocator_settings")
        settings = None
        if st is not None:
            rd = st.get("roundup_power2_divisions", {})
            settings = {"alloc_conf": st["PYTORCH_CUDA_ALLOC_CONF"], "max_split_size": st["max_split_size"],
                        "gc_threshold": st["garbage_collection_threshold"],
                        "expandable_segments": st["expandable_segments"],
                        "roundup": [rd.get(str(1 << i), 0) for i in range(16)]}
        ann = snap.get("external_annotations", [])
        golden = {
            "segments": {
                "count": len(segs),
                "total_size": sum(s["total_size"] for s in segs),
                "allocated_size": sum(s["allocated_size"] for s in segs),
                "active_size": sum(s["active_size"] for s in segs),
                "requested_size": sum(s["requested_size"] for s in segs),
                "blocks": len(blocks), "block_states": states,
                "block_bytes": sum(b["size"] for b in blocks),
                "first": [seg_summary(s) for s in segs[:2]], "last": [seg_summary(s) for s in segs[-2:]],
            },
            "traces": traces,
            "stacks": len(stacks),
            "settings": settings,
            "annotations": {"count": len(ann), "first": ann[:2]},
        }
        name = os.path.splitext(os.path.basename(path))[0]
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(golden, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
