"""Fitted scikit-learn tree models as ai.onnx.ml TreeEnsemble nodes (test side).

convert_tree_model(model, input_name, n_features) -> (nodes, initializers, outputs)

  nodes         a list with one TreeEnsembleClassifier or TreeEnsembleRegressor
                NodeProto (domain ai.onnx.ml, opset 1 attributes), reading
                input_name, a float tensor [N, n_features];
  initializers  a list of TensorProto (empty: the trees are attributes);
  outputs       a list of ValueInfoProto for the node's outputs: a classifier
                gives "label" (int64 or string [N]) and "probabilities"
                (float [N, n_classes]), a regressor gives "variable"
                (float [N, n_targets]).

Supported: DecisionTree, RandomForest, ExtraTrees (classifier and regressor)
and GradientBoosting (classifier and regressor). The graphs follow ONNX
Runtime's reading of the operators:

* thresholds: scikit-learn sends x to the left child when
  float32(x) <= threshold (a double). The attribute is a float, so the
  threshold is rounded *down* to a float32: for every float32 x,
  x <= t exactly when x <= round_down(t).
* forests average the trees' class probabilities; TreeEnsembleClassifier
  always sums, so each leaf weight is its probability / n_trees.
* a binary classifier carries class 1's probability p only, under class
  id 0 (one weighted class, all weights positive): the runtime gives
  [1 - p, p] and picks class 1 when p > 0.5 (scikit-learn's argmax picks
  class 0 on a tie, and so does p > 0.5).
* binary gradient boosting: class 1's raw score (weights of class id 0,
  base_values [init]) with post_transform LOGISTIC; the runtime writes
  [logistic(-s), logistic(s)]. That form needs at least one negative weight
  (with all weights positive the runtime takes the probability branch), so
  a model whose weights are all positive gets a +tiny/-tiny pair on one leaf,
  which leaves every sum unchanged.
* multiclass gradient boosting: one weight per stage and class, base_values
  the initial raw scores, post_transform SOFTMAX.
"""

import numpy as np
from onnx import TensorProto, helper

ML_DOMAIN = "ai.onnx.ml"


def _round_down_f32(t):
    """The largest float32 that is <= t (t a Python or numpy float)."""
    f = np.float32(t)
    if float(f) > float(t):
        f = np.nextafter(f, np.float32(-np.inf), dtype=np.float32)
    return float(f)


class _Nodes:
    """The nodes_* attribute lists of a tree ensemble."""

    def __init__(self):
        self.treeids, self.nodeids, self.featureids = [], [], []
        self.modes, self.values, self.true, self.false = [], [], [], []
        self.hitrates, self.missing = [], []

    def add_tree(self, tree_id, tree, n_features):
        t = tree.tree_
        for i in range(t.node_count):
            left, right = int(t.children_left[i]), int(t.children_right[i])
            self.treeids.append(tree_id)
            self.nodeids.append(i)
            self.hitrates.append(1.0)
            self.missing.append(0)
            if left == -1:
                self.featureids.append(0)
                self.modes.append("LEAF")
                self.values.append(0.0)
                self.true.append(0)
                self.false.append(0)
            else:
                f = int(t.feature[i])
                if not 0 <= f < n_features:
                    raise ValueError(f"tree {tree_id} node {i} reads feature {f} of {n_features}")
                self.featureids.append(f)
                self.modes.append("BRANCH_LEQ")
                self.values.append(_round_down_f32(t.threshold[i]))
                self.true.append(left)
                self.false.append(right)

    def attrs(self):
        return dict(
            nodes_treeids=self.treeids,
            nodes_nodeids=self.nodeids,
            nodes_featureids=self.featureids,
            nodes_modes=self.modes,
            nodes_values=self.values,
            nodes_truenodeids=self.true,
            nodes_falsenodeids=self.false,
            nodes_hitrates=self.hitrates,
            nodes_missing_value_tracks_true=self.missing,
        )


def _leaves(tree):
    t = tree.tree_
    return [i for i in range(t.node_count) if t.children_left[i] == -1]


def _leaf_proba(tree, leaf):
    """Class probabilities at a leaf of a fitted classifier tree."""
    v = np.asarray(tree.tree_.value[leaf][0], dtype=np.float64)
    s = v.sum()
    return v / s if s > 0 else v


def _class_label_attrs(classes):
    classes = np.asarray(classes)
    if classes.dtype.kind in "iub":
        return {"classlabels_int64s": [int(c) for c in classes]}, TensorProto.INT64
    return {"classlabels_strings": [str(c) for c in classes]}, TensorProto.STRING


