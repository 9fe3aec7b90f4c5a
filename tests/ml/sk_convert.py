"""Fitted scikit-learn models as ai.onnx.ml ONNX graphs (test side).

convert(model, n_features, input_type=np.float32, zipmap=False) -> ModelProto

The graph reads "X" ([N, n_features], float32, or int64 for a model that
starts with a OneHotEncoder) and writes, for a classifier, "label" ([N],
int64 or string as the classes are) and "probabilities" ([N, n_classes]
float; the decision values where the model has no probabilities), or with
zipmap=True "label" and "output_probability" (a sequence of maps, through
ZipMap); for a regressor "variable" ([N, 1] float). A transformer alone
writes "variable" too.

Supported (the graph each becomes, read the way ONNX Runtime reads the
operators):

* LinearRegression, Ridge, LinearSVR: LinearRegressor.
* LogisticRegression: LinearClassifier. Binary: the rows [-w, w] with
  intercepts [-b, b] and post_transform LOGISTIC give [P(0), P(1)].
  Multinomial: SOFTMAX of the class scores. One-vs-rest: LOGISTIC, then a
  Normalizer L1 (scikit-learn divides the sigmoids by their sum).
* LinearSVC: LinearClassifier, post_transform NONE. Binary: one row w; the
  runtime writes [1 - s, s], s the decision value.
* SVC, NuSVC: SVMClassifier in libsvm's one-vs-one form (the private
  _dual_coef_ / _intercept_, libsvm's signs, so a pair's score is > 0 for
  its first class). probability=True adds prob_a / prob_b (Platt scaling
  and pairwise coupling give predict_proba). Without probabilities the
  scores are the one-vs-one decision values (decision_function_shape
  'ovo'); binary: [-s, s] of libsvm's score s, which is [d, -d] of
  scikit-learn's decision_function d.
* SVR, NuSVR, OneClassSVM: SVMRegressor (one_class=1 for OneClassSVM).
* StandardScaler, MinMaxScaler: Scaler. SimpleImputer: Imputer.
  Normalizer: Normalizer (its 'max' divides by the largest value, so a
  model with norm='max' agrees with scikit-learn on non-negative data
  only). Binarizer: Binarizer.
* OneHotEncoder (integer columns): per column an ArrayFeatureExtractor and
  a OneHotEncoder (zeros=1: an unknown value gives zeros, as
  handle_unknown='ignore'), joined by a FeatureVectorizer.
* Pipeline of those, the last step any of them.
* Trees (DecisionTree, RandomForest, ExtraTrees, GradientBoosting) through
  tests/ml/sk_trees.py (convert_tree_model).
"""

import numpy as np
import onnx
from onnx import TensorProto, helper

ML = "ai.onnx.ml"


class _Graph:
    def __init__(self):
        self.nodes = []
        self.inits = []
        self.n = 0

    def name(self, base):
        self.n += 1
        return "%s_%d" % (base, self.n)

    def node(self, op, inputs, outputs, domain=ML, **attrs):
        self.nodes.append(
            helper.make_node(op, inputs, outputs, name=self.name(op), domain=domain, **attrs)
        )


def _f(a):
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def _labels(classes):
    classes = np.asarray(classes)
    if classes.dtype.kind in "iub":
        return {"classlabels_ints": [int(c) for c in classes]}, TensorProto.INT64
    return {"classlabels_strings": [str(c) for c in classes]}, TensorProto.STRING


def _is(model, *names):
    return type(model).__name__ in names


