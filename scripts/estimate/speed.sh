#!/usr/bin/env bash
# speed.sh — the Llama-3-8B-shaped training step (llama8b.py) estimated by
# gpumem estimate and by torch's MemTracker in fake mode, one after the
# other on this machine: each one's step time and the ratio. No GPU needed.
# Expects bin/gpumem. Usage: scripts/estimate/speed.sh [SEQ] [BATCH]
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-$(bash scripts/pyenv.sh)}
seq=${1:-2048}
batch=${2:-1}
est=$(bin/gpumem estimate -f "${TMPDIR:-/tmp}/llama8b.trace" -o json -- "$py" scripts/estimate/llama8b.py "$seq" "$batch" 2>&1 >/dev/null | grep '^build ')
mt=$("$py" scripts/estimate/llama8b.py "$seq" "$batch" --memtracker | grep '^build ')
echo "gpumem estimate: $est"
echo "MemTracker:      $mt"
step() { sed -E 's/.*step ([0-9.]+) s.*/\1/' <<<"$1"; }
awk -v a="$(step "$est")" -v b="$(step "$mt")" 'BEGIN { printf "step time, MemTracker / gpumem estimate: %.2f\n", b / a }'
