#!/usr/bin/env python3
"""bench.py — the benchmark table of the README, measured in one run.

Called by scripts/bench.sh, which builds the binaries and makes the inputs;
see there for the options. Each row is a ratio of commands measured side by
side: the commands of a group run interleaved, run after run, so that they
see the same machine load, and medians are compared. CPU time is user +
sys of the whole process (its children included); max RSS is the
kernel's. Prints one markdown block (a caption, the table, the absolute
figures beside it) on stdout; progress on stderr.
"""
import argparse, os, platform, re, shlex, statistics, subprocess, sys, time

p = argparse.ArgumentParser()
p.add_argument("--bin", required=True)
p.add_argument("--walk", required=True)
p.add_argument("--py", default="", help="a Python with torch, for the _memory_viz.py anchor rows")
p.add_argument("--runs", type=int, default=3)
p.add_argument("--work", required=True)
p.add_argument("--replay", nargs="+", required=True, help="EVENTS=FILE synthetic snapshots, smallest first")
p.add_argument("--pools", nargs="*", default=[], help="NAME:EVENTS=FILE repeated private-pool traces")
p.add_argument("--zst", default="", help="the largest snapshot compressed with zstd; empty: no zstd here")
p.add_argument("--gz", required=True)
p.add_argument("--sweep", required=True)
p.add_argument("--machine", default="")
p.add_argument("--only", default="", help="comma-separated rows to run: replay, html, pools, compressed, sweep, start, anchor")
p.add_argument("--base", default="", help="another gpumem binary (the one before a change) run beside this one in the replay, `--html` and pool rows")
a = p.parse_args()
ROWS = ("replay", "html", "pools", "compressed", "sweep", "start", "anchor")
only = set(a.only.split(",")) if a.only else set(ROWS)
if only - set(ROWS):
    sys.exit(f"bench.py: --only takes {', '.join(ROWS)}")

MiB = 2**20
load0 = open("/proc/loadavg").read().split()[0]


def log(*x):
    print(*x, file=sys.stderr, flush=True)


class Run:
    """CPU seconds, wall seconds, max RSS bytes of one command; ok False when it failed."""

    def __init__(self, argv, env=None, out=None):
        t = time.perf_counter()
        with open(out or os.devnull, "wb") as so:
            proc = subprocess.Popen(argv, stdout=so, stderr=subprocess.DEVNULL, env=env)
            _, status, ru = os.wait4(proc.pid, 0)
        self.wall = time.perf_counter() - t
        self.cpu = ru.ru_utime + ru.ru_stime
        self.rss = ru.ru_maxrss * 1024
        self.ok = status == 0
        self.status = os.waitstatus_to_exitcode(status)


def group(cmds, runs, env=None):
    """Runs cmds (name -> argv, or (argv, stdout file)) interleaved, runs times; name -> medians."""
    res = {k: [] for k in cmds}
    for i in range(runs):
        for name, c in cmds.items():
            argv, out = c if isinstance(c, tuple) else (c, None)
            r = Run(argv, env, out)
            if not r.ok:
                log(f"bench: failed (exit {r.status}): {shlex.join(argv)}")
            res[name].append(r)
    med = {}
    for name, rs in res.items():
        good = [r for r in rs if r.ok]
        if not good:
            med[name] = None
            continue
        med[name] = {"cpu": statistics.median(r.cpu for r in good), "wall": statistics.median(r.wall for r in good),
                     "rss": max(r.rss for r in good), "failed": len(rs) - len(good)}
    return med


def cpu(m, k):
    return m[k]["cpu"] if m.get(k) else None


def ratio(x, y, digits=2):
    if x is None or y is None or y == 0:
        return "failed"
    return f"{x / y:.{digits}f}×"


def mib(b):
    return f"{b / MiB:.0f} MiB"


def secs(s):
    return "failed" if s is None else (f"{s:.2f} s" if s >= 0.1 else f"{s * 1e3:.0f} ms")


def mega(n):
    return f"{n / 1e6:g}M"


def bound_ok(rss, events):
    return rss <= 64 * MiB + 8 * events


def status(ok):
    return {True: "met", False: "**not met**", None: "—"}[ok]


gpumem, walk = a.bin, a.walk
py = sys.executable
version = subprocess.run([gpumem, "version"], capture_output=True, text=True).stdout.strip().splitlines()
version = version[0] if version else "unknown version"
rows, notes = [], []

