#!/usr/bin/env bash
# The benchmark models of ../shared/peer/make_models.py (mlp, bert_layer,
# convnet, matmul_1024) with ONNX Runtime's outputs as the reference: makes
# the models, asks ONNX Runtime (the peer) for its outputs, and runs
# `onyx test` over them.
#
#   bench_models.sh ONYX_BIN WORK_DIR
#
# Needs ../shared/peer (or $ONYX_PEER_SCRIPTS), node with the peer installed
# (bash ../shared/peer/setup.sh) and /usr/bin/python3 with onnx; without them
# it skips (exit 77) with a message.
set -uo pipefail
ONYX="$1" WORK="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PEER="${ONYX_PEER_SCRIPTS:-$HERE/../../../shared/peer}"
PEER_DIR="${ONYX_PEER_DIR:-$HOME/.cache/onyx-peer}"
skip() { echo "skip: $*"; exit 77; }
[ -f "$PEER/make_models.py" ] || skip "peer scripts not found at $PEER (set ONYX_PEER_SCRIPTS)"
command -v node >/dev/null || skip "node is not installed (the peer runs on onnxruntime-node)"
[ -d "$PEER_DIR/node_modules/onnxruntime-node" ] ||
  skip "ONNX Runtime is not installed in $PEER_DIR (run: bash $PEER/setup.sh)"
/usr/bin/python3 -c "import onnx" 2>/dev/null || skip "/usr/bin/python3 cannot import onnx"

mkdir -p "$WORK"
if [ ! -f "$WORK/models.json" ]; then
  /usr/bin/python3 "$PEER/make_models.py" "$WORK" > "$WORK/make_models.log" 2>&1 ||
    { cat "$WORK/make_models.log"; exit 1; }
fi
for dir in "$WORK"/*/; do
  m="$(basename "$dir")"
  [ -f "$dir/test_data_set_0/output_0.pb" ] && continue
  ONYX_PEER_DIR="$PEER_DIR" node "$PEER/ort_run.js" "$dir/model.onnx" --inputs "$dir/test_data_set_0" \
    --out "$dir/test_data_set_0" --iters 1 --warmup 0 > "$WORK/ort_$m.log" 2>&1 ||
    { cat "$WORK/ort_$m.log"; exit 1; }
done
"$ONYX" test "$WORK" --verdicts "$WORK/verdicts.txt"
