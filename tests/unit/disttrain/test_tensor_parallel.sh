#!/usr/bin/env bash
# test_tensor_parallel.sh — runs test_tensor_parallel on the model of
# make_bert_block.py in one process (nothing sharded), then under
# `mpirun -np 2 --oversubscribe` (sharded over 2 ranks); then `onyx run
# --tensor-parallel` over 2 ranks against a 1-process `onyx run`.
# usage: test_tensor_parallel.sh TEST_BINARY WORKDIR [ONYX]
# Exit 77 (skipped) without python3's numpy and onnx, without mpirun, or in a
# build without the MPI backend.
set -u
BIN="$1"
WORK="$2"
ONYX="${3:-}"
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
if [ -n "$ONYX" ]; then
  # onyx run --tensor-parallel: the generated inputs are the same on every
  # rank; rank 0 alone prints and writes the outputs, which equal the
  # unsharded run's; its optimized graph holds the 4 AllReduce nodes.
  "$ONYX" run "$WORK/block.onnx" --output-dir "$WORK/run1" >"$WORK/run1.txt" 2>"$WORK/err" ||
    { echo "FAIL: onyx run"; cat "$WORK/err"; exit 1; }
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    mpirun -np 2 --oversubscribe -x ASAN_OPTIONS "$ONYX" run "$WORK/block.onnx" --tensor-parallel \
    --output-dir "$WORK/run2" --save-optimized "$WORK/run2.onnx" >"$WORK/run2.txt" 2>"$WORK/err" ||
    { echo "FAIL: onyx run --tensor-parallel"; cat "$WORK/err"; exit 1; }
  [ "$(grep -c "^output " "$WORK/run2.txt")" -eq "$(grep -c "^output " "$WORK/run1.txt")" ] ||
    { echo "FAIL: onyx run --tensor-parallel printed on more than rank 0"; cat "$WORK/run2.txt"; exit 1; }
  /usr/bin/python3 - "$WORK" <<'PYEOF' || { echo "FAIL: onyx run --tensor-parallel outputs"; exit 1; }
import glob, os, sys
import numpy as np, onnx, onnx.numpy_helper as nh
w = sys.argv[1]
names = sorted(os.path.basename(p) for p in glob.glob(w + "/run1/*.pb"))
assert names and names == sorted(os.path.basename(p) for p in glob.glob(w + "/run2/*.pb")), names
for n in names:
    a, b = (nh.to_array(onnx.load_tensor(w + d + n)) for d in ("/run1/", "/run2/"))
    assert a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-4), (n, np.abs(a - b).max())
ops = [x.op_type for x in onnx.load(w + "/run2.onnx").graph.node]
assert ops.count("AllReduce") == 4, ops
PYEOF
fi
echo "pass"
