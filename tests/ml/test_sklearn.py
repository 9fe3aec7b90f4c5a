"""ai.onnx.ml models from fitted scikit-learn estimators, run by Onyx.

Each case fits a model on one of scikit-learn's bundled datasets (iris,
digits, diabetes, breast_cancer), writes its graph with sk_convert.py into a
temporary folder (never into the tree) and checks Onyx's outputs:

Models run through the onyx command ($ONYX_BIN, else build/bin/onyx: `onyx
run --output-dir`, so a sanitizer build checks the kernels); the ZipMap case,
whose output is a sequence of maps, through the Python package (build/python,
or $ONYX_PYTHONPATH) in a child interpreter, skipped with the reason when
that cannot run it (ZipMap not built, a sanitizer build's module). Outputs are checked

* against scikit-learn itself: labels equal to predict(), probabilities
  (predict_proba) or decision values (decision_function / predict for
  regressors) within 1e-5 (relative to the value's size where it is over
  1, as for the diabetes targets in the hundreds);
* against ONNX Runtime on the same model file and inputs, when the peer
  (node and ../shared/peer with onnxruntime-node, see its README) is there;
  else that comparison is skipped with a message.

The features are rounded to float32 first and scikit-learn is given those
values, so both sides see the same inputs. The ONNX operators compute in
float32 (ONNX Runtime's kernels do, and so do Onyx's), scikit-learn in
float64: the SVMs' C is kept moderate so that sums over hundreds of support
vectors stay within the tolerance in float32.

Run: /usr/bin/python3 -m pytest tests/ml/test_sklearn.py (or ctest -R ml_sklearn).
"""

