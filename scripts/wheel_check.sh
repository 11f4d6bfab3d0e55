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
# the tag names the binary's architecture and the newest glibc it needs,
# as objdump reads them (a second reader of the same ELF file)
if command -v objdump >/dev/null && [ "$(uname -s)" = Linux ]; then
  glibc=$(objdump -T bin/gpumem | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | sed 's/GLIBC_//; s/\./_/')
  case $wheel in
  *"-py3-none-manylinux_${glibc}_$(uname -m).whl") ;;
  *) echo "wheel_check.sh: $wheel is not tagged manylinux_${glibc}_$(uname -m)" >&2; exit 1 ;;
  esac
fi
# the machine's pytest, seen through the system site-packages; the wheel
# itself goes in the environment alone, with no index to fetch from
python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
cd "$work"  # not the source tree: the installed package is tested
GPUMEM_TESTDATA="$OLDPWD/testdata/pytorch" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests"