# 1. replay -o json against CPython's pickle.load and the opcode walk; the
# HTML report at the smallest size against the plain replay.
replay = []
for spec in a.replay:
    n, path = spec.split("=", 1)
    n = int(n)
    log(f"bench: replay of {path} ({n:,} events)")
    cmds = {"gpumem": [gpumem, "replay", path, "--output", "json"]}
    if "replay" in only:
        cmds["walk"] = [walk, "-test.run", "^$", "-test.bench", "^BenchmarkOpcodeWalk$", "-test.benchtime", "1x"]
        cmds["cpython"] = [py, "-c", "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))", path]
        if a.base:
            cmds["base"] = [a.base, "replay", path, "--output", "json"]
    html = os.path.join(a.work, "report.html")
    base_html = os.path.join(a.work, "report_base.html")
    if not replay and only & {"html", "anchor"}:
        cmds["html"] = [gpumem, "replay", path, "--output", "json", "--html", html]
        if a.base and "html" in only:
            cmds["base"] = [a.base, "replay", path, "--output", "json"]
            cmds["base_html"] = [a.base, "replay", path, "--output", "json", "--html", base_html]
    m = group(cmds, a.runs, dict(os.environ, GPUMEM_BIG_TRACE=path))
    m["events"], m["size"], m["path"] = n, os.path.getsize(path), path
    if "html" in cmds and m["html"]:
        m["page"] = os.path.getsize(html)
    if "base_html" in cmds and m["base_html"]:
        m["base_page"] = os.path.getsize(base_html)
    replay.append(m)

ev = " / ".join(mega(m["events"]) for m in replay)
last = replay[-1]
g = [m["gpumem"] for m in replay]
walk_ok = None if not last["gpumem"] or not last.get("walk") else cpu(last, "gpumem") <= 2 * cpu(last, "walk")
rss = " / ".join(mib(x["rss"]) if x else "failed" for x in g)
if len(replay) > 1 and all(g):
    slope = (g[-1]["rss"] - g[0]["rss"]) / (replay[-1]["events"] - replay[0]["events"])
    rss += f" ({mib(g[0]['rss'] - slope * replay[0]['events'])} + {slope:.1f} B/event)"
if "replay" in only:
    rows.append((f"`replay -o json`, synthetic {ev} events",
                 " / ".join(ratio(cpu(m, "gpumem"), cpu(m, "cpython"), 3) for m in replay) + " CPython's `pickle.load`; "
                 + " / ".join(ratio(cpu(m, "gpumem"), cpu(m, "walk")) for m in replay) + " the opcode walk; max RSS " + rss,
                 f"≤ 2× the opcode walk at {mega(last['events'])}; RSS unchanged or lower", status(walk_ok)))
for m in replay if "replay" in only else []:
    notes.append(f"{mega(m['events'])} events ({m['size'] / 1e6:.0f} MB): `gpumem replay -o json` {secs(cpu(m, 'gpumem'))} CPU, "
                 f"the opcode walk {secs(cpu(m, 'walk'))}, CPython's `pickle.load` {secs(cpu(m, 'cpython'))}")
if a.base and "replay" in only:
    b = [m.get("base") for m in replay]
    rows.append((f"the same, `{a.base}` (base, side by side)",
                 " / ".join(ratio(cpu(m, "base"), cpu(m, "walk")) for m in replay) + " the opcode walk; max RSS "
                 + " / ".join(mib(x["rss"]) if x else "failed" for x in b)
                 + "; this binary's CPU " + " / ".join(ratio(cpu(m, "gpumem"), cpu(m, "base")) for m in replay) + " the base's",
                 "", status(None)))

first = replay[0]
h, plain = first.get("html"), first["gpumem"]
if "html" not in only:
    pass
elif h and plain:
    n = first["events"]
    ok = bound_ok(h["rss"], n) and h["cpu"] <= 2 * plain["cpu"] and first["page"] <= 2.4e6
    rows.append((f"the same with `--html` ({mega(n)})",
                 f"{ratio(h['cpu'], plain['cpu'], 1)} the CPU of the plain replay; max RSS {mib(h['rss'])} "
                 f"({(h['rss'] - plain['rss']) / n:.0f} B/event more than the plain replay's); the page {first['page'] / 1e6:.1f} MB",
                 "RSS ≤ 64 MiB + 8 B/event, CPU ≤ 2× the plain replay, the page ≤ 2.4 MB", status(ok)))
    notes.append(f"`--html` at {mega(n)}: {secs(h['cpu'])} CPU")
    bh, bp = first.get("base_html"), first.get("base")
    if bh and bp:
        rows.append((f"the same, `{a.base}` (base, side by side)",
                     f"{ratio(bh['cpu'], bp['cpu'], 1)} the CPU of its plain replay; max RSS {mib(bh['rss'])}; "
                     f"the page {first['base_page'] / 1e6:.1f} MB; this binary's `--html` {ratio(h['cpu'], bh['cpu'])} its CPU",
                     "", status(None)))
        notes.append(f"base: `--html` {secs(bh['cpu'])} CPU, plain {secs(bp['cpu'])}")
