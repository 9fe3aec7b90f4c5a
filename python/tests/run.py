"""Runs the Python package's tests with pytest (the ctest python_tests).

Exits 77, which ctest reads as skipped, when pytest, numpy or onnx is
missing, naming what to install."""
import sys

missing = []
for mod, pkg in (("pytest", "python3-pytest"), ("numpy", "python3-numpy"),
                 ("onnx", "python3-onnx")):
    try:
        __import__(mod)
    except ImportError:
        missing.append("%s (%s)" % (mod, pkg))
if missing:
    print("python_tests skipped: %s not installed for %s"
          % (", ".join(missing), sys.executable))
    sys.exit(77)

import pytest  # noqa: E402

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider"] + (sys.argv[1:] or ["."])))
