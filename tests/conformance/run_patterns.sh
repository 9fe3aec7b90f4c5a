#!/usr/bin/env bash
# run_patterns.sh — the pattern suite (tools/gen_patterns.py, generated at
# build time) through `onyx test --patterns`: every case passes on the CPU
# provider, with the optimizer's fusions (the default) and the CPU alone
# (--provider cpu --only); a provider that takes none of the fused shapes
# (the fake one) gets not-claimed, never pass; and the executable finds the
# suite from an install layout (PREFIX/bin/onyx, PREFIX/share/onyx/patterns).
#
#   run_patterns.sh ONYX PATTERNS_DIR DATADIR
# PATTERNS_DIR: where the build generated the suite (BUILD/DATADIR/onyx/patterns).
# Exit 0: pass; 77: the suite was not generated (no /usr/bin/python3 with
# onnx and numpy at build time); 1: failure.
set -u
ONYX="$1" PATTERNS="$2" DATADIR="$3"
# The cases gen_patterns.py writes: one missing is a failure, not a smaller pass.
CASES="test_pattern_bert_attention test_pattern_conv_bn_relu test_pattern_gelu
test_pattern_gemm_relu test_pattern_layernorm test_pattern_matmul_add test_pattern_matmul_add_2d
test_pattern_residual_block"
N=8
TAB=$(printf '\t')
failures=0
work=$(mktemp -d "${TMPDIR:-/tmp}/onyx-patterns.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
OUT="$work/stdout" ERR="$work/stderr"

fail() {
  echo "FAIL: $*"
  echo "--- stdout:"; cat "$OUT"
  echo "--- stderr:"; cat "$ERR"
  failures=$((failures + 1))
}

# An onyx without the suite beside it says where it looked and how to get it.
mkdir -p "$work/bare/bin" && cp "$ONYX" "$work/bare/bin/onyx"
"$work/bare/bin/onyx" test --patterns >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 1 ] || fail "onyx test --patterns without the suite exited $rc, expected 1"
grep -qF "no folder $work/bare/$DATADIR/onyx/patterns" "$ERR" ||
  fail "the error does not name the folder looked for"
grep -qF "python3-onnx" "$ERR" || fail "the error does not say how to get the suite"
"$ONYX" test "$PATTERNS" --patterns >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 2 ] || fail "onyx test DIR --patterns exited $rc, expected 2 (usage)"

if [ ! -d "$PATTERNS" ]; then
  echo "SKIP: the pattern suite was not generated at $PATTERNS (it needs /usr/bin/python3" \
    "with the onnx and numpy packages at build time: apt-get install python3-onnx python3-numpy)"
  [ $failures -eq 0 ] && exit 77
  exit 1
fi

# all_pass LABEL: every case of CASES passed in $OUT, and nothing else ran.
all_pass() {
  for c in $CASES; do
    grep -qxF "$c${TAB}pass" "$OUT" || fail "$1: $c did not pass: $(grep "^$c$TAB" "$OUT")"
  done
  [ "$(tail -n 1 "$OUT")" = "$N passed, 0 failed, 0 skipped" ] ||
    fail "$1: last line '$(tail -n 1 "$OUT")'"
}

"$ONYX" test --patterns >"$OUT" 2>"$ERR" || fail "onyx test --patterns exited $?"
all_pass "CPU"
grep -q "^suite patterns: $N tests" "$OUT" || fail "the summary does not name the suite"
"$ONYX" test --patterns --provider cpu --only >"$OUT" 2>"$ERR" ||
  fail "onyx test --patterns --provider cpu --only exited $?"
all_pass "--provider cpu --only"
grep -qxF "provider cpu: 0 cases not claimed" "$OUT" || fail "cpu --only: cases not claimed"

# The fake provider (float32 Add, Mul, Relu) takes no pattern whole: with the
# CPU in its config, every case is still not-claimed.
printf '{"providers": [{"name": "fake"}, {"name": "cpu"}]}\n' >"$work/fake_cpu.json"
"$ONYX" test --patterns --config "$work/fake_cpu.json" --provider fake --only >"$OUT" 2>"$ERR" ||
  fail "onyx test --patterns --provider fake --only exited $?"
for c in $CASES; do
  grep -qE "^$c${TAB}not-claimed: provider 'fake' did not claim [0-9]+ of [0-9]+ nodes" "$OUT" ||
    fail "fake --only: $c: $(grep "^$c$TAB" "$OUT")"
done
[ "$(tail -n 1 "$OUT")" = "0 passed, 0 failed, $N skipped" ] ||
  fail "fake --only: last line '$(tail -n 1 "$OUT")'"

# The install layout: PREFIX/bin/onyx finds PREFIX/DATADIR/onyx/patterns.
mkdir -p "$work/prefix/bin" "$work/prefix/$DATADIR/onyx"
cp "$ONYX" "$work/prefix/bin/onyx" && cp -r "$PATTERNS" "$work/prefix/$DATADIR/onyx/patterns"
"$work/prefix/bin/onyx" test --patterns --filter 'gelu' >"$OUT" 2>"$ERR" ||
  fail "an installed onyx test --patterns exited $?"
grep -qxF "test_pattern_gelu${TAB}pass" "$OUT" || fail "the installed layout: gelu did not pass"

[ $failures -eq 0 ] && echo "pattern suite: all checks passed"
[ $failures -eq 0 ]
