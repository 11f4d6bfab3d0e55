"""What cuDNN (and any other library called inside an aten op) allocates
through the caching allocator beyond the op's outputs, on a real GPU.

Every aten op of the runs below goes through a dispatch mode that notes the
allocator's allocation and free counters before and after it and the
storages of its outputs; the memory history then gives, per op, its
allocator events in order: an output's block ("o", K, SIZE), a block that
is no output ("a", J, SIZE) and its free ("f", J), or the free of an older
block ("F", SIZE). Ops with only outputs are left out, except
convolutions (a convolution without scratch is a table entry too). Each op is keyed as
gpumem estimate keys it (gpumem_estimate.op_key: the op, its tensor
arguments' shapes, strides and dtypes, the other arguments, cuDNN's
switches), so the emulator can look the sequence up.
A block freed inside the op is scratch whatever its address (the
allocator may give a freed workspace's address to the next output); the
blocks the op keeps are its outputs, in order: table() reads the events so.

usage: cudnn_probe.py OUT.json [--repeat]   (--repeat: the programs only,
a second process, to check the sequences do not change between processes)
       cudnn_probe.py --table TABLE.json RUN.json...: the emulator's table
(internal/estimate/scratch_h200.json) of the convolutions' sequences, after
checking that every call of a key had the same one"""
import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
for p in (os.path.join(here, "..", "..", "internal", "estimate"), here):
    if os.path.exists(os.path.join(p, "gpumem_estimate.py")):
        sys.path.insert(0, p)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import gpumem_estimate  # noqa: E402
import programs  # noqa: E402


def counters():
    s = torch.cuda.memory_stats()
    return s.get("allocation.all.allocated", 0), s.get("allocation.all.freed", 0)


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        key = gpumem_estimate.op_key(func, args, kwargs)
        a0, f0 = counters()
        out = func(*args, **kwargs)
        a1, f1 = counters()
        outs = []
        for t in tree_leaves(out):
            outs.append(t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.is_cuda else None)
        self.ops.append({"key": key, "op": str(func), "a": (a0, a1), "f": (f0, f1), "outs": outs})
        return out


def record(tag, fn, results):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=20_000_000, stacks="python")
    l0 = len(torch.cuda.memory._snapshot()["device_traces"][0])
    base_a, base_f = counters()
    rec = Recorder()
    t0 = time.time()
    with rec:
        fn()
    torch.cuda.synchronize()
    tr = torch.cuda.memory._snapshot()["device_traces"][0][l0:]
    torch.cuda.memory._record_memory_history(None)
    # alloc / free_requested events by their counter values
    allocs, frees = [], []
    for e in tr:
        if e["action"] == "alloc":
            allocs.append(e)
        elif e["action"] == "free_requested":
            frees.append(e)
    pos = {id(e): i for i, e in enumerate(tr)}
    out = []
    for op in rec.ops:
        (a0, a1), (f0, f1) = op["a"], op["f"]
        evs = [("a", e) for e in allocs[a0 - base_a:a1 - base_a]] + [("f", e) for e in frees[f0 - base_f:f1 - base_f]]
        if not evs:
            continue
        evs.sort(key=lambda x: pos[id(x[1])])  # the op's own events in trace order
        seq, scratch, used = [], {}, set()
        for kind, e in evs:
            if kind == "a":
                k = next((i for i, p in enumerate(op["outs"]) if p == e["addr"] and i not in used), None)
                if k is not None:
                    used.add(k)
                    seq.append(["o", k, e["size"]])
                else:
                    j = len(scratch)
                    scratch[e["addr"]] = j
                    seq.append(["a", j, e["size"]])
            else:
                j = scratch.pop(e["addr"], None)
                seq.append(["f", j] if j is not None else ["F", e["size"]])
        if any(s[0] in "aF" for s in seq) or op["op"] in TABLE_OPS:
            out.append({"key": op["key"], "op": op["op"], "seq": seq})
    results.append({"run": tag, "seconds": time.time() - t0, "ops": out})
    print(f"{tag}: {len(out)} ops with blocks beyond their outputs", file=sys.stderr)


