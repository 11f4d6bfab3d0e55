"""What CUDA kernels allocate inside themselves through the caching
allocator, which a fake-tensor run does not see: a reduction's staging
buffer and semaphores (Reduce.cuh's global reduce), memory-efficient
attention's backward scratch, and whatever else the programs hit.

Every aten op goes through cudnn_probe's recorder (the allocator's
counters around the op and the memory history give its events in order:
"o" an output's block, "a" a block that is no output, "f" its free, "F"
the free of an older block); here for the programs of programs.py and for
sweeps of reductions and of memory-efficient attention, on a real GPU.

The calls of ops with no rule that the programs hit (cuDNN attention,
embedding backward's sort and segment buffers) are added to the card's
recorded table with --table, as cudnn_probe.py's convolutions are; the
rules (internal/estimate/gpumem_estimate_kernels.py) are checked against
the other calls by internal/estimate's tests (testdata/kernel_scratch_h200.json).

usage: kernel_scratch_probe.py OUT.json
       kernel_scratch_probe.py --table TABLE.json RUN.json: add RUN's calls
of TABLE_OPS to TABLE (internal/estimate/scratch_h200.json), after checking
that every call of a key had the same sequence, the table's own calls too
       kernel_scratch_probe.py --testdata OUT.json RUN.json: RUN's calls of
the ops the rules are about, for the tests"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import cudnn_probe  # noqa: E402
import programs  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# (op, shape, dtype, dims): dims None is a reduction over every dimension
REDUCTIONS = []
for dt in ("float32", "bfloat16"):
    for n in (32, 100, 256, 1024, 2048, 4096, 8192, 65536):
        for c in (3, 17, 512, 1000, 1536, 2048, 8192):
            REDUCTIONS.append(("sum", [n, c], dt, [0]))
    for shape, dims in (([8, 512, 512], [0, 1]), ([4, 1024, 2048], [0, 1]), ([4096, 512], [1]), ([512, 4096], [1]),
                        ([4096, 8192], [1]), ([4096, 512], None), ([256, 2048], None), ([1 << 20], None),
                        ([3 << 20], None), ([1000], None), ([32, 64, 56, 56], [0, 2, 3]), ([64, 64, 56, 56], [0, 2, 3])):
        REDUCTIONS.append(("sum", shape, dt, dims))
        REDUCTIONS.append(("mean", shape, dt, dims))
    for shape, dims in (([4096, 512], [1]), ([4096, 512], [0]), ([1 << 20], None), ([4096, 8192], [1])):
        REDUCTIONS.append(("amax", shape, dt, dims))
        REDUCTIONS.append(("var", shape, dt, dims))
        REDUCTIONS.append(("norm", shape, dt, dims))


REDUCTION_OPS = ("aten.sum.dim_IntList", "aten.sum.default", "aten.mean.dim", "aten.mean.default", "aten.amax.default",
                 "aten.var.correction", "aten.linalg_vector_norm.default")


def reductions():
    for op, shape, dt, dims in REDUCTIONS:
        x = torch.randn(shape, device="cuda", dtype=DTYPES[dt])
        if op == "sum":
            y = x.sum() if dims is None else x.sum(dims)
        elif op == "mean":
            y = x.mean() if dims is None else x.mean(dims)
        elif op == "amax":
            y = x.amax() if dims is None else x.amax(dims)
        elif op == "var":
            y = x.var() if dims is None else x.var(dims)
        else:
            y = torch.linalg.vector_norm(x) if dims is None else torch.linalg.vector_norm(x, dim=dims)
        del x, y


# (batch, heads, sequence, head dim, dtype, causal, q/k/v split from one tensor)
ATTENTION = [(b, h, t, d, dt, True, True) for b, t in ((8, 512), (4, 1024), (4, 512), (8, 1024), (1, 128), (2, 300))
             for h, d in ((8, 64),) for dt in ("float32", "bfloat16")]
ATTENTION += [(4, 16, 512, 128, "float32", True, True), (4, 8, 512, 64, "float32", False, True),
              (4, 8, 512, 64, "float32", True, False), (4, 8, 512, 64, "bfloat16", True, False),
              (2, 4, 2048, 64, "float32", True, True), (2, 4, 2048, 64, "bfloat16", True, True)]


def attention():
    for b, h, t, d, dt, causal, packed in ATTENTION:
        dtype = DTYPES[dt]
        if packed:
            qkv = torch.randn(b, t, 3 * h * d, device="cuda", dtype=dtype, requires_grad=True)
            q, k, v = (z.view(b, t, h, d).transpose(1, 2) for z in qkv.split(h * d, dim=2))
        else:
            q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        a.transpose(1, 2).reshape(b, t, h * d).sum().backward()
        del q, k, v, a


# ops whose scratch the emulator takes from the card's recorded table
TABLE_OPS = ("aten._scaled_dot_product_cudnn_attention.default",
             "aten._scaled_dot_product_cudnn_attention_backward.default", "aten.embedding_dense_backward.default")
RULE_OPS = REDUCTION_OPS + ("aten.amin.default", "aten.std.correction",
                            "aten._scaled_dot_product_efficient_attention_backward.default")


def calls(run, ops):
    """The canonical sequence of each key of RUN's calls of ops, checked to
    be the same for every call of a key."""
    with open(run) as f:
        d = json.load(f)
    out = {}
    for r in d["results"]:
        for op in r["ops"]:
            if op["op"] not in ops:
                continue
            seq = cudnn_probe.canonical(op["seq"])
            # canonical numbers the kept blocks in order; the emulator reads
            # "o" K as the op's K-th output (pytree leaf), which the probe
            # matched by address: cuDNN attention's seed and offset come first
            # (the convolutions' entries keep cudnn_probe's numbering)
            leaves = [t[1] for t in op["seq"] if t[0] == "o"]
            if op["op"] in TABLE_OPS and len(leaves) == sum(1 for t in seq if t[0] == "o"):
                it = iter(leaves)
                seq = [["o", next(it), t[2]] if t[0] == "o" else t for t in seq]
            if out.setdefault(op["key"], seq) != seq:
                sys.exit(f"{run}: {op['key']}: two sequences: {out[op['key']]} and {seq}")
    return d["meta"], out


def table(dst, run):
    with open(dst) as f:
        t = json.load(f)
    meta, new = calls(run, cudnn_probe.TABLE_OPS + TABLE_OPS)
    for k in ("torch", "device"):
        if meta[k] != t["meta"][k]:
            sys.exit(f"{run}: recorded with {k} {meta[k]}, the table with {t['meta'][k]}")
    for k, seq in new.items():
        if t["table"].setdefault(k, seq) != seq:
            sys.exit(f"{run}: {k}: {seq}, the table has {t['table'][k]}")
    t["ops"] = sorted(set(t["ops"]) | set(TABLE_OPS))
    with open(dst, "w") as f:
        f.write(json.dumps({"meta": t["meta"], "ops": t["ops"]})[:-1] + ', "table": {\n')
        f.write(",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(t["table"].items())))
        f.write("\n}}\n")
    print(f"{dst}: {len(t['table'])} calls", file=sys.stderr)


def testdata(dst, run):
    meta, cs = calls(run, RULE_OPS)
    with open(dst, "w") as f:
        f.write(json.dumps({"meta": meta, "source": "scripts/estimate/kernel_scratch_probe.py"})[:-1] + ', "calls": {\n')
        f.write(",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(cs.items())))
        f.write("\n}}\n")
    print(f"{dst}: {len(cs)} calls", file=sys.stderr)


def main():
    if sys.argv[1] == "--table":
        table(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--testdata":
        testdata(sys.argv[2], sys.argv[3])
        return
    results = []
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "device": torch.cuda.get_device_name(0),
            "sms": torch.cuda.get_device_properties(0).multi_processor_count,
            "threads_per_sm": torch.cuda.get_device_properties(0).max_threads_per_multi_processor}
    # keep the reductions' calls without scratch too: a rule must say none for them
    cudnn_probe.TABLE_OPS = cudnn_probe.TABLE_OPS + REDUCTION_OPS
    for name in programs.PROGRAMS:
        if name != "gpt_fraction_oom":
            cudnn_probe.record(name, cudnn_probe.program(name), results)
    cudnn_probe.record("reductions", reductions, results)
    cudnn_probe.record("attention", attention, results)
    with open(sys.argv[1], "w") as f:
        json.dump({"meta": meta, "reductions": REDUCTIONS, "attention": ATTENTION, "results": results}, f)


if __name__ == "__main__":
    main()
