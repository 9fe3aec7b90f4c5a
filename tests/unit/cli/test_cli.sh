#!/usr/bin/env bash
# test_cli.sh — tests of the `onyx` command on models written by make_models.
#
# usage: test_cli.sh ONYX MAKE_MODELS WORKDIR
# Needs the CPU provider where ONYX_PROVIDER_PATH points (ctest sets it).
# Expected values are worked out by hand (see make_models.c) or, for generated
# inputs, by the peer harness's generator (bench/peer/lib.js), not taken from
# Onyx's own output.
set -u
ONYX="$1"
MAKE_MODELS="$2"
WORK="$3"
failures=0
checks=0

rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$MAKE_MODELS" "$WORK/m" || { echo "FAIL: make_models"; exit 1; }
M="$WORK/m"
OUT="$WORK/stdout"
ERR="$WORK/stderr"

fail() {
  echo "FAIL: $*"
  echo "--- stdout:"; cat "$OUT"
  echo "--- stderr:"; cat "$ERR"
  failures=$((failures + 1))
}

# expect_rc CODE ARGS...: runs onyx ARGS, checks its exit status.
expect_rc() {
  local want="$1"
  shift
  checks=$((checks + 1))
  "$ONYX" "$@" >"$OUT" 2>"$ERR"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "onyx $* exited $rc, expected $want"
}

# expect_line FILE LINE: FILE holds exactly this line.
expect_line() {
  checks=$((checks + 1))
  grep -qxF -- "$2" "$1" || fail "no line '$2' in $(basename "$1")"
}

expect_grep() {
  checks=$((checks + 1))
  grep -qE -- "$2" "$1" || fail "no match for /$2/ in $(basename "$1")"
}

# --- usage errors exit 2, help and version exit 0 --------------------------------
expect_rc 2
expect_rc 2 frobnicate
expect_grep "$ERR" "unknown command 'frobnicate'"
expect_rc 2 run
expect_grep "$ERR" "missing MODEL"
expect_grep "$ERR" "^usage: onyx run MODEL"
expect_rc 2 run "$M/add_relu.onnx" --bogus
expect_grep "$ERR" "unknown option '--bogus'"
expect_rc 2 run "$M/add_relu.onnx" --input a.pb
expect_rc 2 run "$M/add_relu.onnx" --threads many
expect_rc 2 test
expect_rc 2 test "$M/suite" --filter '('
expect_rc 2 test "$M/suite" --jobs 0
expect_rc 2 test "$M/suite" --timeout-s 0
expect_rc 2 bench "$M/add_relu.onnx" --iters 0
expect_rc 2 partition "$M/add_relu.onnx" extra
expect_rc 0 --help
expect_grep "$OUT" "^  test "
expect_rc 0 test --help
expect_grep "$OUT" "^usage: onyx test DIR"
expect_rc 0 --version
expect_grep "$OUT" "^onyx [0-9]+\.[0-9]+\.[0-9]+"

# --- runtime errors exit 1 and name what is at fault -------------------------------
expect_rc 1 run "$WORK/no_such_model.onnx"
expect_grep "$ERR" "no_such_model.onnx"
expect_rc 1 test "$WORK/no_such_suite"
expect_grep "$ERR" "no_such_suite"
expect_rc 1 run "$M/add_relu.onnx" --input c="$M/a.pb"
expect_grep "$ERR" "no input named 'c'"

# --- run ------------------------------------------------------------------------------------
# Relu(a + b) with a = [1,-2,3,-4,5,-6], b = 0.5: worked out by hand.
expect_rc 0 run "$M/add_relu.onnx" --input a="$M/a.pb" --input b="$M/b.pb" --output-dir "$WORK/out"
expect_grep "$OUT" '^output y: float32 \[2,3\]: 1\.5 -?0 3\.5 -?0 5\.5 -?0$'
expect_grep "$OUT" "^provider cpu: [12] nodes?$"
# x is generated: [N,4] -> [1,4], xorshift32 values -0.551267, -0.48971, 0.0930215,
# -0.0769161 (the peer's lib.js generator, run under node), so Relu keeps one.
expect_rc 0 run "$M/relu_sym.onnx"
expect_grep "$OUT" '^output y: float32 \[1,4\]: -?0 -?0 0\.0930215 -?0$'
expect_grep "$ERR" "^note: input x not given: generated float32 \[1,4\]"

# The saved output, used as the expected output of a test folder, passes.
checks=$((checks + 1))
if [ -f "$WORK/out/y.pb" ]; then
  mkdir -p "$WORK/roundtrip/test_saved/test_data_set_0"
  cp "$M/add_relu.onnx" "$WORK/roundtrip/test_saved/model.onnx"
  cp "$M/a.pb" "$WORK/roundtrip/test_saved/test_data_set_0/input_0.pb"
  cp "$M/b.pb" "$WORK/roundtrip/test_saved/test_data_set_0/input_1.pb"
  cp "$WORK/out/y.pb" "$WORK/roundtrip/test_saved/test_data_set_0/output_0.pb"
  expect_rc 0 test "$WORK/roundtrip"
  expect_line "$OUT" "$(printf 'test_saved\tpass')"
  # Without the expected output there is nothing to check: a skip, not a pass.
  rm "$WORK/roundtrip/test_saved/test_data_set_0/output_0.pb"
  expect_rc 0 test "$WORK/roundtrip"
  expect_line "$OUT" "$(printf 'test_saved\tskip: test_data_set_0 has no expected outputs (output_K.pb)')"
