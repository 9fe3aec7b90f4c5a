#!/usr/bin/env bash
# Runs `onyx test` over one ONNX backend suite (every test, or with an OPS_FILE
# only the tests whose models use only its ops; "-" for all) and fails on any
# failure that the provider's reviewed expected-failures file does not list.
#
#   run_suite.sh ONYX_BIN SUITE OPS_FILE EXPECTED_FAILURES [CONFIG]
#   ONLY_PROVIDER=NAME run_suite.sh ...   the provider's own kit run (--provider NAME --only)
#
# Test data: $ONYX_ONNX_TESTS, else ../shared/onnx-tests beside the source
# tree. Missing data or a missing python3-onnx is a skip (exit 77) with a
# message, never a silent pass.
# Expected-failures lines: "<regex><TAB or spaces><reason>"; a regex without
# metacharacters is an exact test name, and such a test that now passes is
# reported so the list stays honest, unless the name starts with "~": a test
# whose outcome is a random draw (an unseeded random op whose expected output
# is numpy's draw) fails almost always but may match by chance.
set -uo pipefail
ONYX="$1" SUITE="$2" OPS="$3" XFAIL="$4" CONFIG="${5:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="${ONYX_ONNX_TESTS:-$HERE/../../../shared/onnx-tests}"
if [ ! -d "$DATA/$SUITE" ]; then
  echo "skip: ONNX test data not found at $DATA/$SUITE (set ONYX_ONNX_TESTS)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
args=(test "$DATA/$SUITE" --verdicts "$work/verdicts" --jobs "$(nproc)")
if [ "$OPS" != "-" ]; then
  if ! /usr/bin/python3 -c "import onnx" 2>/dev/null; then
    echo "skip: /usr/bin/python3 cannot import onnx (apt-get install python3-onnx) to select tests"
    exit 77
  fi
  /usr/bin/python3 "$HERE/select_tests.py" "$DATA/$SUITE" "$OPS" > "$work/selected"
  if [ ! -s "$work/selected" ]; then
    echo "skip: no test of $SUITE uses only the ops of $(basename "$OPS")"
    exit 77
  fi
  args+=(--filter "^($(paste -sd'|' "$work/selected"))\$")
fi
[ -n "$CONFIG" ] && args+=(--config "$CONFIG")
[ -n "${ONLY_PROVIDER:-}" ] && args+=(--provider "$ONLY_PROVIDER" --only)
"$ONYX" "${args[@]}" > "$work/log" 2>&1
tail -n 1 "$work/log"
# Under the sanitizers a child reports a leak or an error after it has sent its
# verdict: such a report fails the suite even when every verdict passed.
if grep -qE 'ERROR: (LeakSanitizer|AddressSanitizer)|Sanitizer has encountered a fatal error|runtime error:' "$work/log"; then
  grep -E 'ERROR: (LeakSanitizer|AddressSanitizer)|runtime error:' -A 12 "$work/log" | head -40
  echo "$SUITE: a sanitizer reported an error (above)"
  exit 1
fi

# The check, in awk for speed: an exact name is a hash look-up; a line with
# regex metacharacters is tried as an anchored regex. With ONLY_PROVIDER set
# (a run with --provider NAME --only), not-claimed cases are fine and a
# load-error counts only when it names that provider (the others are the
# model's, already covered by the CPU provider's list).
grep -vE '^\s*(#|$)' "$XFAIL" | awk '{print $1}' > "$work/patterns" || true
awk -F'\t' -v xfail="$(basename "$XFAIL")" -v suite="$SUITE" -v only="${ONLY_PROVIDER:-}" '
  FILENAME == ARGV[1] {
    if ($0 ~ /^~/) { exact[substr($0, 2)] = 1; chance[substr($0, 2)] = 1 }
    else if ($0 ~ /[][(){}|*+?\\^$.]/) re[++nre] = $0
    else exact[$0] = 1
    next
  }
  {
    name = $1; verdict = $2; n++
    listed = (name in exact)
    for (i = 1; !listed && i <= nre; i++) if (name ~ ("^(" re[i] ")$")) listed = 1
    if (verdict == "pass") {
      if ((name in exact) && !(name in chance)) { print "now passes, remove it from " xfail ": " name; xpass++ }
      next
    }
    if (only != "" && verdict ~ /^not-claimed:/) next
    if (only != "" && verdict ~ /^load-error:/ && index(verdict, "provider \x27" only "\x27") == 0) next
    if (!listed) { print "UNEXPECTED " name ": " verdict; unexpected++ }
  }
  END {
    printf "%s: %d tests run; %d unexpected failures; %d listed but passing\n", suite, n, unexpected, xpass
    exit (unexpected || xpass) ? 1 : 0
  }' "$work/patterns" "$work/verdicts"
