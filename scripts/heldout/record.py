"""Held-out recordings: small programs unlike the shared fixtures, each run
in a fresh process and recorded as they were (_record_memory_history, then
_snapshot), with a truth in their format: memory_stats and memory_summary at
the end, the settings, the error the program ended with, if any.
usage: record.py OUTDIR NAME WORKLOAD ALLOC_CONF FRACTION (run.sh runs them all)"""
import json, os, pickle, sys
out, name, work, conf, frac = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
import torch, torch.nn as nn
dev = torch.device("cuda")
total = torch.cuda.mem_get_info()[1]
torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=sys.maxsize)
if frac:
    torch.cuda.set_per_process_memory_fraction(frac)
err = None
torch.manual_seed(0)

def tlm(steps=(128, 384, 256, 512, 192, 448)):
    d, v = 512, 8000
    emb = nn.Embedding(v, d).to(dev)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 8, 2048, batch_first=True), 6).to(dev)
    head = nn.Linear(d, v).to(dev)
    ps = list(emb.parameters()) + list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(ps, lr=1e-4)
    for s in steps:
        x = torch.randint(0, v, (16, s), device=dev)
        y = head(enc(emb(x)))
        loss = nn.functional.cross_entropy(y.view(-1, v), x.view(-1))
        loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

def cnn_graph():
    m = nn.Sequential(nn.Conv2d(3, 48, 5, padding=2), nn.BatchNorm2d(48), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(48, 96, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(96 * 16, 10)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(96, 3, 48, 48, device=dev); y = torch.randint(0, 10, (96,), device=dev)
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(m(x), y).backward(); opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = nn.functional.cross_entropy(m(x), y); loss.backward(); opt.step()
    for _ in range(4):
        x.copy_(torch.randn_like(x)); g.replay()
    # i = 1 asks for 1 << 40 floats (4 TiB): the card refuses, and the
    # error ends the program (caught below), as in testdata/heldout
    extra = [torch.empty(1 << 20 * (i % 3 + 1), device=dev) for i in range(6)]
    del extra
    del g, loss
    torch.cuda.empty_cache()
    torch.cuda.synchronize()

def oom_loop():
    m = nn.Sequential(nn.Linear(4096, 8192), nn.GELU(), nn.Linear(8192, 4096)).to(dev)
    opt = torch.optim.Adam(m.parameters())
    b, last = 256, None
    while b < 1 << 20:
        try:
            x = torch.randn(b, 4096, device=dev)
            m(x).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
            last = b; b *= 2
        except torch.OutOfMemoryError:
            x = None; opt.zero_grad(set_to_none=True)
            break
    torch.cuda.empty_cache()
    for _ in range(2):
        x = torch.randn(last, 4096, device=dev)
        m(x).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

def mempools():
    p1, p2 = torch.cuda.MemPool(), torch.cuda.MemPool()
    keep = []
    for i in range(12):
        with torch.cuda.use_mem_pool(p1 if i % 2 else p2):
            keep.append(torch.empty((i % 4 + 1) * (3 << 20) + 4096 * i, dtype=torch.uint8, device=dev))
        keep.append(torch.empty((i + 1) * 700_000, dtype=torch.uint8, device=dev))
        if i % 3 == 2:
            keep.pop(0); keep.pop(1)
    del keep
    with torch.cuda.use_mem_pool(p1):
        t = torch.empty(50 << 20, dtype=torch.uint8, device=dev)
    del t
    del p1
    torch.cuda.empty_cache()
    with torch.cuda.use_mem_pool(p2):
        u = torch.empty(9 << 20, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()

def streams():
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    live = []
    for i in range(40):
        st = (s1, s2, torch.cuda.current_stream())[i % 3]
        with torch.cuda.stream(st):
            a = torch.empty((i % 7 + 1) * 1_300_000 + 512 * i, dtype=torch.uint8, device=dev)
        if i % 4 == 0:
            a.record_stream(torch.cuda.current_stream())
        live.append(a)
        if len(live) > 9:
            live.pop(i % 5)
    del live, a
    torch.cuda.synchronize()
    torch.cuda.empty_cache()

def compiled():
    m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev)
    f = torch.compile(m, mode="reduce-overhead")
    with torch.no_grad():
        for n in (64, 64, 64, 64, 128, 128, 128):
            f(torch.randn(n, 1024, device=dev))
    torch.cuda.synchronize()

def ckpt():
    from torch.utils.checkpoint import checkpoint
    blocks = nn.ModuleList([nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)) for _ in range(8)]).to(dev)
    opt = torch.optim.AdamW(blocks.parameters())
    for n in (512, 1536, 1024, 2048, 768):
        x = torch.randn(n, 1024, device=dev, requires_grad=True)
        for i, b in enumerate(blocks):
            x = checkpoint(b, x, use_reentrant=False) if i % 2 else b(x)
        x.square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