def program(name):
    def fn():
        build, optimizer, step, steps, setup, _conf = programs.PROGRAMS[name]
        torch.manual_seed(0)
        model = build().cuda()
        opt = optimizer(model)
        for i in range(steps):
            step(model, opt, i)
        del model, opt
    return fn


def tv(arch, bs, amp):
    def fn():
        import torchvision
        m = getattr(torchvision.models, arch)().cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(bs, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (bs,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        del m, opt
    return fn


def single(shapes):
    """One conv layer forward and backward per (N, C, H, K, R, stride, dtype)."""
    def fn():
        for n, c, h, k, r, s, dt in shapes:
            x = torch.randn(n, c, h, h, device="cuda", dtype=dt, requires_grad=True)
            w = torch.randn(k, c, r, r, device="cuda", dtype=dt, requires_grad=True)
            F.conv2d(x, w, stride=s, padding=r // 2).sum().backward()
            del x, w
    return fn


def canonical(seq):
    """The op's events with scratch told from outputs by lifetime."""
    blocks, order, by_j = [], [], {}
    for t in seq:
        if t[0] in "oa":
            order.append(("A", len(blocks)))
            if t[0] == "a":
                by_j[t[1]] = len(blocks)
            blocks.append([t[2], False])
        else:
            if t[0] == "f":
                i = by_j[t[1]]
            else:  # the free of a block the probe took for an output: the latest kept one of that size
                i = max(k for k, b in enumerate(blocks) if b[0] == t[1] and not b[1])
            blocks[i][1] = True
            order.append(("F", i))
    out, k, j = [], 0, {}
    for kind, i in order:
        if kind == "F":
            out.append(["f", j[i]])
        elif blocks[i][1]:
            j[i] = len(j)
            out.append(["a", j[i], blocks[i][0]])
        else:
            out.append(["o", k, blocks[i][0]])
            k += 1
    return out


TABLE_OPS = ("aten.convolution.default", "aten.convolution_backward.default")


def table(dst, srcs):
    ops, meta = {}, None
    for src in srcs:
        with open(src) as f:
            d = json.load(f)
        if meta is not None and d["meta"] != meta:
            sys.exit(f"{src}: recorded on another setup: {d['meta']}")
        meta = d["meta"]
        for r in d["results"]:
            for op in r["ops"]:
                if op["op"] not in TABLE_OPS:
                    continue
                seq = canonical(op["seq"])
                if ops.setdefault(op["key"], seq) != seq:
                    sys.exit(f"{src}: {op['key']}: two sequences: {ops[op['key']]} and {seq}")
    with open(dst, "w") as f:
        f.write(json.dumps({"meta": meta, "ops": TABLE_OPS}) [:-1] + ', "table": {\n')
        f.write(",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(ops.items())))
        f.write("\n}}\n")
    print(f"{dst}: {len(ops)} calls", file=sys.stderr)


def main():
    if sys.argv[1] == "--table":
        table(sys.argv[2], sys.argv[3:])
        return
    path = sys.argv[1]
    repeat = "--repeat" in sys.argv
    results = []
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "benchmark": torch.backends.cudnn.benchmark, "deterministic": torch.backends.cudnn.deterministic,
            "allow_tf32": torch.backends.cudnn.allow_tf32}
    for name in ("convnet_sgd", "convnet_amp_adamw"):
        record(name, program(name), results)
    if not repeat:
        for arch in ("resnet18", "resnet50"):
            for bs in (8, 32, 64):
                for amp in (False, True):
                    record(f"{arch}_bs{bs}_{'bf16' if amp else 'fp32'}", tv(arch, bs, amp), results)
        sweep = [(n, 64, 56, 64, 3, 1, dt) for n in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)
                 for dt in (torch.float32, torch.bfloat16)]
        sweep += [(32, c, h, c, 3, 1, dt) for c, h in ((16, 112), (32, 56), (128, 28), (256, 14), (512, 7), (1024, 7))
                  for dt in (torch.float32, torch.bfloat16, torch.float16)]
        sweep += [(32, 64, 56, 64, r, s, torch.float32) for r in (1, 5, 7) for s in (1, 2)]
        record("single_convs", single(sweep), results)
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": results}, f)


if __name__ == "__main__":
    main()
