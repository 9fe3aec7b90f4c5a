#!/usr/bin/env bash
# Runs `onyx test` over one ONNX backend suite (every test, or with an OPS_FILE
# only the tests whose models use only its ops; "-" for all) and fails on any
# failure that the provider's reviewed expected-failures file does not list.
#
#   run_suite.sh ONYX_BIN SUITE OPS_FILE EXPECTED_FAILURES [CONFIG]
#
# Test data: $ONYX_ONNX_TESTS, else ../shared/onnx-tests beside the source
# tree. Missing data or a missing python3-onnx is a skip (exit 77) with a
# message, never a silent pass.
# Expected-failures lines: "<regex><TAB or spaces><reason>"; a regex without
# metacharacters is an exact test name, and such a test that now passes is
# reported so the list stays honest.
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
"$ONYX" "${args[@]}" > "$work/log" 2>&1
tail -n 1 "$work/log"

patterns="$work/patterns"
grep -vE '^\s*(#|$)' "$XFAIL" | awk '{print $1}' > "$patterns" || true
unexpected=0
xpass=0
while IFS=$'\t' read -r name verdict; do
  if [ "$verdict" = pass ]; then
    if grep -qxF "$name" "$patterns"; then
      echo "now passes, remove it from $(basename "$XFAIL"): $name"
      xpass=$((xpass + 1))
    fi
    continue
  fi
  matched=0
  while read -r re; do
    [[ "$name" =~ ^($re)$ ]] && { matched=1; break; }
  done < "$patterns"
  if [ "$matched" -eq 0 ]; then
    echo "UNEXPECTED $name: $verdict"
    unexpected=$((unexpected + 1))
  fi
done < "$work/verdicts"
n=$(wc -l < "$work/verdicts")
echo "$SUITE: $n tests run; $unexpected unexpected failures; $xpass listed but passing"
[ "$unexpected" -eq 0 ] && [ "$xpass" -eq 0 ]
