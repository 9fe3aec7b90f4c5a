#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, writes their seed corpora and runs
# each for a fixed time (docs/security.md).
#   fuzz/fuzz.sh [SECONDS] [TARGET...]      default: 30 s each, all targets
# Environment: BUILD (default build-fuzz), JOBS (parallel fuzzing processes
# per target, default 1), RUNS (a fixed number of inputs per target instead of
# SECONDS: with FUZZ_SEED the run starts from the seeds alone, an emptied
# working corpus, so it is the same run each time), ONNX_TESTS (the ONNX node tests whose small models
# and .pb files join the seeds; default $ONYX_ONNX_TESTS/node, else
# ../shared/onnx-tests/node beside the checkout).
# Seeds and the working corpora live in $BUILD/fuzz-corpus and are never
# committed. A crash leaves its input in $BUILD/fuzz-artifacts/<target>/ and
# the script fails; the fix's regression test is that file copied to
# tests/unit/badinput/crashers/<target>/ (replayed by test_crashers). Known,
# still open leaks are listed in fuzz/lsan.supp.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-30}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(model_load config tensor_proto run structured)
BUILD="${BUILD:-$ROOT/build-fuzz}"
JOBS="${JOBS:-1}"
ONNX_TESTS="${ONNX_TESTS:-${ONYX_ONNX_TESTS:-$ROOT/../shared/onnx-tests}/node}"

if ! command -v clang >/dev/null; then
  echo "fuzz: clang is not installed: skipped (scripts/install-deps.sh installs it)"
  exit 0
fi
RT="$(clang --print-runtime-dir 2>/dev/null || true)"
if [ ! -f "$RT/libclang_rt.fuzzer-$(uname -m).a" ]; then
  echo "fuzz: libFuzzer (libclang-rt-dev) is not installed: skipped"
  exit 0
fi

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DONYX_FUZZ=ON -DONYX_WERROR=ON -DONYX_WITH_ONEDNN=OFF -DONYX_WITH_CUDA=OFF -DONYX_WITH_ROCM=OFF \
  >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target fuzz_make_corpus \
  $(printf 'fuzz_%s ' "${TARGETS[@]}") >/dev/null

SEEDS="$BUILD/fuzz-corpus/seeds"
rm -rf "$SEEDS"
mkdir -p "$SEEDS"
"$BUILD/bin/fuzz_make_corpus" "$SEEDS" >/dev/null
# The structured target starts from the generated models and, below, every
# node-test model up to 16 KiB (its mutator keeps them parseable).
mkdir -p "$SEEDS/structured"
cp "$SEEDS"/model_load/*.onnx "$SEEDS/structured/"
if [ -d "$ONNX_TESTS" ]; then
  # Small models and tensors only: libFuzzer mutates inputs up to 4 KiB.
  for d in "$ONNX_TESTS"/*/; do
    t=$(basename "$d")
    m="$d/model.onnx"
    if [ -f "$m" ] && [ "$(stat -c%s "$m")" -le 4096 ]; then cp "$m" "$SEEDS/model_load/$t.onnx"; fi
    if [ -f "$m" ] && [ "$(stat -c%s "$m")" -le 16384 ]; then cp "$m" "$SEEDS/structured/$t.onnx"; fi
    for p in "$d"/test_data_set_0/*.pb; do
      if [ -f "$p" ] && [ "$(stat -c%s "$p")" -le 4096 ]; then
        cp "$p" "$SEEDS/tensor_proto/${t}_$(basename "$p")"
      fi
    done
  done
fi
cp "$ROOT"/samples/*.json "$SEEDS/config/" 2>/dev/null || true

status=0
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/fuzz-corpus/$t"
  art="$BUILD/fuzz-artifacts/$t"
  # a fixed-count run starts from the seeds alone
  [ -n "${RUNS:-}" ] && rm -rf "$corpus"
  mkdir -p "$corpus" "$art"
  log="$BUILD/fuzz-artifacts/$t.log"
  if [ "$JOBS" -gt 1 ]; then par=(-fork="$JOBS"); else par=(); fi
  [ "$t" = structured ] && par+=(-max_len=16384)
  # FUZZ_SEED fixes libFuzzer's random seed, so a short run (CI's) makes the
  # same mutations each time instead of a new sample of them.
  [ -n "${FUZZ_SEED:-}" ] && par+=(-seed="$FUZZ_SEED")
  if [ -n "${RUNS:-}" ]; then
    par+=(-runs="$RUNS")
    echo "== fuzz $t: $RUNS inputs"
  else
    par+=(-max_total_time="$SECONDS_EACH")
    echo "== fuzz $t: ${SECONDS_EACH}s"
  fi
  if ! ONYX_PROVIDER_PATH="$BUILD/lib" LSAN_OPTIONS="suppressions=$ROOT/fuzz/lsan.supp" \
      "$BUILD/bin/fuzz_$t" "$corpus" "$SEEDS/$t" "${par[@]}" \
      -rss_limit_mb=2048 -timeout=20 -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1; then
    echo "fuzz $t FAILED: input saved in $art/ (log: $log)"
    grep -m1 -A12 -E "ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|runtime error|deadly signal" \
      "$log" || tail -20 "$log"
    status=1
    continue
  fi
  grep -E "^stat::number_of_executed_units|^Done [0-9]+ runs" "$log" | tail -1 |
    sed "s/^/   /"
done
exit $status
