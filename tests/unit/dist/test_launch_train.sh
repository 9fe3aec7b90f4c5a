#!/usr/bin/env bash
# test_launch_train.sh — `onyx train --data-parallel` launched without mpirun
# by scripts/onyx-launch.sh 2 (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT:
# MPI singletons joined through the TCP store): rank 0's per-step losses and
# the exported weights equal a 1-process run with batch 2B (float32
# tolerance), with and without --zero-stage 1; a rank alone (rank 1 with no
# store to reach, rank 0 with no rank 1 to join) fails at the timeout saying
# what it waited for.
#
# usage: test_launch_train.sh ONYX WORKDIR ONYX_LAUNCH MAKE_PROBLEM
# Exit 77 (skipped) without ompi-server, python3's numpy and onnx, or the MPI
# backend.
set -u
ONYX="$1"
WORK="$2"
LAUNCH="$3"
MAKE_PROBLEM="$4"
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

command -v ompi-server >/dev/null || { echo "SKIP: no ompi-server (Debian: openmpi-bin)"; exit 77; }
"$PY" -c "import numpy, onnx" 2>/dev/null ||
  { echo "SKIP: $PY lacks numpy or onnx (Debian: python3-numpy python3-onnx)"; exit 77; }
P="$WORK/problem"
"$PY" "$MAKE_PROBLEM" "$P" || { echo "FAIL: make_problem.py"; exit 1; }
# Sanitizer builds: LeakSanitizer off for the ranks (Open MPI's own
# allocations of MPI_Init); ASan and UBSan stay on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=(--loss cross_entropy --data x="$P/x.npy" --labels "$P/y.npy" --threads 1 --no-shuffle)
SGD=(--optimizer sgd --lr 0.2 --momentum 0.9)

# run NAME WORLD BATCH ARGS...: trains into $WORK/NAME.jsonl and NAME.onnx.
run() {
  local name="$1" world="$2" batch="$3"
  shift 3
  local launch=()
  [ "$world" -eq 1 ] || launch=(bash "$LAUNCH" "$world")
  "${launch[@]}" "$ONYX" train "$P/model.onnx" "${T[@]}" --batch-size "$batch" \
    --log "$WORK/$name.jsonl" --export-inference "$WORK/$name.onnx" "$@" >"$OUT" 2>"$ERR"
}

run one 1 8 --steps 6 "${SGD[@]}" || fail "1 process exited $?"
run two 2 4 --steps 6 "${SGD[@]}" --data-parallel
rc=$?
if [ $rc -ne 0 ] && grep -q "cannot load the MPI backend" "$ERR"; then
  echo "SKIP: no MPI backend in this build: $(head -c 300 "$ERR")"
  exit 77
fi
[ $rc -eq 0 ] || fail "2 ranks without mpirun exited $rc"
run twoz 2 4 --steps 6 "${SGD[@]}" --data-parallel --zero-stage 1 ||
  fail "2 ranks without mpirun, ZeRO-1, exited $?"

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
assert sa[-1]["loss"] < sa[0]["loss"], sa
def weights(p):
    return {t.name: nh.to_array(t) for t in onnx.load(p + ".onnx").graph.initializer}
wa, wb = weights(a), weights(b)
assert sorted(wa) == sorted(wb) == ["b1", "b2", "w1", "w2"], (sorted(wa), sorted(wb))
for k in wa:
    assert np.allclose(wa[k], wb[k], rtol=1e-4, atol=1e-5), (k, np.abs(wa[k] - wb[k]).max())
PYEOF
}
same "$WORK/two" "$WORK/one"
same "$WORK/twoz" "$WORK/one"

# Rank 1 of 2 alone: nobody serves the store, so it fails at the timeout
# saying where it looked.
checks=$((checks + 1))
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$ONYX" train "$P/model.onnx" "${T[@]}" \
  --batch-size 4 --steps 1 "${SGD[@]}" --data-parallel --collective-timeout 1 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -ne 0 ] && grep -qF "127.0.0.1:1" "$ERR" && grep -qF "timed out after 1000 ms" "$ERR" ||
  fail "a lone rank 1 (exit $rc)"

# Rank 0 of 2 alone: it serves the store and starts the MPI world, then
# fails at the timeout naming the rank that never came.
checks=$((checks + 1))
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$PORT" "$ONYX" train "$P/model.onnx" "${T[@]}" \
  --batch-size 4 --steps 1 "${SGD[@]}" --data-parallel --collective-timeout 1 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -ne 0 ] && grep -qF "rank 1 never came to join the MPI world" "$ERR" &&
  grep -qF "timed out after 1000 ms" "$ERR" || fail "a lone rank 0 (exit $rc)"

echo "$checks checks, $failures failures"
[ $failures -eq 0 ]