else
  fail "run --output-dir wrote no y.pb"
fi

# --- partition ---------------------------------------------------------------------------
expect_rc 0 partition "$M/add_relu.onnx"
expect_grep "$OUT" "^provider cpu: [12] nodes?$"
expect_rc 0 partition "$M/add_relu.onnx" --explain
checks=$((checks + 1))
[ -s "$OUT" ] || fail "partition --explain printed nothing"
# --dim fixes the symbolic N before planning: relu_exp_sym's one planned value,
# Relu's output [N, 4] float32, is 16 N bytes (512 B for 32, 1 KiB for 64);
# with N free it is sized at run time. (fuse_elementwise off: it would make
# Relu and Exp one node, without that value.)
export ONYX_OPT_DISABLE=fuse_elementwise
expect_rc 0 partition "$M/relu_exp_sym.onnx" --explain
expect_grep "$OUT" "^memory: planned peak on host \(cpu\): 0 B for 0 static values.* 1 sized at run time$"
expect_rc 0 partition "$M/relu_exp_sym.onnx" --explain --dim N=32
expect_grep "$OUT" "^memory: planned peak on host \(cpu\): 512 B for 1 static values.* 0 sized at run time$"
expect_rc 0 partition "$M/relu_exp_sym.onnx" --explain --dim N=64
expect_grep "$OUT" "^memory: planned peak on host \(cpu\): 1\.0 KiB for 1 static values"
expect_rc 0 partition "$M/relu_exp_sym.onnx" --dim N=7 --dim N=64 --explain # the last one counts
expect_grep "$OUT" "^memory: planned peak on host \(cpu\): 1\.0 KiB for 1 static values"
unset ONYX_OPT_DISABLE
expect_rc 2 partition "$M/relu_exp_sym.onnx" --dim N=-3
expect_grep "$ERR" "--dim 'N=-3': the value must be an integer >= 0"
expect_rc 2 partition "$M/relu_exp_sym.onnx" --dim N=3x
expect_grep "$ERR" "--dim 'N=3x': the value must be an integer >= 0"
expect_rc 2 partition "$M/relu_exp_sym.onnx" --dim N
expect_grep "$ERR" "--dim 'N': expected NAME=VALUE"
expect_rc 1 partition "$M/relu_exp_sym.onnx" --dim Q=3
expect_grep "$ERR" "--dim Q: no input of the model has a symbolic dimension named 'Q' \(its symbolic dimensions: 'N'\)"

# --- test ------------------------------------------------------------------------------------
TAB=$(printf '\t')
expect_rc 1 test "$M/suite" --verdicts "$WORK/verdicts.txt"
V="$WORK/verdicts.txt"
expect_line "$V" "test_add_relu_pass${TAB}pass"
expect_line "$V" "test_add_relu_positional${TAB}pass"
expect_line "$V" "test_add_relu_wrong_shape${TAB}fail: test_data_set_0 output 0 (y): shape: expected [3,2], got [2,3]"
expect_line "$V" "test_add_relu_wrong_value${TAB}fail: test_data_set_0 output 0 (y): values: 1/6 mismatched (rtol 0.001, atol 1e-05), max abs err 1, first at [5]: expected 1, got 0"
expect_grep "$V" "^test_broken_model${TAB}load-error: ."
expect_line "$V" "test_no_data${TAB}skip: no test_data_set_*"
checks=$((checks + 1))
[ "$(wc -l <"$V")" -eq 6 ] || fail "verdicts.txt should have 6 lines (not_a_test is no test)"
checks=$((checks + 1))
[ "$(tail -n 1 "$OUT")" = "2 passed, 3 failed, 1 skipped" ] || fail "last line: '$(tail -n 1 "$OUT")'"
checks=$((checks + 1))
head -n 6 "$OUT" | cmp -s - "$V" || fail "stdout progress differs from the verdict file"

# Parallel children give the same verdicts, in the same order.
expect_rc 1 test "$M/suite" --jobs 3 --verdicts "$WORK/verdicts_j3.txt"
checks=$((checks + 1))
cmp -s "$V" "$WORK/verdicts_j3.txt" || fail "--jobs 3 verdicts differ from --jobs 1"

# A filter that keeps only passing tests: exit 0.
expect_rc 0 test "$M/suite" --filter '_(pass|positional)$'
checks=$((checks + 1))
[ "$(tail -n 1 "$OUT")" = "2 passed, 0 failed, 0 skipped" ] || fail "filtered last line: '$(tail -n 1 "$OUT")'"

