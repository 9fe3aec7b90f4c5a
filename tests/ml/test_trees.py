"""TreeEnsembleClassifier / TreeEnsembleRegressor (ai.onnx.ml 1 and 3).

Run through the onyx command ($ONYX_BIN, else build/bin/onyx): each model
is written to a temporary folder, run with `onyx run --output-dir`, and its
outputs read back. Expectations come from scikit-learn's predict and
predict_proba (tests/ml/sk_trees.py converts the fitted models) or, for the
hand-built trees, from plain Python/NumPy evaluating the same trees.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sk_trees  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ONYX = os.environ.get("ONYX_BIN") or os.path.join(ROOT, "build", "bin", "onyx")
ML = "ai.onnx.ml"


def run_model(model, feeds, threads=None):
    """Runs model with feeds {name: array} (on `threads` intra-op threads);
    returns ({name: array}, None) or (None, stderr) when onyx fails."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        args = [ONYX, "run", path, "--output-dir", os.path.join(d, "out")]
        if threads:
            args += ["--threads", str(threads)]
        for name, a in feeds.items():
            p = os.path.join(d, name + ".pb")
            with open(p, "wb") as f:
                f.write(numpy_helper.from_array(a, name).SerializeToString())
            args += ["--input", "%s=%s" % (name, p)]
        r = subprocess.run(args, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return None, r.stderr
        out = {}
        for f in os.listdir(os.path.join(d, "out")):
            t = onnx.load_tensor(os.path.join(d, "out", f))
            out[f[:-3]] = numpy_helper.to_array(t)
        return out, None


def run_ok(model, feeds, threads=None):
    out, err = run_model(model, feeds, threads)
    assert err is None, err
    return out


def graph_model(node, x_type, n_features, outputs, opset_ml=3):
    x = helper.make_tensor_value_info("X", x_type, [None, n_features])
    g = helper.make_graph([node], "t", [x], outputs)
    return helper.make_model(g, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(ML, opset_ml)])


def reg_outputs(n_targets):
    return [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n_targets])]


def cls_outputs(n_classes, label_type=TensorProto.INT64):
    return [helper.make_tensor_value_info("label", label_type, [None]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, n_classes])]


# --- scikit-learn models ------------------------------------------------------------------

def _datasets():
    from sklearn import datasets
    return {
        "iris": datasets.load_iris(return_X_y=True),
        "digits": datasets.load_digits(return_X_y=True),
        "breast_cancer": datasets.load_breast_cancer(return_X_y=True),
        "diabetes": datasets.load_diabetes(return_X_y=True),
    }


DATA = None


def data(name):
    global DATA
    if DATA is None:
        DATA = _datasets()
    X, y = DATA[name]
    return X.astype(np.float32), y


def check_classifier(model, X, threads=None):
    out = run_ok(sk_trees.make_model(model, X.shape[1]), {"X": X}, threads)
    proba = model.predict_proba(X)
    np.testing.assert_allclose(out["probabilities"], proba, atol=1e-5, rtol=0)
    want = model.predict(X)
    # A row whose two best classes tie (within float rounding of the sums)
    # may take either: scikit-learn breaks the tie in double precision.
    top = np.sort(proba, axis=1)
    tie = (top[:, -1] - top[:, -2]) < 1e-6
    assert (out["label"][~tie] == want[~tie]).all(), np.nonzero(out["label"] != want)
    for i in np.nonzero(tie)[0]:
        best = model.classes_[proba[i] >= top[i, -1] - 1e-6]
        assert out["label"][i] in best


def check_regressor(model, X):
    out = run_ok(sk_trees.make_model(model, X.shape[1]), {"X": X})
    want = model.predict(X).reshape(len(X), -1)
    np.testing.assert_allclose(out["variable"], want, rtol=1e-5, atol=1e-5)


def classifiers():
    from sklearn.ensemble import (ExtraTreesClassifier, GradientBoostingClassifier,
                                  RandomForestClassifier)
    from sklearn.tree import DecisionTreeClassifier
    return [
        lambda: DecisionTreeClassifier(random_state=0),
        lambda: DecisionTreeClassifier(max_depth=3, random_state=0),
        lambda: RandomForestClassifier(n_estimators=15, random_state=0),
        lambda: ExtraTreesClassifier(n_estimators=15, random_state=0),
        lambda: GradientBoostingClassifier(n_estimators=15, random_state=0),
    ]


