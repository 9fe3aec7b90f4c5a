#!/usr/bin/env bash
# test_gpu_train.sh — `onyx train` with a GPU provider placed first gives the
# CPU-only run's per-step losses: the digits MLP of samples/train-mlp, 20
# steps in row order (--no-shuffle), with SGD (momentum 0.9) and AdamW, and
# the digits CNN of samples/train-cnn (Conv, Relu, MaxPool with the Indices
# MaxPoolGrad reads, Gemm), 20 steps with SGD; each pair of loss curves must
# agree within 1e-4 relative at every step.
#
# usage: test_gpu_train.sh ONYX SAMPLES CONFIG WORKDIR
#   CONFIG: the providers' JSON (tests/unit/gpu/gpuemu-cpu.json for the
#   emulated GPU). Needs /usr/bin/python3 with numpy, onnx and sklearn for
#   the sample's generator: without them, exit 77 (skipped).
set -u
ONYX="$1"
SAMPLES="$2"
CONFIG="$3"
WORK="$4"
PY=/usr/bin/python3
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
if ! "$PY" -c "import numpy, onnx, sklearn" 2>/dev/null; then
  echo "SKIP: python3 with numpy, onnx and sklearn is needed for the sample's data"
  exit 77
fi
"$PY" "$SAMPLES/train-mlp/generate.py" "$WORK" >/dev/null || { echo "FAIL: generate.py"; exit 1; }
mkdir -p "$WORK/cnn" && "$PY" "$SAMPLES/train-cnn/generate.py" "$WORK/cnn" >/dev/null ||
  { echo "FAIL: train-cnn/generate.py"; exit 1; }
failures=0
runs=0
for opt in "sgd --momentum 0.9 --lr 0.05" "adamw --lr 0.002" "cnn-sgd --momentum 0.9 --lr 0.05"; do
  name="${opt%% *}"
  dir="$WORK"
  [ "$name" = cnn-sgd ] && dir="$WORK/cnn" && opt="sgd${opt#cnn-sgd}"
  runs=$((runs + 1))
  for where in gpu cpu; do
    cfg=()
    [ "$where" = gpu ] && cfg=(--config "$CONFIG")
    # shellcheck disable=SC2086 # opt holds several words on purpose
    "$ONYX" train "$dir/model.onnx" --loss cross_entropy --batch-size 32 --steps 20 \
      --no-shuffle --optimizer $opt --threads 2 \
      --data x="$dir/train_x.npy" --labels "$dir/train_y.npy" "${cfg[@]}" \
      --log "$WORK/$name-$where.jsonl" >"$WORK/$name-$where.out" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "FAIL: onyx train ($name, $where) exited $rc"
      tail -20 "$WORK/$name-$where.out"
      failures=$((failures + 1))
    fi
  done
  "$PY" - "$WORK/$name-gpu.jsonl" "$WORK/$name-cpu.jsonl" "$name" <<'PYEOF' || failures=$((failures + 1))
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, filter(str.strip, open(path)))
            if "step" in r and "eval" not in r]
g, c = losses(sys.argv[1]), losses(sys.argv[2])
if len(g) != 20 or len(c) != 20:
    print(f"FAIL: {sys.argv[3]}: {len(g)} GPU and {len(c)} CPU steps, expected 20 each")
    sys.exit(1)
worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(g, c))
print(f"{sys.argv[3]}: losses {c[0]:.5f} -> {c[-1]:.5f}; largest relative difference GPU vs CPU {worst:.2e}")
if not worst <= 1e-4 or not c[-1] < c[0]:
    print(f"FAIL: {sys.argv[3]}: GPU {g}\nCPU {c}")
    sys.exit(1)
PYEOF
done
[ $failures -eq 0 ] && echo "$runs passed, 0 failed" || echo "$failures failed"
exit $((failures > 0))
