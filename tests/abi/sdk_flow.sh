#!/bin/bash
# sdk_flow.sh — the whole out-of-tree SDK flow, as a new user follows it
# (samples/custom-ep/README.md):
#
#   1. cmake --install the build into a fresh prefix; check the layout;
#   2. configure and build samples/custom-ep and samples/hello against that
#      prefix only (find_package(onyx)), and both again with pkg-config;
#   3. load the custom provider through a config, by "library" path and, once
#      installed into the prefix, by name; run the demo model; check outputs,
#      placement, `onyx partition --explain`, option errors and declines;
#   4. run the group model: its MatMul -> Add chain is one compiled group on
#      the custom provider (and, with fuse_matmul_add off, two single-node
#      kernels); check outputs against values worked out with numpy, and the
#      group in `onyx partition --explain`; with the ONNX node suite and the
#      installed pattern suite, run a few node cases and the pattern suite's
#      2-D MatMul + bias (float64 references) on the provider alone (--only);
#   5. move the prefix and check that it still finds its providers.
#
# usage: sdk_flow.sh BUILD_DIR SOURCE_DIR CMAKE GENERATOR CC LIBDIR [EXTRA_CFLAGS]
# Exit 0: pass; 77: skipped (a tool is missing); anything else: failure.
set -u
BUILD=$1 SRC=$2 CMAKE=$3 GEN=$4 CC=$5 LIBDIR=$6 XFLAGS=${7:-}

command -v "$CMAKE" >/dev/null 2>&1 || { echo "SKIP: cmake ($CMAKE) not found"; exit 77; }
command -v pkg-config >/dev/null 2>&1 || { echo "SKIP: pkg-config not found"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/onyx-sdk-flow.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
# The installed layout must work on its own: no search path from the build.
unset ONYX_PROVIDER_PATH

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }
# run LOG CMD...: runs quietly, shows the log on failure.
run() {
  local log=$1
  shift
  "$@" >"$log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { cat "$log" >&2; fail "$* (exit $rc)"; }
}

step "install into $prefix"
run "$tmp/install.log" "$CMAKE" --install "$BUILD" --prefix "$prefix"
for f in include/onyx/onyx.h include/onyx/onyx_ep.h include/onyx/onyx_types.h \
  "$LIBDIR/libonyx.so" "$LIBDIR/onyx/providers/libonyx_ep_cpu.so" bin/onyx \
  "$LIBDIR/cmake/onyx/onyxConfig.cmake" "$LIBDIR/cmake/onyx/onyxConfigVersion.cmake" \
  "$LIBDIR/cmake/onyx/onyxTargets.cmake" "$LIBDIR/pkgconfig/onyx.pc"; do
  [ -e "$prefix/$f" ] || fail "the install lacks $f"
done

# configure_build NAME SOURCE: an out-of-tree CMake build against the prefix.
configure_build() {
  run "$tmp/$1-configure.log" "$CMAKE" -S "$2" -B "$tmp/$1" -G "$GEN" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$XFLAGS" -DCMAKE_COMPILE_WARNING_AS_ERROR=ON
  grep -q "^onyx_DIR:PATH=$prefix/" "$tmp/$1/CMakeCache.txt" ||
    fail "$1 found onyx somewhere else than $prefix: $(grep '^onyx_DIR' "$tmp/$1/CMakeCache.txt")"
  run "$tmp/$1-build.log" "$CMAKE" --build "$tmp/$1"
}

step "build samples/custom-ep and samples/hello with find_package(onyx)"
configure_build custom "$SRC/samples/custom-ep"
configure_build hello "$SRC/samples/hello"
[ -f "$tmp/custom/libonyx_ep_custom.so" ] || fail "no libonyx_ep_custom.so built"

step "build both again with pkg-config"
export PKG_CONFIG_PATH="$prefix/$LIBDIR/pkgconfig"
pc_cflags=$(pkg-config --cflags onyx) || fail "pkg-config --cflags onyx"
pc_libs=$(pkg-config --libs onyx) || fail "pkg-config --libs onyx"
pc_libdir=$(pkg-config --variable=libdir onyx)
[ "$(pkg-config --variable=abi_version onyx)" != "" ] || fail "onyx.pc has no abi_version"
# shellcheck disable=SC2086 # flag lists
run "$tmp/hello-pc.log" "$CC" $XFLAGS -std=c11 -Wall -Wextra -Werror "$SRC/samples/hello/hello.c" \
  $pc_cflags $pc_libs -Wl,-rpath,"$pc_libdir" -o "$tmp/hello-pc"