import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn", reason="scikit-learn (Debian's python3-sklearn) is missing")
onnx = pytest.importorskip("onnx", reason="onnx (python3-onnx) is missing")
from onnx import numpy_helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
ONYX_BIN = os.environ.get("ONYX_BIN") or os.path.join(REPO, "build", "bin", "onyx")

import sk_convert  # noqa: E402
from sklearn import datasets, linear_model, pipeline, preprocessing, svm  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402

TOL = 1e-5
PEER = os.environ.get("ONYX_PEER_SCRIPTS") or os.path.join(REPO, "..", "shared", "peer")

# --- data --------------------------------------------------------------------------------------


def _data(name):
    loader = {
        "iris": datasets.load_iris,
        "digits": datasets.load_digits,
        "diabetes": datasets.load_diabetes,
        "breast_cancer": datasets.load_breast_cancer,
    }[name]
    X, y = loader(return_X_y=True)
    X = X.astype(np.float32).astype(np.float64)
    return X, y


def _scaled(name):
    X, y = _data(name)
    X = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
    return X.astype(np.float32).astype(np.float64), y


# --- running -------------------------------------------------------------------------------------


def _run_onyx(path, X):
    if not os.path.isfile(ONYX_BIN):
        pytest.skip("the onyx command is not built (%s)" % ONYX_BIN)
    d = os.path.dirname(path)
    inp = os.path.join(d, "onyx_X.pb")
    with open(inp, "wb") as f:
        f.write(numpy_helper.from_array(X, "X").SerializeToString())
    out = os.path.join(d, "onyx_out")
    r = subprocess.run([ONYX_BIN, "run", path, "--input", "X=" + inp, "--output-dir", out],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, "onyx failed on %s: %s" % (path, r.stderr[-2000:])
    return {f[:-3]: numpy_helper.to_array(onnx.load_tensor(os.path.join(out, f)))
            for f in os.listdir(out)}


# Runs a model through the Python package in a child interpreter (a
# sanitizer build's module cannot load into this one) and prints its outputs
# as JSON: tensors as lists, a sequence of maps as a list of [key, value]
# pair lists.
_PY_RUN = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import onyx
sess = onyx.InferenceSession(sys.argv[2], providers=["CPUExecutionProvider"])
x = np.load(sys.argv[3])
res = {}
for o, v in zip(sess.get_outputs(), sess.run(None, {"X": x})):
    if isinstance(v, list):
        res[o.name] = [[[k.item() if hasattr(k, "item") else k, float(val)] for k, val in m.items()]
                       for m in v]
    else:
        res[o.name] = [e.decode() if isinstance(e, bytes) else e for e in v.tolist()]
print(json.dumps(res))
"""


def _run_onyx_python(path, X):
    """The outputs through the Python package, or pytest.skip naming why not."""
    pkg = os.environ.get("ONYX_PYTHONPATH") or os.path.join(REPO, "build", "python")
    if not os.path.isdir(os.path.join(pkg, "onyx")):
        pytest.skip("the onyx Python package is not built (%s)" % pkg)
    xf = os.path.join(os.path.dirname(path), "X.npy")
    np.save(xf, X)
    r = subprocess.run([sys.executable, "-c", _PY_RUN, pkg, path, xf], capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        lines = r.stderr.strip().splitlines()
        pytest.skip("the model does not run through the Python package: %s" %
                    (lines[-1] if lines else "exit %d" % r.returncode))
    return json.loads(r.stdout)


_peer_state = {}


def _peer_missing():
    """None when ONNX Runtime's peer runs here, else why it does not."""
    if "why" not in _peer_state:
        why = None
        if not shutil.which("node"):
            why = "node is not installed"
        elif not os.path.isfile(os.path.join(PEER, "ort_run.js")):
            why = "the peer scripts are not at %s" % PEER
        else:
            r = subprocess.run(
                ["node", "-e", "require(%s).ort()" % json.dumps(os.path.join(PEER, "lib.js"))],
                capture_output=True,
                text=True,
            )
            if r.returncode:
                why = "onnxruntime-node is not installed (bash %s/setup.sh): %s" % (
                    PEER,
                    r.stderr.strip().splitlines()[-1:] or "",
                )
        _peer_state["why"] = why
    return _peer_state["why"]


def _run_ort(path, X, tmp):
    inp = os.path.join(tmp, "X.pb")
    with open(inp, "wb") as f:
        f.write(numpy_helper.from_array(X, "X").SerializeToString())
    out = os.path.join(tmp, "ort_out")
    r = subprocess.run(
        ["node", os.path.join(PEER, "ort_run.js"), path, "--inputs", inp, "--out", out,
         "--iters", "1", "--warmup", "0"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, "ONNX Runtime failed on %s: %s" % (path, r.stderr[-2000:])
    model = onnx.load(path)
    res = {}
    for k, o in enumerate(model.graph.output):
        t = onnx.TensorProto()
        with open(os.path.join(out, "output_%d.pb" % k), "rb") as f:
            t.ParseFromString(f.read())
        res[o.name] = numpy_helper.to_array(t)
    return res


def _close(a, b, what):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, "%s: shape %s vs %s" % (what, a.shape, b.shape)
    err = np.abs(a - b) / np.maximum(1.0, np.abs(b))
    worst = np.unravel_index(np.argmax(err), err.shape) if err.size else None
    assert err.size == 0 or err.max() <= TOL, "%s: worst at %s: %r vs %r (err %.3g)" % (
        what,
        worst,
        a[worst],
        b[worst],
        err.max(),
    )


def _labels_equal(got, want, what):
    got = np.asarray(got)
    want = np.asarray(want)
    if want.dtype.kind in "OUS":
        got = np.array([g.decode() if isinstance(g, bytes) else str(g) for g in got.ravel()])
        want = np.array([w.decode() if isinstance(w, bytes) else str(w) for w in want.ravel()])
    else:
        got = got.astype(np.int64).ravel()
        want = want.astype(np.int64).ravel()
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, "%s: %d labels differ, first at row %d: %r vs %r" % (
        what,
        bad.size,
        bad[0],
        got[bad[0]],
        want[bad[0]],
    )


def _check(tmp_path, model, X, expect, input_type=np.float32, zipmap=False):
    """Converts, runs Onyx, compares with `expect` (output name -> array, or
    'label' -> labels), then with ONNX Runtime's outputs."""
    proto = sk_convert.convert(model, X.shape[1], input_type=input_type, zipmap=zipmap)
    path = str(tmp_path / "model.onnx")
    onnx.save(proto, path)
    Xin = X.astype(input_type)
    got = _run_onyx(path, Xin)
    for name, want in expect.items():
        if name == "label":
            _labels_equal(got["label"], want, "Onyx vs scikit-learn, label")
        else:
            _close(got[name], want, "Onyx vs scikit-learn, %s" % name)
    why = _peer_missing()
    if why:
        pytest.skip("compared with scikit-learn only; ONNX Runtime comparison skipped: " + why)
    ref = _run_ort(path, Xin, str(tmp_path))
    for name, g in got.items():
        if name == "label":
            _labels_equal(g, ref[name], "Onyx vs ONNX Runtime, label")
        else:
            _close(g, ref[name], "Onyx vs ONNX Runtime, %s" % name)


def _fit(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, y)


# --- regressors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: linear_model.LinearRegression(),
        lambda: linear_model.Ridge(alpha=0.5),
        lambda: svm.LinearSVR(C=10.0, max_iter=20000, random_state=0),
    ],
    ids=["LinearRegression", "Ridge", "LinearSVR"],
)
def test_linear_regressors(tmp_path, make):
    X, y = _data("diabetes")
    m = _fit(make(), X, y)
    _check(tmp_path, m, X, {"variable": m.predict(X).reshape(-1, 1)})


def test_linear_regression_two_targets(tmp_path):
    X, y = _data("diabetes")
    Y = np.stack([y, 0.5 * y - 3.0 * X[:, 0]], axis=1)
    m = _fit(linear_model.LinearRegression(), X, Y)
    _check(tmp_path, m, X, {"variable": m.predict(X)})


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
def test_svr(tmp_path, kernel):
    X, y = _scaled("diabetes")
    m = _fit(svm.SVR(kernel=kernel, C=2.0, degree=3, coef0=0.5 if kernel != "linear" else 0.0), X, y)
    _check(tmp_path, m, X, {"variable": m.predict(X).reshape(-1, 1)})


def test_nusvr(tmp_path):
    X, y = _scaled("diabetes")
    m = _fit(svm.NuSVR(nu=0.4, C=20.0), X, y)
    _check(tmp_path, m, X, {"variable": m.predict(X).reshape(-1, 1)})


def test_one_class_svm(tmp_path):
    X, _ = _scaled("breast_cancer")
    m = _fit(svm.OneClassSVM(nu=0.1, gamma=0.05), X, None)
    pred = m.predict(X)
    # A score within float rounding of 0 may land on either side.
    d = m.decision_function(X)
    keep = np.abs(d) > 1e-4
    proto = sk_convert.convert(m, X.shape[1])
    path = str(tmp_path / "model.onnx")
    onnx.save(proto, path)
    got = _run_onyx(path, X.astype(np.float32))["variable"].ravel()
    _labels_equal(got[keep], pred[keep], "Onyx vs scikit-learn, one-class label")


# --- linear classifiers --------------------------------------------------------------------------


@pytest.mark.parametrize("dataset", ["breast_cancer", "iris", "digits"])
def test_logistic_multinomial_and_binary(tmp_path, dataset):
    X, y = _scaled(dataset)
    m = _fit(linear_model.LogisticRegression(max_iter=5000, C=0.5), X, y)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


@pytest.mark.parametrize("dataset", ["iris", "digits"])
def test_logistic_ovr(tmp_path, dataset):
    X, y = _scaled(dataset)
    m = _fit(linear_model.LogisticRegression(multi_class="ovr", max_iter=5000), X, y)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


def test_logistic_string_labels(tmp_path):
    X, y = _scaled("iris")
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    m = _fit(linear_model.LogisticRegression(max_iter=5000), X, names)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


@pytest.mark.parametrize("dataset", ["breast_cancer", "iris"])
def test_linear_svc(tmp_path, dataset):
    X, y = _scaled(dataset)
    m = _fit(svm.LinearSVC(C=0.5, max_iter=20000, random_state=0), X, y)
    d = m.decision_function(X)
    scores = np.stack([1 - d, d], axis=1) if d.ndim == 1 else d
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": scores})


# --- kernel SVM classifiers ----------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
@pytest.mark.parametrize("dataset", ["breast_cancer", "iris"])
def test_svc_decision(tmp_path, dataset, kernel):
    X, y = _scaled(dataset)
    m = _fit(
        svm.SVC(kernel=kernel, C=0.5, degree=2, coef0=0.1, gamma="scale",
                decision_function_shape="ovo"),
        X,
        y,
    )
    d = m.decision_function(X)
    # Binary: libsvm's score is for the first class, scikit-learn's d for the second.
    scores = np.stack([d, -d], axis=1) if d.ndim == 1 else d
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": scores})


@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly"])
@pytest.mark.parametrize("dataset", ["breast_cancer", "iris", "digits"])
def test_svc_probability(tmp_path, dataset, kernel):
    X, y = _scaled(dataset)
    if dataset == "digits":
        X, y = X[::3], y[::3]
    m = _fit(svm.SVC(kernel=kernel, C=1.0, degree=2, coef0=0.1, probability=True, random_state=0),
             X, y)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


def test_svc_digits_decision(tmp_path):
    """Ten classes: 45 one-vs-one scores per row."""
    X, y = _scaled("digits")
    X, y = X[::2], y[::2]
    m = _fit(svm.SVC(kernel="rbf", C=0.5, decision_function_shape="ovo"), X, y)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.decision_function(X)})


