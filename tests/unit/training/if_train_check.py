#!/usr/bin/env python3
"""A classifier with an If, trained through `onyx train`: its loss falls, and
the weights of both branches are trained.

x [N, 4] -> h = x W1 + b1 -> If(sum(x) > 0): then Relu(h) W2, else
Sigmoid(h) W3 -> logits [N, 3]; the label is the argmax of x T (T a fixed
random [4, 3]). The condition depends on each batch, so both branches run.
200 steps of AdamW (batch 16): the mean loss of the last 10 steps must be
under 0.6 of the first 10's, and the exported W2 and W3 must both differ
from their initial values.

usage: if_train_check.py ONYX WORKDIR
Exit 77 (skipped) without python3-onnx or python3-numpy."""
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover
    print("SKIP: %s (Debian: python3-onnx python3-numpy)" % e)
    sys.exit(77)

F, H, C = 4, 8, 3


def model(path, rng):
    inits = {
        "W1": rng.randn(F, H) * 0.5, "b1": np.zeros(H),
        "W2": rng.randn(H, C) * 0.5, "W3": rng.randn(H, C) * 0.5,
    }
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    zero = numpy_helper.from_array(np.array(0, dtype=np.float32), "zero")
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "W2"], ["yt"])], "then", [],
        [helper.make_tensor_value_info("yt", TensorProto.FLOAT, None)])
    else_g = helper.make_graph(
        [helper.make_node("Sigmoid", ["h"], ["s"]),
         helper.make_node("MatMul", ["s", "W3"], ["ye"])], "else", [],
        [helper.make_tensor_value_info("ye", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["xw"]),
             helper.make_node("Add", ["xw", "b1"], ["h"]),
             helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0),
             helper.make_node("Greater", ["sx", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["logits"], then_branch=then_g,
                              else_branch=else_g)]
    graph = helper.make_graph(
        nodes, "if_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()] + [zero])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return inits


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    onyx, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.RandomState(7)
    path = os.path.join(work, "model.onnx")
    w0 = model(path, rng)
    x = rng.randn(256, F).astype(np.float32)
    y = np.argmax(x @ rng.randn(F, C), axis=1).astype(np.int64)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "y.npy"), y)
    log, out = os.path.join(work, "log.jsonl"), os.path.join(work, "trained.onnx")
    cmd = [onyx, "train", path, "--loss", "cross_entropy", "--data",
           "x=" + os.path.join(work, "x.npy"), "--labels", os.path.join(work, "y.npy"),
           "--batch-size", "16", "--steps", "200", "--optimizer", "adamw", "--lr", "0.02",
           "--seed", "1", "--threads", "1", "--log", log, "--export-inference", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr[-3000:]))
    losses = [json.loads(l)["loss"] for l in open(log) if l.strip() and '"step"' in l]
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    print("loss %.4f (first 10 steps) -> %.4f (last 10)" % (first, last))
    if not last < 0.6 * first:
        sys.exit("FAIL: the loss did not fall enough")
    w1 = {i.name: numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    for name in ("W1", "W2", "W3"):
        moved = np.abs(w1[name] - w0[name]).max()
        print("%s: max |trained - initial| = %.4f" % (name, moved))
        if not moved > 1e-3:
            sys.exit("FAIL: %s was not trained" % name)
    print("OK")


if __name__ == "__main__":
    main()
