#!/usr/bin/env python3
"""Re-pickle seed_frag.pickle with other protocols and as a bare segment
list, so the tests cover BINPUT/LONG_BINPUT, BINUNICODE and the old
list-only format. Run from the repository root:
    python3 pkg/trace/pickle/testdata/gen_protocols.py
"""
import pickle

with open("testdata/pytorch/seed_frag.pickle", "rb") as f:
    snap = pickle.load(f)
for proto in (2, 3, 5):
    with open("pkg/trace/pickle/testdata/seed_frag_p%d.pickle" % proto, "wb") as f:
        pickle.dump(snap, f, protocol=proto)
with open("pkg/trace/pickle/testdata/seed_frag_segments.pickle", "wb") as f:
    pickle.dump(snap["segments"], f, protocol=4)