def regressors():
    from sklearn.ensemble import (ExtraTreesRegressor, GradientBoostingRegressor,
                                  RandomForestRegressor)
    from sklearn.tree import DecisionTreeRegressor
    return [
        lambda: DecisionTreeRegressor(random_state=0),
        lambda: RandomForestRegressor(n_estimators=15, random_state=0),
        lambda: ExtraTreesRegressor(n_estimators=15, random_state=0),
        lambda: GradientBoostingRegressor(n_estimators=20, random_state=0),
    ]


@pytest.mark.parametrize("dataset", ["iris", "digits", "breast_cancer"])
@pytest.mark.parametrize("k", range(5))
def test_sklearn_classifier(dataset, k):
    X, y = data(dataset)
    if dataset == "digits" and k == 4:  # 10 classes x 15 stages: keep it small
        from sklearn.ensemble import GradientBoostingClassifier
        m = GradientBoostingClassifier(n_estimators=5, max_depth=2, random_state=0)
    else:
        m = classifiers()[k]()
    check_classifier(m.fit(X, y), X)


def test_sklearn_classifier_string_labels():
    from sklearn.ensemble import RandomForestClassifier
    X, y = data("iris")
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    m = RandomForestClassifier(n_estimators=10, random_state=0).fit(X, names)
    out = run_ok(sk_trees.make_model(m, X.shape[1]), {"X": X})
    labels = np.array([s.decode() if isinstance(s, bytes) else s for s in out["label"]])
    proba = m.predict_proba(X)
    top = np.sort(proba, axis=1)
    clear = (top[:, -1] - top[:, -2]) >= 1e-6
    assert (labels[clear] == m.predict(X)[clear]).all()
    np.testing.assert_allclose(out["probabilities"], proba, atol=1e-5)


@pytest.mark.parametrize("k", range(4))
def test_sklearn_regressor(k):
    X, y = data("diabetes")
    check_regressor(regressors()[k]().fit(X, y), X)


def test_sklearn_multi_target_regressor():
    from sklearn.ensemble import RandomForestRegressor
    X, y = data("diabetes")
    Y = np.stack([y, np.sqrt(y)], axis=1)
    check_regressor(RandomForestRegressor(n_estimators=8, random_state=0).fit(X, Y), X)


def test_sklearn_large_batch_threads():
    """Many rows, split between 2 and 3 threads' blocks, through 8-row walks
    and the rows left over."""
    from sklearn.ensemble import RandomForestClassifier
    X, y = data("digits")
    Xs = np.concatenate([X, X[:7]])
    m = RandomForestClassifier(n_estimators=5, random_state=1).fit(X, y)
    check_classifier(m, Xs, threads=2)
    check_classifier(m, Xs, threads=3)


# --- Hand-built trees ------------------------------------------------------------------------

MODES = {
    "BRANCH_LEQ": lambda x, t: x <= t,
    "BRANCH_LT": lambda x, t: x < t,
    "BRANCH_GTE": lambda x, t: x >= t,
    "BRANCH_GT": lambda x, t: x > t,
    "BRANCH_EQ": lambda x, t: x == t,
    "BRANCH_NEQ": lambda x, t: x != t,
}

ROWS = np.array([[0.5, 2.0], [1.0, -1.0], [1.5, 0.0], [np.nan, 3.0], [1.0, 1.0],
                 [-3.0, 2.5], [2.0, np.nan]], dtype=np.float32)


def stump_regressor(mode, missing=0, **extra):
    """Tree 0: node 0 tests feature 0 against 1.0 (mode); true -> leaf 1
    (weight 10), false -> leaf 2 (weight 20)."""
    attrs = dict(
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=[mode, "LEAF", "LEAF"], nodes_values=[1.0, 0.0, 0.0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        nodes_missing_value_tracks_true=[missing, 0, 0],
        target_ids=[0, 0], target_nodeids=[1, 2], target_treeids=[0, 0],
        target_weights=[10.0, 20.0], n_targets=1)
    attrs.update(extra)
    return helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **attrs)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("missing", [0, 1])
def test_node_modes(mode, missing):
    out = run_ok(graph_model(stump_regressor(mode, missing), TensorProto.FLOAT, 2, reg_outputs(1)),
                 {"X": ROWS})
    want = []
    for x in ROWS[:, 0]:
        go = MODES[mode](float(x), 1.0) or (missing == 1 and np.isnan(x))
        want.append(10.0 if go else 20.0)
    np.testing.assert_array_equal(out["Y"][:, 0], np.array(want, dtype=np.float32))


