#!/bin/sh
# Record the four programs of docs/categories.md ("Checked against the
# profiler") on a CUDA machine with PyTorch and torchvision, each in its
# own process, into OUTDIR (default: $OUT, else ./categories-out):
# PROGRAM.pickle.gz (snapshot) and PROGRAM.profiler.json.gz (the
# profiler's categories). Copy them to internal/categories/testdata/profiler/.
set -u
out=${1:-${OUT:-categories-out}}
here=$(dirname "$0")
mkdir -p "$out"
for p in gpt resnet ckpt leak; do
	echo "== $p" >&2
	timeout 70 python3 "$here/record.py" "$p" "$out" || echo "$p: failed ($?)" >&2
	[ -f "$out/$p.pickle" ] && gzip -9f "$out/$p.pickle"
done
ls -l "$out" >&2
