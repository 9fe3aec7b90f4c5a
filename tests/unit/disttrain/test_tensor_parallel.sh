#!/usr/bin/env bash
# test_tensor_parallel.sh — runs test_tensor_parallel on the model of
# make_bert_block.py in one process (nothing sharded), then under
# `mpirun -np 2 --oversubscribe` (sharded over 2 ranks).
# usage: test_tensor_parallel.sh TEST_BINARY WORKDIR
# Exit 77 (skipped) without python3's numpy and onnx, without mpirun, or in a
# build without the MPI backend.
set -u
BIN="$1"
WORK="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
/usr/bin/python3 -c "import numpy, onnx" 2>/dev/null ||
  { echo "SKIP: python3 lacks numpy or onnx (Debian: python3-numpy python3-onnx)"; exit 77; }
/usr/bin/python3 "$HERE/make_bert_block.py" "$WORK/block.onnx" || { echo "FAIL: make_bert_block.py"; exit 1; }
"$BIN" "$WORK/block.onnx" || { echo "FAIL: one process"; exit 1; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
# Sanitizer builds: LeakSanitizer off for the ranks (Open MPI's own
# allocations of MPI_Init); ASan and UBSan stay on.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  mpirun -np 2 --oversubscribe -x ASAN_OPTIONS "$BIN" "$WORK/block.onnx" >"$WORK/out" 2>"$WORK/err"
rc=$?
cat "$WORK/out"
if [ $rc -ne 0 ] && grep -q "cannot load the MPI backend" "$WORK/err"; then
  echo "SKIP: no MPI backend in this build: $(head -c 300 "$WORK/err")"
  exit 77
fi
[ $rc -eq 0 ] || { echo "FAIL: 2 ranks exited $rc"; cat "$WORK/err"; exit 1; }
[ "$(grep -c "outputs agree" "$WORK/out")" -eq 2 ] || { echo "FAIL: not every rank passed"; exit 1; }
echo "pass"