def amp():
    m = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.Conv2d(64, 128, 3, stride=2, padding=1),
                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 100)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler()
    for bs in (64, 128, 96, 160):
        x = torch.randn(bs, 3, 64, 64, device=dev); y = torch.randint(0, 100, (bs,), device=dev)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(m(x), y)
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

def serve():
    m = nn.Sequential(nn.Linear(2048, 8192), nn.ReLU(), nn.Linear(8192, 2048)).to(dev).half()
    with torch.no_grad():
        for i, bs in enumerate((1, 7, 64, 3, 512, 33, 1024, 5, 256, 2048, 9)):
            out = m(torch.randn(bs, 2048, device=dev, dtype=torch.half))
            del out
            if i % 4 == 3:
                torch.cuda.empty_cache()
    torch.cuda.synchronize()

def oom_mid():
    m = nn.Linear(8192, 8192).to(dev)
    keep = [torch.randn(4096, 8192, device=dev) for _ in range(4)]
    for i in range(3):
        try:
            big = torch.empty(int(2e14), dtype=torch.uint8, device=dev)
        except torch.OutOfMemoryError:
            keep.pop()
        y = m(torch.randn(1024 * (i + 1), 8192, device=dev)); del y
    torch.cuda.empty_cache()
    z = m(torch.randn(2048, 8192, device=dev))
    torch.cuda.synchronize()

def compiled_default():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), 2).to(dev)
    f = torch.compile(enc)
    opt = torch.optim.Adam(enc.parameters())
    for s in (64, 64, 128, 128):
        f(torch.randn(8, s, 256, device=dev)).sum().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

def compile_train():
    m = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    f = torch.compile(m, mode="reduce-overhead")
    for n in (128, 128, 128, 128, 256, 256, 256, 128):
        x = torch.randn(n, 512, device=dev)
        f(x).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

def two_graphs():
    a = nn.Linear(1024, 1024).to(dev); b = nn.Linear(1024, 4096).to(dev)
    xa = torch.randn(256, 1024, device=dev); xb = torch.randn(512, 1024, device=dev)
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            a(xa); b(xb)
    torch.cuda.current_stream().wait_stream(s)
    pool = torch.cuda.graph_pool_handle()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, pool=pool):
        ya = a(xa).relu()
    with torch.cuda.graph(g2, pool=pool):
        yb = b(xb).relu()
    for _ in range(3):
        g1.replay(); g2.replay()
    z = [torch.empty(3 << 20, device=dev) for _ in range(3)]
    del g1, ya
    torch.cuda.empty_cache()
    g2.replay()
    del g2, yb, z
    torch.cuda.empty_cache()
    torch.cuda.synchronize()

def graphed_callables():
    m = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(64, 256, device=dev, requires_grad=True)
    gm = torch.cuda.make_graphed_callables(m, (x,))
    for _ in range(5):
        gm(torch.randn(64, 256, device=dev, requires_grad=True)).sum().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

