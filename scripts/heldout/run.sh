#!/usr/bin/env bash
# run.sh — on a machine with a GPU and PyTorch: record the held-out programs
# (record.py, each in a fresh process) into DIR and compare gpumem's replays
# with what PyTorch reported (compare.py): under their own settings, with
# --ignore-addresses, and as what-ifs of one program's trace under the
# settings of runs recorded with them. Expects bin/gpumem.
# Usage: scripts/heldout/run.sh [DIR]   (default /tmp/gpumem-heldout)
set -uo pipefail
cd "$(dirname "$0")/../.."
o=${1:-/tmp/gpumem-heldout}
mkdir -p "$o"
rec() { timeout 300 python3 scripts/heldout/record.py "$o" "$@" 2>&1 | grep -v -i warn | tail -1; }
frac() { # a fraction of the card: $1 × tlm's peak reserved
  python3 -c "import json,sys; t=json.load(open('$o/tlm.truth.json')); print($1*t['memory_stats']['reserved_bytes.all.peak']/t['recorded_with']['device_total_bytes'])"
}
rec tlm tlm "" 0
for v in "tlm_exp expandable_segments:True" "tlm_split64 max_split_size_mb:64" \
  "tlm_div roundup_power2_divisions:[128:8,256:4,>:1]" "tlm_div4 roundup_power2_divisions:4" \
  "tlm_split256_div2 max_split_size_mb:256,roundup_power2_divisions:2"; do
  set -- $v; rec "$1" tlm "$2" 0
done
rec tlm_cap97 tlm "" "$(frac 0.97)"
rec tlm_gc95 tlm "garbage_collection_threshold:0.7" "$(frac 0.95)"
rec tlm_gc90 tlm "garbage_collection_threshold:0.6" "$(frac 0.92)"
rec tlm_cap80 tlm "" "$(frac 0.8)"
rec tlm_exp_cap80 tlm "expandable_segments:True" "$(frac 0.8)"
rec tlm_cap_exp tlm "expandable_segments:True" 0.023
for w in cnn_graph compiled compiled_default compile_train two_graphs graphed_callables mempools pool_live \
  streams ckpt amp serve oom_mid; do rec $w $w "" 0; done
rec pool_live_exp pool_live "expandable_segments:True" 0
rec ckpt_exp ckpt "expandable_segments:True,max_split_size_mb:256" 0
rec amp_exp amp "expandable_segments:True" 0
rec serve_split serve "max_split_size_mb:32" 0
rec oom_loop oom_loop "" 0.02
rec oom_loop_exp oom_loop "expandable_segments:True" 0.02
rec oom_loop_split oom_loop "max_split_size_mb:128,garbage_collection_threshold:0.6" 0.02
rec oom_backward oom_backward "" 0.01
rec oom_backward_msgc oom_backward "max_split_size_mb:128,garbage_collection_threshold:0.7" 0.01
rec oom_backward_exp oom_backward "expandable_segments:True" 0.01
rec oom_backward_div oom_backward "roundup_power2_divisions:2" 0.01
c=scripts/heldout/compare.py
echo "== under their own settings"; python3 $c bin/gpumem "$o"
echo "== --ignore-addresses"; python3 $c bin/gpumem "$o" --ignore-addresses
echo "== what-if"
python3 $c bin/gpumem "$o" --whatif tlm tlm_exp tlm_split64 tlm_div tlm_div4 tlm_split256_div2 tlm_cap97 tlm_gc95 tlm_gc90 tlm_cap80 tlm_exp_cap80
python3 $c bin/gpumem "$o" --whatif oom_loop oom_loop_exp oom_loop_split
python3 $c bin/gpumem "$o" --whatif oom_backward oom_backward_msgc oom_backward_exp oom_backward_div
python3 $c bin/gpumem "$o" --whatif serve serve_split
python3 $c bin/gpumem "$o" --whatif amp amp_exp
