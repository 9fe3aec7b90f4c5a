#!/usr/bin/env python3
"""Writes the two models the custom provider is demonstrated on.

custom_demo.onnx, the single-node kernels and the custom op:

    S = Add(X, B)                      X: float[2,3], B: float[3] (broadcast)
    L = LeakyRelu(S, alpha=0.2)
    C = com.example.custom.ScaleBias(L, scale=2, bias=0.5)    the custom op
    M = Mul(C, B)                      (broadcast)
    Y = Sigmoid(M)                     no kernel in the custom provider: CPU

  Outputs M and Y.

custom_group.onnx, a MatMul -> Add chain the provider compiles into one kernel:

    H = MatMul(X, W)                   X: float[2,4], W: float[4,3] initializer
    Y = Add(R, H)                      R: float[rows,3], a residual broadcast
                                       over the product's rows
    Z = LeakyRelu(Y, alpha=0.1)        a single-node kernel reading the group's output

  Outputs Y and Z. W[k][j] = 0.25 * (3k + j) - 1.

Needs python3-onnx (a generator only: Onyx never runs Python).
usage: make_model.py [OUT_DIR]"""
import os
import sys

import onnx
from onnx import TensorProto, helper


def demo_model():
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Add", ["X", "B"], ["S"], name="add"),
        helper.make_node("LeakyRelu", ["S"], ["L"], name="leaky", alpha=0.2),
        helper.make_node("ScaleBias", ["L"], ["C"], name="scale_bias", domain="com.example.custom",
                         scale=2.0, bias=0.5),
        helper.make_node("Mul", ["C", "B"], ["M"], name="mul"),
        helper.make_node("Sigmoid", ["M"], ["Y"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes, "custom_demo",
        [helper.make_tensor_value_info("X", f, [2, 3]), helper.make_tensor_value_info("B", f, [3])],
        [helper.make_tensor_value_info("M", f, [2, 3]), helper.make_tensor_value_info("Y", f, [2, 3])])
    model = helper.make_model(graph, producer_name="onyx-sample", opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.example.custom", 1)])
    model.ir_version = 8
    return model


def group_model():
    f = TensorProto.FLOAT
    w = [0.25 * (3 * k + j) - 1 for k in range(4) for j in range(3)]
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["H"], name="matmul"),
        # The product is Add's second operand: the compiled kernel finds its
        # operands by value, not by position.
        helper.make_node("Add", ["R", "H"], ["Y"], name="residual"),
        helper.make_node("LeakyRelu", ["Y"], ["Z"], name="leaky", alpha=0.1),
    ]
    graph = helper.make_graph(
        nodes, "custom_group",
        [helper.make_tensor_value_info("X", f, [2, 4]),
         helper.make_tensor_value_info("R", f, ["rows", 3])],
        [helper.make_tensor_value_info("Y", f, [2, 3]), helper.make_tensor_value_info("Z", f, [2, 3])],
        initializer=[helper.make_tensor("W", f, [4, 3], w)])
    model = helper.make_model(graph, producer_name="onyx-sample",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main(out_dir):
    onnx.save(demo_model(), os.path.join(out_dir, "custom_demo.onnx"))
    onnx.save(group_model(), os.path.join(out_dir, "custom_group.onnx"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
