"""Builds the onyx package with setuptools (pip install --no-build-isolation
./python), against libonyx from, in order:

  $ONYX_PREFIX           an installed prefix (cmake --install): include/, lib/
  $ONYX_BUILD_DIR        a build folder (scripts/build.sh): lib/ beside the
                         checkout's sdk/include
  ../build               the checkout's default build folder

The module gets an rpath to that lib/ folder, where libonyx.so finds its
providers. CMake builds and installs the same package without this file
(python/CMakeLists.txt)."""
import os
import re

import numpy
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def find_onyx():
    prefix = os.environ.get("ONYX_PREFIX")
    if prefix:
        for lib in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu")):
            if os.path.exists(os.path.join(prefix, lib, "libonyx.so")):
                return os.path.join(prefix, "include"), os.path.join(prefix, lib)
        raise SystemExit("ONYX_PREFIX=%s holds no lib/libonyx.so" % prefix)
    build = os.environ.get("ONYX_BUILD_DIR", os.path.join(ROOT, "build"))
    lib = os.path.join(os.path.abspath(build), "lib")
    if not os.path.exists(os.path.join(lib, "libonyx.so")):
        raise SystemExit("libonyx.so not found in %s: build Onyx first (bash scripts/build.sh), "
                         "or set ONYX_BUILD_DIR or ONYX_PREFIX" % lib)
    return os.path.join(ROOT, "sdk", "include"), lib


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(onyx VERSION ([0-9.]+)", f.read()).group(1)


include_dir, lib_dir = find_onyx()
setup(
    name="onyx",
    version=version(),
    description="Onyx ONNX runtime: the onnxruntime-style Python API",
    packages=["onyx", "onyx.training"],
    python_requires=">=3.10",
    install_requires=["numpy"],
    ext_modules=[Extension(
        "onyx._onyx", [os.path.join("onyx", f)
                       for f in ("_onyx.c", "_onyx_values.c", "_onyx_training.c")],
        include_dirs=[include_dir, numpy.get_include()],
        library_dirs=[lib_dir], libraries=["onyx"], runtime_library_dirs=[lib_dir],
        extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"])],
)