mkdir -p "$tmp/pc"
# shellcheck disable=SC2086
run "$tmp/custom-pc.log" "$CC" $XFLAGS -std=c11 -Wall -Wextra -Werror -shared -fPIC \
  -fvisibility=hidden -Wl,--no-undefined "$SRC/samples/custom-ep/custom_ep.c" \
  "$SRC/samples/custom-ep/custom_kernels.c" "$SRC/samples/custom-ep/custom_group.c" $pc_cflags -lm \
  -o "$tmp/pc/libonyx_ep_custom.so"

model=$SRC/samples/custom-ep/custom_demo.onnx
# The outputs for X = [-1.5,-1,-0.5,0,0.5,1] (2x3) and B = [-1.5,-1,-0.5], the
# inputs hello feeds: S = X+B, L = LeakyRelu(S, 0.2), C = 2L + 0.5, M = C*B,
# Y = sigmoid(M), worked out with numpy.
want_m="1.05 0.3 -0.05 0.15 -0.3 -0.75"
want_y="0.740775 0.574443 0.487503 0.53743 0.425557 0.320821"

# check_output FILE NAME WANT: hello's float32 [2,3] output NAME is WANT.
check_output() {
  local got
  got=$(sed -n "s/^$2 \[2,3\] float32: //p" "$1")
  [ -n "$got" ] || { cat "$1" >&2; fail "no output $2"; }
  awk -v got="$got" -v want="$3" -v name="$2" 'BEGIN {
    n = split(got, g, " "); m = split(want, w, " ");
    if (n != m) { print name ": " n " values, want " m; exit 1 }
    for (i = 1; i <= n; i++) {
      d = g[i] - w[i]; if (d < 0) d = -d;
      if (d > 2e-6) { print name "[" i - 1 "] = " g[i] ", want " w[i]; exit 1 }
    }
  }' >&2 || fail "output $2 differs"
}

# check_outputs FILE WANT_PLACEMENT: compares hello's output for the demo model.
check_outputs() {
  grep -qx "placement: $2" "$1" || { cat "$1" >&2; fail "placement is not '$2'"; }
  check_output "$1" M "$want_m"
  check_output "$1" Y "$want_y"
}

step "load the provider by library path through a config; run"
cat >"$tmp/by-path.json" <<EOF
{ "providers": [ { "name": "custom", "library": "$tmp/custom/libonyx_ep_custom.so",
                   "options": { "max_elements": 1000, "custom_op": true } } ] }
EOF
run "$tmp/run1.log" "$tmp/hello/hello" "$model" "$tmp/by-path.json"
check_outputs "$tmp/run1.log" "custom=4 cpu=1"
# The pkg-config builds give the same answers.
sed "s|$tmp/custom/|$tmp/pc/|" "$tmp/by-path.json" >"$tmp/by-path-pc.json"
run "$tmp/run2.log" "$tmp/hello-pc" "$model" "$tmp/by-path-pc.json"
check_outputs "$tmp/run2.log" "custom=4 cpu=1"

step "install the provider into the prefix; load it by name"
run "$tmp/custom-install.log" "$CMAKE" --install "$tmp/custom"
[ -f "$prefix/$LIBDIR/onyx/providers/libonyx_ep_custom.so" ] ||
  fail "cmake --install of custom-ep did not put it in the provider folder"
echo '{ "providers": [ { "name": "custom" } ] }' >"$tmp/by-name.json"
run "$tmp/run3.log" "$tmp/hello/hello" "$model" "$tmp/by-name.json"
check_outputs "$tmp/run3.log" "custom=4 cpu=1"

step "onyx partition --explain"
run "$tmp/explain.log" "$prefix/bin/onyx" partition "$model" --config "$tmp/by-name.json" --explain
for want in "declined by custom: no kernel for Sigmoid" "copies: 3" "fused groups: 0" \
  "$prefix/$LIBDIR/onyx/providers/libonyx_ep_custom.so"; do
  grep -qF "$want" "$tmp/explain.log" || { cat "$tmp/explain.log" >&2; fail "explain lacks '$want'"; }
done
grep -qE '^  1\. custom .*[^0-9]4 nodes' "$tmp/explain.log" ||
  { cat "$tmp/explain.log" >&2; fail "explain does not give custom 4 nodes"; }

