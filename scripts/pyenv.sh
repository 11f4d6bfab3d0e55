#!/usr/bin/env bash
# pyenv.sh — a Python virtual environment with torch 2.11.0 for the tests of
# gpumem estimate (no GPU needed), kept under the cache folder so that a
# second run installs nothing. Prints the interpreter's path on stdout.
#
# torch 2.11.0's Linux wheel on PyPI is built for CUDA and cannot be
# imported without the CUDA libraries it links, so they come with it (the
# nvidia-* wheels, about 3 GB installed; downloaded once, by pip).
# Usage: PY=$(scripts/pyenv.sh)
set -euo pipefail
dir=${GPUMEM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/gpumem/venv-torch-2.11.0}
py=$dir/bin/python
if [ -x "$py" ] && [ -f "$dir/.gpumem-ok" ]; then
  echo "$py"
  exit 0
fi
base=${PYTHON:-python3}
ver=$($base -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case $ver in
3.10 | 3.11 | 3.12 | 3.13) ;;
*) echo "pyenv.sh: $base is Python $ver; torch 2.11.0 needs 3.10 to 3.13" >&2; exit 1 ;;
esac
mkdir -p "$(dirname "$dir")"
rm -rf "$dir"
echo "pyenv.sh: installing torch 2.11.0 into $dir (once)" >&2
$base -m venv "$dir"
"$py" -m pip install --quiet torch==2.11.0 numpy >&2
"$py" -c 'import torch; assert torch.__version__.startswith("2.11.0"), torch.__version__' >&2
touch "$dir/.gpumem-ok"
echo "$py"
