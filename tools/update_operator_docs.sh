#!/usr/bin/env bash
# Regenerates docs/operators/<provider>.md: runs `onyx test --coverage` over the four
# ONNX backend suites with the provider given first claim, then formats the result.
#   tools/update_operator_docs.sh PROVIDER [BUILD_DIR] [CONFIG]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROVIDER="${1:?usage: update_operator_docs.sh PROVIDER [BUILD_DIR] [CONFIG]}"
BUILD="${2:-$ROOT/build}"
CONFIG="${3:-}"
DATA="${ONYX_ONNX_TESTS:-$ROOT/../shared/onnx-tests}"
[ -d "$DATA/node" ] || { echo "ONNX test data not found at $DATA (set ONYX_ONNX_TESTS)"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
files=()
for suite in node simple pytorch-converted pytorch-operator; do
  args=(test "$DATA/$suite" --provider "$PROVIDER" --coverage "$work/$suite.tsv" --jobs "$(nproc)")
  [ -n "$CONFIG" ] && args+=(--config "$CONFIG")
  ONYX_PROVIDER_PATH="${ONYX_PROVIDER_PATH:-$BUILD/lib}" "$BUILD/bin/onyx" "${args[@]}" | tail -n 1 || true
  files+=("$work/$suite.tsv")
done
mkdir -p "$ROOT/docs/operators"
/usr/bin/python3 "$ROOT/tools/gen_operator_docs.py" "$PROVIDER" "$ROOT/docs/operators/$PROVIDER.md" "${files[@]}"
echo "wrote docs/operators/$PROVIDER.md"
