#!/usr/bin/env bash
# wheel_check.sh — build the gpumem wheel for this machine (the binary in
# bin/gpumem, built first), install it into a fresh virtual environment,
# and run python/tests against the installed package, as a user of
# `pip install gpumem` would use it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/gpumem ] || go build -o bin/gpumem ./cmd/gpumem
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheel=$(python3 python/build_wheel.py bin/gpumem "$work/dist")
# the machine's pytest, seen through the system site-packages; the wheel
# itself goes in the environment alone, with no index to fetch from
python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
cd "$work"  # not the source tree: the installed package is tested
GPUMEM_TESTDATA="$OLDPWD/testdata/pytorch" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests"
