#!/usr/bin/env bash
# The test command from the README: unit, fuzz-corpus and end-to-end tests,
# the race detector and AddressSanitizer on the C allocator, and the replay
# of every shared PyTorch fixture against what PyTorch reported.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g}"

echo "== go vet, gofmt"
go vet ./...
unformatted=$(gofmt -l cmd pkg internal deploy)
if [ -n "$unformatted" ]; then
  echo "gofmt would rewrite: $unformatted" >&2
  exit 1
fi
echo "== race detector and AddressSanitizer on pkg/alloc (and the race detector on the concurrent packages)"
go test -count=1 -race ./pkg/alloc/
# the exporter's collectors and its HTTP server run concurrently; ranks,
# sweeps and the offline planner replay in parallel
go test -count=1 -race ./internal/exporter/ ./internal/pipeline/ ./internal/sweep/
go test -count=1 -asan ./pkg/alloc/
go test -count=1 -asan -run Truncated ./pkg/replay/
echo "== fidelity against PyTorch's own numbers"
if [ -f ../shared/tools/fidelity.py ] && command -v python3 >/dev/null; then
  go build -o bin/gpumem ./cmd/gpumem
  # every key of memory_stats, equal or said why (inexact_keys, divergence)
  python3 ../shared/tools/fidelity.py --all-keys bin/gpumem
else
  echo "skipped: ../shared/tools/fidelity.py or python3 is missing (the recorded fixtures' replays still run in go test)"
fi
echo "== a Python with torch 2.11.0 for gpumem estimate's tests (cached: installs once)"
if py=$(bash scripts/pyenv.sh); then
  export GPUMEM_TEST_PYTHON=$py
elif [ "${CI:-}" = true ]; then
  echo "test.sh: scripts/pyenv.sh failed; CI runs the estimate tests" >&2
  exit 1
else
  echo "test.sh: no torch 2.11.0 venv: the estimate tests will skip" >&2
fi
echo "== go test ./..."
go test -count=1 ./...
echo "== every fuzz target, briefly, from its kept corpus"
FUZZTIME=${FUZZTIME:-2s} bash scripts/fuzz.sh
echo "== go mod tidy leaves go.mod and go.sum as they are"
go mod tidy -diff
echo "== the Python wheel, installed in a fresh environment"
bash scripts/wheel_check.sh
echo "== the HTML report in a headless browser"
bash test/html_check.sh
echo "== gpumem exporter with a real Prometheus"
bash test/exporter_e2e.sh
