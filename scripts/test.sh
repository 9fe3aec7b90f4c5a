#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the unit tests (ctest),
# the same suite under AddressSanitizer + UndefinedBehaviorSanitizer, and the
# ONNX conformance checks of the CPU provider (skipped with a message when the
# ONNX test data is absent).
#   scripts/test.sh            everything
#   SKIP_SANITIZE=1 scripts/test.sh   without the sanitizer build
#   SKIP_TSAN=1 scripts/test.sh       without the ThreadSanitizer build
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="$(nproc)"
bash "$ROOT/scripts/install-deps.sh"

echo "== format check (clang-format)"
bad=$(cd "$ROOT" && git ls-files '*.c' '*.h' | xargs -r clang-format --dry-run -Werror 2>&1 | grep -c "error:" || true)
if [ "${bad:-0}" -ne 0 ]; then
  (cd "$ROOT" && git ls-files '*.c' '*.h' | xargs -r clang-format --dry-run -Werror 2>&1 | grep "error:" | head -20)
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
  # session), the thread pool, sessions (cancelling from another thread) and
  # mixed placement.
  echo "== build with ThreadSanitizer and the threaded tests"
  TSAN_TESTS=(test_concurrency test_threadpool test_session test_session_options test_mixed)
  cmake -S "$ROOT" -B "$ROOT/build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DONYX_WERROR=ON -DONYX_TSAN=ON >/dev/null
  cmake --build "$ROOT/build-tsan" -j "$JOBS" --target "${TSAN_TESTS[@]}" >/dev/null
  (cd "$ROOT/build-tsan" && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --output-on-failure -j "$JOBS" -R "^($(IFS='|'; echo "${TSAN_TESTS[*]}"))\$")
fi
