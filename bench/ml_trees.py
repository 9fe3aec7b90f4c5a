#!/usr/bin/env python3
"""Writes the tree-ensemble benchmark models (docs/performance.md, "Tree
ensembles") in the layout bench/pair.js reads:

  python3 bench/ml_trees.py OUTDIR [--rows N] [--trees T]

OUTDIR/NAME/model.onnx and OUTDIR/NAME/test_data_set_0/input_0.pb (X, float32
[rows, 20]) for
  rf_classifier  RandomForestClassifier, T trees, full depth, 3 classes
  gb_regressor   GradientBoostingRegressor, T trees of depth 5
fitted by scikit-learn (Debian's python3-sklearn; call /usr/bin/python3) on
synthetic data (make_classification / make_regression, seed 0, the rows that
are timed) and converted by tests/ml/sk_trees.py."""
import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "ml"))
import sk_trees  # noqa: E402


def write(outdir, name, model, X):
    d = os.path.join(outdir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    proto = sk_trees.make_model(model, X.shape[1])
    onnx.checker.check_model(proto)
    onnx.save(proto, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "test_data_set_0", "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(X, "X").SerializeToString())
    n = len(proto.graph.node[0].attribute[[a.name for a in proto.graph.node[0].attribute]
                                          .index("nodes_nodeids")].ints)
    print("%s: %d nodes, %.1f MB" % (d, n, os.path.getsize(os.path.join(d, "model.onnx")) / 1e6))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--trees", type=int, default=300)
    a = ap.parse_args()
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier

    X, y = make_classification(n_samples=a.rows, n_features=20, n_informative=10, n_classes=3,
                               random_state=0)
    X = X.astype(np.float32)
    rf = RandomForestClassifier(n_estimators=a.trees, random_state=0, n_jobs=1).fit(X, y)
    write(a.outdir, "rf_classifier", rf, X)

    X, y = make_regression(n_samples=a.rows, n_features=20, n_informative=10, noise=1.0,
                           random_state=0)
    X = X.astype(np.float32)
    gb = GradientBoostingRegressor(n_estimators=a.trees, max_depth=5, random_state=0).fit(X, y)
    write(a.outdir, "gb_regressor", gb, X)


if __name__ == "__main__":
    main()
