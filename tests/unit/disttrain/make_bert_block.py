#!/usr/bin/env python3
"""Writes a two-layer BERT-like encoder for test_tensor_parallel: per layer a
packed QKV MatMul + bias, Split, Reshape to heads, Transpose, scaled scores
plus an additive mask from the attention mask, Softmax, the context, the
merge of the heads, the output projection + bias, the residual and
LayerNormalization, then the MLP (MatMul + bias, Gelu written with Erf,
MatMul + bias), residual and LayerNormalization: the ops of a PyTorch
export (bench/zoo.py's bert_encoder_2l). Layer 0 reshapes with explicit
sizes and 0 (copy), layer 1 with -1 (inferred). Weights from numpy's seeded
generator.

Inputs x float32 [B, S, 32] and attention_mask float32 [B, S] (B, S free);
output y [B, S, 32]. Hidden 32, 4 heads of 8, MLP 64.

usage: make_bert_block.py OUT.onnx"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, HEADS, D, F = 32, 4, 8, 64


def main():
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out] if isinstance(out, str) else out, **kw))
        return out

    def w(name, *shape, scale=0.2):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    # Additive mask [B, 1, 1, S]: (1 - mask) * -10000.
    one = const("one", np.array(1.0, np.float32))
    neg = const("neg", np.array(-10000.0, np.float32))
    m = node("Sub", [one, "attention_mask"], "m_inv")
    m = node("Mul", [m, neg], "m_add")
    m = node("Unsqueeze", [m, const("ax1", np.array([1, 2], np.int64))], "mask4")
    x = "x"
    for l in range(2):
        p = f"l{l}."
        qkv = node("MatMul", [x, w(p + "qkv.w", H, 3 * H)], p + "qkv.mm")
        qkv = node("Add", [w(p + "qkv.b", 3 * H, scale=0.05), qkv], p + "qkv")
        parts = node("Split", [qkv, const(p + "split", np.array([H, H, H], np.int64))],
                     [p + "q", p + "k", p + "v"], axis=-1)
        heads = [0, 0, HEADS, D] if l == 0 else [0, 0, -1, D]
        shp = const(p + "heads", np.array(heads, np.int64))
        q = node("Transpose", [node("Reshape", [parts[0], shp], p + "q4")], p + "qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [parts[1], shp], p + "k4")], p + "kt", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [parts[2], shp], p + "v4")], p + "vt", perm=[0, 2, 1, 3])
        s = node("MatMul", [q, k], p + "scores")
        s = node("Div", [s, const(p + "scale", np.array(np.sqrt(D), np.float32))], p + "scaled")
        s = node("Add", [s, m], p + "masked")
        a = node("Softmax", [s], p + "probs", axis=-1)
        c = node("MatMul", [a, v], p + "ctx")
        c = node("Transpose", [c], p + "ctx_t", perm=[0, 2, 1, 3])
        merge = [0, 0, H] if l == 0 else [0, 0, -1]
        c = node("Reshape", [c, const(p + "merge", np.array(merge, np.int64))], p + "ctx2")
        o = node("MatMul", [c, w(p + "o.w", H, H)], p + "o.mm")
        o = node("Add", [w(p + "o.b", H, scale=0.05), o], p + "o")
        r = node("Add", [x, o], p + "res1")
        g1, b1 = const(p + "ln1.g", np.ones(H, np.float32)), const(p + "ln1.b", np.zeros(H, np.float32))
        n1 = node("LayerNormalization", [r, g1, b1], p + "ln1", axis=-1, epsilon=1e-5)
        f = node("MatMul", [n1, w(p + "f1.w", H, F)], p + "f1.mm")
        f = node("Add", [w(p + "f1.b", F, scale=0.05), f], p + "f1")
        e = node("Div", [f, const(p + "sqrt2", np.array(np.sqrt(2.0), np.float32))], p + "gd")
        e = node("Erf", [e], p + "erf")
        e = node("Add", [e, const(p + "g1", np.array(1.0, np.float32))], p + "erf1")
        e = node("Mul", [f, e], p + "gm")
        e = node("Mul", [e, const(p + "half", np.array(0.5, np.float32))], p + "gelu")
        f2 = node("MatMul", [e, w(p + "f2.w", F, H)], p + "f2.mm")
        f2 = node("Add", [w(p + "f2.b", H, scale=0.05), f2], p + "f2")
        r2 = node("Add", [n1, f2], p + "res2")
        g2, b2 = const(p + "ln2.g", np.ones(H, np.float32)), const(p + "ln2.b", np.zeros(H, np.float32))
        x = node("LayerNormalization", [r2, g2, b2], "y" if l == 1 else p + "ln2", axis=-1, epsilon=1e-5)
    g = helper.make_graph(
        nodes, "bert_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", H]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", H])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, sys.argv[1])


if __name__ == "__main__":
    main()