def test_mixed_modes_and_missing():
    """Node 0: x0 <= 1 (missing -> true); its true child node 1: x1 > 0
    (BRANCH_GT); false child node 2: x1 == 2.5 (BRANCH_EQ)."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML,
        nodes_treeids=[0] * 7, nodes_nodeids=list(range(7)), nodes_featureids=[0, 1, 1, 0, 0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_GT", "BRANCH_EQ", "LEAF", "LEAF", "LEAF", "LEAF"],
        nodes_values=[1.0, 0.0, 2.5, 0, 0, 0, 0],
        nodes_truenodeids=[1, 3, 5, 0, 0, 0, 0], nodes_falsenodeids=[2, 4, 6, 0, 0, 0, 0],
        nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0, 0],
        target_ids=[0] * 4, target_nodeids=[3, 4, 5, 6], target_treeids=[0] * 4,
        target_weights=[1.0, 2.0, 3.0, 4.0], n_targets=1)
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, reg_outputs(1)), {"X": ROWS})
    want = []
    for x0, x1 in ROWS.astype(np.float64):
        if x0 <= 1.0 or np.isnan(x0):
            want.append(1.0 if x1 > 0 else 2.0)
        else:
            want.append(3.0 if x1 == 2.5 else 4.0)
    np.testing.assert_array_equal(out["Y"][:, 0], np.array(want, dtype=np.float32))


def two_tree_two_target(agg, post="NONE", base=None):
    """Tree 0: x0 <= 1 ? leaf(t0: 1, t1: -2) : leaf(t0: 3); tree 1:
    x1 <= 0 ? leaf(t1: 5) : leaf(t0: -4, t1: 0.5). Returns the node and a
    function giving, per row, the (score, has) lists the leaves add up to."""
    attrs = dict(
        nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
        nodes_featureids=[0, 0, 0, 1, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2, nodes_values=[1.0, 0, 0, 0.0, 0, 0],
        nodes_truenodeids=[1, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
        target_treeids=[0, 0, 0, 1, 1, 1], target_nodeids=[1, 1, 2, 1, 2, 2],
        target_ids=[0, 1, 0, 1, 0, 1], target_weights=[1.0, -2.0, 3.0, 5.0, -4.0, 0.5],
        n_targets=2, aggregate_function=agg, post_transform=post)
    if base is not None:
        attrs["base_values"] = base
    leaves = {(0, True): [(0, 1.0), (1, -2.0)], (0, False): [(0, 3.0)],
              (1, True): [(1, 5.0)], (1, False): [(0, -4.0), (1, 0.5)]}

    def votes(x):
        go0 = bool(x[0] <= 1.0)
        go1 = bool(x[1] <= 0.0)
        return leaves[(0, go0)] + leaves[(1, go1)]

    return helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **attrs), votes


def expected_multi(votes, rows, agg, base, post):
    out = []
    for x in rows:
        s, h = [0.0, 0.0], [False, False]
        for t, w in votes(x):
            if agg in ("SUM", "AVERAGE"):
                s[t] += w
            elif agg == "MIN":
                s[t] = w if not h[t] else min(s[t], w)
            else:
                s[t] = w if not h[t] else max(s[t], w)
            h[t] = True
        b = base if base is not None and len(base) == 2 else [0.0, 0.0]
        if agg == "AVERAGE":
            s = [v / 2 for v in s]
        if agg in ("SUM", "AVERAGE"):
            s = [v + bb for v, bb in zip(s, b)]
        else:
            s = [bb + (v if hh else 0.0) for v, bb, hh in zip(s, b, h)]
        v = np.array([s[k] if h[k] else 0.0 for k in range(2)], dtype=np.float64)
        out.append(post_np(v, post))
    return np.array(out, dtype=np.float32)


def probit_np(p):
    """ONNX Runtime's PROBIT: sqrt(2) * erfinv(2p - 1) with Winitzki's
    approximation a = 0.147: erfinv(y) ~ sgn(y) * sqrt(sqrt(c^2 - ln(1-y^2)/a) - c),
    c = 2 / (pi a) + ln(1 - y^2) / 2."""
    y = 2 * p - 1
    a = 0.147
    ln = np.log((1 - y) * (1 + y))
    c = 2 / (np.pi * a) + ln / 2
    return np.sqrt(2) * np.sign(y) * np.sqrt(np.sqrt(c * c - ln / a) - c)


def post_np(v, post):
    if post == "LOGISTIC":
        return 1 / (1 + np.exp(-v))
    if post == "SOFTMAX":
        e = np.exp(v - v.max())
        return e / e.sum()
    if post == "SOFTMAX_ZERO":
        e = np.where(np.abs(v) > 1e-7, np.exp(v - v.max()), v * np.exp(-v.max()))
        return e / e.sum()
    if post == "PROBIT":
        return probit_np(v)
    return v


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("base", [None, [0.25, -0.5]])
def test_aggregate_functions(agg, base):
    node, votes = two_tree_two_target(agg, base=base)
    rows = ROWS[~np.isnan(ROWS).any(axis=1)]
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, reg_outputs(2)), {"X": rows})
    np.testing.assert_allclose(out["Y"], expected_multi(votes, rows, agg, base, "NONE"),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_post_transforms(post):
    node, votes = two_tree_two_target("SUM", post=post)
    rows = ROWS[~np.isnan(ROWS).any(axis=1)]
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, reg_outputs(2)), {"X": rows})
    np.testing.assert_allclose(out["Y"], expected_multi(votes, rows, "SUM", None, post),
                               rtol=1e-5, atol=1e-6)


def test_post_transform_probit():
    """Scores in (0, 1): tree 0 gives (0.2, 0.9) or (0.7, 0.4)."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[1.0, 0, 0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        target_treeids=[0] * 4, target_nodeids=[1, 1, 2, 2], target_ids=[0, 1, 0, 1],
        target_weights=[0.2, 0.9, 0.7, 0.4], n_targets=2, post_transform="PROBIT")
    rows = ROWS[~np.isnan(ROWS[:, 0])]
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, reg_outputs(2)), {"X": rows})
    want = [probit_np(np.array([0.2, 0.9]) if x <= 1 else np.array([0.7, 0.4])) for x in rows[:, 0]]
    np.testing.assert_allclose(out["Y"], np.array(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_single_target_base_value(agg):
    """One target: two stumps (weights 10/20 and 1/2) plus base_values [0.5]."""
    nodes_t = [0, 0, 0, 1, 1, 1]
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML,
        nodes_treeids=nodes_t, nodes_nodeids=[0, 1, 2] * 2, nodes_featureids=[0, 0, 0, 1, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2, nodes_values=[1.0, 0, 0, 0.5, 0, 0],
        nodes_truenodeids=[1, 0, 0] * 2, nodes_falsenodeids=[2, 0, 0] * 2,
        target_treeids=[0, 0, 1, 1], target_nodeids=[1, 2, 1, 2], target_ids=[0] * 4,
        target_weights=[10.0, 20.0, 1.0, 2.0], n_targets=1, aggregate_function=agg,
        base_values=[0.5])
    rows = ROWS[~np.isnan(ROWS).any(axis=1)]
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, reg_outputs(1)), {"X": rows})
    want = []
    for x0, x1 in rows:
        a = 10.0 if x0 <= 1 else 20.0
        b = 1.0 if x1 <= 0.5 else 2.0
        v = {"SUM": a + b, "AVERAGE": (a + b) / 2, "MIN": min(a, b), "MAX": max(a, b)}[agg]
        want.append(v + 0.5)
    np.testing.assert_allclose(out["Y"][:, 0], want, rtol=1e-6)


