#!/usr/bin/env bash
# Tree ensembles against ONNX Runtime (docs/performance.md, "Tree ensembles"):
# writes the models (bench/ml_trees.py) and times each with bench/pair.js, ORT
# and Onyx run by run, 1 thread.
#   bench/ml_trees.sh [DIR] [ROUNDS]     (DIR default /tmp/onyx-ml-trees, ROUNDS 15)
# Needs Debian's python3-sklearn and python3-onnx, node, and the ORT peer
# (bash ../shared/peer/setup.sh). ONYX (default build/bin/onyx) picks the binary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-/tmp/onyx-ml-trees}"
ROUNDS="${2:-15}"
ONYX="${ONYX:-$ROOT/build/bin/onyx}"
if [ ! -f "$DIR/rf_classifier/model.onnx" ] || [ ! -f "$DIR/gb_regressor/model.onnx" ]; then
  /usr/bin/python3 "$ROOT/bench/ml_trees.py" "$DIR"
fi
for m in rf_classifier gb_regressor; do
  echo "== $m"
  node "$ROOT/bench/pair.js" "$DIR/$m" --threads 1 --rounds "$ROUNDS" --onyx "$ONYX"
done
