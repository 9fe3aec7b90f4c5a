#!/usr/bin/env bash
# The CUDA provider on a machine with an NVIDIA GPU (docs/providers/cuda.md):
#
#   scripts/gpu-check.sh bundle BUILD_DIR BUNDLE_DIR
#       here (the build machine): copies what the GPU machine needs into
#       BUNDLE_DIR: the onyx CLI, test_gpu_cuda, test_gpu_modes_cuda, the
#       host and provider libraries, the Debian libraries they link that a bare CUDA image may
#       lack (protobuf-c, CMocka, Jansson, SLEEF, the image codecs), the ONNX
#       node tests that the GPU provider claims or that the CUDA + CPU spine
#       run selects, the sample model and the peer's make_models.py.
#   [STEPS="1 2 ..."] scripts/gpu-check.sh run BUNDLE_DIR OUT_DIR
#       there: finds the CUDA runtime, cuBLAS and cuDNN, then runs the steps
#       (all seven by default):
#         1. test_gpu_cuda, test_gpu_modes_cuda, test_nvtx,
#            test_gpu_attention_cuda, test_gpu_half_cuda (float16 /
#            bfloat16), test_gpu_fused_cuda (FusedElementwise programs) and
#            test_gpu_async_cuda (run events; the emulation-gated cases
#            skip); their device tests run when a GPU is present;
#         2. the sample model through cuda + cpu (placement and outputs);
#         3. the node tests with --provider cuda --only (verdicts in OUT_DIR);
#         4. the benchmark models through cuda + cpu against ONNX Runtime's
#            outputs (python3 with onnx, numpy and onnxruntime), their
#            placement, then `onyx bench` of each on cuda + cpu and on the CPU
#            alone;
#         5. the spine-op node tests with providers/cuda/cuda-cpu.json;
#         6. compute-sanitizer memcheck over test_gpu_cuda and one run of the
#            sample and benchmark models;
#         7. Onyx against PyTorch on the same GPU (scripts/torch_peer.py;
#            PEER_MODELS=a,b,... picks models), float32 and TF32, and a
#            float16 GPT block (gpt_block_fp16), with the inputs and outputs
#            bound on the device;
#         8. host profiles of 20 runs of PROFILE_MODELS (after step 7);
#         9. training (not in the default STEPS): test_gpu_grad_cuda (the
#            gradient and optimizer kernels against the CPU provider and
#            float64 references), then `onyx train` on cuda + cpu against
#            PyTorch on the same GPU (scripts/train_peer.py --device cuda)
#            for the MLP and the ResNet-style CNN: per-step losses and
#            samples/s of both, and a profile of the CNN's steps on cuda +
#            cpu summed per provider and op (scripts/profile_summary.py);
#        10. the collective ops on the CUDA provider through NCCL with one
#            rank (test_dist cuda; not in the default STEPS);
#        11. CUDA graphs (not in the default STEPS): test_gpu_graph_cuda (a
#            small static model's replays against a plain session), then
#            `onyx bench --io device` of the benchmark models on cuda + cpu
#            without and with the provider option enable_cuda_graph 1.
#       The verdict files are checked against the expected-failures lists
#       afterwards, on the build machine (scripts/gpu-check.sh verdicts).
#   scripts/gpu-check.sh verdicts OUT_DIR
#       checks OUT_DIR's verdicts as tests/conformance/run_suite.sh would.
#
# Test data: $ONYX_ONNX_TESTS, else ../shared/onnx-tests; peer scripts:
# $ONYX_PEER_SCRIPTS, else ../shared/peer.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${ONYX_ONNX_TESTS:-$ROOT/../shared/onnx-tests}"
PEER="${ONYX_PEER_SCRIPTS:-$ROOT/../shared/peer}"
die() {
  echo "gpu-check: $*" >&2
  exit 1
}