@pytest.mark.parametrize("x_type", [TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32])
def test_input_types(x_type):
    node = stump_regressor("BRANCH_LEQ")
    xs = {TensorProto.DOUBLE: np.float64, TensorProto.INT64: np.int64,
          TensorProto.INT32: np.int32}[x_type]
    rows = np.array([[0, 5], [1, 5], [2, 5], [-7, 0], [3, 1]], dtype=xs)
    out = run_ok(graph_model(node, x_type, 2, reg_outputs(1)), {"X": rows})
    assert out["Y"].dtype == np.float32
    np.testing.assert_array_equal(out["Y"][:, 0], [10.0 if x <= 1 else 20.0 for x in rows[:, 0]])


def test_double_thresholds_as_tensor():
    """opset 3: a double threshold between two floats decides double inputs."""
    t = 1.0 + 2.0 ** -40  # not a float32
    node = stump_regressor("BRANCH_LEQ")
    del node.attribute[[a.name for a in node.attribute].index("nodes_values")]
    node.attribute.extend([helper.make_attribute(
        "nodes_values_as_tensor", numpy_helper.from_array(np.array([t, 0, 0], dtype=np.float64)))])
    rows = np.array([[1.0, 0], [t, 0], [1.0 + 2.0 ** -39, 0]], dtype=np.float64)
    out = run_ok(graph_model(node, TensorProto.DOUBLE, 2, reg_outputs(1)), {"X": rows})
    np.testing.assert_array_equal(out["Y"][:, 0], [10.0, 10.0, 20.0])


