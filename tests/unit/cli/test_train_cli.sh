#!/usr/bin/env bash
# test_train_cli.sh — `onyx train`: usage and data errors, then per-step
# losses on a small regression problem against train_reference.py (numpy,
# from the definitions of the MSE loss, SGD and AdamW), the --no-shuffle batch
# order, --resume, --save-checkpoint, --export-inference and the eval log.
#
# usage: test_train_cli.sh ONYX WORKDIR
# The second part needs /usr/bin/python3 with numpy and onnx, and the
# training API: without them the script stops there with exit 77 (skipped).
set -u
ONYX="$1"
WORK="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
PY=/usr/bin/python3
failures=0
checks=0
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
OUT="$WORK/stdout"
ERR="$WORK/stderr"

fail() {
  echo "FAIL: $*"
  echo "--- stdout:"; cat "$OUT"
  echo "--- stderr:"; cat "$ERR"
  failures=$((failures + 1))
}

# expect RC PHRASE ARGS...: onyx train ARGS exits RC and stderr holds PHRASE.
expect() {
  local want="$1" phrase="$2"
  shift 2
  checks=$((checks + 1))
  "$ONYX" train "$@" >"$OUT" 2>"$ERR"
  local rc=$?
  [ "$rc" -eq "$want" ] || { fail "onyx train $* exited $rc, expected $want"; return; }
  [ -z "$phrase" ] || grep -qF -- "$phrase" "$ERR" || fail "onyx train $*: stderr lacks '$phrase'"
}

# --- Usage errors (exit 2) and data errors (exit 1), before any training ---
M="$WORK/none.onnx"
BASE=(--loss mse --data x=a.npy --labels b.npy --batch-size 2 --steps 1 --optimizer sgd --lr 0.1)
expect 2 "--loss is required" "$M" --data x=a.npy --labels b.npy --batch-size 2 --steps 1 --optimizer sgd --lr 0.1
expect 2 "--loss: expected" "$M" "${BASE[@]}" --loss hinge
expect 2 "one of --steps and --epochs" "$M" "${BASE[@]}" --epochs 2
expect 2 "--optimizer: expected sgd, adamw or lamb" "$M" "${BASE[@]}" --optimizer rmsprop
expect 2 "--lr must be positive" "$M" "${BASE[@]}" --lr 0
expect 2 "exclude each other" "$M" "${BASE[@]}" --no-shuffle --seed 3
expect 2 "--momentum applies to --optimizer sgd only" "$M" "${BASE[@]}" --optimizer adamw --momentum 0.9
expect 2 "go together" "$M" "${BASE[@]}" --eval-data x=c.npy
expect 2 "--batch-size wants an integer >= 1" "$M" "${BASE[@]}" --batch-size 0
expect 2 "unknown option" "$M" "${BASE[@]}" --frobnicate
expect 0 "" --help
grep -q -- "--export-inference" "$OUT" || fail "--help does not describe --export-inference"
grep -q -- "--explain" "$OUT" || fail "--help does not describe --explain"
expect 2 "--dim applies with --explain only" "$M" "${BASE[@]}" --dim N=3
expect 2 "--dim 'N=x': the value must be an integer >= 0" "$M" --loss mse --batch-size 2 --optimizer sgd --explain --dim N=x
expect 2 "--dim 'N': expected NAME=VALUE" "$M" --loss mse --batch-size 2 --optimizer sgd --explain --dim N
expect 2 "--explain and --data-parallel exclude each other" "$M" "${BASE[@]}" --explain --data-parallel
expect 2 "--batch-size is required" "$M" --loss mse --optimizer sgd --explain