def _transform(g, est, x, n_features):
    """A transformer step from x; returns (its output, its feature count)."""
    y = g.name("t")
    if _is(est, "StandardScaler"):
        mean = est.mean_ if est.with_mean else np.zeros(n_features)
        scale = est.scale_ if est.with_std else np.ones(n_features)
        g.node("Scaler", [x], [y], offset=_f(mean), scale=_f(1.0 / np.asarray(scale)))
    elif _is(est, "MinMaxScaler"):
        # X * scale_ + min_ = (X - (-min_ / scale_)) * scale_
        g.node("Scaler", [x], [y], offset=_f(-est.min_ / est.scale_), scale=_f(est.scale_))
    elif _is(est, "SimpleImputer"):
        if est.strategy not in ("mean", "median", "most_frequent", "constant"):
            raise ValueError("SimpleImputer strategy %s" % est.strategy)
        missing = est.missing_values
        rv = float("nan") if missing is None or missing != missing else float(missing)
        g.node("Imputer", [x], [y], imputed_value_floats=_f(est.statistics_), replaced_value_float=rv)
    elif _is(est, "Normalizer"):
        g.node("Normalizer", [x], [y], norm={"l1": "L1", "l2": "L2", "max": "MAX"}[est.norm])
    elif _is(est, "Binarizer"):
        g.node("Binarizer", [x], [y], threshold=float(est.threshold))
    elif _is(est, "OneHotEncoder"):
        parts, dims = [], []
        for j, cats in enumerate(est.categories_):
            idx = g.name("col")
            g.inits.append(helper.make_tensor(idx, TensorProto.INT64, [1], [j]))
            col, hot = g.name("c"), g.name("h")
            g.node("ArrayFeatureExtractor", [x, idx], [col])
            g.node("OneHotEncoder", [col], [hot], cats_int64s=[int(c) for c in cats], zeros=1)
            parts.append(hot)
            dims.append(len(cats))
        g.node("FeatureVectorizer", parts, [y], inputdimensions=dims)
        return y, int(sum(dims))
    else:
        return None, None
    return y, n_features


def _final(g, est, x, n_features, zipmap):
    """The last step; returns the graph outputs (ValueInfoProto list)."""
    N = "N"
    if _is(est, "LinearRegression", "Ridge", "LinearSVR"):
        coef = np.atleast_2d(est.coef_)
        icpt = np.atleast_1d(est.intercept_)
        g.node(
            "LinearRegressor",
            [x],
            ["variable"],
            coefficients=_f(coef),
            intercepts=_f(icpt),
            targets=coef.shape[0],
        )
        return [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [N, coef.shape[0]])]
    if _is(est, "SVR", "NuSVR", "OneClassSVM"):
        attrs = _svm_kernel(est)
        g.node(
            "SVMRegressor",
            [x],
            ["variable"],
            coefficients=_f(est.dual_coef_),
            support_vectors=_f(est.support_vectors_),
            n_supports=int(est.support_vectors_.shape[0]),
            rho=_f(est.intercept_[:1]),
            one_class=1 if _is(est, "OneClassSVM") else 0,
            **attrs,
        )
        return [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [N, 1])]

    if not hasattr(est, "classes_") or _is(est, *_TREES):
        return _trees(g, est, x, n_features, zipmap)
    classes = est.classes_
    lab, lab_type = _labels(classes)
    nc = len(classes)
    scores = "probabilities" if not zipmap else g.name("scores")
    if _is(est, "LogisticRegression"):
        coef, icpt = est.coef_, est.intercept_
        multi = getattr(est, "multi_class", "auto")
        if nc == 2:
            g.node(
                "LinearClassifier",
                [x],
                ["label", scores],
                coefficients=_f(np.vstack([-coef, coef])),
                intercepts=_f([-icpt[0], icpt[0]]),
                post_transform="LOGISTIC",
                **lab,
            )
        elif multi == "ovr" or (multi == "auto" and est.solver == "liblinear"):
            raw = g.name("sig")
            g.node(
                "LinearClassifier",
                [x],
                ["label", raw],
                coefficients=_f(coef),
                intercepts=_f(icpt),
                post_transform="LOGISTIC",
                **lab,
            )
            g.node("Normalizer", [raw], [scores], norm="L1")
        else:
            g.node(
                "LinearClassifier",
                [x],
                ["label", scores],
                coefficients=_f(coef),
                intercepts=_f(icpt),
                post_transform="SOFTMAX",
                **lab,
            )
    elif _is(est, "LinearSVC"):
        g.node(
            "LinearClassifier",
            [x],
            ["label", scores],
            coefficients=_f(est.coef_),
            intercepts=_f(est.intercept_),
            post_transform="NONE",
            **lab,
        )
    elif _is(est, "SVC", "NuSVC"):
        attrs = _svm_kernel(est)
        if est.probability:
            attrs["prob_a"] = _f(est.probA_)
            attrs["prob_b"] = _f(est.probB_)
        g.node(
            "SVMClassifier",
            [x],
            ["label", scores],
            coefficients=_f(est._dual_coef_),
            support_vectors=_f(est.support_vectors_),
            vectors_per_class=[int(v) for v in est._n_support],
            rho=_f(est._intercept_),
            **attrs,
            **lab,
        )
    else:
        raise ValueError("no ONNX form for %s" % type(est).__name__)
    label = helper.make_tensor_value_info("label", lab_type, [N])
    if zipmap:
        return [label] + _zipmap(g, scores, lab)
    n_scores = None
    return [label, helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [N, n_scores])]


