#!/usr/bin/env bash
# run_classes.sh — on a machine with a GPU and PyTorch: record programs of
# the classes the strict check found silent differences in (graph captures
# into a shared pool, MemPools deleted mid-run, a batch-size finder under
# garbage collection and max_split_size, a compiled training step, a
# MemPool under expandable segments, Hugging Face generate) and compare
# every memory_stats key of gpumem's replays with PyTorch's (compare.py:
# equal, or said why). Expects bin/gpumem.
# Usage: scripts/heldout/run_classes.sh [DIR]   (default /tmp/gpumem-classes)
set -uo pipefail
cd "$(dirname "$0")/../.."
o=${1:-/tmp/gpumem-classes}
mkdir -p "$o"
rec() { timeout 300 python3 scripts/heldout/record.py "$o" "$@" 2>&1 | grep -v -i warn | tail -1; }
rec kv_graphs kv_graphs "" 0
rec mempool_cublas mempool_cublas "" 0
rec oom_loop_gc8 oom_loop "garbage_collection_threshold:0.8,max_split_size_mb:128" 0.02
rec compile_train compile_train "" 0
rec pool_live_exp pool_live "expandable_segments:True" 0
rec generate generate "" 0
rec serve serve "" 0
echo "== under their own settings"; python3 scripts/heldout/compare.py bin/gpumem "$o"
echo "== --ignore-addresses"; python3 scripts/heldout/compare.py bin/gpumem "$o" --ignore-addresses
