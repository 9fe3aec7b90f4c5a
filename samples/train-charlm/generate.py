#!/usr/bin/env python3
"""Writes the `onyx train` character-level language model sample into
OUT_DIR: a tiny transformer LM and next-character data from the Zen of
Python (the text of the standard library's `this` module).

The model (opset 17, free batch dimension) takes tokens int64 [N, T], T = 32,
and returns logits [N, V, T] (classes on axis 1, as SoftmaxCrossEntropyLoss
wants them):
  h = Gather(embed, tokens) + pos                  embedding, learned positions
  a = LayerNorm(h); one attention head (D = 32): Softmax(QK^T / sqrt(D) + mask) V,
      the causal mask a Constant (-1e9 above the diagonal), output projection
  h = h + attention; h = h + MLP(LayerNorm(h))     (D -> 4D Relu -> D)
  logits = Transpose(LayerNorm(h) W_out, [0, 2, 1])
Initial weights: normal(0, 0.02) for embeddings and projections, LayerNorm
scale 1 and bias 0, fixed seed. Constants are Constant nodes, not
initializers, so that training leaves them alone.

Files: model.onnx, train_x.npy (int64 [S, 32]: every window of the text at
stride 1), train_y.npy (int64 [S, 32]: the next characters), vocab.txt.

usage: generate.py OUT_DIR
Needs Debian's python3-onnx and python3-numpy."""
import codecs
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

T = 32  # context length
D = 32  # model width


def text():
    import this  # noqa: F401  (its import prints the decoded text; the module keeps it encoded)
    return codecs.decode(this.s, "rot13")


def main(out):
    os.makedirs(out, exist_ok=True)
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        s = text()
    vocab = sorted(set(s))
    idx = {c: i for i, c in enumerate(vocab)}
    ids = np.array([idx[c] for c in s], dtype=np.int64)
    n = len(ids) - T
    x = np.stack([ids[i:i + T] for i in range(n)])
    y = np.stack([ids[i + 1:i + T + 1] for i in range(n)])
    np.save(os.path.join(out, "train_x.npy"), x)
    np.save(os.path.join(out, "train_y.npy"), y)
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(vocab))

    V = len(vocab)
    rng = np.random.RandomState(3)

    def normal(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32), name)

    def const(name, arr):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))

    ones = lambda name: numpy_helper.from_array(np.ones(D, np.float32), name)  # noqa: E731
    zeros = lambda name, k=D: numpy_helper.from_array(np.zeros(k, np.float32), name)  # noqa: E731
    inits = [normal("embed", V, D), normal("pos", T, D),
             ones("ln1_s"), zeros("ln1_b"), normal("wq", D, D), normal("wk", D, D),
             normal("wv", D, D), normal("wo", D, D),
             ones("ln2_s"), zeros("ln2_b"), normal("w1", D, 4 * D), zeros("b1", 4 * D),
             normal("w2", 4 * D, D), zeros("b2"),
             ones("lnf_s"), zeros("lnf_b"), normal("wout", D, V)]
    mask = np.triu(np.full((T, T), -1e9, np.float32), k=1)
    N = helper.make_node
    nodes = [
        const("mask", mask), const("scale", np.array(1.0 / np.sqrt(D), np.float32)),
        N("Gather", ["embed", "tokens"], ["emb"]),
        N("Add", ["emb", "pos"], ["h0"]),
        N("LayerNormalization", ["h0", "ln1_s", "ln1_b"], ["a0"], axis=-1),
        N("MatMul", ["a0", "wq"], ["q"]), N("MatMul", ["a0", "wk"], ["k"]),
        N("MatMul", ["a0", "wv"], ["v"]),
        N("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        N("MatMul", ["q", "kt"], ["s0"]), N("Mul", ["s0", "scale"], ["s1"]),
        N("Add", ["s1", "mask"], ["s2"]), N("Softmax", ["s2"], ["p"], axis=-1),
        N("MatMul", ["p", "v"], ["att"]), N("MatMul", ["att", "wo"], ["proj"]),
        N("Add", ["h0", "proj"], ["h1"]),
        N("LayerNormalization", ["h1", "ln2_s", "ln2_b"], ["a1"], axis=-1),
        N("MatMul", ["a1", "w1"], ["m0"]), N("Add", ["m0", "b1"], ["m1"]), N("Relu", ["m1"], ["m2"]),
        N("MatMul", ["m2", "w2"], ["m3"]), N("Add", ["m3", "b2"], ["m4"]),
        N("Add", ["h1", "m4"], ["h2"]),
        N("LayerNormalization", ["h2", "lnf_s", "lnf_b"], ["a2"], axis=-1),
        N("MatMul", ["a2", "wout"], ["lt"]),
        N("Transpose", ["lt"], ["logits"], perm=[0, 2, 1]),
    ]
    graph = helper.make_graph(
        nodes, "charlm",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["N", T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", V, T])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "model.onnx"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
