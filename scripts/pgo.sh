#!/usr/bin/env bash
# pgo.sh — remake cmd/gpumem/default.pgo, the CPU profile `go build` uses
# for profile-guided optimization of the gpumem binary (Go picks up a
# default.pgo beside a main package by itself).
#
# The profile merges what users run most: the whole sweep of gpt2_varlen
# (decode, plan, the grid's replays, the offline planner) and the decoding
# of a 1,000,000-event snapshot, read whole and streamed, and the whole
# `gpumem replay -o json` of that snapshot (BenchmarkReplayBigTrace). With it the sweep
# takes about 6-10 % less wall time than without (side by side, 31 runs,
# 2-core machine); rerun this script when those paths change much, and
# check the gain with `python3`-timed runs of both binaries (see README).
# Usage: scripts/pgo.sh [BIG_TRACE]  (default /tmp/gpumem_1m.pickle, made
# with scripts/gen_trace.py when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g}"
big=${1:-/tmp/gpumem_1m.pickle}
[ -f "$big" ] || python3 scripts/gen_trace.py "$big" --events 1000000 >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -run '^$' -bench '^BenchmarkSweepGPT2$' -benchtime 60x -cpuprofile "$tmp/sweep.prof" -o "$tmp/pipeline.test" ./internal/pipeline >/dev/null
GPUMEM_BIG_TRACE=$big go test -run '^$' -bench '^Benchmark(Read|Stream)Pickle$' -benchtime 8x \
  -cpuprofile "$tmp/decode.prof" -o "$tmp/pickle.test" ./pkg/trace/pickle >/dev/null
go test -run '^$' -bench '^BenchmarkOfflinePeak$/fast' -benchtime 30x -cpuprofile "$tmp/offline.prof" -o "$tmp/replay.test" ./pkg/replay >/dev/null
GPUMEM_BIG_TRACE=$big go test -run '^$' -bench '^BenchmarkReplayBigTrace$' -benchtime 4x \
  -cpuprofile "$tmp/replay.prof" -o "$tmp/pipeline.test" ./internal/pipeline >/dev/null
go tool pprof -proto "$tmp/sweep.prof" "$tmp/decode.prof" "$tmp/offline.prof" "$tmp/replay.prof" >cmd/gpumem/default.pgo
echo "wrote cmd/gpumem/default.pgo ($(wc -c <cmd/gpumem/default.pgo) bytes)" >&2
