#!/usr/bin/env python3
"""Writes the `onyx train` MLP sample into OUT_DIR: scikit-learn's digits
(1797 8x8 images, pixels scaled to [0, 1]) split into 1437 training and 360
held-out rows by a fixed permutation, and an MLP (64 -> 128 Relu -> 10, Gemm
nodes, opset 17, a free batch dimension) with PyTorch's default initial
weights (uniform in +-1/sqrt(fan_in)) from a fixed seed.

Files: model.onnx, train_x.npy (float32 [1437, 64]), train_y.npy (int64
[1437]), test_x.npy, test_y.npy.

usage: generate.py OUT_DIR
Needs Debian's python3-sklearn, python3-onnx and python3-numpy (a generator
only: Onyx itself never runs Python)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits


def digits(out, image_shape):
    """Saves the split; returns nothing. image_shape: per-row shape of x."""
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32).reshape((-1,) + image_shape)
    y = d.target.astype(np.int64)
    perm = np.random.RandomState(0).permutation(len(y))
    tr, te = perm[:1437], perm[1437:]
    np.save(os.path.join(out, "train_x.npy"), np.ascontiguousarray(x[tr]))
    np.save(os.path.join(out, "train_y.npy"), y[tr])
    np.save(os.path.join(out, "test_x.npy"), np.ascontiguousarray(x[te]))
    np.save(os.path.join(out, "test_y.npy"), y[te])


def linear(rng, name, fan_in, fan_out):
    bound = 1.0 / np.sqrt(fan_in)
    w = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
    b = rng.uniform(-bound, bound, (fan_out,)).astype(np.float32)
    return [numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")]


def main(out):
    os.makedirs(out, exist_ok=True)
    digits(out, (64,))
    rng = np.random.RandomState(1)
    inits = linear(rng, "fc1", 64, 128) + linear(rng, "fc2", 128, 10)
    nodes = [
        helper.make_node("Gemm", ["x", "fc1_w", "fc1_b"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("Gemm", ["a", "fc2_w", "fc2_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "model.onnx"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