else:
    rows.append((f"the same with `--html` ({mega(first['events'])})", "failed", "", status(False)))

# 2. private-pool traces: a fixture's events repeated.
if a.pools and "pools" in only:
    by = {}
    for spec in a.pools:
        name, rest = spec.split(":", 1)
        n, path = rest.split("=", 1)
        log(f"bench: private pools, {path}")
        cmds = {
            "gpumem": [gpumem, "replay", path, "--output", "json"],
            "walk": [walk, "-test.run", "^$", "-test.bench", "^BenchmarkOpcodeWalk$", "-test.benchtime", "1x"],
            "cpython": [py, "-c", "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))", path],
        }
        if a.base:
            cmds["base"] = [a.base, "replay", path, "--output", "json"]
        m = group(cmds, a.runs, dict(os.environ, GPUMEM_BIG_TRACE=path))
        by.setdefault(name, []).append((int(n), m))
    cells, ok = [], True
    for name, ms in by.items():
        parts = []
        for n, m in ms:
            gm = m["gpumem"]
            if not gm:
                parts.append(f"{mega(n)}: failed")
                ok = False
                continue
            ok = ok and gm["cpu"] <= 4 * cpu(m, "walk") and bound_ok(gm["rss"], n)
            parts.append(f"{mega(n)}: {ratio(gm['cpu'], cpu(m, 'walk'), 1)} the walk, {ratio(gm['cpu'], cpu(m, 'cpython'))} CPython, "
                         f"max RSS {mib(gm['rss'])}")
            notes.append(f"`{name}` repeated to {mega(n)} events: gpumem {secs(gm['cpu'])} CPU, the walk {secs(cpu(m, 'walk'))}, "
                         f"CPython {secs(cpu(m, 'cpython'))}")
            if m.get("base"):
                parts[-1] += f" (the base: {ratio(cpu(m, 'base'), cpu(m, 'walk'), 1)} the walk, max RSS {mib(m['base']['rss'])})"
        if len(ms) > 1 and all(m["gpumem"] for _, m in ms):
            (n0, m0), (n1, m1) = ms[0], ms[-1]
            parts.append(f"RSS grows {(m1['gpumem']['rss'] - m0['gpumem']['rss']) / (n1 - n0):.0f} B/event")
        cells.append(f"`{name}` " + "; ".join(parts))
    rows.append(("traces with private pools (a fixture's events repeated)", "<br>".join(cells),
                 "≤ 4× the walk; RSS ≤ 64 MiB + 8 B/event", status(ok)))

# 3. compressed input.
if "compressed" in only:
    log(f"bench: compressed input, {a.zst or '(no zstd)'} and {a.gz}")
    cmds = {"plain": [gpumem, "replay", last["path"], "--output", "json"], "gz": [gpumem, "replay", a.gz, "--output", "json"]}
    if a.zst:
        cmds["zst"] = [gpumem, "replay", a.zst, "--output", "json"]
        cmds["zstd"] = ["zstd", "-dc", a.zst]
    m = group(cmds, a.runs)
    zst = (f"{ratio(cpu(m, 'zst'), cpu(m, 'plain'))} / {ratio(cpu(m, 'gz'), cpu(m, 'plain'))} the plain file; "
           f"the `.zst` {ratio(cpu(m, 'zst'), cpu(m, 'zstd'), 1)} `zstd -dc`") if a.zst else \
        f"(no zstd on this machine) / {ratio(cpu(m, 'gz'), cpu(m, 'plain'))} the plain file"
    rows.append((f"`.zst` / `.gz` input, {mega(last['events'])}", zst, "keep (1.09× / 1.12×; 6.9× `zstd -dc`)", status(None)))
    notes.append(f"compressed: plain {secs(cpu(m, 'plain'))}, `.gz` {secs(cpu(m, 'gz'))}"
                 + (f", `.zst` {secs(cpu(m, 'zst'))}, `zstd -dc` {secs(cpu(m, 'zstd'))}" if a.zst else "") + " CPU")

