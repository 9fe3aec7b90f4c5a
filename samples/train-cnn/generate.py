#!/usr/bin/env python3
"""Writes the `onyx train` CNN sample into OUT_DIR: scikit-learn's digits as
images [N, 1, 8, 8] (the split of ../train-mlp/generate.py: 1437 training,
360 held-out rows) and a small CNN, opset 17, free batch dimension:
Conv 1->16 3x3 pad 1, Relu, MaxPool 2 -> Conv 16->32 3x3 pad 1, Relu,
MaxPool 2 -> Flatten -> Gemm 128->10, with PyTorch's default initial weights
(uniform in +-1/sqrt(fan_in)) from a fixed seed.

Files: model.onnx, train_x.npy (float32 [1437, 1, 8, 8]), train_y.npy
(int64 [1437]), test_x.npy, test_y.npy.

usage: generate.py OUT_DIR
Needs Debian's python3-sklearn, python3-onnx and python3-numpy."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train-mlp"))
from generate import digits, linear  # noqa: E402  (the MLP sample's split and init)


def conv(rng, name, cin, cout, k):
    bound = 1.0 / np.sqrt(cin * k * k)
    w = rng.uniform(-bound, bound, (cout, cin, k, k)).astype(np.float32)
    b = rng.uniform(-bound, bound, (cout,)).astype(np.float32)
    return [numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")]


def main(out):
    os.makedirs(out, exist_ok=True)
    digits(out, (1, 8, 8))
    rng = np.random.RandomState(2)
    inits = conv(rng, "conv1", 1, 16, 3) + conv(rng, "conv2", 16, 32, 3) + linear(rng, "fc", 128, 10)
    nodes = [
        helper.make_node("Conv", ["x", "conv1_w", "conv1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "model.onnx"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
