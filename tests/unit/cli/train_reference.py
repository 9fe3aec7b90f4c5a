#!/usr/bin/env python3
"""Writes a small regression problem for test_train_cli.sh and the per-step
losses `onyx train` must log on it, computed here in plain numpy (float64)
from the definitions of the loss and of PyTorch's optimizers, not from Onyx.

OUT_DIR gets: model.onnx (pred = x W^T + b: Gemm, W [2, 3], b [2], a free
batch dimension), x.npy (float32 [10, 3]), t.npy (float32 [10, 2]), and
expected.json: {"sgd": [losses...], "sgd_momentum": [...], "adamw": [...]},
six steps each of batch 4 with --no-shuffle, so the batches are rows 0-3,
4-7, then (rows 8-9 dropped) 0-3 again: three epochs of two batches; and
"l1", "bce_with_logits": the first step's loss (initial weights, rows 0-3)
of those losses, the targets taken as given (bce: not 0/1, still defined).

usage: train_reference.py OUT_DIR"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STEPS, BATCH = 6, 4


def losses(x, t, w0, b0, opt):
    w, b = w0.astype(np.float64), b0.astype(np.float64)
    state = {}
    out = []
    per_epoch = len(x) // BATCH
    for k in range(STEPS):
        j = k % per_epoch
        xb, tb = x[j * BATCH:(j + 1) * BATCH], t[j * BATCH:(j + 1) * BATCH]
        r = xb @ w.T + b - tb
        out.append(float(np.mean(r * r)))
        g = 2.0 * r / r.size  # d mean(r^2) / d pred
        grads = {"w": g.T @ xb, "b": g.sum(axis=0)}
        params = {"w": w, "b": b}
        for name in ("w", "b"):
            p, gr = params[name], grads[name]
            if opt["kind"] == "sgd":
                lr, mom = opt["lr"], opt["momentum"]
                if mom:
                    buf = state.get(name)
                    buf = gr.copy() if buf is None else mom * buf + gr  # dampening 0
                    state[name] = buf
                    gr = buf
                params[name] = p - lr * gr
            else:  # AdamW: decoupled weight decay, bias-corrected moments
                lr, b1, b2, eps, wd = opt["lr"], 0.9, 0.999, 1e-8, opt["weight_decay"]
                m, v = state.get(name, (np.zeros_like(p), np.zeros_like(p)))
                p = p * (1 - lr * wd)
                m = b1 * m + (1 - b1) * gr
                v = b2 * v + (1 - b2) * gr * gr
                state[name] = (m, v)
                step = k + 1
                mh, vh = m / (1 - b1 ** step), v / (1 - b2 ** step)
                params[name] = p - lr * mh / (np.sqrt(vh) + eps)
        w, b = params["w"], params["b"]
    return out


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(5)
    x = rng.uniform(-1, 1, (10, 3)).astype(np.float32)
    t = rng.uniform(-1, 1, (10, 2)).astype(np.float32)
    w0 = rng.uniform(-0.5, 0.5, (2, 3)).astype(np.float32)
    b0 = rng.uniform(-0.5, 0.5, (2,)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "t.npy"), t)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["pred"], transB=1)], "linreg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("pred", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(w0, "w"), numpy_helper.from_array(b0, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, os.path.join(out, "model.onnx"))
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    expected = {
        "sgd": losses(x64, t64, w0, b0, {"kind": "sgd", "lr": 0.1, "momentum": 0.0}),
        "sgd_momentum": losses(x64, t64, w0, b0, {"kind": "sgd", "lr": 0.1, "momentum": 0.9}),
        "adamw": losses(x64, t64, w0, b0, {"kind": "adamw", "lr": 0.05, "weight_decay": 0.01}),
    }
    # First-step losses (the initial weights) of the other losses, on rows 0-3.
    p0 = x64[:BATCH] @ w0.astype(np.float64).T + b0.astype(np.float64)
    t0 = t64[:BATCH]
    expected["l1"] = [float(np.mean(np.abs(p0 - t0)))]
    expected["bce_with_logits"] = [
        float(np.mean(np.maximum(p0, 0) - p0 * t0 + np.log1p(np.exp(-np.abs(p0)))))]
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