# 4. the sweep, wall time.
if "sweep" in only:
    log(f"bench: sweep of {a.sweep}")
    sw = group({j: [gpumem, "sweep", "-j", j, a.sweep, "--output", "json"] for j in ("1", "2")}, max(a.runs, 11))
    loadnow = float(open("/proc/loadavg").read().split()[0])
    if sw["1"] and sw["2"]:
        r = sw["2"]["wall"] / sw["1"]["wall"]
        # quiet: under half a runnable task per core of the machine (a host
        # pinned with taskset counts all its cores: the load is the host's)
        per_core = max(float(load0), loadnow) / os.cpu_count()
        quiet = per_core < 0.5
        ok = r <= (0.6 if quiet else 0.8)
        rows.append((f"`sweep {os.path.basename(a.sweep)} -j 2` / `-j 1`, wall",
                     f"{r:.2f}× ({sw['2']['wall'] * 1e3:.0f} vs {sw['1']['wall'] * 1e3:.0f} ms; load {load0} → {loadnow:.2f}, "
                     f"{per_core:.2f} a core)", "≤ 0.6× on a quiet 2-core machine, ≤ 0.8× under load",
                     status(ok) + (" (the quiet goal)" if quiet else " (the goal under load)")))
    else:
        rows.append(("`sweep -j 2` / `-j 1`", "failed", "", status(False)))

# 5. process start.
if "start" in only:
    log("bench: process start")
    st = group({"gpumem": [gpumem, "version"], "true": ["/bin/true"]}, max(a.runs, 21))
    g, t = st["gpumem"], st["true"]
    rows.append(("process start (`gpumem version`)",
                 f"{g['wall'] * 1e3:.1f} ms wall, {g['cpu'] * 1e3:.1f} ms CPU ({ratio(g['wall'], t['wall'], 1)} `/bin/true`)" if g and t else "failed",
                 "≤ 10 ms", status(bool(g) and g["wall"] <= 0.010)))

# 6. the anchor: PyTorch's own _memory_viz.py on the smallest snapshot.
if "anchor" not in only:
    pass
elif a.py:
    path = first["path"]
    log(f"bench: _memory_viz.py on {path} (one run each)")
    viz = os.path.join(a.work, "memory_viz.html")
    mv = [a.py, "-m", "torch.cuda._memory_viz"]
    m = group({"stats": mv + ["stats", path], "trace": mv + ["trace", path],
               "trace_plot": mv + ["trace_plot", path, "-o", viz]}, 1)
    g, h = cpu(first, "gpumem"), cpu(first, "html")
    cells = [f"`replay -o json` {ratio(g, cpu(m, 'stats'), 3)} / {ratio(g, cpu(m, 'trace'), 3)} the CPU of `stats` / `trace`",
             f"`--html` {ratio(h, cpu(m, 'trace_plot'))} `trace_plot`'s"]
    if os.path.exists(viz) and first.get("page"):
        cells.append(f"its page {os.path.getsize(viz) / 1e6:.1f} MB vs gpumem's {first['page'] / 1e6:.1f} MB")
    ok = None if h is None or cpu(m, "trace_plot") is None else h <= 0.1 * cpu(m, "trace_plot")
    rows.append((f"anchor: `_memory_viz.py stats` / `trace` / `trace_plot` on the {mega(first['events'])} snapshot", "; ".join(cells),
                 "keep the lead; `--html` ≤ 0.1× `trace_plot`'s CPU", status(ok)))
    notes.append(f"`_memory_viz.py`: `stats` {secs(cpu(m, 'stats'))}, `trace` {secs(cpu(m, 'trace'))}, "
                 f"`trace_plot` {secs(cpu(m, 'trace_plot'))} CPU (one run each)")
else:
    notes.append("the `_memory_viz.py` anchor was not measured: no Python with torch (PY=, or scripts/pyenv.sh)")

model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
cores = len(os.sched_getaffinity(0))
where = f"{cores} cores" + (f" of {os.cpu_count()} (taskset)" if cores < os.cpu_count() else "")
machine = a.machine or platform.node()
loadend = open("/proc/loadavg").read().split()[0]
print(f"`scripts/bench.sh` on {machine}: {where}, {model}; load {load0} at the start, {loadend} at the end; "
      f"{version}; medians of {a.runs} runs (the sweep {max(a.runs, 11)}, process start {max(a.runs, 21)}), "
      f"each row's commands run side by side, interleaved. CPU = user + sys of the whole process.\n")
print("| path | measured | goal | |")
print("| --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
print()
print("Absolute figures of the same run: " + "; ".join(notes) + ".")