bundle() {
  local build="$1" b="$2"
  [ -x "$build/bin/onyx" ] || die "no onyx CLI in $build/bin (build first: scripts/build.sh $build)"
  [ -f "$build/lib/libonyx_ep_cuda.so" ] ||
    die "$build has no CUDA provider (the CUDA toolkit and cuDNN were not found at configure time)"
  [ -d "$DATA/node" ] || die "ONNX node tests not found at $DATA/node (set ONYX_ONNX_TESTS)"
  rm -rf "$b" && mkdir -p "$b/bin" "$b/lib" "$b/deps" "$b/node" "$b/models"
  cp "$build/bin/onyx" "$build/bin/test_gpu_cuda" "$build/bin/test_gpu_modes_cuda" "$b/bin/"
  cp "$build/bin/test_gpu_grad_cuda" "$b/bin/" 2>/dev/null || true
  cp "$build/bin/test_dist" "$b/bin/" 2>/dev/null || true
  cp "$build/bin/test_gpu_graph_cuda" "$b/bin/" 2>/dev/null || true
  cp "$build/bin/test_gpu_attention_cuda" "$b/bin/" 2>/dev/null || true
  cp "$build/bin/test_gpu_half_cuda" "$b/bin/" 2>/dev/null || true
  cp "$build/bin/test_gpu_fused_cuda" "$build/bin/test_gpu_async_cuda" "$b/bin/" 2>/dev/null || true
  if [ -x "$build/bin/test_nvtx" ] && [ -f "$build/lib/libonyx_nvtx_inject.so" ]; then
    cp "$build/bin/test_nvtx" "$b/bin/" && cp "$build/lib/libonyx_nvtx_inject.so" "$b/lib/"
    cp "$build/lib/libonyx_ep_fake.so" "$build/lib/libonyx_ep_gpuemu.so" "$b/lib/" 2>/dev/null || true
  fi
  cp -P "$build/lib/"libonyx.so* "$build/lib/libonyx_ep_cpu.so" "$build/lib/libonyx_ep_cuda.so" "$b/lib/"
  # The Debian libraries the binaries link, less glibc, the compiler's
  # runtime and CUDA's (the GPU machine has its own).
  ldd "$b/bin/"* "$b/lib/"*.so | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/usr/local/cuda|/libonyx' |
    while read -r lib; do cp -L "$lib" "$b/deps/"; done
  # The node tests the GPU provider claims (the gpuemu kit run: the same host
  # code), the cuDNN ops', and the spine-op selection of the mixed run.
  local work
  work="$(mktemp -d)"
  ONYX_PROVIDER_PATH="$build/lib" "$build/bin/onyx" test "$DATA/node" --provider gpuemu --only \
    --verdicts "$work/emu" --jobs "$(nproc)" > /dev/null 2>&1
  awk -F'\t' '$2 !~ /^not-claimed/ {print $1}' "$work/emu" > "$work/claimed"
  find "$DATA/node" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' |
    grep -E '^test_(conv|maxpool|averagepool|globalaveragepool|globalmaxpool|batchnorm)' >> "$work/claimed"
  /usr/bin/python3 "$ROOT/tests/conformance/select_tests.py" "$DATA/node" \
    "$ROOT/tests/conformance/spine-ops.txt" > "$b/spine.txt" || die "select_tests.py failed"
  sort -u "$work/claimed" "$b/spine.txt" | while read -r t; do cp -r "$DATA/node/$t" "$b/node/"; done
  rm -rf "$work"
  /usr/bin/python3 "$ROOT/samples/make_sample_model.py" "$b/models/sample_cnn.onnx" > /dev/null ||
    die "make_sample_model.py failed"
  cp "$PEER/make_models.py" "$b/"
  # Debug sections off the copies: the device tool carries at most 64 MiB.
  strip --strip-debug "$b/bin/"* "$b/lib/"*.so* 2> /dev/null || true
  du -sh "$b"
}

# Prints the folders holding the CUDA libraries the provider links, looked for
# under /usr/local and in Python's site-packages (pip's nvidia-* wheels).
cuda_lib_dirs() {
  local n d
  for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    d="$(find /usr/local /usr/lib /opt -name "$n" -print -quit 2>/dev/null)"
    [ -n "$d" ] && dirname "$d"
  done | awk '!seen[$0]++' | paste -sd:
}

