#!/usr/bin/env bash
# bench_decode.sh — how far `gpumem replay FILE --output json` is from the
# floor, side by side in one run: CPU time (user+sys, whole process) of the
# command, of a Go loop that reads the file and walks its pickle opcodes
# building nothing (BenchmarkOpcodeWalk in pkg/trace/pickle), and of
# CPython's pickle.load. Runs are interleaved; medians are printed with the
# ratios, and the command's max RSS against the file size.
# Usage: scripts/bench_decode.sh FILE [RUNS]  (FILE: a big snapshot pickle,
# e.g. from scripts/gen_trace.py --events 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
file=${1:?usage: scripts/bench_decode.sh FILE [RUNS]}
runs=${2:-3}
go build -o bin/gpumem ./cmd/gpumem
go test -c -o bin/pickle.test ./pkg/trace/pickle
python3 - "$file" "$runs" <<'PY'
import os, platform, statistics, subprocess, sys
path, runs = sys.argv[1], int(sys.argv[2])
cmds = {
    "gpumem replay --output json": ["bin/gpumem", "replay", path, "--output", "json"],
    "Go opcode walk (floor)": ["bin/pickle.test", "-test.run", "^$", "-test.bench", "^BenchmarkOpcodeWalk$", "-test.benchtime", "1x"],
    "CPython pickle.load": [sys.executable, "-c", "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))", path],
}
env = dict(os.environ, GPUMEM_BIG_TRACE=path)
cpu = {k: [] for k in cmds}
rss = []
for _ in range(runs):
    for name, argv in cmds.items():
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        if status != 0:
            sys.exit(f"{name} failed on {path}")
        cpu[name].append(ru.ru_utime + ru.ru_stime)
        if name.startswith("gpumem"):
            rss.append(ru.ru_maxrss * 1024)
med = {k: statistics.median(v) for k, v in cpu.items()}
size = os.path.getsize(path)
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"machine: {os.cpu_count()} cores, {model}; file {size/1e6:.1f} MB; median of {runs} runs, CPU time")
g = med["gpumem replay --output json"]
for name, t in med.items():
    print(f"  {name:30s} {t:7.2f} s   gpumem/this {g/t:6.2f}")
r = max(rss)
print(f"  gpumem max RSS {r/2**20:.0f} MiB = {r/size:.2f}x the file")
PY