step "option errors and declines"
# expect_error CONFIG FRAGMENT: hello must fail with a message holding FRAGMENT.
expect_error() {
  echo "$1" >"$tmp/bad.json"
  if "$tmp/hello/hello" "$model" "$tmp/bad.json" >"$tmp/bad.log" 2>&1; then
    cat "$tmp/bad.log" >&2
    fail "config $1 did not fail"
  fi
  grep -qF "$2" "$tmp/bad.log" || { cat "$tmp/bad.log" >&2; fail "error lacks '$2'"; }
}
expect_error '{ "providers": [ { "name": "custom", "options": { "bogus": 1 } } ] }' \
  "custom: unknown option 'bogus' (known: max_elements, custom_op, fuse_matmul_add)"
expect_error '{ "providers": [ { "name": "custom", "options": { "max_elements": -3 } } ] }' \
  "custom: option 'max_elements' has value '-3'; expected a whole number >= 0"
expect_error '{ "providers": [ { "name": "custom", "options": { "custom_op": "maybe" } } ] }' \
  "custom: option 'custom_op' has value 'maybe'; expected true or false"
# Add's output has 6 elements: with a limit of 4 the provider declines it,
# and explain shows why.
echo '{ "providers": [ { "name": "custom", "options": { "max_elements": 4 } } ] }' >"$tmp/max4.json"
run "$tmp/max4.log" "$prefix/bin/onyx" partition "$model" --config "$tmp/max4.json" --explain
grep -qF "declined by custom: output has 6 elements, above the max_elements option (4)" \
  "$tmp/max4.log" || { cat "$tmp/max4.log" >&2; fail "no max_elements decline"; }
CUSTOM_EP_UNPLUGGED=1 expect_error '{ "providers": [ { "name": "custom" } ] }' \
  "no Example Accelerator found"
expect_error '{ "providers": [ { "name": "custom", "options": { "fuse_matmul_add": 2 } } ] }' \
  "custom: option 'fuse_matmul_add' has value '2'; expected true or false"

step "a compiled group: MatMul -> Add on the custom provider"
group_model=$SRC/samples/custom-ep/custom_group.onnx
# H = X·W, Y = R + H, Z = LeakyRelu(Y, 0.1), for the inputs hello feeds:
# X = [[-1.5,-1,-0.5,0],[0.5,1,1.5,-1.5]], R = [[-1.5,-1,-0.5]] (its unknown
# row count taken as 1, so it is broadcast over both rows of the product),
# and the model's W[k][j] = 0.25 * (3k + j) - 1; worked out with numpy.
want_gy="0 -0.25 -0.5 -3.375 -2.5 -1.625"
want_gz="0 -0.025 -0.05 -0.3375 -0.25 -0.1625"
run "$tmp/group.log" "$tmp/hello/hello" "$group_model" "$tmp/by-name.json"
grep -qx "placement: custom=3 cpu=0" "$tmp/group.log" ||
  { cat "$tmp/group.log" >&2; fail "the group model did not run whole on custom"; }
check_output "$tmp/group.log" Y "$want_gy"
check_output "$tmp/group.log" Z "$want_gz"
run "$tmp/group-explain.log" "$prefix/bin/onyx" partition "$group_model" \
  --config "$tmp/by-name.json" --explain
# The group's inputs are the values entering it in the order its nodes read
# them (X and the initializer W for the MatMul, then R for the Add); its one
# output is the Add's, read by LeakyRelu and a graph output.
for want in "fused groups: 1" \
  "'matmul+residual' on custom: 2 nodes (matmul, residual); inputs: 'X', 'W', 'R'; outputs: 'Y'" \
  "constant 'W': host -> other:ffff:0/mem0 (custom), once at session creation"; do
  grep -qF "$want" "$tmp/group-explain.log" ||
    { cat "$tmp/group-explain.log" >&2; fail "group explain lacks '$want'"; }
done
for node in matmul residual; do
  grep -qE "^  $node +[A-Za-z]+ +v[0-9]+ +-> custom \(group 'matmul\+residual'\)" \
    "$tmp/group-explain.log" || { cat "$tmp/group-explain.log" >&2; fail "$node is not in the group"; }
done
grep -qE "^  leaky +LeakyRelu +v[0-9]+ +-> custom$" "$tmp/group-explain.log" ||
  { cat "$tmp/group-explain.log" >&2; fail "leaky is not a single node on custom"; }
