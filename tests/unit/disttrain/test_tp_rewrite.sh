#!/usr/bin/env bash
# test_tp_rewrite.sh — test_tp_rewrite on the model of make_bert_block.py
# (no MPI needed). usage: test_tp_rewrite.sh TEST_BINARY WORKDIR
# Exit 77 (skipped) without python3's numpy and onnx.
set -u
rm -rf "$2" && mkdir -p "$2" || exit 1
/usr/bin/python3 -c "import numpy, onnx" 2>/dev/null ||
  { echo "SKIP: python3 lacks numpy or onnx (Debian: python3-numpy python3-onnx)"; exit 77; }
/usr/bin/python3 "$(dirname "$0")/make_bert_block.py" "$2/block.onnx" || { echo "FAIL: make_bert_block.py"; exit 1; }
exec "$1" "$2/block.onnx"