# A loose tolerance lets the wrong value pass: |0 - 1| <= 1 + 0.
expect_rc 0 test "$M/suite" --filter 'wrong_value' --atol 1
expect_line "$OUT" "test_add_relu_wrong_value${TAB}pass"

# --- test as a provider's conformance kit -----------------------------------------------------
expect_rc 2 test "$M/suite" --only
expect_grep "$ERR" "\-\-only needs \-\-provider"
# The fake provider (tests/providers/fake) claims Add, Mul and Relu by default: the
# add_relu cases (opset 13: Add-13, Relu-13) run wholly on it.
expect_rc 0 test "$M/suite" --filter '_(pass|positional)$' --provider fake --only \
  --coverage "$WORK/cov.tsv"
expect_line "$OUT" "test_add_relu_pass${TAB}pass"
expect_grep "$WORK/cov.tsv" "^test_add_relu_pass${TAB}Add${TAB}ai.onnx${TAB}13${TAB}float32,float32${TAB}fake${TAB}pass$"
expect_grep "$WORK/cov.tsv" "^test_add_relu_pass${TAB}Relu${TAB}ai.onnx${TAB}13${TAB}float32${TAB}fake${TAB}pass$"
checks=$((checks + 1))
[ "$(grep -vc '^#' "$WORK/cov.tsv")" -eq 4 ] || fail "coverage: 2 cases x 2 nodes expected"
# Claiming Add only: the cases are not claimed (skipped), or failures with --strict.
printf '{"providers": [{"name": "fake", "options": {"ops": "Add"}}]}\n' >"$WORK/fake_add.json"
expect_rc 0 test "$M/suite" --filter '_pass$' --config "$WORK/fake_add.json" --provider fake --only
expect_line "$OUT" "test_add_relu_pass${TAB}not-claimed: provider 'fake' did not claim 1 of 2 nodes (Relu); node 'relu0' (Relu v13): fake: fake device: op not supported"
expect_line "$OUT" "provider fake: 1 case not claimed"
expect_line "$OUT" "0 passed, 0 failed, 1 skipped"
expect_rc 1 test "$M/suite" --filter '_pass$' --config "$WORK/fake_add.json" --provider fake --only --strict
expect_line "$OUT" "0 passed, 1 failed, 0 skipped"
# Without --only the rest falls back to the CPU and the case runs.
expect_rc 0 test "$M/suite" --filter '_pass$' --config "$WORK/fake_add.json" --provider fake
expect_line "$OUT" "test_add_relu_pass${TAB}pass"
# A config that lists another provider first is refused for --provider.
printf '{"providers": [{"name": "cpu"}, {"name": "fake"}]}\n' >"$WORK/cpu_first.json"
expect_rc 1 test "$M/suite" --filter '_pass$' --config "$WORK/cpu_first.json" --provider fake
expect_grep "$OUT" "lists provider 'cpu' before it; list 'fake' first"

# --- bench -------------------------------------------------------------------------------
expect_rc 0 bench "$M/suite/test_add_relu_pass" --inputs "$M/suite/test_add_relu_pass/test_data_set_0" --iters 7 --warmup 2
checks=$((checks + 1))
[ "$(wc -l <"$OUT")" -eq 1 ] || fail "bench should print one line"
for key in '"model":"test_add_relu_pass"' '"threads":1' '"iters":7' '"min_ms":' '"median_ms":' '"p90_ms":' '"mean_ms":' '"session_ms":'; do
  expect_grep "$OUT" "$key"
done
if [ -x /usr/bin/python3 ]; then
  checks=$((checks + 1))
  /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert 0 <= r["min_ms"] <= r["median_ms"] <= r["p90_ms"], r
assert r["inputs"] == {"a": "float32[2,3]", "b": "float32[2,3]"}, r
' "$OUT" || fail "bench JSON is not valid or its statistics are out of order"
fi
expect_rc 0 bench "$M/relu_sym.onnx" --iters 3 --warmup 0 --threads 2
expect_grep "$OUT" '^\{"model":"relu_sym","threads":2,"iters":3,'

# --serve: 'ready', then one timed run per line of input (its ms), until end of input.
checks=$((checks + 1))
printf 'a\n\nc\n' | "$ONYX" bench "$M/relu_sym.onnx" --warmup 1 --serve >"$OUT" 2>"$ERR" ||
  fail "bench --serve exited $?"
{ [ "$(sed -n 1p "$OUT")" = ready ] && [ "$(wc -l <"$OUT")" -eq 4 ] &&
  [ "$(grep -cE '^[0-9]+\.[0-9]{3}$' "$OUT")" -eq 3 ]; } ||
  fail "bench --serve should print ready, then one time per input line"
checks=$((checks + 1))
"$ONYX" bench "$M/relu_sym.onnx" --serve </dev/null >"$OUT" 2>"$ERR" && [ "$(cat "$OUT")" = ready ] ||
  fail "bench --serve with no input should print ready only and exit 0"

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