_TREES = (
    "DecisionTreeClassifier",
    "DecisionTreeRegressor",
    "RandomForestClassifier",
    "RandomForestRegressor",
    "ExtraTreesClassifier",
    "ExtraTreesRegressor",
    "GradientBoostingClassifier",
    "GradientBoostingRegressor",
)


def _trees(g, est, x, n_features, zipmap):
    """A tree model through tests/ml/sk_trees.py (its outputs "label" and
    "probabilities", or "variable")."""
    from sk_trees import convert_tree_model

    nodes, inits, outs = convert_tree_model(est, x, n_features)
    g.nodes += nodes
    g.inits += inits
    if not zipmap or not any(o.name == "probabilities" for o in outs):
        return outs
    scores = g.name("scores")
    for n in nodes:
        n.output[:] = [scores if o == "probabilities" else o for o in n.output]
    lab, _ = _labels(est.classes_)
    return [o for o in outs if o.name != "probabilities"] + _zipmap(g, scores, lab)


def _zipmap(g, scores, lab):
    key = "classlabels_int64s" if "classlabels_ints" in lab else "classlabels_strings"
    vals = lab.get("classlabels_ints", lab.get("classlabels_strings"))
    g.node("ZipMap", [scores], ["output_probability"], **{key: vals})
    key_type = TensorProto.INT64 if key == "classlabels_int64s" else TensorProto.STRING
    m = onnx.TypeProto()
    m.map_type.key_type = key_type
    m.map_type.value_type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    seq = helper.make_sequence_type_proto(m)
    return [helper.make_value_info("output_probability", seq)]


def _svm_kernel(est):
    kernel = est.kernel
    if callable(kernel) or kernel == "precomputed":
        raise ValueError("SVM kernel %r has no ONNX form" % (kernel,))
    gamma = float(getattr(est, "_gamma", 0.0))
    return {
        "kernel_type": kernel.upper(),
        "kernel_params": [gamma, float(est.coef0), float(est.degree)],
    }


def convert(model, n_features, input_type=np.float32, zipmap=False):
    """The ModelProto of a fitted model (or Pipeline) reading X [N, n_features]."""
    g = _Graph()
    n_inputs = n_features
    steps = [s for _, s in model.steps] if _is(model, "Pipeline") else [model]
    x = "X"
    for est in steps[:-1]:
        x, n_features = _transform(g, est, x, n_features)
        if x is None:
            raise ValueError("no ONNX form for pipeline step %s" % type(est).__name__)
    last = steps[-1]
    y, _ = _transform(g, last, x, n_features)
    if y is not None:
        g.node("Identity", [y], ["variable"], domain="")
        outputs = [helper.make_tensor_value_info("variable", TensorProto.FLOAT, ["N", None])]
    else:
        outputs = _final(g, last, x, n_features, zipmap)
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}[
        np.dtype(input_type)
    ]
    graph = helper.make_graph(
        g.nodes,
        "sklearn_" + type(model).__name__,
        [helper.make_tensor_value_info("X", elem, ["N", n_inputs])],
        outputs,
        g.inits,
    )
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid(ML, 3)],
        producer_name="onyx-tests-sk_convert",
    )
    m.ir_version = 8
    return m