def _classifier(model, input_name, n_features, trees, kind):
    if getattr(model, "n_outputs_", 1) != 1:
        raise TypeError("convert_tree_model: multi-output classifiers are not supported")
    classes = model.classes_
    n_classes = len(classes)
    label_attrs, label_type = _class_label_attrs(classes)
    nodes = _Nodes()
    ids, nodeids, treeids, weights = [], [], [], []
    base_values = None
    post = "NONE"
    if kind == "forest":
        scale = 1.0 / len(trees)
        for tid, tree in enumerate(trees):
            nodes.add_tree(tid, tree, n_features)
            for leaf in _leaves(tree):
                p = _leaf_proba(tree, leaf)
                cls = [1] if n_classes == 2 else range(n_classes)
                for c in cls:
                    if p[c] == 0:
                        continue
                    ids.append(0 if n_classes == 2 else c)
                    nodeids.append(leaf)
                    treeids.append(tid)
                    weights.append(float(p[c] * scale))
    else:  # gradient boosting
        lr = model.learning_rate
        init = model._raw_predict_init(np.zeros((1, n_features), dtype=np.float32))[0]
        est = model.estimators_
        tid = 0
        for stage in range(est.shape[0]):
            for k in range(est.shape[1]):
                tree = est[stage, k]
                nodes.add_tree(tid, tree, n_features)
                for leaf in _leaves(tree):
                    ids.append(k)
                    nodeids.append(leaf)
                    treeids.append(tid)
                    weights.append(float(tree.tree_.value[leaf][0][0] * lr))
                tid += 1
        base_values = [float(v) for v in init]
        if n_classes == 2:
            post = "LOGISTIC"
            if all(w >= 0 for w in weights):
                leaf = nodeids[0]
                for w in (1e-30, -1e-30):
                    ids.append(0)
                    nodeids.append(leaf)
                    treeids.append(0)
                    weights.append(w)
        else:
            post = "SOFTMAX"
    attrs = nodes.attrs()
    attrs.update(label_attrs)
    attrs.update(class_ids=ids, class_nodeids=nodeids, class_treeids=treeids,
                 class_weights=weights, post_transform=post)
    if base_values is not None:
        attrs["base_values"] = base_values
    node = helper.make_node("TreeEnsembleClassifier", [input_name], ["label", "probabilities"],
                            domain=ML_DOMAIN, **attrs)
    outputs = [
        helper.make_tensor_value_info("label", label_type, [None]),
        helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, n_classes]),
    ]
    return [node], [], outputs


def _regressor(model, input_name, n_features, trees, kind):
    nodes = _Nodes()
    ids, nodeids, treeids, weights = [], [], [], []
    attrs = {}
    if kind == "forest":
        n_targets = int(trees[0].tree_.value.shape[1])
        for tid, tree in enumerate(trees):
            nodes.add_tree(tid, tree, n_features)
            for leaf in _leaves(tree):
                for k in range(n_targets):
                    ids.append(k)
                    nodeids.append(leaf)
                    treeids.append(tid)
                    weights.append(float(tree.tree_.value[leaf][k][0]))
        attrs["aggregate_function"] = "AVERAGE"
    else:
        n_targets = 1
        lr = model.learning_rate
        init = model._raw_predict_init(np.zeros((1, n_features), dtype=np.float32))[0]
        for tid, tree in enumerate(model.estimators_[:, 0]):
            nodes.add_tree(tid, tree, n_features)
            for leaf in _leaves(tree):
                ids.append(0)
                nodeids.append(leaf)
                treeids.append(tid)
                weights.append(float(tree.tree_.value[leaf][0][0] * lr))
        attrs["aggregate_function"] = "SUM"
        attrs["base_values"] = [float(init[0])]
    attrs.update(nodes.attrs())
    attrs.update(n_targets=n_targets, target_ids=ids, target_nodeids=nodeids,
                 target_treeids=treeids, target_weights=weights, post_transform="NONE")
    node = helper.make_node("TreeEnsembleRegressor", [input_name], ["variable"],
                            domain=ML_DOMAIN, **attrs)
    outputs = [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, n_targets])]
    return [node], [], outputs


def convert_tree_model(model, input_name, n_features):
    """See the module's docstring."""
    name = type(model).__name__
    if name in ("DecisionTreeClassifier", "ExtraTreeClassifier"):
        return _classifier(model, input_name, n_features, [model], "forest")
    if name in ("RandomForestClassifier", "ExtraTreesClassifier"):
        return _classifier(model, input_name, n_features, list(model.estimators_), "forest")
    if name == "GradientBoostingClassifier":
        return _classifier(model, input_name, n_features, None, "boost")
    if name in ("DecisionTreeRegressor", "ExtraTreeRegressor"):
        return _regressor(model, input_name, n_features, [model], "forest")
    if name in ("RandomForestRegressor", "ExtraTreesRegressor"):
        return _regressor(model, input_name, n_features, list(model.estimators_), "forest")
    if name == "GradientBoostingRegressor":
        return _regressor(model, input_name, n_features, None, "boost")
    raise TypeError(f"convert_tree_model: {name} is not a supported tree model")


def make_model(model, n_features, input_name="X", opset_ml=1):
    """A whole ModelProto around convert_tree_model's node (float input [N, F])."""
    nodes, inits, outputs = convert_tree_model(model, input_name, n_features)
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [None, n_features])
    graph = helper.make_graph(nodes, "sk_trees", [x], outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(ML_DOMAIN, opset_ml)],
                             ir_version=8)