def pool_live():
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(5 << 20, dtype=torch.uint8, device=dev)
        b = torch.empty(30 << 20, dtype=torch.uint8, device=dev)
        c = torch.empty(700_000, dtype=torch.uint8, device=dev)
    d = torch.empty(5 << 20, dtype=torch.uint8, device=dev)
    del b
    del pool
    torch.cuda.empty_cache()
    e = torch.empty(25 << 20, dtype=torch.uint8, device=dev)
    del a, c
    torch.cuda.empty_cache()
    torch.cuda.synchronize()

def oom_backward():
    m = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(6)]).to(dev)
    opt = torch.optim.Adam(m.parameters())
    for bs in (1024, 8192, 65536, 2048):
        try:
            m(torch.randn(bs, 4096, device=dev)).square().mean().backward()
            opt.step(); opt.zero_grad(set_to_none=True)
        except torch.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
    torch.cuda.synchronize()

def kv_graphs():
    # a server: a KV cache preallocated, decode warmed up, then one graph per
    # batch size captured into one shared pool (each capture begins with
    # torch.cuda.graph's empty_cache())
    d, layers, ctx = 1024, 4, 2048
    blocks = nn.ModuleList([nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers)]).to(dev).half()
    kv = torch.empty(layers, 2, 16, ctx, d, dtype=torch.half, device=dev)
    def step(x):
        for i, b in enumerate(blocks):
            x = x + b(x) + kv[i, 0, : x.shape[0], 0]
        return x
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for bs in (1, 2, 4, 8, 16):
            step(torch.randn(bs, d, device=dev, dtype=torch.half))
    torch.cuda.current_stream().wait_stream(s)
    pool = torch.cuda.graph_pool_handle()
    graphs, outs, ins = [], [], []
    with torch.no_grad():
        for bs in (16, 8, 4, 2, 1):
            x = torch.randn(bs, d, device=dev, dtype=torch.half)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                y = step(x)
            graphs.append(g); outs.append(y); ins.append(x)
        for _ in range(3):
            for g in graphs:
                g.replay()
    torch.cuda.synchronize()

def mempool_cublas():
    # two MemPools used in turn; the first matmul (cuBLAS's workspace) runs
    # inside one of them, which is deleted mid-run, then empty_cache()
    p1, p2 = torch.cuda.MemPool(), torch.cuda.MemPool()
    w = torch.randn(1024, 1024, device=dev)
    keep = []
    for i in range(8):
        with torch.cuda.use_mem_pool(p1 if i % 2 == 0 else p2):
            keep.append(w @ torch.randn(1024, 512 * (i % 3 + 1), device=dev))
        if i % 3 == 2:
            keep.pop(0)
    del keep
    del p1
    torch.cuda.empty_cache()
    with torch.cuda.use_mem_pool(p2):
        u = w @ torch.randn(1024, 2048, device=dev)
    torch.cuda.synchronize()

def generate():
    # Hugging Face generate on a small GPT-2 built from its config (no
    # weights to download)
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=512, n_head=8)).to(dev).eval()
    for bs, new in ((1, 32), (4, 48), (8, 24)):
        ids = torch.randint(0, 50000, (bs, 16), device=dev)
        m.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()

try:
    globals()[work]()
except Exception as e:  # the truth keeps the error, as the fixtures do
    err = f"{type(e).__name__}: {e}"[:300]
snap = torch.cuda.memory._snapshot()
with open(os.path.join(out, name + ".pickle"), "wb") as f:
    pickle.dump(snap, f, protocol=4)
truth = {"replay": name + ".pickle", "alloc_conf": conf, "per_process_memory_fraction": frac,
         "allowed_bytes": int(frac * total), "memory_stats": dict(torch.cuda.memory_stats()),
         "memory_summary": torch.cuda.memory_summary(), "error": err, "device": 0,
         "recorded_with": {"device": torch.cuda.get_device_name(), "device_total_bytes": total, "torch": torch.__version__}}
json.dump(truth, open(os.path.join(out, name + ".truth.json"), "w"))
print(name, "peak reserved", truth["memory_stats"]["reserved_bytes.all.peak"], "error", err, file=sys.stderr)
