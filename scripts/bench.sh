#!/usr/bin/env bash
# bench.sh — the big-trace and sweep benchmarks as one markdown table,
# measured side by side in one run (runs interleaved, medians):
#   - `gpumem replay FILE --output json` against CPython's pickle.load of the
#     same file and against a Go loop that only walks its pickle opcodes
#     (BenchmarkOpcodeWalk, the floor): CPU time (user+sys) and max RSS
#     against the file size, on a synthetic snapshot of 1,000,000 events
#     (and of 10,000,000 with --10m);
#   - `gpumem sweep FIXTURE` at -j 2 against -j 1, wall time.
# With --real the snapshots are shaped like real ones: segment events, final
# segments, and a trace cut short by max_entries (gen_trace.py --max-entries).
# Usage: scripts/bench.sh [--real] [--10m] [RUNS]
# Env: BIN (a gpumem binary, default: build bin/gpumem), BIG1M / BIG10M
# (snapshots of 1M and 10M events; made with scripts/gen_trace.py when missing;
# with --real: BIG1M_REAL / BIG10M_REAL),
# SWEEP_TRACE (default testdata/pytorch/gpt2_varlen.pickle).
set -euo pipefail
cd "$(dirname "$0")/.."
ten=0
real=0
if [ "${1:-}" = "--real" ]; then real=1; shift; fi
if [ "${1:-}" = "--10m" ]; then ten=1; shift; fi
runs=${1:-3}
big1m=${BIG1M:-/tmp/gpumem_1m.pickle}
big10m=${BIG10M:-/tmp/gpumem_10m.pickle}
if [ "$real" = 1 ]; then
  big1m=${BIG1M_REAL:-/tmp/gpumem_1m_real.pickle}
  big10m=${BIG10M_REAL:-/tmp/gpumem_10m_real.pickle}
fi
sweep=${SWEEP_TRACE:-testdata/pytorch/gpt2_varlen.pickle}
bin=${BIN:-bin/gpumem}
if [ -z "${BIN:-}" ]; then go build -o bin/gpumem ./cmd/gpumem; fi
go test -c -o bin/pickle.test ./pkg/trace/pickle
# a real-shaped trace keeps the last N of 1.2 N events
make() { # OUT N
  if [ "$real" = 1 ]; then
    python3 scripts/gen_trace.py "$1" --events $(($2 * 6 / 5)) --max-entries "$2" >&2
  else
    python3 scripts/gen_trace.py "$1" --events "$2" >&2
  fi
}
[ -f "$big1m" ] || make "$big1m" 1000000
files=("$big1m")
if [ "$ten" = 1 ]; then
  [ -f "$big10m" ] || make "$big10m" 10000000
  files+=("$big10m")
fi
python3 - "$bin" "$runs" "$sweep" "${files[@]}" <<'PY'
import os, statistics, subprocess, sys, time

bin, runs, sweep, files = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

def run(argv, env=None):
    """CPU seconds, wall seconds and max RSS bytes of one command."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"failed: {' '.join(argv)}")
    return ru.ru_utime + ru.ru_stime, time.perf_counter() - t, ru.ru_maxrss * 1024

cols = []
for path, events in zip(files, (1_000_000, 10_000_000)):
    env = dict(os.environ, GPUMEM_BIG_TRACE=path)
    cmds = {
        "gpumem": [bin, "replay", path, "--output", "json"],
        "walk": ["bin/pickle.test", "-test.run", "^$", "-test.bench", "^BenchmarkOpcodeWalk$", "-test.benchtime", "1x"],
        "cpython": [sys.executable, "-c", "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))", path],
    }
    cpu = {k: [] for k in cmds}
    rss = []
    for _ in range(runs):
        for name, argv in cmds.items():
            c, _, r = run(argv, env)
            cpu[name].append(c)
            if name == "gpumem":
                rss.append(r)
    cols.append({"path": path, "size": os.path.getsize(path), "cpu": {k: statistics.median(v) for k, v in cpu.items()},
                 "rss": max(rss), "events": events})

sw = {1: [], 2: []}
for _ in range(max(runs, 5)):
    for j in (1, 2):
        _, w, _ = run([bin, "sweep", "-j", str(j), sweep, "--output", "json"])
        sw[j].append(w)
sw = {j: statistics.median(v) for j, v in sw.items()}

model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
load = open("/proc/loadavg").read().split()[0]
print(f"Machine: {os.cpu_count()} cores ({model}), load {load}; median of {runs} runs, measured side by side.\n")
head = "| measure | " + " | ".join(f"{c['events']/1e6:.0f}M events ({c['size']/1e6:.0f} MB)" for c in cols) + " |"
print(head)
print("| --- |" + " --- |" * len(cols))
def row(name, f):
    print(f"| {name} | " + " | ".join(f(c) for c in cols) + " |")
row("`gpumem replay -o json`, CPU", lambda c: f"{c['cpu']['gpumem']:.2f} s")
row("opcode walk (floor), CPU", lambda c: f"{c['cpu']['walk']:.2f} s")
row("CPython `pickle.load`, CPU", lambda c: f"{c['cpu']['cpython']:.2f} s")
row("gpumem / opcode walk", lambda c: f"{c['cpu']['gpumem']/c['cpu']['walk']:.2f}×")
row("gpumem / CPython", lambda c: f"{c['cpu']['gpumem']/c['cpu']['cpython']:.3f}×")
row("gpumem max RSS", lambda c: f"{c['rss']/2**20:.0f} MiB = {c['rss']/c['size']:.2f}× the file")
def bound(c):
    b = 64 * 2**20 + 8 * c["events"]
    return f"{'within' if c['rss'] <= b else 'OVER'} {b/2**20:.0f} MiB"
row("bound: 64 MiB + 8 B/event", bound)
print(f"\n| `gpumem sweep {os.path.basename(sweep)}` | wall |")
print("| --- | --- |")
print(f"| -j 1 | {sw[1]*1e3:.0f} ms |")
print(f"| -j 2 | {sw[2]*1e3:.0f} ms |")
print(f"| -j 2 / -j 1 | {sw[2]/sw[1]:.2f}× |")
PY
