#!/usr/bin/env bash
# test_ml_map_cli.sh — `onyx run` prints map outputs and reads a MapProto
# input; `onyx test` compares SequenceProto-of-MapProto expected outputs as
# dictionaries. Models and expected values: make_ml_map_models.c.
#
# usage: test_ml_map_cli.sh ONYX MAKE_MODELS WORKDIR
set -u
ONYX="$1"
MAKE="$2"
WORK="$3"
failures=0
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$MAKE" "$WORK/m" || { echo "FAIL: make_ml_map_models"; exit 1; }
M="$WORK/m"
OUT="$WORK/stdout"
ERR="$WORK/stderr"

fail() {
  echo "FAIL: $*"
  echo "--- stdout:"; cat "$OUT"
  echo "--- stderr:"; cat "$ERR"
  failures=$((failures + 1))
}

run() {
  local want="$1"
  shift
  "$ONYX" "$@" >"$OUT" 2>"$ERR"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "onyx $* exited $rc, expected $want"
}

# ZipMap over X = [[0.25, 0.75], [1, 0]] with labels 7, 9.
run 0 run "$M/suite/test_zip/model.onnx" --input "X=$M/suite/test_zip/test_data_set_0/input_0.pb"
grep -qxF 'output Z: seq(map(int64, float32)) of 2: [{7: 0.25, 9: 0.75}, {7: 1, 9: 0}]' "$OUT" ||
  fail "onyx run: the seq(map) output line"

# The memory plan names the map type of the slot ZipMap writes.
ONYX_DUMP_MEMORY_PLAN=1 run 0 run "$M/suite/test_zip/model.onnx" \
  --input "X=$M/suite/test_zip/test_data_set_0/input_0.pb"
grep -q "^  #1 *Z *seq(map(int64,float32)) " "$OUT" "$ERR" || fail "memory plan: the seq(map) slot"

# The MapProto {2: 4.5} through DictVectorizer [1, 2]: [[0, 4.5]].
run 0 run "$M/dv/model.onnx" --input "M=$M/dv/m.pb"
grep -qxF 'output Y: float32 [1,2]: 0 4.5' "$OUT" || fail "onyx run: DictVectorizer of a MapProto"

# Expected seq(map) outputs: keys in another order pass; a wrong value fails.
run 0 test "$M/suite"
grep -qxF "$(printf 'test_zip\tpass')" "$OUT" || fail "onyx test: test_zip passes"
grep -qxF "$(printf 'test_zip_empty\tpass')" "$OUT" || fail "onyx test: no rows, no maps"
run 1 test "$M/suite_wrong"
grep -q "^test_zip_wrong.fail: .*map 1" "$OUT" || fail "onyx test: the failing map is named"

# --output-dir writes the seq(map) output as a SequenceProto of MapProto; read
# back by `onyx test` as the expected output of the same model, it passes.
run 0 run "$M/suite/test_zip/model.onnx" --input "X=$M/suite/test_zip/test_data_set_0/input_0.pb" \
  --output-dir "$WORK/out"
mkdir -p "$WORK/saved/test_saved/test_data_set_0"
cp "$M/suite/test_zip/model.onnx" "$WORK/saved/test_saved/model.onnx"
cp "$M/suite/test_zip/test_data_set_0/input_0.pb" "$WORK/saved/test_saved/test_data_set_0/"
cp "$WORK/out/Z.pb" "$WORK/saved/test_saved/test_data_set_0/output_0.pb" || fail "no Z.pb"
run 0 test "$WORK/saved"
grep -qxF "$(printf 'test_saved\tpass')" "$OUT" || fail "onyx test: the saved seq(map) output"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
