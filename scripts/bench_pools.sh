#!/usr/bin/env bash
# bench_pools.sh — traces with private pools (CUDA graphs, MemPool) at
# scale: `gpumem replay FILE --output json` on a private-pool fixture's
# trace repeated to N events (scripts/repeat_trace.py: each copy a new
# pool lifetime at the old one's addresses), side by side in one run with
# the Go loop that walks the same file's pickle opcodes building nothing
# (BenchmarkOpcodeWalk, the floor). Prints CPU time, the ratio to the
# walk, max RSS and the bound 64 MiB + 8 B/event; runs interleaved,
# medians. The goal (issue 32): <= 4x the walk, RSS within the bound.
# Usage: scripts/bench_pools.sh [RUNS] [EVENTS...]  (default 3 runs; 1M and 5M events)
# Env: BIN (a gpumem binary, default: build bin/gpumem), FIXTURE (default
# testdata/pytorch/mempool_single.pickle), OUT (where the repeated
# snapshots are kept, default /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000000 5000000)
fixture=${FIXTURE:-testdata/pytorch/mempool_single.pickle}
out=${OUT:-/tmp}
bin=${BIN:-bin/gpumem}
if [ -z "${BIN:-}" ]; then go build -o bin/gpumem ./cmd/gpumem; fi
go test -c -o bin/pickle.test ./pkg/trace/pickle
files=()
for n in "${sizes[@]}"; do
  f="$out/gpumem_$(basename "$fixture" .pickle)_$n.pickle"
  [ -f "$f" ] || python3 scripts/repeat_trace.py "$fixture" "$f" --events "$n" >&2
  files+=("$f")
done
python3 - "$bin" "$runs" "${#files[@]}" "${files[@]}" "${sizes[@]}" <<'PY'
import os, statistics, subprocess, sys
bin, runs, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files, sizes = sys.argv[4:4 + k], [int(n) for n in sys.argv[4 + k:]]
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
print(f"machine: {os.cpu_count()} cores ({model}), load {open('/proc/loadavg').read().split()[0]}; median of {runs} runs, CPU time (user+sys)")
for path, events in zip(files, sizes):  # events: at least this many (whole copies)
    env = dict(os.environ, GPUMEM_BIG_TRACE=path)
    cmds = {"gpumem": [bin, "replay", path, "--output", "json"],
            "walk": ["bin/pickle.test", "-test.run", "^$", "-test.bench", "^BenchmarkOpcodeWalk$", "-test.benchtime", "1x"]}
    cpu = {k: [] for k in cmds}
    rss = []
    for _ in range(runs):
        for name, argv in cmds.items():
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            _, status, ru = os.wait4(p.pid, 0)
            if status != 0:
                sys.exit(f"{name} failed on {path}")
            cpu[name].append(ru.ru_utime + ru.ru_stime)
            if name == "gpumem":
                rss.append(ru.ru_maxrss * 1024)
    g, w, r = statistics.median(cpu["gpumem"]), statistics.median(cpu["walk"]), max(rss)
    bound = 64 * 2**20 + 8 * events
    print(f"  {os.path.basename(path)} ({events/1e6:.1f}M events, {os.path.getsize(path)/1e6:.0f} MB): "
          f"gpumem {g:.2f} s, walk {w:.2f} s, gpumem/walk {g/w:.2f}x; "
          f"max RSS {r/2**20:.0f} MiB, {'within' if r <= bound else 'OVER'} 64 MiB + 8 B/event ({bound/2**20:.0f} MiB)")
PY