def test_svc_string_labels_binary(tmp_path):
    X, y = _scaled("breast_cancer")
    names = np.array(["malignant", "benign"])[y]
    m = _fit(svm.SVC(kernel="rbf", C=0.5, probability=True, random_state=0), X, names)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


def test_nusvc(tmp_path):
    X, y = _scaled("iris")
    m = _fit(svm.NuSVC(nu=0.3, probability=True, random_state=0), X, y)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


# --- preprocessing and pipelines -----------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        preprocessing.StandardScaler,
        preprocessing.MinMaxScaler,
        lambda: preprocessing.Normalizer(norm="l1"),
        lambda: preprocessing.Normalizer(norm="l2"),
        lambda: preprocessing.Normalizer(norm="max"),  # digits are >= 0: max = max |x|
        lambda: preprocessing.Binarizer(threshold=4.0),
    ],
    ids=["StandardScaler", "MinMaxScaler", "Normalizer-l1", "Normalizer-l2", "Normalizer-max",
         "Binarizer"],
)
def test_transformers(tmp_path, make):
    X, _ = _data("digits")
    m = _fit(make(), X, None)
    _check(tmp_path, m, X, {"variable": m.transform(X)})


def _with_holes(X, seed=0):
    X = X.copy()
    rng = np.random.default_rng(seed)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


