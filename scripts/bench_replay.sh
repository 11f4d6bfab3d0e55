#!/usr/bin/env bash
# bench_replay.sh — the big-trace benchmark: `gpumem replay FILE --output json`
# on the 1,000,000-event synthetic snapshot against CPython's pickle.load of
# the same file, side by side. Targets: under a quarter of CPython's time,
# peak memory (max RSS) under twice the file size.
set -euo pipefail
cd "$(dirname "$0")/.."
big=${1:-/tmp/gpumem_big.pickle}
[ -f "$big" ] || python3 scripts/gen_trace.py "$big"
go build -o bin/gpumem ./cmd/gpumem
size=$(stat -c %s "$big")
best_go=999; best_rss=0
for i in 1 2 3; do
  /usr/bin/time -f "%e %M" -o /tmp/gpumem_time bin/gpumem replay "$big" --output json > /dev/null
  read -r secs rss < /tmp/gpumem_time
  best_go=$(python3 -c "print(min($best_go, $secs))")
  best_rss=$rss
done
py=$(python3 -c "
import pickle, time
best = 1e9
for _ in range(3):
    t = time.time(); pickle.load(open('$big', 'rb')); best = min(best, time.time() - t)
print(f'{best:.2f}')")
python3 - "$size" "$best_go" "$best_rss" "$py" <<'PY'
import sys
size, go, rss, py = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]) * 1024, float(sys.argv[4])
print(f"file {size/1e6:.1f} MB")
print(f"gpumem replay --output json: {go:.2f} s, max RSS {rss/1e6:.1f} MB ({rss/size:.2f}x the file)")
print(f"python pickle.load:          {py:.2f} s")
print(f"time ratio {go/py:.2f} (target < 0.25); memory ratio {rss/size:.2f} (target < 2)")
PY
