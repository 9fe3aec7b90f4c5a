#!/usr/bin/env bash
# test_onednn_train.sh — `onyx train` of samples/train-cnn with the oneDNN
# provider placed first (providers/onednn/onednn-cpu.json) against the CPU
# provider alone: the same data, batch order and initial weights, so the
# per-step losses must agree within 1e-4 relative over 30 steps; the
# training and eval graphs' forward Conv nodes (their weights are graph inputs: the
# trained parameters), ConvGrad and ReluGrad nodes run on onednn and its
# MaxPoolGrad nodes are declined with the reason (ONYX_DUMP_PLACEMENT).
#
# usage: test_onednn_train.sh ONYX SOURCE_DIR WORKDIR
# Skipped (exit 77) when /usr/bin/python3 lacks numpy, onnx or sklearn, or
# the oneDNN provider is not built.
set -u
ONYX="$1"
SRC="$2"
WORK="$3"
PY=/usr/bin/python3
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
if ! "$PY" -c "import numpy, onnx, sklearn" 2>/dev/null; then
  echo "SKIP: $PY lacks one of numpy, onnx, sklearn (Debian: python3-numpy python3-onnx python3-sklearn)"
  exit 77
fi
if [ ! -f "${ONYX_PROVIDER_PATH:-.}/libonyx_ep_onednn.so" ]; then
  echo "SKIP: libonyx_ep_onednn.so not built"
  exit 77
fi
"$PY" "$SRC/samples/train-cnn/generate.py" "$WORK" || { echo "FAIL: generate.py"; exit 1; }
ARGS=(--loss cross_entropy --batch-size 32 --steps 30 --optimizer adamw --lr 0.01 --no-shuffle
      --threads 1 --data x="$WORK/train_x.npy" --labels "$WORK/train_y.npy")
"$ONYX" train "$WORK/model.onnx" "${ARGS[@]}" --log "$WORK/cpu.jsonl" >/dev/null 2>"$WORK/cpu.err" ||
  { echo "FAIL: CPU run"; cat "$WORK/cpu.err"; exit 1; }
ONYX_DUMP_PLACEMENT=1 "$ONYX" train "$WORK/model.onnx" "${ARGS[@]}" \
  --config "$SRC/providers/onednn/onednn-cpu.json" --log "$WORK/dnnl.jsonl" >/dev/null \
  2>"$WORK/dnnl.err" || { echo "FAIL: onednn run"; cat "$WORK/dnnl.err"; exit 1; }
for op in ConvGrad ReluGrad; do
  n=$(grep -cE " $op +v1 +-> onednn \(group" "$WORK/dnnl.err")
  [ "$n" -eq 2 ] || { echo "FAIL: $n of the 2 $op nodes on onednn"; grep "$op" "$WORK/dnnl.err"; exit 1; }
done
n=$(grep -cE " Conv +v[0-9]+ +-> onednn \(group" "$WORK/dnnl.err")
[ "$n" -eq 4 ] || { echo "FAIL: $n of the 4 forward Conv nodes (2 in the training model, 2 in the eval model) on onednn"; grep " Conv " "$WORK/dnnl.err"; exit 1; }
grep -A1 -E " MaxPoolGrad +v1 +-> cpu" "$WORK/dnnl.err" |
  grep -q "declined by onednn: oneDNN's max pooling backward needs the workspace" ||
  { echo "FAIL: MaxPoolGrad not declined with its reason"; exit 1; }
"$PY" - "$WORK/cpu.jsonl" "$WORK/dnnl.jsonl" <<'PYEOF'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if "step" in r and "eval" not in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) != 30 or len(b) != 30:
    sys.exit(f"FAIL: {len(a)} and {len(b)} steps logged, not 30")
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"losses {a[0]:.6f} -> {a[-1]:.6f}; worst relative difference onednn/cpu {worst:.3g}")
if worst > 1e-4:
    sys.exit("FAIL: losses differ by more than 1e-4 relative")
if not a[-1] < a[0]:
    sys.exit("FAIL: the loss did not fall")
PYEOF
