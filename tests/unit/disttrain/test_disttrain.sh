#!/usr/bin/env bash
# test_disttrain.sh — data-parallel `onyx train` (docs/distributed.md): with
# 2 ranks of per-rank batch B under mpirun, rank 0's per-step losses and the
# final weights equal a 1-process run with batch 2B (float32 tolerance), for
# SGD with momentum and AdamW, with and without --zero-stage 1, the gradients
# averaged in the training graph (the default) and on the host, with the
# --no-shuffle row split and with the seeded shuffle; a checkpoint saved by
# a ZeRO-1 run resumes in 1 process as the uninterrupted run goes on.
#
# usage: test_disttrain.sh ONYX WORKDIR
# Exit 77 (skipped) without mpirun, without python3's numpy and onnx, or in
# a build without the MPI backend.
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
  echo "--- stderr:"; head -c 3000 "$ERR"
  failures=$((failures + 1))
}

command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
"$PY" -c "import numpy, onnx" 2>/dev/null ||
  { echo "SKIP: $PY lacks numpy or onnx (Debian: python3-numpy python3-onnx)"; exit 77; }
P="$WORK/problem"
"$PY" "$HERE/make_problem.py" "$P" || { echo "FAIL: make_problem.py"; exit 1; }
# Sanitizer builds: LeakSanitizer off for the ranks (Open MPI's own
# allocations of MPI_Init); ASan and UBSan stay on.
MPI=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  mpirun -np 2 --oversubscribe -x ASAN_OPTIONS)
T=(--loss cross_entropy --data x="$P/x.npy" --labels "$P/y.npy" --threads 1)

# Usage errors.
checks=$((checks + 1))
"$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size 4 --steps 1 --optimizer sgd --lr 0.1 \
  --zero-stage 1 >"$OUT" 2>"$ERR"
[ $? -eq 2 ] && grep -qF "need --data-parallel" "$ERR" || fail "--zero-stage without --data-parallel"
checks=$((checks + 1))
"$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size 4 --steps 1 --optimizer sgd --lr 0.1 \
  --data-parallel --zero-stage 2 >"$OUT" 2>"$ERR"
[ $? -eq 2 ] && grep -qF "expected 0 or 1" "$ERR" || fail "--zero-stage 2"

# One process started with --data-parallel is a world of one rank.
checks=$((checks + 1))
"$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size 8 --steps 2 --no-shuffle --optimizer sgd \
  --lr 0.1 --data-parallel --zero-stage 1 --log "$WORK/w1.jsonl" >"$OUT" 2>"$ERR" ||
  fail "a world of one rank"

# The MPI backend is there (it is optional in the build).
"${MPI[@]}" "$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size 4 --steps 1 --no-shuffle \
  --optimizer sgd --lr 0.1 --data-parallel >"$OUT" 2>"$ERR"
if [ $? -ne 0 ] && grep -q "cannot load the MPI backend" "$ERR"; then
  echo "SKIP: no MPI backend in this build: $(head -c 300 "$ERR")"
  exit 77
fi

# A different model on rank 1 (mpirun's MPMD form): every rank fails at
# set_data_parallel naming rank 1, instead of mixing unequal buffers.
checks=$((checks + 1))
D1=(--batch-size 4 --steps 1 --no-shuffle --optimizer sgd --lr 0.1 --data-parallel)
env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun --oversubscribe -x ASAN_OPTIONS \
  -np 1 "$ONYX" train "$P/model.onnx" "${T[@]}" "${D1[@]}" : \
  -np 1 "$ONYX" train "$P/model24.onnx" "${T[@]}" "${D1[@]}" >"$OUT" 2>"$ERR"
