#!/usr/bin/env bash
# ddp_check.sh — on a machine with 2 GPUs and PyTorch: record a small DDP job
# under torchrun with `gpumem record`, replay the per-rank snapshots as one
# run, and print each rank's replayed peak reserved memory beside the
# torch.cuda.max_memory_reserved() the rank printed; then try the trainer
# callbacks of python/gpumem_hooks.py (Lightning, Hugging Face) where those
# packages are installed. Expects bin/gpumem built beforehand
# (go build -o bin/gpumem ./cmd/gpumem). Writes its evidence to
# ${OUT:-/tmp/ddp_check}. Exit 1 when a replayed peak differs.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/ddp_check}
mkdir -p "$out"
rm -f "$out"/ddp.rank*.pickle "$out"/pl*.pickle "$out"/hf*.pickle
gm=bin/gpumem
[ -x $gm ] || { echo "ddp_check: build bin/gpumem first" >&2; exit 2; }
n=$(python3 -c 'import torch; print(torch.cuda.device_count())') || { echo "ddp_check: no PyTorch" >&2; exit 2; }
[ "$n" -ge 2 ] || { echo "ddp_check: needs 2 GPUs, torch sees $n" >&2; exit 2; }
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
status=0

# compare LOG JSON: the "<name> max_memory_reserved N" lines of LOG against the
# replay's runs (in rank order, or the one run of a single replay)
compare() {
python3 - "$1" "$2" <<'PY' || status=1
import json, os, re, sys
log, rep = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
printed = [int(m) for m in re.findall(r"max_memory_reserved (\d+)", log)]
runs = rep["runs"] if "runs" in rep else [rep]
bad = len(printed) != len(runs)
print(f"{'rank':>4}  {'source':<40} {'replayed peak reserved':>24} {'max_memory_reserved()':>22}")
for i, r in enumerate(runs):
    got = r["memory_stats"]["reserved_bytes.all.peak"]
    want = printed[i] if i < len(printed) else None
    ok = got == want
    bad |= not ok
    print(f"{i:>4}  {os.path.basename(r['source']):<40} {got:>24} {str(want):>22}  {'ok' if ok else 'DIFFERS'}")
if "worst" in rep:
    print("worst rank:", rep["worst"])
sys.exit(1 if bad else 0)
PY
}

echo "== gpumem record -- torchrun --nproc_per_node 2 python/examples/ddp_train.py"
$gm record --snapshot "$out/ddp.pickle" -- torchrun --standalone --nproc_per_node 2 python/examples/ddp_train.py \
  2> >(tee "$out/record.err" >&2) | tee "$out/train.log"
ls -l "$out"/ddp.rank*.pickle

echo "== gpumem replay '$out/ddp.rank*.pickle'"
$gm replay --no-color "$out/ddp.rank*.pickle" | head -20
$gm replay "$out/ddp.rank*.pickle" -o json > "$out/ranks.json"
sort -n -k2 "$out/train.log" | grep max_memory_reserved > "$out/train.sorted"
compare "$out/train.sorted" "$out/ranks.json"

echo "== gpumem diff rank0 rank1"
$gm diff --no-color "$out/ddp.rank0.pickle" "$out/ddp.rank1.pickle" | head -16

echo "== SIGUSR1 to a running rank dumps it on demand (rank 1 signals itself at step 4)"
grep "on SIGUSR1" "$out/record.err" || { echo "no dump on SIGUSR1"; status=1; }

$gm hooks "$out/gpumem_hooks.py"
for fw in lightning hf; do
  echo "== $fw callback (gpumem_hooks.py)"
  # one GPU: with two visible, the HF Trainer would run DataParallel over both
  CUDA_VISIBLE_DEVICES=0 PYTHONPATH="$out" python3 python/examples/callbacks_train.py "$out" $fw 2>"$out/$fw.err" | tee "$out/$fw.log"
  tail -3 "$out/$fw.err"
  grep -q "not installed" "$out/$fw.log" && continue
  p=${fw/lightning/pl}
  ls "$out"/$p*.pickle
  end=$(ls "$out"/$p*.end.pickle | head -1)
  [ -n "$end" ] || { echo "$fw: no end snapshot"; status=1; continue; }
  $gm replay "$end" -o json > "$out/$fw.json" && compare "$out/$fw.log" "$out/$fw.json"
done

echo "== ddp_check: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
