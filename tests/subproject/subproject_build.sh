#!/bin/bash
# subproject_build.sh — Onyx built as another project's subproject: configures
# tests/subproject/outer (add_subdirectory(<onyx source>) and a program that
# links onyx::onyx), builds only that program and the library it needs, runs
# it and checks the version it prints.
#
# usage: subproject_build.sh SOURCE_DIR WORK_DIR CMAKE CC VERSION [CMAKE_ARGS...]
# Exit 0: pass; 77: skipped (cmake or ninja missing); anything else: failure.
set -u
SRC=$1 WORK=$2 CMAKE=$3 CC=$4 VERSION=$5
shift 5

command -v "$CMAKE" >/dev/null 2>&1 || { echo "SKIP: cmake ($CMAKE) not found"; exit 77; }
command -v ninja >/dev/null 2>&1 || { echo "SKIP: ninja not found"; exit 77; }

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# run LOG CMD...: runs quietly, shows the log on failure.
run() {
  local log=$1
  shift
  "$@" >"$log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { cat "$log" >&2; fail "$* (exit $rc)"; }
}

rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot create $WORK"
# Debug: the quickest to compile; no tests, no optional providers.
run "$WORK/configure.log" "$CMAKE" -S "$SRC/tests/subproject/outer" -B "$WORK/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER="$CC" -DONYX_SOURCE="$SRC" \
  -DONYX_BUILD_TESTS=OFF -DONYX_WITH_ONEDNN=OFF -DONYX_WITH_CUDA=OFF -DONYX_WITH_ROCM=OFF "$@"
run "$WORK/build.log" "$CMAKE" --build "$WORK/build" --target outer_app -j 2
# The subproject's outputs stay under its own binary folder.
[ -e "$WORK/build/onyx/lib/libonyx.so" ] || fail "libonyx.so is not in the subproject's lib/"
out=$("$WORK/build/outer_app" "$VERSION") || fail "outer_app: '$out' (expected onyx $VERSION)"
echo "$out"
[ "$out" = "onyx $VERSION" ] || fail "outer_app printed '$out', expected 'onyx $VERSION'"
echo "subproject build: ok"
