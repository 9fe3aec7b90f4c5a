#!/usr/bin/env python3
"""Writes the problem of test_disttrain.sh: a two-layer MLP classifier and
its data, from numpy's seeded generator.

OUT_DIR gets model.onnx (x [N, 6] -> Gemm 6->16 -> Relu -> Gemm 16->4 ->
logits), model24.onnx (the same with 24 hidden units: a different model for
the mismatched-world check), x.npy (float32 [48, 6]) and y.npy (int64 [48],
classes 0-3).

usage: make_problem.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(28)
    x = rng.standard_normal((48, 6)).astype(np.float32)
    y = rng.integers(0, 4, size=48).astype(np.int64)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "y.npy"), y)
    save_mlp(rng, 16, os.path.join(out, "model.onnx"))
    save_mlp(rng, 24, os.path.join(out, "model24.onnx"))


def save_mlp(rng, hidden, path):
    w1 = (rng.standard_normal((hidden, 6)) * 0.4).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((4, hidden)) * 0.4).astype(np.float32)
    b2 = (rng.standard_normal(4) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
         numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(b2, "b2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


if __name__ == "__main__":
    main()
