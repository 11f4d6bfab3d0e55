#!/usr/bin/env python3
"""Write hostile trace files that once cost gpumem gigabytes (issue #12),
to measure the readers' bounds:

    python3 scripts/hostile_traces.py /tmp/hostile
    for f in /tmp/hostile/*; do /usr/bin/time -v bin/gpumem replay $f >/dev/null; done

Each file is small (at most about 64 MB); gpumem must reject or read each
within a few hundred MiB, with a one-line error naming the file and where.
"""
import os
import struct
import sys


def s(text):
    b = text.encode()
    if len(b) < 256:
        return b"\x8c" + bytes([len(b)]) + b
    return b"X" + struct.pack("<I", len(b)) + b


def i(n):
    return b"J" + struct.pack("<i", n) if n < 2**31 else b"\x8a\x08" + struct.pack("<q", n)


def snapshot(events=b"", segments=b""):
    """A snapshot dict: segments, then one device trace of events."""
    return (b"\x80\x04}(" + s("segments") + b"]" + (b"(" + segments + b"e" if segments else b"")
            + s("device_traces") + b"](](" + events + b"eeu.")


def event(action, addr, size, extra=b""):
    return b"}(" + s("action") + s(action) + s("addr") + i(addr) + s("size") + i(size) + extra + b"u"


def main(out):
    os.makedirs(out, exist_ok=True)
    files = {}
    # #12 item 3: a stack of 2,000 references to one frame with a 1 MiB
    # filename, on a live allocation and on one that runs out of memory
    frame = b"}(" + s("filename") + s("x" * (1 << 20)) + s("line") + i(1) + s("name") + s("f") + b"u\x94"
    stack = s("frames") + b"]\x94(" + frame + b"h\x01" * 1999 + b"e"
    files["frames.pickle"] = snapshot(event("alloc", 1 << 20, 512, stack)
                                      + event("alloc", 1 << 30, 1 << 50, s("frames") + b"h\x00"))
    # #12 item 6: one list referenced 20 million times through the memo
    files["memo.pickle"] = b"\x80\x04]]\x94a" + (b"(" + b"h\x00" * 1000 + b"e") * 20_000 + b"."
    # #12 item 6: 5 MB of nested empty lists
    files["nested.pickle"] = b"\x80\x04" + b"]" * 5_000_000 + b"."
    # a memo index as large as the file allows, asking for its pages at once
    files["sparsememo.pickle"] = b"\x80\x04B" + struct.pack("<I", 60_000_000) + b"\0" * 60_000_000 + b"r" + struct.pack("<I", 60_000_000) + b"."
    # 60 MB of distinct 3-byte strings
    strs = bytearray(b"\x80\x04](")
    for n in range(12_000_000):
        strs += b"\x8c\x03" + (n).to_bytes(3, "little")
    files["strings.pickle"] = bytes(strs + b"e.")
    # #12 item 6: a 200 MB line in an RMM log
    files["longline.csv"] = b"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x" + b"0" * 200_000_000 + b"\n"
    # #12 item 7: a 60 MB action string
    files["longaction.pickle"] = snapshot(event("\x1b[2J" + "a" * 60_000_000, 512, 512))
    # #12 item 8: a segment whose size is not a multiple of 512
    block = b"}(" + s("address") + i(1 << 21) + s("size") + i(1000) + s("state") + s("active_allocated") + b"u"
    seg = b"}(" + s("device") + i(0) + s("address") + i(1 << 21) + s("total_size") + i(1000) + s("segment_type") + s("large") + s("blocks") + b"](" + block + b"eu"
    files["badsegment.pickle"] = snapshot(event("free_requested", 1 << 21, 1000), seg)
    # short lines make 40-byte events: 64 MB of frees
    files["frees.trace"] = b"# gpumem-trace v1\n" + b"free 0x200 1\n" * 5_000_000
    files["frees.csv"] = b"Action,Pointer,Size\n" + b"free,0x200,1\n" * 5_000_000
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "hostile")
