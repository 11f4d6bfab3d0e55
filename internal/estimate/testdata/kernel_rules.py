"""Checks the kernel scratch rules (gpumem_estimate_kernels.py) against the
calls recorded on the H200 (kernel_scratch_h200.json, from
scripts/estimate/kernel_scratch_probe.py): for each recorded call, the
rule's events must be the H200's, outputs and scratch in order, sizes to
the byte. Prints one line per mismatch, then "kernel rules: N ok, M wrong".
usage: kernel_rules.py DIR_OF_THE_RULES TESTDATA.json"""
import json
import re
import sys

sys.path.insert(0, sys.argv[1])
import gpumem_estimate_kernels as kern  # noqa: E402


def split_top(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def arg(a):
    m = re.fullmatch(r"T\[([^\]]*)\]\[([^\]]*)\](\w+)\+(\d+)", a)
    if not m:
        return a
    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    return ints(m.group(1)), ints(m.group(2)), m.group(3), int(m.group(4))


def events(seq):
    """Outputs as one marker; scratch numbered by first use."""
    out, ids = [], {}
    for t in seq:
        if t[0] == "o":
            if not out or out[-1] != ("o",):
                out.append(("o",))
        elif t[0] == "a":
            ids[t[1]] = len(ids)
            out.append(("a", ids[t[1]], t[2]))
        else:
            out.append(("f", ids.pop(t[1])))
    return out


def rule(op, args, meta):
    if op in kern.REDUCE_OPS:
        shape, stride, dt, off = args[0]
        dims = None
        rest = [json.loads(a) for a in args[1:] if a.startswith("[")]
        if op not in ("aten.sum.default", "aten.mean.default") and rest:
            dims = rest[0]
        return kern.reduction(op, shape, stride, dt, off, dims, meta["sms"], meta["threads_per_sm"])
    g, q, v = args[0], args[1], args[3]
    bias = None if args[4] == "None" else args[4]
    return kern.efficient_attention_backward(g[:3], q[:3], v[:3], bias, float(args[9]), (9, 0))


d = json.load(open(sys.argv[2]))
ok = bad = 0
for key, seq in d["calls"].items():
    op, rest = key.split("|")[0].split("(", 1)
    got = rule(op, [arg(a) for a in split_top(rest[:-1])], d["meta"])
    got = [("o",)] if got is None else got
    if isinstance(got, str) or events(got) != events(seq):
        bad += 1
        print(f"{key}: the H200 {events(seq)}, the rule {got}")
    else:
        ok += 1
print(f"kernel rules: {ok} ok, {bad} wrong")
