#!/usr/bin/env bash
# test_train_samples.sh — the samples of `onyx train` (samples/train-*) learn:
#   mlp, cnn: scikit-learn's digits; the held-out accuracy of the eval log
#             reaches 0.95 (best eval), and the last eval is at least 0.93;
#   charlm:   the tiny transformer LM's loss falls: the mean of the last 10
#             steps is under 0.7 x the mean of the first 10.
#
# usage: test_train_samples.sh ONYX SAMPLES_DIR mlp|cnn|charlm WORKDIR
# Skipped (exit 77) when /usr/bin/python3 lacks numpy, onnx or (mlp, cnn)
# sklearn (Debian: python3-numpy python3-onnx python3-sklearn), or when the
# training API is not implemented in this build.
set -u
ONYX="$1"
SAMPLES="$2"
WHICH="$3"
WORK="$4"
PY=/usr/bin/python3
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1

mods="numpy, onnx"
[ "$WHICH" = charlm ] || mods="numpy, onnx, sklearn"
if ! "$PY" -c "import $mods" 2>/dev/null; then
  echo "SKIP: $PY lacks one of $mods (Debian: python3-numpy python3-onnx python3-sklearn)"
  exit 77
fi
"$PY" "$SAMPLES/train-$WHICH/generate.py" "$WORK" || { echo "FAIL: generate.py"; exit 1; }

# The commands of the samples' READMEs.
case "$WHICH" in
mlp)
  ARGS=(--loss cross_entropy --batch-size 32 --epochs 10 --optimizer adamw --lr 0.002 --seed 1
        --data x="$WORK/train_x.npy" --labels "$WORK/train_y.npy"
        --eval-data x="$WORK/test_x.npy" --eval-labels "$WORK/test_y.npy") ;;
cnn)
  ARGS=(--loss cross_entropy --batch-size 32 --epochs 4 --optimizer adamw --lr 0.01 --seed 1
        --data x="$WORK/train_x.npy" --labels "$WORK/train_y.npy"
        --eval-data x="$WORK/test_x.npy" --eval-labels "$WORK/test_y.npy") ;;
charlm)
  ARGS=(--loss cross_entropy --batch-size 16 --steps 80 --optimizer adamw --lr 0.01 --seed 1
        --data tokens="$WORK/train_x.npy" --labels "$WORK/train_y.npy") ;;
*) echo "unknown sample '$WHICH'"; exit 2 ;;
esac
start=$(date +%s%N)
"$ONYX" train "$WORK/model.onnx" "${ARGS[@]}" --threads 2 --log "$WORK/log.jsonl" \
  >"$WORK/stdout" 2>"$WORK/stderr"
rc=$?
end=$(date +%s%N)
if [ $rc -ne 0 ] && grep -q "not implemented" "$WORK/stderr"; then
  echo "SKIP: the training API is not implemented in this build: $(head -c 300 "$WORK/stderr")"
  exit 77
fi
cat "$WORK/stdout"
tail -5 "$WORK/stderr"
[ $rc -eq 0 ] || { echo "FAIL: onyx train exited $rc"; cat "$WORK/stderr"; exit 1; }
echo "train-$WHICH: $(( (end - start) / 1000000 )) ms"

"$PY" - "$WORK/log.jsonl" "$WHICH" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r["loss"] for r in rows if "step" in r and "eval" not in r]
evals = [r for r in rows if "eval" in r]
if sys.argv[2] == "charlm":
    first, last = sum(steps[:10]) / 10, sum(steps[-10:]) / 10
    print(f"charlm: mean loss of the first 10 steps {first:.4f}, of the last 10 {last:.4f}")
    ok = last < 0.7 * first
else:
    acc = [e["accuracy"] for e in evals]
    print(f"{sys.argv[2]}: held-out accuracy per epoch {acc}")
    ok = bool(acc) and max(acc) >= 0.95 and acc[-1] >= 0.93
print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
sys.exit(0 if ok else 1)
PYEOF
