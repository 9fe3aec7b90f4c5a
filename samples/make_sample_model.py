#!/usr/bin/env python3
"""Writes the sample model `onyx run` is demonstrated on: a small image
classifier (Conv, BatchNormalization, Relu, MaxPool, Conv, GlobalAveragePool,
Flatten, Gemm, Softmax) with fixed-seed weights, opset 17.

usage: make_sample_model.py OUT.onnx
Needs Debian's python3-onnx and python3-numpy (a generator only: Onyx itself
never runs Python)."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(out):
    rng = np.random.default_rng(7)

    def w(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("conv1_w", 8, 3, 3, 3), w("conv1_b", 8),
        numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "bn_scale"),
        w("bn_bias", 8, scale=0.1), w("bn_mean", 8, scale=0.1),
        numpy_helper.from_array(np.linspace(0.8, 1.2, 8, dtype=np.float32), "bn_var"),
        w("conv2_w", 16, 8, 3, 3), w("conv2_b", 16),
        w("fc_w", 10, 16), w("fc_b", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1_w", "conv1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["b1"],
                         name="bn1", epsilon=1e-5),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "sample_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="onyx-samples",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