def classifier_node(class_ids, class_weights, n_labels=2, labels=None, post="NONE", base=None,
                    **extra):
    """Stump x0 <= 1: node 1 (true) and node 2 (false) leaves; the weights
    are (leaf, class id, weight) triples."""
    attrs = dict(
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[1.0, 0, 0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0] * len(class_ids), class_nodeids=[w[0] for w in class_weights],
        class_ids=class_ids, class_weights=[w[2] for w in class_weights], post_transform=post)
    if labels is None:
        attrs["classlabels_int64s"] = list(range(10, 10 + n_labels))
    else:
        attrs["classlabels_strings"] = labels
    if base is not None:
        attrs["base_values"] = base
    attrs.update(extra)
    return helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "scores"], domain=ML,
                            **attrs)


def test_binary_one_class_positive():
    """Class id 0 weighted only, weights >= 0: score p, outputs [1 - p, p],
    label 11 (the second class) when p > 0.5."""
    w = [(1, 0, 0.25), (2, 0, 0.75)]
    node = classifier_node([0, 0], w)
    rows = np.array([[0.0, 0], [2.0, 0], [1.0, 0], [5.0, 0], [-1, 0]], dtype=np.float32)
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, cls_outputs(2)), {"X": rows})
    p = np.where(rows[:, 0] <= 1, 0.25, 0.75)
    np.testing.assert_allclose(out["scores"], np.stack([1 - p, p], axis=1), rtol=1e-6)
    np.testing.assert_array_equal(out["label"], np.where(p > 0.5, 11, 10))


def test_binary_one_class_mixed_logistic():
    """Mixed signs with base_values [0.5] and LOGISTIC: score s = w + 0.5,
    outputs [logistic(-s), logistic(s)], label by s > 0."""
    w = [(1, 0, -1.5), (2, 0, 0.25)]
    node = classifier_node([0, 0], w, post="LOGISTIC", base=[0.5])
    rows = np.array([[0.0, 0], [2.0, 0], [1.0, 0], [5.0, 0], [-1, 0]], dtype=np.float32)
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, cls_outputs(2)), {"X": rows})
    s = np.where(rows[:, 0] <= 1, -1.5, 0.25) + 0.5
    sig = 1 / (1 + np.exp(-s))
    np.testing.assert_allclose(out["scores"], np.stack([1 - sig, sig], axis=1), rtol=1e-6)
    np.testing.assert_array_equal(out["label"], np.where(s > 0, 11, 10))


def test_binary_one_class_mixed_none():
    w = [(1, 0, -1.5), (2, 0, 0.25)]
    node = classifier_node([0, 0], w)
    rows = np.array([[0.0, 0], [2.0, 0]], dtype=np.float32)
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, cls_outputs(2)), {"X": rows})
    np.testing.assert_allclose(out["scores"], [[1.5, -1.5], [-0.25, 0.25]])
    np.testing.assert_array_equal(out["label"], [10, 11])


def test_multiclass_softmax_strings():
    """Three classes with base values and SOFTMAX; labels as strings; the
    label is the class of highest raw score."""
    w = [(1, 0, 1.0), (1, 2, 2.0), (2, 1, 0.5), (2, 2, -1.0)]
    node = classifier_node([c for _, c, _ in w], w, labels=["a", "b", "c"], post="SOFTMAX",
                           base=[0.1, 0.2, 0.3])
    rows = np.array([[0.0, 0], [2.0, 0], [1.0, 0], [7.0, 0], [-4.0, 0]], dtype=np.float32)
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, cls_outputs(3, TensorProto.STRING)),
                 {"X": rows})
    raw = np.where((rows[:, 0] <= 1)[:, None], [1.1, 0.2, 2.3], [0.1, 0.7, -0.7])
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["scores"], e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    labels = [s.decode() if isinstance(s, bytes) else s for s in out["label"]]
    assert labels == [["a", "b", "c"][k] for k in raw.argmax(axis=1)]


def test_multiclass_missing_class_scores_zero():
    """A class no reached leaf weights outputs 0 and cannot be the label,
    even when the others are negative."""
    w = [(1, 0, -1.0), (2, 1, -2.0)]
    node = classifier_node([0, 1], w, n_labels=3)
    rows = np.array([[0.0, 0], [2.0, 0]], dtype=np.float32)
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, cls_outputs(3)), {"X": rows})
    np.testing.assert_array_equal(out["scores"], [[-1.0, 0, 0], [0, -2.0, 0]])
    np.testing.assert_array_equal(out["label"], [10, 11])


