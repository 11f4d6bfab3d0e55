#!/usr/bin/env bash
# bench_start.sh — how long `gpumem version` takes to start and exit,
# side by side in one run with /bin/true and a cgo hello-world (the floor
# of a Go binary that links C, as gpumem does): wall and CPU time, runs
# interleaved, medians and best, and the ratios. Then the package inits
# that took longest (GODEBUG=inittrace=1), the ones to move behind first
# use.
# Usage: scripts/bench_start.sh [RUNS]  (default 200)
# Env: BIN (a gpumem binary, default: build bin/gpumem)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
bin=${BIN:-bin/gpumem}
if [ -z "${BIN:-}" ]; then go build -o bin/gpumem ./cmd/gpumem; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/main.go" <<'GO'
package main

// #include <stdio.h>
// static void hello(void) { fputs("hello\n", stdout); fflush(stdout); }
import "C"

func main() { C.hello() }
GO
(cd "$tmp" && printf 'module hello\n\ngo 1.22\n' >go.mod && CGO_ENABLED=1 go build -o hello .)
python3 - "$bin" "$runs" "$tmp/hello" <<'PY'
import os, statistics, subprocess, sys, time
bin, runs, hello = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cmds = {"gpumem version": [bin, "version"], "cgo hello-world": [hello], "/bin/true": ["/bin/true"]}
wall = {k: [] for k in cmds}
cpu = {k: [] for k in cmds}
for _ in range(runs):
    for name, argv in cmds.items():
        t = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall[name].append(time.perf_counter() - t)
        cpu[name].append(ru.ru_utime + ru.ru_stime)
        if status != 0:
            sys.exit(f"{name} failed")
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
load = open("/proc/loadavg").read().split()[0]
print(f"machine: {os.cpu_count()} cores ({model}), load {load}; {runs} runs each, interleaved")
g = statistics.median(wall["gpumem version"])
for name in cmds:
    w = statistics.median(wall[name])
    print(f"  {name:16s} wall median {w*1e3:6.2f} ms  best {min(wall[name])*1e3:6.2f} ms  "
          f"CPU median {statistics.median(cpu[name])*1e3:6.2f} ms   gpumem/this {g/w:5.2f}x")
PY
echo "slowest package inits (GODEBUG=inittrace=1, one run):"
GODEBUG=inittrace=1 "$bin" version 2>&1 >/dev/null | awk '/^init /{print $5, $6, $2}' | sort -rn | head -8 | sed 's/^/  /'