# Data files: written byte by byte (printf), so this part needs no Python.
npy() { # npy FILE DESCR SHAPE NBYTES: a version 1.0 file of NBYTES zero bytes
  local h="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
  local pad=$(( (64 - (10 + ${#h} + 1) % 64) % 64 ))
  local len=$(( ${#h} + pad + 1 ))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((len % 256)))\\x$(printf %02x $((len / 256)))"
    printf '%s' "$h"; printf '%*s' "$pad" ''; printf '\n'; head -c "$4" /dev/zero; } >"$1"
}
npy "$WORK/x4.npy" '<f4' '(4, 3)' 48
npy "$WORK/y4.npy" '<f4' '(4, 2)' 32
npy "$WORK/y5.npy" '<f4' '(5, 2)' 40
npy "$WORK/yi.npy" '<f8' '(4,)' 32
npy "$WORK/short.npy" '<f4' '(4, 3)' 40
npy "$WORK/big.npy" '>f4' '(4, 3)' 48
D=(--loss mse --batch-size 2 --steps 1 --optimizer sgd --lr 0.1)
expect 1 "$WORK/missing.npy: cannot open" "$M" "${D[@]}" --data x="$WORK/missing.npy" --labels "$WORK/y4.npy"
expect 1 "$WORK/short.npy: truncated data" "$M" "${D[@]}" --data x="$WORK/short.npy" --labels "$WORK/y4.npy"
expect 1 "$WORK/big.npy: dtype '>f4' is big-endian" "$M" "${D[@]}" --data x="$WORK/big.npy" --labels "$WORK/y4.npy"
expect 1 "has 4 rows but the labels $WORK/y5.npy have 5" "$M" "${D[@]}" --data x="$WORK/x4.npy" --labels "$WORK/y5.npy"
expect 1 "expected NAME=FILE.npy" "$M" "${D[@]}" --data "$WORK/x4.npy" --labels "$WORK/y4.npy"
expect 1 "input 'x' given twice" "$M" "${D[@]}" --data x="$WORK/x4.npy" --data x="$WORK/x4.npy" --labels "$WORK/y4.npy"
expect 1 "must be int64 class indices" "$M" "${D[@]}" --loss cross_entropy --data x="$WORK/x4.npy" --labels "$WORK/yi.npy"
expect 1 "--batch-size 8 exceeds the 4 rows" "$M" "${D[@]}" --batch-size 8 --data x="$WORK/x4.npy" --labels "$WORK/y4.npy"

echo "usage and data checks: $((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ] || exit 1

# --- Training against the numpy reference ---
if ! "$PY" -c "import numpy, onnx" 2>/dev/null; then
  echo "SKIP: $PY lacks numpy or onnx (Debian: python3-numpy python3-onnx)"
  exit 77
fi
R="$WORK/ref"
"$PY" "$HERE/train_reference.py" "$R" || { echo "FAIL: train_reference.py"; exit 1; }
T=(--loss mse --data x="$R/x.npy" --labels "$R/t.npy" --batch-size 4 --no-shuffle --threads 1)
"$ONYX" train "$R/model.onnx" "${T[@]}" --steps 6 --optimizer sgd --lr 0.1 --log "$R/sgd.jsonl" \
  --save-checkpoint "$R/ck6" >"$OUT" 2>"$ERR"
rc=$?
if [ $rc -ne 0 ] && grep -q "not implemented" "$ERR"; then
  echo "SKIP: the training API is not implemented in this build: $(head -c 300 "$ERR")"
  exit 77
fi
[ $rc -eq 0 ] || fail "sgd run exited $rc"

# compare LOG KEY [FIRST]: the log's step losses equal expected.json[KEY][FIRST-1:] (rtol 1e-4).
compare() {
  checks=$((checks + 1))
  "$PY" - "$1" "$R/expected.json" "$2" "${3:-1}" <<'PYEOF' || fail "losses of $1 differ from the reference $2"
import json, sys
log, exp, key, first = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
steps = [json.loads(l) for l in open(log) if l.strip()]
steps = [s for s in steps if "step" in s and "eval" not in s]
want = json.load(open(exp))[key][first - 1:]
got = [s["loss"] for s in steps]
print(key, "onyx", got)
print(key, "reference", want)
assert len(got) == len(want), (len(got), len(want))
assert [s["step"] for s in steps] == list(range(first, first + len(want))), [s["step"] for s in steps]
for g, w in zip(got, want):
    assert abs(g - w) <= 1e-4 * abs(w) + 1e-6, (g, w)
assert all(s["ms"] >= 0 and s["lr"] > 0 for s in steps)
PYEOF
}
compare "$R/sgd.jsonl" sgd
"$ONYX" train "$R/model.onnx" "${T[@]}" --steps 6 --optimizer sgd --lr 0.1 --momentum 0.9 \
  --log "$R/mom.jsonl" >"$OUT" 2>"$ERR" || fail "sgd momentum run"
compare "$R/mom.jsonl" sgd_momentum
"$ONYX" train "$R/model.onnx" "${T[@]}" --steps 6 --optimizer adamw --lr 0.05 \
  --log "$R/adamw.jsonl" >"$OUT" 2>"$ERR" || fail "adamw run"
compare "$R/adamw.jsonl" adamw

# The other losses, one step each (with LAMB): the loss at the initial weights.
for loss in l1 bce_with_logits; do
  "$ONYX" train "$R/model.onnx" "${T[@]/mse/$loss}" --steps 1 --optimizer lamb --lr 0.01 \
    --log "$R/$loss.jsonl" >"$OUT" 2>"$ERR" || fail "$loss run"
  compare "$R/$loss.jsonl" "$loss"
done

# --resume: 3 steps, save, 3 more from the checkpoint = steps 4-6 of the 6-step run.
"$ONYX" train "$R/model.onnx" "${T[@]}" --steps 3 --optimizer adamw --lr 0.05 \
  --save-checkpoint "$R/ck3" >"$OUT" 2>"$ERR" || fail "adamw 3 steps"
"$ONYX" train "$R/model.onnx" "${T[@]}" --steps 3 --optimizer adamw --lr 0.05 --resume "$R/ck3" \
  --log "$R/resumed.jsonl" --export-inference "$R/trained.onnx" \
  --eval-data x="$R/x.npy" --eval-labels "$R/t.npy" >"$OUT" 2>"$ERR" || fail "adamw resumed"
compare "$R/resumed.jsonl" adamw 4
# The exported model runs, and the eval line is the MSE over all 10 rows of
# its predictions, recomputed here from `onyx run`'s saved outputs.
checks=$((checks + 1))
"$PY" -c "
import numpy as np, onnx.numpy_helper as nh, sys
open(sys.argv[2], 'wb').write(nh.from_array(np.load(sys.argv[1]), 'x').SerializeToString())
" "$R/x.npy" "$R/x.pb" || fail "writing x.pb"
"$ONYX" run "$R/trained.onnx" --input x="$R/x.pb" --output-dir "$R/pred" >"$OUT" 2>"$ERR" ||
  fail "onyx run on the exported model"
"$PY" - "$R/pred/pred.pb" "$R/t.npy" "$R/resumed.jsonl" <<'PYEOF' || fail "the eval line is not the MSE of the exported model's predictions"
import json, sys
import numpy as np, onnx, onnx.numpy_helper
t = onnx.TensorProto()
t.ParseFromString(open(sys.argv[1], "rb").read())
pred = onnx.numpy_helper.to_array(t).astype(np.float64)
want = float(np.mean((pred - np.load(sys.argv[2]).astype(np.float64)) ** 2))
evals = [json.loads(l) for l in open(sys.argv[3]) if '"eval"' in l]
# Epochs end after steps 4 and 6 (two batches each); the last eval follows the last update.
assert [e["step"] for e in evals] == [4, 6] and [e["eval"] for e in evals] == [2, 3], evals
assert abs(evals[-1]["loss"] - want) <= 1e-5 * want, (evals[-1]["loss"], want)
assert "accuracy" not in evals[-1]
PYEOF
checks=$((checks + 1))
[ -d "$R/ck6" ] || fail "--save-checkpoint $R/ck6 wrote nothing"

# --- --explain: the three sessions' placement and planned peaks, nothing trained ---
# explain_check BATCH: the report for --batch-size BATCH (with --steps and a
# --log, which --explain does not use).
explain_check() {
  checks=$((checks + 1))
  rm -f "$R/explain.jsonl"
  "$ONYX" train "$R/model.onnx" --loss mse --batch-size "$1" --optimizer sgd --explain \
    --steps 3 --log "$R/explain.jsonl" >"$OUT" 2>"$ERR" || { fail "--explain --batch-size $1 exited $?"; return 1; }
  [ ! -e "$R/explain.jsonl" ] || fail "--explain trained (it wrote the --log)"
  grep -q '"steps"' "$OUT" && fail "--explain printed a training summary"
  for sess in training eval optimizer; do
    grep -qxF "== $sess session (${sess}_model.onnx of the artifacts); fixed dims: N=$1 ==" "$OUT" ||
      fail "--explain: no header for the $sess session with N=$1"
  done
  # A node of the backward pass (named after the Gradient node the artifacts
  # expand) and the optimizer's node, each with its provider.
  grep -qE '^  onyx_gradient/[^ ]+ +[A-Za-z]+ +v[0-9]+ +-> cpu$' "$OUT" || fail "--explain: no gradient node placed on cpu"
  grep -qE '^  onyx_optimizer +SGDOptimizer +v1 +-> cpu$' "$OUT" || fail "--explain: no SGDOptimizer node placed on cpu"
  [ "$(grep -c '^memory: ' "$OUT")" -eq 3 ] || fail "--explain: not one memory line per session"
  grep '^memory: ' "$OUT" | head -1 >"$R/explain_train_$1.txt"
}
explain_check 4
explain_check 32
# The eval model at batch 32, worked out by hand: its planned values are the
# loss's Sub and Mul outputs, [32, 2] float32 (256 B each, both live at the
# Mul); the labels' batch dim is fixed with the model input's, so nothing is
# left to size at run time.
checks=$((checks + 1))
grep -qE '^memory: planned peak on host \(cpu\): 512 B for 2 static values .* 0 sized at run time$' "$OUT" ||
  fail "--explain: the eval session's planned peak at batch 32 is not 512 B"
checks=$((checks + 1))
cmp -s "$R/explain_train_4.txt" "$R/explain_train_32.txt" &&
  fail "--explain: the training session's planned peak does not change with --batch-size"
expect 1 "--dim Q: no input of the training model has a symbolic dimension named 'Q' (its symbolic dimensions: 'N')" \
  "$R/model.onnx" --loss mse --batch-size 4 --optimizer sgd --explain --dim Q=3

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
