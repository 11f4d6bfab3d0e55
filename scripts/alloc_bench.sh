#!/usr/bin/env bash
# alloc_bench.sh — builds scripts/alloc_bench.cu against the installed PyTorch
# and times cuMemAlloc, cudaMallocAsync and PyTorch's caching allocator on an
# operation stream ("a ID SIZE" / "f ID" lines, see alloc_bench.cu).
#
#   scripts/alloc_bench.sh [-r REPEATS] [STREAM]
#   scripts/alloc_bench.sh --gen OPS SEED > stream.txt
#
# Without STREAM it generates a synthetic one of $ALLOC_BENCH_OPS operations
# (default 100000). Needs nvcc, python3 with torch, and a GPU. The binary and
# the generated stream go to $ALLOC_BENCH_DIR (default /tmp/alloc_bench).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${ALLOC_BENCH_DIR:-/tmp/alloc_bench}

# gen OPS SEED: a training-loop-like stream. One "iteration" (about 2000 ops)
# of mixed sizes is drawn at random, then repeated with fresh ids until OPS
# ops are written; live memory stays under 40 GiB.
gen() {
  python3 - "$1" "$2" <<'EOF'
import random, sys
ops, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

def size():
    r = rng.random()
    if r < 0.60:  # small: 512 B .. 1 MiB, log-uniform
        return int(2 ** rng.uniform(9, 20))
    if r < 0.95:  # medium: 1 .. 64 MiB
        return int(2 ** rng.uniform(20, 26))
    return int(2 ** rng.uniform(26, 30))  # large: 64 MiB .. 1 GiB

# One iteration as (is_alloc, local id, size); frees refer to local ids.
it, live, live_bytes, n = [], {}, 0, 0
while len(it) < 2000:
    if live and (live_bytes > 8 * GiB or rng.random() < len(live) / 400):
        k = rng.choice(list(live))
        it.append((False, k, 0))
        live_bytes -= live.pop(k)
    else:
        s = size()
        it.append((True, n, s))
        live[n] = s
        live_bytes += s
        n += 1
for k in list(live):  # each iteration ends with nothing live
    it.append((False, k, 0))

out, written, base = sys.stdout, 0, 0
while written < ops:
    for a, k, s in it:
        out.write(f"a {base + k} {s}\n" if a else f"f {base + k}\n")
    written += len(it)
    base += n
EOF
}

if [[ ${1:-} == --gen ]]; then
  [[ $# == 3 ]] || { echo "usage: alloc_bench.sh --gen OPS SEED" >&2; exit 2; }
  gen "$2" "$3"
  exit
fi

args=()
stream=
while [[ $# -gt 0 ]]; do
  case $1 in
    -r|-d) args+=("$1" "$2"); shift 2 ;;
    *) stream=$1; shift ;;
  esac
done

mkdir -p "$dir"
torch=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
abi=$(python3 -c 'import torch;print(int(torch.compiled_with_cxx11_abi()))')
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda=$(dirname "$(dirname "$(readlink -f "$nvcc")")")

build() {
  "$nvcc" -std="$1" -O2 -D_GLIBCXX_USE_CXX11_ABI="$abi" \
    -I"$torch/include" -I"$torch/include/torch/csrc/api/include" \
    -o "$dir/alloc_bench" "$here/alloc_bench.cu" \
    -cudart shared -L"$torch/lib" \
    -Xlinker --no-as-needed -ltorch -lc10 -lc10_cuda -ltorch_cuda -Xlinker --as-needed \
    -Xlinker -rpath -Xlinker "$torch/lib" -Xlinker -rpath -Xlinker "$cuda/lib64" \
    -ldl -lpthread
}
# PyTorch's headers want C++17; newer releases may want C++20.
build c++17 || build c++20

if [[ -z $stream ]]; then
  stream=$dir/stream.txt
  gen "${ALLOC_BENCH_OPS:-100000}" 1 >"$stream"
fi
exec "$dir/alloc_bench" "${args[@]}" "$stream"