@pytest.mark.parametrize("strategy", ["mean", "median"])
def test_simple_imputer(tmp_path, strategy):
    X, _ = _data("diabetes")
    X = _with_holes(X)
    m = _fit(SimpleImputer(strategy=strategy), X, None)
    _check(tmp_path, m, X, {"variable": m.transform(X)})


def test_pipeline_imputer_scaler_logistic(tmp_path):
    X, y = _data("breast_cancer")
    X = _with_holes(X, 1)
    m = _fit(
        pipeline.make_pipeline(
            SimpleImputer(), preprocessing.StandardScaler(),
            linear_model.LogisticRegression(max_iter=5000)
        ),
        X,
        y,
    )
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


def test_pipeline_minmax_svc(tmp_path):
    X, y = _data("iris")
    m = _fit(
        pipeline.make_pipeline(preprocessing.MinMaxScaler(),
                               svm.SVC(kernel="rbf", probability=True, random_state=0)),
        X,
        y,
    )
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


def test_pipeline_scaler_ridge(tmp_path):
    X, y = _data("diabetes")
    m = _fit(pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.Ridge()), X, y)
    _check(tmp_path, m, X, {"variable": m.predict(X).reshape(-1, 1)})


def test_pipeline_onehot_logistic(tmp_path):
    X, y = _data("iris")
    Xi = np.floor(X * 2).astype(np.int64)  # a few small integer categories per column
    m = pipeline.make_pipeline(
        preprocessing.OneHotEncoder(handle_unknown="ignore"),
        linear_model.LogisticRegression(max_iter=5000),
    )
    # Fitted on half the rows, so some values of the others are unknown (zeros).
    _fit(m, Xi[::2], y[::2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = {"label": m.predict(Xi), "probabilities": m.predict_proba(Xi)}
    _check(tmp_path, m, Xi, want, input_type=np.int64)


def test_pipeline_normalizer_linear_svc(tmp_path):
    X, y = _data("digits")
    m = _fit(
        pipeline.make_pipeline(preprocessing.Normalizer(), svm.LinearSVC(max_iter=20000,
                                                                          random_state=0)),
        X,
        y,
    )
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.decision_function(X)})