def test_classifier_opset3_tensors():
    """class_weights_as_tensor, base_values_as_tensor, double input."""
    node = classifier_node([0, 2, 1], [(1, 0, 0), (1, 2, 0), (2, 1, 0)], n_labels=3)
    for name in ("class_weights",):
        del node.attribute[[a.name for a in node.attribute].index(name)]
    node.attribute.extend([
        helper.make_attribute("class_weights_as_tensor",
                              numpy_helper.from_array(np.array([0.5, 0.25, 2.0]))),
        helper.make_attribute("base_values_as_tensor",
                              numpy_helper.from_array(np.array([0.0, 0.1, 0.2])))])
    rows = np.array([[0.0, 0], [2.0, 0]], dtype=np.float64)
    out = run_ok(graph_model(node, TensorProto.DOUBLE, 2, cls_outputs(3)), {"X": rows})
    np.testing.assert_allclose(out["scores"], [[0.5, 0.1, 0.45], [0.0, 2.1, 0.2]], rtol=1e-6)
    np.testing.assert_array_equal(out["label"], [10, 11])


def test_opset1_model():
    X, y = data("iris")
    from sklearn.tree import DecisionTreeClassifier
    m = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)
    out = run_ok(sk_trees.make_model(m, 4, opset_ml=1), {"X": X})
    np.testing.assert_array_equal(out["label"], m.predict(X))


