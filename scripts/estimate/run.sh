#!/usr/bin/env bash
# run.sh — on a machine with a GPU and PyTorch: run every program of
# programs.py for real (record.py, memory_stats and a snapshot), under
# gpumem estimate (no GPU used) and under MemTracker in fake mode, then
# compare (compare.py). Expects bin/gpumem, unless ESTIMATE=0: then the
# estimates are left out (they need no GPU: run them where gpumem is built,
# with the same torch, into the same DIR, and compare there).
# Everything it writes is also packed into DIR.tar.gz: a device that sends
# back a limited number of files sends that one whole.
# Usage: scripts/estimate/run.sh DIR [NAME...]
set -uo pipefail
cd "$(dirname "$0")/../.."
o=${1:?usage: run.sh DIR [NAME...]}
shift
mkdir -p "$o"
py=${PYTHON:-python3}
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <($py -c "import sys; sys.path.insert(0, 'scripts/estimate'); import programs; print('\n'.join(programs.PROGRAMS))")
conf() { $py -c "import sys; sys.path.insert(0, 'scripts/estimate'); import programs; print(programs.PROGRAMS['$1'][5])"; }
est() { # the estimates run on the CPU side, several at once
  local n=$1
  PYTORCH_CUDA_ALLOC_CONF=$(conf "$n") timeout 400 bin/gpumem estimate -f "$o/$n.est.trace" -o json -- \
    $py scripts/estimate/record.py "$n" >"$o/$n.est.json" 2>"$o/$n.est.err"
  grep '^{"name"' "$o/$n.est.err" | tail -1 >"$o/$n.est.script.json"
}
export -f est conf
export o py
if [ "${ESTIMATE:-1}" != 0 ]; then
  printf '%s\n' "${names[@]}" | xargs -P 6 -I{} bash -c 'est {}' &
fi
for n in "${names[@]}"; do
  PYTORCH_CUDA_ALLOC_CONF=$(conf "$n") timeout 120 $py scripts/estimate/record.py "$n" --snapshot "$o/$n.pickle" \
    >"$o/$n.real.json" 2>"$o/$n.real.err"
  timeout 120 $py scripts/estimate/memtracker.py "$n" >"$o/$n.mt.json" 2>"$o/$n.mt.err"
done
wait
$py scripts/estimate/compare.py "$o" "${names[@]}" | tee "$o/compare.md"
tar czf "$o.tar.gz" -C "$o" --exclude '*.est.trace' .
