#!/usr/bin/env bash
# bench.sh — the README's benchmark table, every row a ratio of whole
# commands (bin/gpumem ..., as users run them) measured side by side in one
# run (scripts/bench.py runs each row's commands interleaved, medians):
#   - `gpumem replay FILE -o json` on a synthetic snapshot (1M events; and
#     10M with --10m) against CPython's pickle.load of the same file and a
#     Go loop that only walks its pickle opcodes (BenchmarkOpcodeWalk, the
#     floor): CPU time and max RSS;
#   - the same with --html, against the plain replay (1M);
#   - traces with private pools (mempool_single repeated to 1M events with
#     the same addresses; graph_convnet to 100k, each copy at addresses of
#     its own; --10m adds 5M and 250k) against the walk and CPython;
#   - the largest snapshot compressed with zstd and gzip against the plain
#     file and `zstd -dc`;
#   - `gpumem sweep gpt2_varlen.pickle` at -j 2 against -j 1, wall time;
#   - process start, `gpumem version` against /bin/true;
#   - PyTorch's own `python -m torch.cuda._memory_viz stats / trace /
#     trace_plot` on the 1M snapshot, when a Python with torch is at hand.
# It prints one markdown block: a caption naming the machine, the table
# (measured, goal, met or not) and the absolute figures of the run.
#
# Usage: scripts/bench.sh [--10m] [--real] [--runs N] [--rows LIST] [--base BIN] [--readme NAME | --paste NAME FILE]
#   --10m     add the 10M-event snapshot (and bigger pool traces): minutes more
#   --real    snapshots shaped like real ones (segment events, final segments,
#             a trace cut short by max_entries: gen_trace.py --max-entries)
#   --runs N  runs of each command (default 3; the sweep 11, start 21)
#   --rows LIST  only these rows, comma-separated, of replay, html, pools,
#             compressed, sweep, start, anchor (default: all); the inputs
#             of the others are not made
#   --base BIN  another gpumem binary (the tree before a change, say),
#             measured beside BIN, interleaved, in the replay and pool rows
#   --readme NAME  also write the block into README.md, between its
#             "<!-- bench.sh NAME: begin -->" and "... end -->" markers
#             (the README has two: quiet, a quiet 2-core machine; loaded,
#             the shared development machine)
#   --paste NAME FILE  only write FILE (a block this script printed, on
#             another machine say) into README.md there, and exit
# Env: BIN (a gpumem binary; default: build bin/gpumem), WALK (the
# pkg/trace/pickle test binary; default: build bin/pickle.test), PY (a
# Python with torch; default: scripts/pyenv.sh's venv when installed, else
# python3 when it imports torch, else the anchor row is left out), WORK
# (where the inputs are made and kept, default /tmp/gpumem-bench), MACHINE
# (the machine's name in the caption; default: the host name).
set -euo pipefail
cd "$(dirname "$0")/.."
ten=0 real=0 runs=3 readme= rows=replay,html,pools,compressed,sweep,start,anchor base=
while [ $# -gt 0 ]; do
  case $1 in
  --10m) ten=1 ;;
  --real) real=1 ;;
  --runs) runs=$2; shift ;;
  --rows) rows=$2; shift ;;
  --base) base=$2; shift ;;
  --readme) readme=$2; shift ;;
  --paste) readme=$2 paste=$3; shift 2 ;;
  [0-9]*) runs=$1 ;;
  *) echo "usage: scripts/bench.sh [--10m] [--real] [--runs N] [--rows LIST] [--base BIN] [--readme NAME | --paste NAME FILE]" >&2; exit 2 ;;
  esac
  shift
done

# paste_readme NAME FILE: put FILE between README.md's markers NAME
paste_readme() {
  python3 - "$1" "$2" <<'PY'
import sys
name, block = sys.argv[1], open(sys.argv[2]).read().strip()
text = open("README.md").read()
begin, end = f"<!-- bench.sh {name}: begin -->", f"<!-- bench.sh {name}: end -->"
if begin not in text or end not in text:
    sys.exit(f"bench.sh: README.md has no {begin} ... {end} markers")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open("README.md", "w").write(head + begin + "\n" + block + "\n" + end + tail)
print(f"bench.sh: wrote the table between README.md's {name} markers", file=sys.stderr)
PY
}
if [ -n "${paste:-}" ]; then
  paste_readme "$readme" "$paste"
  exit
fi

export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g}"
bin=${BIN:-bin/gpumem}
walk=${WALK:-bin/pickle.test}
if [ -z "${BIN:-}" ]; then go build -o bin/gpumem ./cmd/gpumem; fi
if [ -z "${WALK:-}" ]; then go test -c -o bin/pickle.test ./pkg/trace/pickle; fi
py=${PY:-}
if [ -z "$py" ]; then
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/gpumem/venv-torch-2.11.0
  if [ -f "$venv/.gpumem-ok" ]; then
    py=$venv/bin/python
  elif python3 -c 'import torch' 2>/dev/null; then
    py=python3
  fi
fi
work=${WORK:-/tmp/gpumem-bench}
mkdir -p "$work"
fix=testdata/pytorch

# make OUT N: a synthetic snapshot of N events (a real-shaped one keeps the
# last N of 1.2 N events)
mk() {
  [ -f "$1" ] && return
  if [ "$real" = 1 ]; then
    python3 scripts/gen_trace.py "$1" --events $(($2 * 6 / 5)) --max-entries "$2" >&2
  else
    python3 scripts/gen_trace.py "$1" --events "$2" >&2
  fi
}
# on ROW...: whether --rows has one of them
on() {
  local r
  for r in "$@"; do
    case ",$rows," in *",$r,"*) return 0 ;; esac
  done
  return 1
}
tag=$([ "$real" = 1 ] && echo _real || true)
replay=() zst= gz=
if on replay html compressed anchor; then
  mk "$work/1m$tag.pickle" 1000000
  replay=("1000000=$work/1m$tag.pickle")
  big=$work/1m$tag.pickle
  if [ "$ten" = 1 ]; then
    mk "$work/10m$tag.pickle" 10000000
    replay+=("10000000=$work/10m$tag.pickle")
    big=$work/10m$tag.pickle
  fi
fi
if on compressed; then
  zst=$big.zst
  if ! command -v zstd >/dev/null; then
    zst= # the row says zstd is missing
  elif [ ! -f "$zst" ]; then
    zstd -q -f -o "$zst" "$big"
  fi
  gz=$big.gz
  [ -f "$gz" ] || gzip -c "$big" >"$gz"
fi

# repeat NAME EVENTS [--shift]: a fixture's events repeated
pools=()
repeat() {
  local out=$work/$1_$2.pickle
  [ -f "$out" ] || python3 scripts/repeat_trace.py "$fix/$1.pickle" "$out" --events "$2" ${3:-} >&2
  pools+=("$1:$2=$out")
}
if on pools; then
  repeat mempool_single 1000000
  [ "$ten" = 1 ] && repeat mempool_single 5000000
  repeat graph_convnet 100000 --shift
  [ "$ten" = 1 ] && repeat graph_convnet 250000 --shift
fi

out=$work/bench.md
python3 scripts/bench.py --bin "$bin" --walk "$walk" --py "$py" --runs "$runs" --work "$work" \
  --replay "${replay[@]}" --pools "${pools[@]}" --zst "$zst" --gz "$gz" \
  --sweep "$fix/gpt2_varlen.pickle" --machine "${MACHINE:-}" --rows "$rows" --base "$base" >"$out"
cat "$out"
if [ -n "$readme" ]; then paste_readme "$readme" "$out"; fi