step1() {
  echo "== 1. test_gpu_cuda"
  "$B/bin/test_gpu_cuda" > "$O/test_gpu_cuda.log" 2>&1
  echo "rc $?"
  sed -n '/test(s) run/,$p' "$O/test_gpu_cuda.log"
  grep -B2 -A8 -E '^\[  (FAILED|ERROR) +\] test_' "$O/test_gpu_cuda.log" | head -60
  echo "== 1b. test_gpu_modes_cuda (use_tf32, FusedConv)"
  "$B/bin/test_gpu_modes_cuda" > "$O/test_gpu_modes_cuda.log" 2>&1
  echo "rc $?"
  grep -E 'TF32 rounding|differ from float32|test\(s\)|FAILED|ERROR' "$O/test_gpu_modes_cuda.log" | head -40
  echo "== 1c. test_nvtx (NVTX ranges through an injection library, cuda included)"
  if [ -x "$B/bin/test_nvtx" ]; then
    ONYX_TEST_NVTX_INJECT="$B/lib/libonyx_nvtx_inject.so" "$B/bin/test_nvtx" > "$O/test_nvtx.log" 2>&1
    echo "rc $?"
    grep -E 'test\(s\)|FAILED|ERROR|SKIP' "$O/test_nvtx.log" | head -20
  else
    echo "not in the bundle (built without NVTX headers)"
  fi
  echo "== 1d. test_gpu_attention_cuda (MultiHeadAttention and Attention against the CPU provider)"
  if [ -x "$B/bin/test_gpu_attention_cuda" ]; then
    "$B/bin/test_gpu_attention_cuda" > "$O/test_gpu_attention_cuda.log" 2>&1
    echo "rc $?"
    grep -E 'test\(s\)|FAILED|ERROR|SKIP|differ|MISMATCH' "$O/test_gpu_attention_cuda.log" | head -30
  else
    echo "not in the bundle"
  fi
  echo "== 1e. test_gpu_half_cuda (float16 / bfloat16: Cast, cuBLAS GemmEx, kernels, a model)"
  if [ -x "$B/bin/test_gpu_half_cuda" ]; then
    "$B/bin/test_gpu_half_cuda" > "$O/test_gpu_half_cuda.log" 2>&1
    echo "rc $?"
    grep -E 'test\(s\)|FAILED|ERROR|SKIP|reference|became' "$O/test_gpu_half_cuda.log" | head -30
  else
    echo "not in the bundle"
  fi
  local t
  for t in test_gpu_fused_cuda test_gpu_async_cuda; do
    echo "== 1f. $t"
    if [ -x "$B/bin/$t" ]; then
      "$B/bin/$t" > "$O/$t.log" 2>&1
      echo "rc $?"
      grep -E 'test\(s\)|FAILED|ERROR|SKIP' "$O/$t.log" | head -30
    else
      echo "not in the bundle"
    fi
  done
}

step2() {
  echo "== 2. sample model through cuda + cpu"
  "$ONYX" partition "$B/models/sample_cnn.onnx" --config "$CFG" --explain > "$O/sample.log" 2>&1
  "$ONYX" run "$B/models/sample_cnn.onnx" --config "$CFG" >> "$O/sample.log" 2>&1
  echo "rc $?"
  head -c 3000 "$O/sample.log"
}

step3() {
  echo "== 3. node tests, cuda alone"
  "$ONYX" test "$B/node" --provider cuda --only --jobs "$(nproc)" --verdicts "$O/verdicts_only.txt" \
    > "$O/node_only.log" 2>&1
  tail -n 2 "$O/node_only.log"
  grep -vP '\t(pass|not-claimed)' "$O/verdicts_only.txt" | head -25 | cut -c1-300
}

step4() {
  echo "== 4. benchmark models"
  local m="$MODELS" cpu_all="$O/cpu_all.json" name
  python3 "$B/make_models.py" "$m" > "$O/make_models.log" 2>&1 ||
    { tail -5 "$O/make_models.log"; return; }
  python3 "$ROOT/scripts/ort_reference.py" "$m" > "$O/ort_reference.log" 2>&1 ||
    { tail -5 "$O/ort_reference.log"; return; }
  "$ONYX" test "$m" --config "$CFG" --verdicts "$O/verdicts_bench_models.txt" > "$O/bench_models.log" 2>&1
  cut -c1-300 "$O/verdicts_bench_models.txt"
  printf '{"providers":[{"name":"cpu"}],"session":{"threads":%s}}\n' "$(nproc)" > "$cpu_all"
  for name in mlp bert_layer convnet matmul_1024; do
    "$ONYX" partition "$m/$name" --config "$CFG" --explain > "$O/partition_$name.log" 2>&1
    echo "$name: $(grep -E '^  [0-9]\. |^copies' "$O/partition_$name.log" | sed 's/ *\[.*//' | paste -sd' ')"
  done
  for name in mlp bert_layer convnet matmul_1024; do
    "$ONYX" bench "$m/$name" --config "$CFG" --inputs "$m/$name/test_data_set_0" --iters 50 --warmup 10
    "$ONYX" bench "$m/$name" --config "$cpu_all" --inputs "$m/$name/test_data_set_0" --iters 20 --warmup 5
  done 2>&1 | tee "$O/bench.jsonl"
}

