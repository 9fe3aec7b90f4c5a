#!/usr/bin/env bash
# The int8 benchmark: QDQ ResNet-18 and a QDQ BERT encoder (two layers), made from
# the zoo's float32 models by bench/quantize.py at benchmark time (never committed),
# with ONNX Runtime's outputs as each model's expected outputs. Checks Onyx against
# them (`onyx test`), prints both runtimes' accuracy against the float32 models,
# then times Onyx against ONNX Runtime on the same QDQ files, run by run
# (bench/pair.js).
#
#   bench/qdq.sh [QDQ_DIR] [ZOO_DIR]        # defaults /tmp/onyx-qdq, /tmp/onyx-zoo
#   MODELS="resnet18" ROUNDS=15 THREADS=1 ATOL=0.15 SKIP_TIMING=1 SKIP_ACCURACY=1 bench/qdq.sh
#
# The float32 models come from bench/zoo.sh's folder (exported there when missing).
# A QDQ model is made once per folder: delete QDQ_DIR/NAME_qdq to make it again.
# Needs what bench/zoo.sh needs (python3-onnx, numpy, the peer).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
QDQ="${1:-/tmp/onyx-qdq}"
ZOO="${2:-/tmp/onyx-zoo}"
PY="${PYTHON:-/usr/bin/python3}"
ONYX="${ONYX:-$ROOT/build/bin/onyx}"
PEER="${PEER:-${ONYX_PEER_SCRIPTS:-$ROOT/../shared/peer}}"
PEER_DIR="${ONYX_PEER_DIR:-$HOME/.cache/onyx-peer}"
MODELS="${MODELS:-resnet18 bert_encoder_2l}"
export PEER ONYX_PEER_DIR="$PEER_DIR"
mkdir -p "$QDQ" "$ZOO"

for m in $MODELS; do
  [ -f "$ZOO/$m/model.onnx" ] || "$PY" "$HERE/zoo.py" "$ZOO" --only "$m" 2>/dev/null
  d="$QDQ/${m}_qdq"
  [ -f "$d/model.onnx" ] || "$PY" "$HERE/quantize.py" "$ZOO/$m" "$d"
  ds="$d/test_data_set_0"
  [ -f "$ds/output_0.pb" ] ||
    node "$PEER/ort_run.js" "$d/model.onnx" --inputs "$ds" --out "$ds" --iters 1 --warmup 0 > /dev/null
done

# Two runtimes may round a tie of an intermediate requantization apart: one step
# of an intermediate value moves the output by about one step of its own scale
# (ResNet-18's logits: 0.06, BERT's hidden states: 0.07), hence ATOL.
filter="^($(for m in $MODELS; do printf '%s_qdq|' "$m"; done | sed 's/|$//'))\$"
echo "== agreement with ONNX Runtime (onyx test --rtol 0 --atol ${ATOL:-0.15})"
"$ONYX" test "$QDQ" --filter "$filter" --rtol 0 --atol "${ATOL:-0.15}" || true

if [ "${SKIP_ACCURACY:-0}" != 1 ]; then
  echo "== accuracy against float32"
  for m in $MODELS; do
    echo "-- $m"
    "$PY" "$HERE/quantize.py" --accuracy "$ZOO/$m" "$QDQ/${m}_qdq" --onyx "$ONYX"
  done
fi

[ "${SKIP_TIMING:-0}" = 1 ] && exit 0
echo "== timing, run by run with ONNX Runtime"
for m in $MODELS; do
  echo "-- ${m}_qdq"
  node "$HERE/pair.js" "$QDQ/${m}_qdq" --threads "${THREADS:-1}" --rounds "${ROUNDS:-15}" --onyx "$ONYX"
done