# --- trees (tests/ml/sk_trees.py) ----------------------------------------------------------------


def _trees():
    try:
        import sk_trees  # noqa: F401
    except ImportError:
        pytest.skip("tests/ml/sk_trees.py (the tree converter) is not in this tree")


@pytest.mark.parametrize("dataset", ["iris", "breast_cancer"])
def test_pipeline_scaler_forest(tmp_path, dataset):
    _trees()
    from sklearn.ensemble import RandomForestClassifier

    X, y = _data(dataset)
    m = _fit(
        pipeline.make_pipeline(preprocessing.StandardScaler(),
                               RandomForestClassifier(n_estimators=10, max_depth=6,
                                                      random_state=0)),
        X,
        y,
    )
    # Scaler's attributes are float32: give scikit-learn the same mean and
    # 1 / scale, else a scaled value next to a split may fall on the other side.
    sc = m.steps[0][1]
    sc.mean_ = sc.mean_.astype(np.float32).astype(np.float64)
    sc.scale_ = 1.0 / (1.0 / sc.scale_).astype(np.float32).astype(np.float64)
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


def test_pipeline_imputer_gradient_boosting(tmp_path):
    _trees()
    from sklearn.ensemble import GradientBoostingClassifier

    X, y = _data("breast_cancer")
    X = _with_holes(X, 2)
    m = _fit(
        pipeline.make_pipeline(SimpleImputer(strategy="median"),
                               GradientBoostingClassifier(n_estimators=15, max_depth=3,
                                                          random_state=0)),
        X,
        y,
    )
    _check(tmp_path, m, X, {"label": m.predict(X), "probabilities": m.predict_proba(X)})


def test_gradient_boosting_regressor(tmp_path):
    _trees()
    from sklearn.ensemble import GradientBoostingRegressor

    X, y = _data("diabetes")
    m = _fit(GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0), X, y)
    _check(tmp_path, m, X, {"variable": m.predict(X).reshape(-1, 1)})


# --- ZipMap --------------------------------------------------------------------------------------


def test_zipmap_output(tmp_path):
    X, y = _scaled("iris")
    m = _fit(linear_model.LogisticRegression(max_iter=5000), X, y)
    proto = sk_convert.convert(m, X.shape[1], zipmap=True)
    path = str(tmp_path / "model.onnx")
    onnx.save(proto, path)
    got = _run_onyx_python(path, X.astype(np.float32))
    _labels_equal(got["label"], m.predict(X), "Onyx vs scikit-learn, label")
    probs = m.predict_proba(X)
    maps = got["output_probability"]
    assert len(maps) == len(X)
    for r, row in enumerate(maps):
        row = dict(row)
        assert sorted(row.keys()) == list(m.classes_)
        _close([row[c] for c in m.classes_], probs[r], "ZipMap row %d" % r)
