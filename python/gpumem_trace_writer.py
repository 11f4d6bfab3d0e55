#!/usr/bin/env python3
"""Write gpumem text traces (docs/trace-format.md) from Python.

As a library, log allocator events by hand, from any allocator:

    from gpumem_trace_writer import TraceWriter
    with TraceWriter("my.trace") as w:
        w.alloc(0x7F0000000000, 1 << 20, stream=0)
        w.free(0x7F0000000000, 1 << 20)
        w.oom(1 << 40)

As a program, convert a PyTorch memory snapshot pickle (no torch needed):

    python3 gpumem_trace_writer.py snapshot.pickle out.trace

Then `gpumem replay my.trace`. The text format is one event per line, so a
writer needs nothing but formatted prints; this file is an example of one.
"""

import pickle
import sys

HEADER = "# gpumem-trace v1"


class TraceWriter:
    """Writes one event per line. Addresses are written in hex."""

    def __init__(self, path_or_file):
        if hasattr(path_or_file, "write"):
            self._f, self._own = path_or_file, False
        else:
            self._f, self._own = open(path_or_file, "w"), True
        self._f.write(HEADER + "\n")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._own:
            self._f.close()

    def _line(self, words, stream=0, t=0, **extra):
        parts = [str(w) for w in words]
        parts += [f"{k}={v}" for k, v in extra.items() if v]
        if stream:
            parts.append(f"stream={stream:#x}")
        if t:
            parts.append(f"t={int(t)}")
        self._f.write(" ".join(parts) + "\n")

    def comment(self, text):
        for line in str(text).splitlines():
            self._f.write(f"# {line}\n")

    def device(self, n):
        self._f.write(f"device {int(n)}\n")

    def setting(self, name, *values):
        self._f.write(" ".join(["setting", name, *map(str, values)]) + "\n")

    def alloc(self, addr, size, stream=0, t=0):
        self._line(["alloc", f"{addr:#x}", size], stream, t)

    def free(self, addr, size=None, stream=0, t=0):
        """free_requested and free_completed at once."""
        self._line(["free", f"{addr:#x}"] + ([] if size is None else [size]), stream, t)

    def free_requested(self, addr, size=None, stream=0, t=0):
        self._line(["free_requested", f"{addr:#x}"] + ([] if size is None else [size]), stream, t)

    def free_completed(self, addr, size=None, stream=0, t=0):
        self._line(["free_completed", f"{addr:#x}"] + ([] if size is None else [size]), stream, t)

    def segment_event(self, action, addr, size, stream=0, t=0):
        """action: segment_alloc, segment_free, segment_map or segment_unmap."""
        self._line([action, f"{addr:#x}", size], stream, t)

    def oom(self, size, device_free=0, stream=0, t=0):
        self._line(["oom", size], stream, t, device_free=device_free)

    def empty_cache(self, t=0):
        self._line(["empty_cache"], 0, t)

    def segment(self, addr, total_size, blocks, stream=0, pool=(0, 0), small=False, expandable=False, device=None):
        """A segment present at the end of the trace, with its blocks as
        (address, size, state, requested_size) tuples."""
        words = ["segment", f"{addr:#x}", total_size]
        if device is not None:
            words.append(f"device={device}")
        if stream:
            words.append(f"stream={stream:#x}")
        if tuple(pool) != (0, 0):
            words.append(f"pool={pool[0]},{pool[1]}")
        if small:
            words.append("small")
        if expandable:
            words.append("expandable")
        self._f.write(" ".join(map(str, words)) + "\n")
        for b_addr, b_size, state, requested in blocks:
            extra = f" requested={requested}" if requested else ""
            self._f.write(f"block {b_addr:#x} {b_size} {state}{extra}\n")


def convert_snapshot(snapshot, w):
    """Writes a torch.cuda.memory._snapshot() dict (or a pickled one)."""
    if isinstance(snapshot, list):  # a bare segment list
        snapshot = {"segments": snapshot}
    st = snapshot.get("allocator_settings")
    if st is not None:
        if st.get("PYTORCH_CUDA_ALLOC_CONF"):
            w.setting("alloc_conf", st["PYTORCH_CUDA_ALLOC_CONF"])
        w.setting("max_split_size", st.get("max_split_size", -1))
        w.setting("garbage_collection_threshold", float(st.get("garbage_collection_threshold", 0)))
        w.setting("expandable_segments", "true" if st.get("expandable_segments") else "false")
        div = st.get("roundup_power2_divisions") or {}
        w.setting("roundup_power2_divisions", *(div.get(str(1 << i), 0) for i in range(16)))
    traces = snapshot.get("device_traces", [])
    segs_by_device = {}
    for s in snapshot.get("segments", []):
        segs_by_device.setdefault(s.get("device", 0), []).append(s)

    def write_segment(s, with_device):
        # older releases call a pending free "active_awaiting_free"
        state = lambda b: "active_pending_free" if b["state"] == "active_awaiting_free" else b["state"]
        blocks = [(b["address"], b["size"], state(b), b.get("requested_size", 0)) for b in s.get("blocks", [])]
        w.segment(s["address"], s["total_size"], blocks, stream=s.get("stream", 0),
                  pool=s.get("segment_pool_id", (0, 0)), small=s.get("segment_type") == "small",
                  expandable=s.get("is_expandable", False), device=s.get("device", 0) if with_device else None)

    for d, events in enumerate(traces):
        w.device(d)
        for e in events:
            a, t, stream = e["action"], e.get("time_us", 0), e.get("stream", 0)
            if a == "alloc":
                w.alloc(e["addr"], e["size"], stream, t)
            elif a in ("free_requested", "free_completed"):
                getattr(w, a)(e["addr"], e["size"], stream, t)
            elif a.startswith("segment_"):
                w.segment_event(a, e["addr"], e["size"], stream, t)
            elif a == "oom":
                w.oom(e["size"], e.get("device_free", 0), stream, t)
            elif a == "snapshot":
                w._line(["snapshot"], stream, t)
        for s in segs_by_device.pop(d, []):
            write_segment(s, False)
    for d in sorted(segs_by_device):  # devices with no trace list
        for s in segs_by_device[d]:
            write_segment(s, True)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gpumem_trace_writer.py SNAPSHOT.pickle OUT.trace (OUT - for stdout)")
    with open(sys.argv[1], "rb") as f:
        snap = pickle.load(f)  # only dicts, lists, strings and numbers: no torch needed
    out = sys.stdout if sys.argv[2] == "-" else sys.argv[2]
    with TraceWriter(out) as w:
        w.comment(f"converted from {sys.argv[1]} by gpumem_trace_writer.py")
        convert_snapshot(snap, w)


if __name__ == "__main__":
    main()