def test_shared_child_dag():
    """Two branch nodes sending both sides to one leaf: stored once, fine."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML,
        nodes_treeids=[0] * 4, nodes_nodeids=[0, 1, 2, 3], nodes_featureids=[0, 1, 0, 0],
        nodes_modes=["BRANCH_EQ", "BRANCH_EQ", "LEAF", "LEAF"], nodes_values=[1.0, 2.0, 0, 0],
        nodes_truenodeids=[2, 2, 0, 0], nodes_falsenodeids=[1, 3, 0, 0],
        target_ids=[0, 0], target_nodeids=[2, 3], target_treeids=[0, 0],
        target_weights=[1.0, 7.0], n_targets=1)
    rows = np.array([[1, 0], [0, 2], [0, 0], [3, 3], [1, 2]], dtype=np.float32)
    out = run_ok(graph_model(node, TensorProto.FLOAT, 2, reg_outputs(1)), {"X": rows})
    np.testing.assert_array_equal(out["Y"][:, 0], [1, 1, 7, 7, 1])


def test_tree_ensemble_v5_shares_the_evaluator():
    """TreeEnsemble 5, double input, 2 targets, SUM: tree 0 tests x0 <= 1
    (true: leaf 0 -> target 0 += 1; false: node 1, x1 in {2, 5} -> leaf 1
    (target 1 += 10) else leaf 2 (target 0 += 100)); tree 1 is node 2,
    x1 > 0 -> leaf 3 (target 1 += 0.5) else leaf 4 (target 1 += -0.5)."""
    d = lambda v: numpy_helper.from_array(np.array(v, dtype=np.float64))  # noqa: E731
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML,
        nodes_featureids=[0, 1, 1], nodes_splits=d([1.0, 0.0, 0.0]),
        nodes_modes=numpy_helper.from_array(np.array([0, 6, 3], dtype=np.uint8)),
        membership_values=d([2.0, 5.0, np.nan]),
        nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
        nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
        tree_roots=[0, 2], leaf_targetids=[0, 1, 0, 1, 1],
        leaf_weights=d([1.0, 10.0, 100.0, 0.5, -0.5]), n_targets=2, aggregate_function=1)
    x = helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, 2])
    y = helper.make_tensor_value_info("Y", TensorProto.DOUBLE, [None, 2])
    g = helper.make_graph([node], "t", [x], [y])
    model = helper.make_model(g, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)])
    rows = np.array([[0, 2], [2, 2], [2, 5], [2, 3], [1, -1], [3, 0], [9, 5], [0, 0], [4, 4]],
                    dtype=np.float64)
    want = []
    for x0, x1 in rows:
        t = [0.0, 0.0]
        if x0 <= 1:
            t[0] += 1
        elif x1 in (2.0, 5.0):
            t[1] += 10
        else:
            t[0] += 100
        t[1] += 0.5 if x1 > 0 else -0.5
        want.append(t)
    out = run_ok(model, {"X": rows})
    np.testing.assert_array_equal(out["Y"], np.array(want))


# --- Hostile models ---------------------------------------------------------------------------

def hostile(mutate, width=2, rows=None):
    node = stump_regressor("BRANCH_LEQ")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mutate(attrs)
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **attrs)
    rows = ROWS[:, :width] if rows is None else rows
    out, err = run_model(graph_model(node, TensorProto.FLOAT, width, reg_outputs(1)), {"X": rows})
    assert out is None, "a hostile model ran"
    assert "Sanitizer" not in err and "runtime error:" not in err, err
    return err


def test_hostile_child_id():
    err = hostile(lambda a: a.__setitem__("nodes_truenodeids", [7, 0, 0]))
    assert "nodes_truenodeids[0] = 7" in err and "no such node" in err


def test_hostile_negative_child_id():
    err = hostile(lambda a: a.__setitem__("nodes_falsenodeids", [-1, 0, 0]))
    assert "nodes_falsenodeids[0] = -1" in err


def test_hostile_cycle():
    def m(a):
        a["nodes_modes"] = ["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"]
        a["nodes_truenodeids"] = [1, 0, 0]
        a["nodes_falsenodeids"] = [2, 2, 0]
    err = hostile(m)
    assert "cycle" in err and "tree 0 node 1" in err


def test_hostile_self_loop():
    err = hostile(lambda a: a.__setitem__("nodes_falsenodeids", [0, 0, 0]))
    assert "cycle" in err


def test_hostile_feature_out_of_width():
    err = hostile(lambda a: a.__setitem__("nodes_featureids", [5, 0, 0]))
    assert "tree 0 node 0 reads feature 5" in err and "2 features" in err


def test_hostile_negative_feature():
    err = hostile(lambda a: a.__setitem__("nodes_featureids", [-3, 0, 0]))
    assert "feature -3" in err and "nodes_featureids" in err


def test_hostile_target_id():
    err = hostile(lambda a: a.__setitem__("target_ids", [0, 4]))
    assert "target_ids[1] = 4" in err


def test_hostile_weight_node():
    err = hostile(lambda a: a.__setitem__("target_nodeids", [1, 9]))
    assert "target_nodeids[1] = 9" in err


def test_hostile_duplicate_node():
    err = hostile(lambda a: a.__setitem__("nodes_nodeids", [0, 1, 1]))
    assert "appears twice" in err


def test_hostile_lengths():
    err = hostile(lambda a: a.__setitem__("nodes_featureids", [0, 0]))
    assert "nodes_featureids" in err


def test_hostile_mode():
    err = hostile(lambda a: a.__setitem__("nodes_modes", ["BRANCH_XX", "LEAF", "LEAF"]))
    assert "nodes_modes[0]" in err and "BRANCH_XX" in err


def test_hostile_post_transform():
    err = hostile(lambda a: a.__setitem__("post_transform", "EXP"))
    assert "post_transform" in err


def test_hostile_class_id():
    node = classifier_node([0, 5], [(1, 0, 1.0), (2, 5, 1.0)], n_labels=3)
    out, err = run_model(graph_model(node, TensorProto.FLOAT, 2, cls_outputs(3)),
                         {"X": ROWS})
    assert out is None and "class_ids[1] = 5" in err
    assert "Sanitizer" not in err and "runtime error:" not in err, err


# --- Random ensembles -------------------------------------------------------------------------

def random_tree(rng, tree_id, n_features, modes, depth):
    """A random full binary tree as attribute lists (node ids in creation
    order, children listed after their parent)."""
    nodes = []

    def make(d):
        i = len(nodes)
        nodes.append(None)
        if d == 0 or rng.random() < 0.2:
            nodes[i] = ("LEAF", 0, 0.0, 0, 0, 0)
            return i
        t = make(d - 1)
        f = make(d - 1)
        mode = modes[rng.integers(len(modes))]
        nodes[i] = (mode, int(rng.integers(n_features)), float(rng.integers(-4, 5)) / 2,
                    t, f, int(rng.random() < 0.3))
        return i

    make(depth)
    return nodes


def reference_regressor(trees, weights, X, n_targets, agg, base):
    """Plain-Python evaluation with ONNX Runtime's rules for several
    targets (see cpu_ml_tree.c): per target a score and whether a leaf gave
    one; base values added when there is one per target."""
    out = []
    for x in X.astype(np.float64):
        s = [0.0] * n_targets
        h = [False] * n_targets
        for tid, nodes in enumerate(trees):
            i = 0
            while nodes[i][0] != "LEAF":
                mode, f, t, ti, fi, miss = nodes[i]
                v = x[f]
                go = MODES[mode](v, t) or (miss and np.isnan(v))
                i = ti if go else fi
            for k, w in weights.get((tid, i), []):
                if agg in ("SUM", "AVERAGE"):
                    s[k] += w
                elif not h[k]:
                    s[k] = w
                else:
                    s[k] = min(s[k], w) if agg == "MIN" else max(s[k], w)
                h[k] = True
        row = []
        for k in range(n_targets):
            b = base[k] if base is not None else 0.0
            v = s[k] / len(trees) if agg == "AVERAGE" else s[k]
            v = v + b if agg in ("SUM", "AVERAGE") else b + (s[k] if h[k] else 0.0)
            row.append(v if h[k] else 0.0)
        out.append(row)
    return np.array(out)


@pytest.mark.parametrize("seed", range(12))
def test_random_ensembles(seed):
    """Random trees (uniform or mixed modes, missing-value flags, several
    weights per leaf, 3 targets) on 37 rows with NaNs, against the Python
    evaluation above."""
    rng = np.random.default_rng(seed)
    n_features, n_targets = 4, 3
    uniform = seed % 2 == 0
    modes = [sorted(MODES)[seed % 6]] if uniform else sorted(MODES)
    agg = ["SUM", "AVERAGE", "MIN", "MAX"][seed % 4]
    trees = [random_tree(rng, t, n_features, modes, int(rng.integers(1, 7)))
             for t in range(int(rng.integers(1, 6)))]
    attrs = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                             "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                             "nodes_missing_value_tracks_true", "target_treeids",
                             "target_nodeids", "target_ids", "target_weights")}
    weights = {}
    for tid, nodes in enumerate(trees):
        for i, (mode, f, t, ti, fi, miss) in enumerate(nodes):
            for k, v in zip(["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                             "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                             "nodes_missing_value_tracks_true"],
                            [tid, i, f, mode, t, ti, fi, miss if not uniform else 0]):
                attrs[k].append(v)
            if mode == "LEAF":
                for k in rng.choice(n_targets, size=int(rng.integers(0, 3)), replace=False):
                    w = float(rng.integers(-8, 9)) / 4
                    weights.setdefault((tid, i), []).append((int(k), w))
                    attrs["target_treeids"].append(tid)
                    attrs["target_nodeids"].append(i)
                    attrs["target_ids"].append(int(k))
                    attrs["target_weights"].append(w)
        if uniform:
            trees[tid] = [n[:5] + (0,) if n[0] != "LEAF" else n for n in nodes]
    base = [0.5, -1.0, 2.0] if seed % 3 == 0 else None
    if base is not None:
        attrs["base_values"] = base
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=n_targets,
                            aggregate_function=agg, **attrs)
    X = rng.integers(-6, 7, size=(37, n_features)).astype(np.float32) / 2
    X[rng.random(X.shape) < 0.1] = np.nan
    out = run_ok(graph_model(node, TensorProto.FLOAT, n_features, reg_outputs(n_targets)),
                 {"X": X})
    want = reference_regressor(trees, weights, X, n_targets, agg, base)
    np.testing.assert_allclose(out["Y"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", range(30))
def test_random_hostile_structure(seed):
    """Random child ids, modes and feature ids, valid or not: the model runs
    or is refused with an error; never a crash or a sanitizer report."""
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(1, 8))
    names = sorted(MODES) + ["LEAF", "LEAF"]
    attrs = dict(
        nodes_treeids=[int(v) for v in rng.integers(0, 2, n)], nodes_nodeids=list(range(n)),
        nodes_featureids=[int(v) for v in rng.integers(-1, 4, n)],
        nodes_modes=[names[int(v)] for v in rng.integers(0, len(names), n)],
        nodes_values=[float(v) for v in rng.normal(size=n)],
        nodes_truenodeids=[int(v) for v in rng.integers(-1, n + 1, n)],
        nodes_falsenodeids=[int(v) for v in rng.integers(-1, n + 1, n)],
        target_treeids=[0, 1], target_nodeids=[int(v) for v in rng.integers(0, n + 1, 2)],
        target_ids=[int(v) for v in rng.integers(0, 3, 2)], target_weights=[1.0, 2.0],
        n_targets=2)
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **attrs)
    X = rng.normal(size=(11, 3)).astype(np.float32)
    out, err = run_model(graph_model(node, TensorProto.FLOAT, 3, reg_outputs(2)), {"X": X})
    if out is None:
        assert "Sanitizer" not in err and "runtime error:" not in err, err
        assert "TreeEnsembleRegressor" in err or "tree" in err, err
