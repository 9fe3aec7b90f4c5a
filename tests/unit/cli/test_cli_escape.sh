#!/usr/bin/env bash
# test_cli_escape.sh — the `onyx` command prints names from a model escaped
# (no terminal escape or line break of theirs reaches the output), writes
# `onyx test --verdicts` lines whose fields are escaped, and prints error
# messages whole, however long.
#
# usage: test_cli_escape.sh ONYX MAKE_HOSTILE_NAMES WORKDIR
# Needs the CPU provider where ONYX_PROVIDER_PATH points (ctest sets it).
set -u
ONYX="$1"
MAKE="$2"
WORK="$3"
failures=0
checks=0

rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$MAKE" "$WORK" || { echo "FAIL: make_hostile_names"; exit 1; }
OUT="$WORK/stdout"
ERR="$WORK/stderr"
ESC=$'\x1b'
BEL=$'\x07'

fail() {
  echo "FAIL: $*"
  echo "--- stdout:"; cat -v "$OUT"
  echo "--- stderr:"; cat -v "$ERR"
  failures=$((failures + 1))
}

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

# no_byte FILE BYTE NAME: FILE holds no BYTE.
no_byte() {
  checks=$((checks + 1))
  if grep -qF -- "$2" "$1"; then fail "$(basename "$1") holds a raw $3"; fi
}

# line_count FILE N
line_count() {
  checks=$((checks + 1))
  local n
  n=$(wc -l <"$1")
  [ "$n" -eq "$2" ] || fail "$(basename "$1") has $n lines, expected $2"
}

# --- onyx run: output and input names -----------------------------------------
expect_rc 0 run "$WORK/names.onnx"
no_byte "$OUT" "$ESC" ESC
no_byte "$ERR" "$ESC" ESC
checks=$((checks + 1))
grep -q '^output y\\x1b\[2J\\tz: float32 \[2\]: ' "$OUT" || fail "no escaped output name"
checks=$((checks + 1))
grep -qF 'note: input x\x1b[31m\nfake not given' "$ERR" || fail "no escaped input name in the note"
line_count "$OUT" 2 # the placement line and the output

# --- onyx partition --explain: the report's names --------------------------------
expect_rc 0 partition "$WORK/names.onnx" --explain
no_byte "$OUT" "$ESC" ESC
no_byte "$OUT" "$BEL" BEL
checks=$((checks + 1))
grep -qF 'relu\x1b]0;title\x07' "$OUT" || fail "no escaped node name in the report"

# --- onyx test --verdicts: folder names with a tab and a newline ---------------
SUITE="$WORK/suite"
mkdir -p "$SUITE/test_tab"$'\t'"name" "$SUITE/test_newline"$'\n'"name" "$SUITE/test_back\\slash"
for d in "$SUITE"/*/; do cp "$WORK/names.onnx" "$d/model.onnx"; done
expect_rc 0 test "$SUITE" --verdicts "$WORK/verdicts.tsv"
line_count "$WORK/verdicts.tsv" 3
expect_line "$WORK/verdicts.tsv" 'test_back\\slash	skip: no test_data_set_*'
expect_line "$WORK/verdicts.tsv" 'test_newline\nname	skip: no test_data_set_*'
expect_line "$WORK/verdicts.tsv" 'test_tab\tname	skip: no test_data_set_*'
expect_line "$OUT" 'test_tab\tname	skip: no test_data_set_*'
checks=$((checks + 1))
[ "$(awk -F'\t' 'NF != 2' "$WORK/verdicts.tsv" | wc -l)" -eq 0 ] || fail "a verdict line without exactly 2 fields"

# --- errors are printed whole ----------------------------------------------------
expect_rc 1 run "$WORK/long_error.onnx"
checks=$((checks + 1))
grep -qF "END_OF_MESSAGE" "$ERR" || fail "the error message was cut"
checks=$((checks + 1))
[ "$(wc -c <"$ERR")" -gt 3000 ] || fail "the error message is shorter than the op type it names"

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
