"""Runs one pytest file of tests/ml (the ctests ml_trees, ml_sklearn).

  run.py TEST_FILE [pytest args...]

Exits 77, which ctest reads as skipped, when pytest, numpy, onnx or
scikit-learn is missing (naming the Debian package to install) or when
TEST_FILE does not exist. The tests find the onyx command in $ONYX_BIN."""
import os
import sys

missing = []
for mod, pkg in (("pytest", "python3-pytest"), ("numpy", "python3-numpy"),
                 ("onnx", "python3-onnx"), ("sklearn", "python3-sklearn")):
    try:
        __import__(mod)
    except ImportError:
        missing.append("%s (%s)" % (mod, pkg))
if missing:
    print("skipped: %s not installed for %s" % (", ".join(missing), sys.executable))
    sys.exit(77)
if len(sys.argv) < 2 or not os.path.exists(sys.argv[1]):
    print("skipped: no test file %s" % (sys.argv[1] if len(sys.argv) > 1 else "(none given)"))
    sys.exit(77)

import pytest  # noqa: E402

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
