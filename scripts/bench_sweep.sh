#!/usr/bin/env bash
# bench_sweep.sh — the sweep as users run it, end to end:
# `gpumem sweep TRACE` with -j 1 and -j 2, interleaved run by run so both
# see the same machine load. Prints the median wall and CPU time of each and
# the ratio -j 2 / -j 1 (target: at most 0.6 on 2 cores).
# Usage: scripts/bench_sweep.sh [TRACE] [RUNS]; BIN=path picks the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
trace=${1:-testdata/pytorch/gpt2_varlen.pickle}
runs=${2:-11}
bin=${BIN:-bin/gpumem}
if [ -z "${BIN:-}" ]; then go build -o bin/gpumem ./cmd/gpumem; fi
python3 - "$bin" "$trace" "$runs" <<'PY'
import os, statistics, subprocess, sys, time
bin, trace, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
res = {1: [], 2: []}
for _ in range(runs):
    for j in (1, 2):
        t = time.perf_counter()
        p = subprocess.Popen([bin, "sweep", "-j", str(j), trace, "--output", "json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        if status != 0:
            sys.exit(f"gpumem sweep -j {j} {trace} failed")
        res[j].append((time.perf_counter() - t, ru.ru_utime + ru.ru_stime))
med = {j: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for j, r in res.items()}
print(f"machine: {os.cpu_count()} cores; {runs} runs each, medians")
for j in (1, 2):
    print(f"gpumem sweep -j {j} {trace}: wall {med[j][0]*1e3:.0f} ms, cpu {med[j][1]*1e3:.0f} ms")
print(f"ratio -j 2 / -j 1 (wall): {med[2][0]/med[1][0]:.2f}")
PY
