#!/usr/bin/env bash
# gpu_check.sh — the end-to-end checks of the CUDA side, on a machine with an
# NVIDIA GPU: `gpumem summary` against nvidia-smi with a process holding
# memory, a replay on the real GPU against the simulated device (default and
# expandable segments), memory returned at exit, and the allocator
# benchmarks, and the CUDA backend's own tests (pkg/alloc/cuda_test.go).
# Expects bin/gpumem, bin/replay.test (go test -c ./pkg/replay) and
# bin/alloc.test (go test -c ./pkg/alloc) built beforehand. Writes its evidence to ${OUT:-/tmp/gpu_check}.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
trace=testdata/pytorch/gpt2_varlen.pickle
smi() { nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader,nounits; }

echo "== the CUDA backend, entry point by entry point"
(cd pkg/alloc && ../../bin/alloc.test -test.run 'CUDA' -test.v -test.count=1) 2>&1 | tee "$out/cuda_backend.txt"

echo "== summary against nvidia-smi, with a torch process holding 8 GiB"
python3 -c "import torch,time; x=torch.empty(8<<30,dtype=torch.uint8,device='cuda'); time.sleep(40)" &
holder=$!
sleep 12
echo "nvidia-smi (total, used, free MiB): $(smi)"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
bin/gpumem summary --no-color
bin/gpumem summary -o json > "$out/summary.json"
kill $holder; wait $holder 2>/dev/null

echo "== replay on the GPU against the simulated device"
base=$(smi | cut -d, -f2)
for conf in "" "expandable_segments:True"; do
  tag=${conf:+_expandable}
  bin/gpumem replay $trace --alloc-conf "$conf" -o json > "$out/sim$tag.json"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 20 > "$out/used$tag.txt" &
  sampler=$!
  bin/gpumem replay $trace --alloc-conf "$conf" --backend cuda -o json > "$out/cuda$tag.json"
  sleep 0.3; kill $sampler
  after=$(smi | cut -d, -f2)
  python3 - "$out" "$tag" "$base" "$after" <<'PY'
import json, sys
out, tag, base, after = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sim = json.load(open(f"{out}/sim{tag}.json"))["memory_stats"]
cuda = json.load(open(f"{out}/cuda{tag}.json"))["memory_stats"]
diff = [k for k in sim if sim[k] != cuda.get(k)]
used = [int(l) for l in open(f"{out}/used{tag}.txt") if l.strip().isdigit()]
print(f"settings {tag or 'default'}: {len(sim)} memory_stats keys, {len(diff)} differ between sim and cuda {diff[:5]}")
print(f"  reserved peak {sim['reserved_bytes.all.peak']/2**20:.0f} MiB; device used grew by {max(used)-base} MiB at most; after exit {after-base:+d} MiB")
PY
done

echo "== benchmarks"
(cd pkg/replay && ../../bin/replay.test -test.run '^$' -test.bench 'Replay' -test.benchtime 20x)
[ -f out/cuda_bench_streams/gpt2_varlen.txt ] && bash scripts/alloc_bench.sh -r 3 out/cuda_bench_streams/gpt2_varlen.txt
exit 0