rc=$?
[ $rc -ne 0 ] && [ "$(grep -o "rank 1 trains 4 parameters (268 elements" "$ERR" | wc -l)" -eq 2 ] ||
  fail "a different model on rank 1 (exit $rc)"

# same A B: logs A and B hold the same steps and losses; models A.onnx and
# B.onnx the same initializers (float32 tolerance).
same() {
  checks=$((checks + 1))
  "$PY" - "$1" "$2" <<'PYEOF' || fail "$1 and $2 differ"
import json, sys
import numpy as np, onnx, onnx.numpy_helper as nh
a, b = sys.argv[1], sys.argv[2]
def steps(p):
    return [json.loads(l) for l in open(p + ".jsonl") if l.strip()]
sa, sb = steps(a), steps(b)
assert [s["step"] for s in sa] == [s["step"] for s in sb], (sa, sb)
assert len(sa) >= 3, sa
for x, y in zip(sa, sb):
    assert abs(x["loss"] - y["loss"]) <= 2e-5 * abs(y["loss"]) + 1e-6, (x, y)
def weights(p):
    return {t.name: nh.to_array(t) for t in onnx.load(p + ".onnx").graph.initializer}
wa, wb = weights(a), weights(b)
assert sorted(wa) == sorted(wb) == ["b1", "b2", "w1", "w2"], (sorted(wa), sorted(wb))
for k in wa:
    assert np.allclose(wa[k], wb[k], rtol=1e-4, atol=1e-5), (k, np.abs(wa[k] - wb[k]).max())
PYEOF
}

# run NAME WORLD BATCH ARGS...: trains into $WORK/NAME.jsonl and NAME.onnx.
run() {
  local name="$1" world="$2" batch="$3"
  shift 3
  local launch=()
  [ "$world" -eq 1 ] || launch=("${MPI[@]}")
  "${launch[@]}" "$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size "$batch" \
    --log "$WORK/$name.jsonl" --export-inference "$WORK/$name.onnx" "$@" >"$OUT" 2>"$ERR" ||
    fail "run $name (world $world) exited $?"
}

SGD=(--optimizer sgd --lr 0.2 --momentum 0.9)
ADAMW=(--optimizer adamw --lr 0.02)
run sgd1 1 8 --steps 8 --no-shuffle "${SGD[@]}"
# Buckets of 416 bytes: in the graph, (b2, w2, b1) then w1; on the host,
# 104 of the 180 flattened gradient elements, then 76 (b1 spans the two).
run sgd2 2 4 --steps 8 --no-shuffle "${SGD[@]}" --data-parallel --bucket-mb 0.0004
same "$WORK/sgd2" "$WORK/sgd1"
run sgd2h 2 4 --steps 8 --no-shuffle "${SGD[@]}" --data-parallel --bucket-mb 0.0004 --host-allreduce
same "$WORK/sgd2h" "$WORK/sgd1"
run sgd2z 2 4 --steps 8 --no-shuffle "${SGD[@]}" --data-parallel --zero-stage 1
same "$WORK/sgd2z" "$WORK/sgd1"
run adamw1 1 8 --steps 8 --seed 5 "${ADAMW[@]}" --save-checkpoint "$WORK/ck_adamw1"
run adamw2 2 4 --steps 8 --seed 5 "${ADAMW[@]}" --data-parallel
same "$WORK/adamw2" "$WORK/adamw1"
run adamw2z 2 4 --steps 8 --seed 5 "${ADAMW[@]}" --data-parallel --zero-stage 1
same "$WORK/adamw2z" "$WORK/adamw1"

# The training moved the weights (the comparisons above are not of two
# untouched models), and the 1-process run's loss went down.
checks=$((checks + 1))
"$PY" - "$P/model.onnx" "$WORK/adamw1.onnx" "$WORK/adamw1.jsonl" <<'PYEOF' || fail "training did not change the model"
import json, sys
import numpy as np, onnx, onnx.numpy_helper as nh
a = {t.name: nh.to_array(t) for t in onnx.load(sys.argv[1]).graph.initializer}
b = {t.name: nh.to_array(t) for t in onnx.load(sys.argv[2]).graph.initializer}
assert all(np.abs(a[k] - b[k]).max() > 1e-3 for k in a), {k: np.abs(a[k] - b[k]).max() for k in a}
losses = [json.loads(l)["loss"] for l in open(sys.argv[3]) if l.strip()]
assert losses[-1] < losses[0], losses
PYEOF

# Resume in 1 process from a ZeRO-1 checkpoint (the full optimizer state,
# gathered on rank 0): 4 steps with 2 ranks, then 4 steps of batch 8 in one
# process, as the 8-step 1-process run.
"${MPI[@]}" "$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size 4 --steps 4 --seed 5 "${ADAMW[@]}" \
  --data-parallel --zero-stage 1 --save-checkpoint "$WORK/ck_zero" >"$OUT" 2>"$ERR" ||
  fail "ZeRO-1 run saving a checkpoint"
checks=$((checks + 1))
"$PY" - "$WORK/ck_zero" <<'PYEOF' || fail "the ZeRO-1 checkpoint lacks the full optimizer state"
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/optimizer.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
shapes = {k: v["shape"] for k, v in head.items() if k != "__metadata__"}
want = {"w1": [16, 6], "b1": [16], "w2": [4, 16], "b2": [4]}
for p, s in want.items():
    for slot in ("exp_avg", "exp_avg_sq"):
        assert shapes.get(p + "." + slot) == s, (p, slot, shapes)
PYEOF
"$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size 8 --steps 4 --seed 5 "${ADAMW[@]}" \
  --resume "$WORK/ck_zero" --log "$WORK/resumed.jsonl" --export-inference "$WORK/resumed.onnx" \
  >"$OUT" 2>"$ERR" || fail "resuming the ZeRO-1 checkpoint in 1 process"
"$PY" -c "
import sys
lines = open(sys.argv[1]).read().splitlines()
open(sys.argv[2], 'w').write(''.join(l + '\n' for l in lines[4:]))
" "$WORK/adamw1.jsonl" "$WORK/adamw1_tail.jsonl"
cp "$WORK/adamw1.onnx" "$WORK/adamw1_tail.onnx"
same "$WORK/resumed" "$WORK/adamw1_tail"

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
