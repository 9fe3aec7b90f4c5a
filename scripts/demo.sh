#!/usr/bin/env bash
# The main job on the shipped default: installs what is missing, builds, makes
# the sample model and runs it through the providers of samples/providers.json,
# showing the placement and the outputs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/install-deps.sh"
bash "$ROOT/scripts/build.sh" "$BUILD" >/dev/null
MODEL="$BUILD/samples/sample_cnn.onnx"
if [ ! -f "$MODEL" ]; then
  mkdir -p "$BUILD/samples"
  /usr/bin/python3 "$ROOT/samples/make_sample_model.py" "$MODEL"
fi
export ONYX_PROVIDER_PATH="$BUILD/lib"
echo "== onyx partition $MODEL --config samples/providers.json --explain"
"$BUILD/bin/onyx" partition "$MODEL" --config "$ROOT/samples/providers.json" --explain
echo
echo "== onyx run $MODEL --config samples/providers.json"
"$BUILD/bin/onyx" run "$MODEL" --config "$ROOT/samples/providers.json"