step5() {
  echo "== 5. node tests of the spine ops, cuda + cpu"
  "$ONYX" test "$B/node" --config "$CFG" --jobs "$(nproc)" --verdicts "$O/verdicts_mixed.txt" \
    --filter "^($(paste -sd'|' "$B/spine.txt"))\$" > "$O/node_mixed.log" 2>&1
  tail -n 1 "$O/node_mixed.log"
  grep -vP '\tpass' "$O/verdicts_mixed.txt" | head -15 | cut -c1-300
}

# compute-sanitizer memcheck over processes that do their device work
# themselves (`onyx test` forks a child per test, and the sanitizer printed
# one summary only, the parent's): test_gpu_cuda, then one run of the sample
# model and of each benchmark model step 4 made.
step6() {
  echo "== 6. compute-sanitizer memcheck"
  command -v compute-sanitizer > /dev/null || { echo "compute-sanitizer not found"; return; }
  local cs=(compute-sanitizer --tool memcheck --print-limit 20) name
  timeout 60 "${cs[@]}" "$B/bin/test_gpu_cuda" > "$O/memcheck.log" 2>&1
  echo "test_gpu_cuda: rc $?, $(grep -E 'ERROR SUMMARY' "$O/memcheck.log")"
  for name in "$B/models/sample_cnn.onnx" "$MODELS"/*/; do
    [ -e "$name" ] || continue
    echo "== memcheck: onyx run $name" >> "$O/memcheck.log"
    timeout 60 "${cs[@]}" "$ONYX" run "$name" --config "$CFG" >> "$O/memcheck.log" 2>&1
    echo "$(basename "$name"): rc $?, $(grep -E 'ERROR SUMMARY' "$O/memcheck.log" | tail -n 1)"
  done
  grep -E 'Invalid|out of bounds|uninitialized' "$O/memcheck.log" | sort | uniq -c | head -20
}

# Onyx against PyTorch on the same GPU (scripts/torch_peer.py): the benchmark
# models and the zoo models (ResNet-50, MobileNet-V2, a 12-layer BERT-base
# encoder, a GPT block at sequence 1024, a 4096^3 MatMul), float32 and TF32,
# inputs and outputs on the device. Needs the machine's python3 with torch,
# torchvision and onnx.
step7() {
  echo "== 7. Onyx against PyTorch"
  # PyTorch loads the cuDNN it was built with: the library path the bundle
  # needs (which may hold another cuDNN) is set for the onyx processes only.
  local wrap="$O/onyx-env.sh"
  printf '#!/bin/sh\nexport LD_LIBRARY_PATH="%s"\nexec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$ONYX" > "$wrap"
  chmod +x "$wrap"
  env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/torch_peer.py" --onyx "$wrap" --config "$CFG" \
    --work "$MODELS/peer" --make-models "$B/make_models.py" --models "${PEER_MODELS:-}" \
    --out "$O/torch_peer.json" 2>&1 | tee "$O/torch_peer.log" | grep -v '^{'
}

# The host's Chrome-trace profile (docs/debugging.md) of 20 runs of each of
# PROFILE_MODELS (default resnet50,gpt_block) as step 7 made them, inputs and
# outputs on the device: where the time between the GPU's kernels goes.
step8() {
  echo "== 8. host profiles"
  local name cfg
  for name in $(echo "${PROFILE_MODELS:-resnet50,gpt_block}" | tr ',' ' '); do
    [ -f "$MODELS/peer/$name/model.onnx" ] || { echo "$name: not made (run step 7 first)"; continue; }
    cfg="$O/profile_$name.config.json"
    printf '{"providers":[{"name":"cuda"},{"name":"cpu"}],"session":{"profile":"%s"}}\n' \
      "$O/profile_$name.json" > "$cfg"
    "$ONYX" bench "$MODELS/peer/$name" --config "$cfg" --inputs "$MODELS/peer/$name/test_data_set_0" \
      --iters 20 --warmup 5 --io device
  done
}

# The training kernels and `onyx train` on the GPU against PyTorch on the
# same GPU (docs/providers/cuda.md, "Training"). TRAIN_MODELS (default
# mlp,resnet) and TRAIN_STEPS (default 30) pick the runs; batch 32.
step9() {
  echo "== 9. training on the GPU"
  if [ -x "$B/bin/test_gpu_grad_cuda" ]; then
    "$B/bin/test_gpu_grad_cuda" > "$O/test_gpu_grad_cuda.log" 2>&1
    echo "test_gpu_grad_cuda: rc $?"
    grep -E 'test\(s\)|FAILED|ERROR|SKIP' "$O/test_gpu_grad_cuda.log" | head -30
  else
    echo "test_gpu_grad_cuda: not in the bundle"
  fi
  local wrap="$O/onyx-env.sh"
  printf '#!/bin/sh\nexport LD_LIBRARY_PATH="%s"\nexec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$ONYX" > "$wrap"
  chmod +x "$wrap"
  env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/train_peer.py" --onyx "$wrap" \
    --config "$CFG" --device cuda --models "${TRAIN_MODELS:-mlp,resnet}" \
    --steps "${TRAIN_STEPS:-30}" --batch 32 --work "$MODELS/train" --json "$O/train_peer.json" \
    2>&1 | tee "$O/train_peer.log"
  # Where the CNN's step goes: a profile of 10 steps of `onyx train` on
  # [cuda, cpu], summed per provider and op (copies included).
  local m="$MODELS/train"
  [ -f "$m/resnet.onnx" ] || return 0
  cp "$m/resnet.onnx" "$O/train_resnet.onnx"
  printf '{"providers":[{"name":"cuda"},{"name":"cpu"}],"session":{"profile":"%s"}}\n' \
    "$O/train_profile.json" > "$O/train_profile.config.json"
  "$ONYX" train "$m/resnet.onnx" --loss cross_entropy --data "x=$m/resnet_x.npy" \
    --labels "$m/resnet_y.npy" --batch-size 32 --steps 10 --no-shuffle --optimizer sgd --lr 0.05 \
    --momentum 0.9 --config "$O/train_profile.config.json" > "$O/train_profile.log" 2>&1
  echo "profiled onyx train: rc $?"
  python3 "$ROOT/scripts/profile_summary.py" "$O/train_profile.json" 2>&1 | head -40
}

# The collective ops on the CUDA provider through NCCL with one rank
# (tests/unit/dist: AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll
# on a one-rank communicator, placed on cuda).
step10() {
  echo "== 10. NCCL collectives, one rank"
  if [ -x "$B/bin/test_dist" ]; then
    timeout 120 "$B/bin/test_dist" cuda > "$O/test_dist_cuda.log" 2>&1
    echo "test_dist cuda: rc $?"
    tail -n 15 "$O/test_dist_cuda.log"
  else
    echo "test_dist: not in the bundle"
  fi
}

# CUDA graphs (docs/providers/cuda.md, "CUDA graphs"): the device test, then
# each benchmark model benched with its inputs and outputs on the device,
# without and with enable_cuda_graph (same machine, same call); the log
# lines that say whether the runs replayed go to OUT_DIR/graph_<name>.log.
step11() {
  echo "== 11. CUDA graphs"
  if [ -x "$B/bin/test_gpu_graph_cuda" ]; then
    "$B/bin/test_gpu_graph_cuda" > "$O/test_gpu_graph_cuda.log" 2>&1
    echo "test_gpu_graph_cuda: rc $?"
    grep -E 'INFO|test\(s\)|FAILED|ERROR|SKIP' "$O/test_gpu_graph_cuda.log" | head -20
  else
    echo "test_gpu_graph_cuda: not in the bundle"
  fi
  local m="$MODELS" name plain="$O/graph_off.json" on="$O/graph_on.json"
  # ort_reference.py also caps the IR version the machine's onnx wrote.
  if [ ! -f "$m/mlp/model.onnx" ]; then
    python3 "$B/make_models.py" "$m" > "$O/make_models.log" 2>&1 &&
      python3 "$ROOT/scripts/ort_reference.py" "$m" >> "$O/make_models.log" 2>&1 ||
      { tail -5 "$O/make_models.log"; return; }
  fi
  printf '{"providers":[{"name":"cuda"},{"name":"cpu"}]}\n' > "$plain"
  printf '{"providers":[{"name":"cuda","options":{"enable_cuda_graph":"1"}},{"name":"cpu"}],"session":{"log_severity":"info"}}\n' > "$on"
  for name in mlp bert_layer convnet matmul_1024; do
    "$ONYX" bench "$m/$name" --config "$plain" --inputs "$m/$name/test_data_set_0" \
      --iters 200 --warmup 20 --io device 2> "$O/graph_off_$name.log"
    "$ONYX" bench "$m/$name" --config "$on" --inputs "$m/$name/test_data_set_0" \
      --iters 200 --warmup 20 --io device 2> "$O/graph_$name.log"
    echo "$name: $(grep -cE 'captured the run as a graph' "$O/graph_$name.log") captured; $(grep -E 'cannot use them|capturing the run as a graph failed|instead of replaying' "$O/graph_$name.log" | head -1 | cut -c1-240)"
  done 2>&1 | tee "$O/graph_bench.jsonl"
}

# STEPS (default "1 2 3 4 5 6 7") picks the steps to run.
run() {
  B="$(cd "$1" && pwd)" O="$2"
  mkdir -p "$O"
  local dirs t0=$SECONDS step
  dirs="$(cuda_lib_dirs)"
  export LD_LIBRARY_PATH="$B/lib:$B/deps:$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ONYX_PROVIDER_PATH="$B/lib" ONYX_SOURCE_DIR="$ROOT" ONYX_BINARY_DIR="$B"
  ONYX="$B/bin/onyx" CFG="$ROOT/providers/cuda/cuda-cpu.json" MODELS="$(mktemp -d)"
  echo "== machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nproc
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$B/lib/libonyx_ep_cuda.so" | grep -E 'not found|cuda|cublas|cudnn'
  for step in ${STEPS:-1 2 3 4 5 6 7}; do
    "step$step"
    echo "(step $step done at $((SECONDS - t0)) s)"
  done
}

# Checks the verdict files steps 3 and 5 left in OUT_DIR (either may be absent
# when STEPS skipped it; neither present is an error).
verdicts() {
  local o="$1" rc=0 seen=0
  if [ -f "$o/verdicts_only.txt" ]; then
    seen=1
    ONLY_PROVIDER=cuda check "$o/verdicts_only.txt" \
      "$ROOT/tests/unit/gpu/gpuemu-expected-failures.txt" || rc=1
  fi
  if [ -f "$o/verdicts_mixed.txt" ]; then
    seen=1
    check "$o/verdicts_mixed.txt" "$ROOT/providers/cpu/conformance-expected-failures.txt" || rc=1
  fi
  [ $seen = 1 ] || die "no verdicts_only.txt or verdicts_mixed.txt in $o (steps 3 and 5)"
  return $rc
}

# run_suite.sh's verdict check over a verdict file already written.
check() {
  local v="$1" x="$2" dir
  dir="$(mktemp -d)"
  # shellcheck disable=SC2016 # $4 is the stand-in's own argument
  printf '#!/bin/sh\ncp "%s" "$4"\n' "$v" > "$dir/onyx"
  chmod +x "$dir/onyx"
  # run_suite.sh runs "$ONYX" test DIR --verdicts FILE ...: the stand-in copies
  # the verdicts there; "-" selects every test.
  ONYX_ONNX_TESTS="$dir" bash -c "mkdir -p '$dir/node' && '$ROOT/tests/conformance/run_suite.sh' '$dir/onyx' node - '$x'"
  local rc=$?
  rm -rf "$dir"
  return $rc
}

case "${1:-}" in
  bundle) bundle "${2:?build dir}" "${3:?bundle dir}" ;;
  run) run "${2:?bundle dir}" "${3:?out dir}" ;;
  verdicts) verdicts "${2:?out dir}" ;;
  *) die "usage: gpu-check.sh bundle BUILD_DIR BUNDLE_DIR | run BUNDLE_DIR OUT_DIR | verdicts OUT_DIR" ;;
esac
