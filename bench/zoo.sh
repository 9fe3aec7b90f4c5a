#!/usr/bin/env bash
# The model zoo against ONNX Runtime: exports the zoo (bench/zoo.py), writes ONNX
# Runtime's outputs as each model's expected outputs, checks Onyx's against them
# (`onyx test`), then times both, interleaved round by round (bench/run.sh), and
# prints run.sh's table with the geometric mean of the ratios.
#
#   bench/zoo.sh [ZOO_DIR]                   # default /tmp/onyx-zoo
#   MODELS="resnet18 lstm" THREADS="1" ROUNDS=3 bench/zoo.sh
#   CONFIG=providers/onednn/onednn-cpu.json bench/zoo.sh   # check with that config
#
# Environment: MODELS (default: the whole zoo, `bench/zoo.py --list`), CONFIG (a
# provider config for the agreement check and, through run.sh's ALT_CONFIG, a
# second timed variant), SKIP_TIMING=1 (agreement only), and run.sh's ONYX, PEER,
# ONYX_PEER_DIR, ROUNDS, ITERS, WARMUP, THREADS, RESULTS, PYTHON. The zoo is
# exported once per folder; delete the folder (or a model's subfolder) to export
# again. Needs Debian's python3-torch, python3-torchvision and python3-onnx
# (scripts/install-deps.sh --bench), and the
# peer (bash ../shared/peer/setup.sh) for the reference outputs and ORT's timings.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
ZOO="${1:-/tmp/onyx-zoo}"
PY="${PYTHON:-/usr/bin/python3}"
ONYX="${ONYX:-$ROOT/build/bin/onyx}"
PEER="${PEER:-${ONYX_PEER_SCRIPTS:-$ROOT/../shared/peer}}"
PEER_DIR="${ONYX_PEER_DIR:-$HOME/.cache/onyx-peer}"
RESULTS="${RESULTS:-/tmp/onyx-zoo-results}"
MODELS="${MODELS:-$("$PY" "$HERE/zoo.py" --list)}"
mkdir -p "$ZOO" "$RESULTS"

missing=()
for m in $MODELS; do
  [ -f "$ZOO/$m/model.onnx" ] || missing+=("$m")
done
if [ ${#missing[@]} -gt 0 ]; then
  "$PY" "$HERE/zoo.py" "$ZOO" --only "$(IFS=,; echo "${missing[*]}")" 2>/dev/null
fi

[ -f "$PEER/ort_run.js" ] && [ -d "$PEER_DIR/node_modules/onnxruntime-node" ] || {
  echo "zoo.sh: ONNX Runtime (the peer) is not installed: run bash $PEER/setup.sh" >&2
  exit 1
}
for m in $MODELS; do
  ds="$ZOO/$m/test_data_set_0"
  [ -f "$ds/output_0.pb" ] && continue
  ONYX_PEER_DIR="$PEER_DIR" node "$PEER/ort_run.js" "$ZOO/$m/model.onnx" --inputs "$ds" \
    --out "$ds" --iters 1 --warmup 0 > /dev/null ||
    echo "zoo.sh: ONNX Runtime could not run $m (no reference outputs)" >&2
done

cfg=()
[ -n "${CONFIG:-}" ] && cfg=(--config "$CONFIG")
filter="^($(echo $MODELS | tr ' ' '|'))\$"
echo "== agreement with ONNX Runtime (onyx test ${cfg[*]})"
"$ONYX" test "$ZOO" "${cfg[@]}" --filter "$filter" --verdicts "$RESULTS/verdicts.txt" | tail -n 1 || true
grep -vP '\tpass' "$RESULTS/verdicts.txt" | cut -c1-300 || true

[ "${SKIP_TIMING:-0}" = 1 ] && exit 0
echo "== timing, interleaved with ONNX Runtime"
ALT_CONFIG="${CONFIG:-}" MODELS="$MODELS" RESULTS="$RESULTS" ONYX="$ONYX" PEER="$PEER" \
  bash "$HERE/run.sh" "$ZOO"
