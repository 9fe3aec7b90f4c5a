#!/usr/bin/env bash
# Installs what Onyx needs to build and test, from Debian's packages, if it is
# missing. Safe to run again: it installs nothing when everything is there.
#   scripts/install-deps.sh           build and test
#   scripts/install-deps.sh --bench   also the model zoo's exporters
#                                     (bench/zoo.py: python3-torchvision)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config   # toolchain
  protobuf-c-compiler libprotobuf-c-dev          # ONNX files (code generated from onnx.proto)
  libonnx-dev                                    # /usr/include/onnx/onnx.proto
  libjansson-dev                                 # JSON provider configs
  libcmocka-dev                                  # unit tests
  libdnnl-dev                                    # oneDNN provider (providers/onednn)
  ocl-icd-opencl-dev                             #   its CMake config requires OpenCL (only a Recommends)
  libdlpack-dev                                  # dlpack/dlpack.h (DLPack import/export)
  libsleef-dev                                   # vectorized erf for Erf/Gelu (providers/cpu/cpu_vmath.c)
  libjpeg62-turbo-dev libpng-dev libtiff-dev     # ImageDecoder (providers/cpu/cpu_image.c):
  libwebp-dev libopenjp2-7-dev libstb-dev        #   JPEG, PNG, TIFF, WebP, JPEG 2000, BMP
  clang-format git                               # formatting check in CI
  clang libclang-rt-14-dev                       # fuzz targets: libFuzzer + ASan/UBSan (fuzz/)
  valgrind                                       # unit tests under memcheck in CI
  python3-onnx python3-numpy python3-sklearn     # test and sample model generators (never at run time;
                                                 #   sklearn: the digits of samples/train-mlp, -cnn)
  python3-dev python3-pytest                     # the Python package (python/): CPython headers, its tests
  python3-torch                                  #   its PyTorch front end's tests (onyx.torch), never at run time
  libopenmpi-dev openmpi-bin                     # CPU collectives (MPI, loaded only when a session asks),
                                                 #   mpirun for the distributed tests
  hipcc                                          # ROCm provider: HIP 5.2 + clang 15 (CUDA is never apt-installed)
)

if [ "${1:-}" = --bench ]; then
  PACKAGES+=(python3-torchvision)
elif [ -n "${1:-}" ]; then
  echo "install-deps: unknown argument '$1' (expected --bench or nothing)" >&2
  exit 2
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
