#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the unit tests (ctest),
# the same suite under AddressSanitizer + UndefinedBehaviorSanitizer, and the
# ONNX conformance checks of the CPU provider (skipped with a message when the
# ONNX test data is absent).
#   scripts/test.sh            everything
#   SKIP_SANITIZE=1 scripts/test.sh   without the sanitizer build
#   SKIP_TSAN=1 scripts/test.sh       without the ThreadSanitizer build
#   SKIP_FUZZ=1 scripts/test.sh       without the short fuzz run (FUZZ_SECONDS each, default 30)
#   SKIP_VALGRIND=1 scripts/test.sh   without the unit tests under valgrind
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="$(nproc)"
bash "$ROOT/scripts/install-deps.sh"

echo "== format check (clang-format)"
bad=$(cd "$ROOT" && git ls-files '*.c' '*.h' '*.cu' | xargs -r clang-format --dry-run -Werror 2>&1 | grep -c "error:" || true)
if [ "${bad:-0}" -ne 0 ]; then
  (cd "$ROOT" && git ls-files '*.c' '*.h' '*.cu' | xargs -r clang-format --dry-run -Werror 2>&1 | grep "error:" | head -20)
  echo "format check failed: run clang-format -i on the files above"
  exit 1
fi

echo "== build (warnings are errors) and unit tests"
bash "$ROOT/scripts/build.sh" "$ROOT/build-ci" -DONYX_WERROR=ON >/dev/null
(cd "$ROOT/build-ci" && ctest --output-on-failure -j "$JOBS")

if [ "${SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build with ASan+UBSan and unit tests"
  bash "$ROOT/scripts/build.sh" "$ROOT/build-asan" -DONYX_WERROR=ON -DONYX_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
  (cd "$ROOT/build-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$JOBS")
fi

if [ "${SKIP_TSAN:-0}" != 1 ]; then
  # Only what runs threads: the concurrency test (8 threads x 1000 runs on one
  # session), the thread pool, sessions (cancelling from another thread),
  # mixed placement, NVTX ranges pushed from several threads, the TCP
  # store's server thread with its client threads, and asynchronous runs
  # waited on and released while another thread completes them.
  echo "== build with ThreadSanitizer and the threaded tests"
  TSAN_TESTS=(test_concurrency test_threadpool test_session test_session_options test_mixed test_streams
    test_nvtx test_tcp_store test_gpu_async_gpuemu)
  cmake -S "$ROOT" -B "$ROOT/build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DONYX_WERROR=ON -DONYX_TSAN=ON >/dev/null
  cmake --build "$ROOT/build-tsan" -j "$JOBS" --target "${TSAN_TESTS[@]}" >/dev/null
  (cd "$ROOT/build-tsan" && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --output-on-failure -j "$JOBS" -R "^($(IFS='|'; echo "${TSAN_TESTS[*]}"))\$")
fi

if [ "${SKIP_VALGRIND:-0}" != 1 ]; then
  # The unit tests of the plain build under memcheck: about 5 minutes of CPU
  # on a 2-core machine (measured), run $JOBS at a time. Not here: test_math
  # (valgrind rounds int64->float conversions its own way), the GPU tests
  # (vendor drivers) and test_winograd_kernel (large convolutions: 2.7 min
  # under memcheck; the ASan build runs it). Suppressions:
  # tests/unit/badinput/valgrind.supp.
  if command -v valgrind >/dev/null; then
    echo "== unit tests under valgrind (memcheck)"
    VG_SKIP=" test_math test_gpu_cuda test_gpu_rocm test_gpu_grad_cuda test_gpu_grad_rocm test_gpu_attention_cuda test_gpu_attention_rocm test_winograd_kernel "
    B="$ROOT/build-ci"
    vg_tests=()
    for t in $(cd "$B" && ctest -N -R '^test_' | awk '/Test +#/ {print $3}'); do
      [[ "$VG_SKIP" == *" $t "* ]] && continue
      exe="$B/bin/$t"
      if [ -x "$exe" ] && [ "$(head -c4 "$exe" | tail -c3)" = ELF ]; then vg_tests+=("$t"); fi
    done
    (
      export ONYX_PROVIDER_PATH="$B/lib" ONYX_SOURCE_DIR="$ROOT" ONYX_BINARY_DIR="$B"
      export VG_B="$B" VG_SUPP="$ROOT/tests/unit/badinput/valgrind.supp"
      export ONYX_UNDER_VALGRIND=1 # tests that need what memcheck does not emulate skip
      printf '%s\n' "${vg_tests[@]}" | xargs -P "$JOBS" -I{} bash -c \
        'valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
           --suppressions="$VG_SUPP" "$VG_B/bin/$1" >"$VG_B/valgrind-$1.log" 2>&1 ||
         { echo "valgrind: $1 failed (log: $VG_B/valgrind-$1.log)"; exit 1; }' _ {}
    )
    echo "valgrind: ${#vg_tests[@]} unit tests clean"
  else
    echo "valgrind is not installed: skipped"
  fi
fi

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
  # Each libFuzzer target (docs/security.md) for a short fixed time, from
  # generated seeds (and the ONNX node-test models when present); skipped
  # with a message when
  # clang or libFuzzer is absent.
  echo "== fuzz targets, ${FUZZ_SECONDS:-30} s each"
  FUZZ_SEED="${FUZZ_SEED:-1}" BUILD="$ROOT/build-fuzz" bash "$ROOT/fuzz/fuzz.sh" "${FUZZ_SECONDS:-30}" \
    model_load config tensor_proto run
  # The structure-aware target runs a fixed number of inputs from the seeds
  # alone (FUZZ_STRUCTURED_RUNS; 12000 take 20 to 60 s on 2 cores), not a
  # fixed time, so the step does the same amount of work on any machine (with
  # the fixed seed, the same mutations until coverage feedback first differs
  # between two processes: about the first 2,500 inputs). Its sessions
  # stop themselves (max_run_ms, max_fold_ms) through the cancellation every
  # CPU kernel with data- or attribute-bound work polls; libFuzzer's
  # per-input timeout (20 s) is only a backstop.
  FUZZ_SEED="${FUZZ_SEED:-1}" RUNS="${FUZZ_STRUCTURED_RUNS:-12000}" BUILD="$ROOT/build-fuzz" \
    bash "$ROOT/fuzz/fuzz.sh" 0 structured
fi