# The same model node by node (MatMul and Add kernels): the same answers.
echo '{ "providers": [ { "name": "custom", "options": { "fuse_matmul_add": false } } ] }' \
  >"$tmp/nofuse.json"
run "$tmp/nofuse.log" "$tmp/hello/hello" "$group_model" "$tmp/nofuse.json"
grep -qx "placement: custom=3 cpu=0" "$tmp/nofuse.log" ||
  { cat "$tmp/nofuse.log" >&2; fail "the group model did not run whole on custom, node by node"; }
check_output "$tmp/nofuse.log" Y "$want_gy"
check_output "$tmp/nofuse.log" Z "$want_gz"
run "$tmp/nofuse-explain.log" "$prefix/bin/onyx" partition "$group_model" \
  --config "$tmp/nofuse.json" --explain
grep -qF "fused groups: 0" "$tmp/nofuse-explain.log" ||
  { cat "$tmp/nofuse-explain.log" >&2; fail "fuse_matmul_add=false still made a group"; }

suites=${ONYX_ONNX_TESTS:-$SRC/../shared/onnx-tests}
if "$prefix/bin/onyx" test --help 2>&1 | grep -q -- "--only" && [ -d "$suites/node/test_add" ]; then
  step "onyx test --provider custom --only (a few node tests)"
  "$prefix/bin/onyx" test "$suites/node" --provider custom --only --jobs 2 \
    --filter '^test_(add|mul|leakyrelu|leakyrelu_default|matmul_2d|matmul_3d|sigmoid)$' \
    --verdicts "$tmp/verdicts.txt" >"$tmp/test.log" 2>&1
  for t in test_add test_mul test_leakyrelu test_leakyrelu_default test_matmul_2d; do
    grep -q "^$t	pass" "$tmp/verdicts.txt" ||
      { cat "$tmp/verdicts.txt" >&2; fail "onyx test: $t did not pass on custom"; }
  done
  # No Sigmoid kernel, and a 3-D MatMul declined: reported, not run elsewhere.
  for t in test_sigmoid test_matmul_3d; do
    grep -q "^$t	not-claimed" "$tmp/verdicts.txt" ||
      { cat "$tmp/verdicts.txt" >&2; fail "onyx test: $t is not 'not-claimed'"; }
  done
else
  echo "(onyx test --provider/--only or the ONNX node suite not available: that step skipped)"
fi

if "$prefix/bin/onyx" test --help 2>&1 | grep -q -- "--patterns" &&
  [ -d "$prefix/share/onyx/patterns/test_pattern_matmul_add_2d" ]; then
  step "onyx test --patterns --provider custom --only: the group against float64 references"
  "$prefix/bin/onyx" test --patterns --config "$tmp/by-name.json" --provider custom --only \
    --filter '^test_pattern_matmul_add_2d$' --verdicts "$tmp/patterns.txt" >"$tmp/patterns.log" 2>&1
  grep -q "^test_pattern_matmul_add_2d	pass" "$tmp/patterns.txt" ||
    { cat "$tmp/patterns.log" "$tmp/patterns.txt" >&2; fail "the pattern MatMul+Add did not pass on custom"; }
  run "$tmp/patterns-explain.log" "$prefix/bin/onyx" partition \
    "$prefix/share/onyx/patterns/test_pattern_matmul_add_2d/model.onnx" --config "$tmp/by-name.json" --explain
  grep -qF "fused groups: 1" "$tmp/patterns-explain.log" ||
    { cat "$tmp/patterns-explain.log" >&2; fail "the pattern MatMul+Add is not a group on custom"; }
else
  echo "(onyx test --patterns or the installed pattern suite not available: that step skipped)"
fi

step "move the prefix: it still finds its providers"
mv "$prefix" "$tmp/moved"
run "$tmp/moved.log" "$tmp/moved/bin/onyx" partition "$model" --config "$tmp/by-name.json"
grep -q "provider custom: 4 nodes" "$tmp/moved.log" || { cat "$tmp/moved.log" >&2; fail "moved prefix"; }
LD_LIBRARY_PATH="$tmp/moved/$LIBDIR" run "$tmp/run4.log" "$tmp/hello-pc" "$model" "$tmp/by-name.json"
check_outputs "$tmp/run4.log" "custom=4 cpu=1"

echo "PASS: install, out-of-tree builds (CMake and pkg-config), config loading, outputs, explain, errors, a compiled group, relocation"
