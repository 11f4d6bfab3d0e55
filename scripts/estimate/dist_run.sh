#!/usr/bin/env bash
# dist_run.sh — on a machine with GPUs and PyTorch: run every program of
# dist_programs.py for real under torchrun (dist_record.py: each rank's
# memory_stats and a snapshot), all at once (each process has its own
# allocator, so its figures do not depend on the others). With 2 GPUs:
# 2 ranks, NCCL. With one: 1 rank with NCCL, and 2 ranks on the one GPU
# with gloo (NCCL refuses two ranks on one GPU). Writes DIR/NAME.BACKEND.N.real.jsonl
# and packs DIR into DIR.tar.gz. The estimates (gpumem estimate --nproc N
# -- python3 scripts/estimate/dist_record.py NAME) run anywhere: compare
# with dist_compare.py.
# Usage: scripts/estimate/dist_run.sh DIR [NAME...]
set -uo pipefail
cd "$(dirname "$0")/../.."
o=${1:?usage: dist_run.sh DIR [NAME...]}
shift
mkdir -p "$o"
py=${PYTHON:-python3}
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <($py -c "import sys; sys.path.insert(0, 'scripts/estimate'); import dist_programs; print('\n'.join(dist_programs.PROGRAMS))")
ngpu=$($py -c 'import torch; print(torch.cuda.device_count())')
$py -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' | tee "$o/device.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv >>"$o/device.txt" 2>&1
one() { # NAME BACKEND NPROC
  local n=$1 b=$2 p=$3
  timeout 240 $py -m torch.distributed.run --standalone --nproc_per_node "$p" scripts/estimate/dist_record.py "$n" \
    --backend "$b" --snapshot "$o/$n.$b.$p" >"$o/$n.$b.$p.real.jsonl" 2>"$o/$n.$b.$p.real.err"
  echo "$n $b $p: exit $?"
}
for n in "${names[@]}"; do
  if [ "$ngpu" -ge 2 ]; then
    one "$n" nccl 2 &
  else
    one "$n" nccl 1 &
    one "$n" gloo 2 &
  fi
done
wait
tar czf "$o.tar.gz" -C "$o" .
