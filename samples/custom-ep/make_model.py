#!/usr/bin/env python3
"""Writes custom_demo.onnx, the model the custom provider is demonstrated on:

    S = Add(X, B)                      X: float[2,3], B: float[3] (broadcast)
    L = LeakyRelu(S, alpha=0.2)
    C = com.example.custom.ScaleBias(L, scale=2, bias=0.5)    the custom op
    M = Mul(C, B)                      (broadcast)
    Y = Sigmoid(M)                     no kernel in the custom provider: CPU

Outputs M and Y. Needs python3-onnx (a generator only: Onyx never runs Python).
usage: make_model.py [OUT.onnx]"""
import sys

import onnx
from onnx import TensorProto, helper


def main(out):
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
    onnx.save(model, out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "custom_demo.onnx")
