#!/usr/bin/env bash
# build_wheels.sh — the wheels `pip install gpumem` chooses from, one per
# Linux platform, the way ruff and uv ship theirs: the gpumem binary for the
# platform (cgo, so each is built with that platform's C compiler) and the
# Python package. linux x86_64 is built with the machine's gcc, linux
# aarch64 with Debian's cross compiler (apt-get install gcc-aarch64-linux-gnu).
# Each binary is run before its wheel is written: natively, or under
# qemu-aarch64 (apt-get install qemu-user) when the machine has it, and its
# replay of a fixture must equal the native binary's byte for byte.
# usage: scripts/build_wheels.sh [OUTDIR] [--version V]   (OUTDIR: dist)
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist
version=0.0.0.dev0
while [ $# -gt 0 ]; do
  case $1 in
  --version) version=$2; shift 2 ;;
  *) out=$1; shift ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fixture=testdata/pytorch/gpt2_varlen.pickle

native=$(go env GOARCH)
CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$work/gpumem-$native" ./cmd/gpumem
"$work/gpumem-$native" replay "$fixture" -o json >"$work/want.json"

build() { # GOARCH CC [RUNNER...]
  local arch=$1 cc=$2
  shift 2
  if ! command -v "$cc" >/dev/null; then
    echo "build_wheels.sh: skipped linux/$arch: $cc is not installed" >&2
    return
  fi
  local bin="$work/gpumem-$arch"
  [ -x "$bin" ] || CC=$cc CGO_ENABLED=1 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$bin" ./cmd/gpumem
  if [ $# -gt 0 ] && ! command -v "$1" >/dev/null; then
    echo "build_wheels.sh: linux/$arch built but not run: $1 is not installed" >&2
  else
    "$@" "$bin" replay "$fixture" -o json >"$work/got.json"
    cmp -s "$work/want.json" "$work/got.json" || { echo "build_wheels.sh: linux/$arch: replay differs from linux/$native" >&2; exit 1; }
  fi
  python3 python/build_wheel.py "$bin" "$out" --version "$version"
}

case $native in
amd64)
  build amd64 gcc
  build arm64 aarch64-linux-gnu-gcc qemu-aarch64 -L /usr/aarch64-linux-gnu
  ;;
arm64)
  build arm64 gcc
  build amd64 x86_64-linux-gnu-gcc qemu-x86_64 -L /usr/x86_64-linux-gnu
  ;;
*) build "$native" gcc ;;
esac
