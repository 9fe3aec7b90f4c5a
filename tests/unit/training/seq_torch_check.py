#!/usr/bin/env python3
"""LSTM and GRU sequence classifiers through `onyx train`, checked against
PyTorch autograd and checked to learn.

For each cell (LSTM; GRU, which in PyTorch is ONNX's linear_before_reset=1),
a classifier x [N, 6, 3] -> cell (hidden 5, layout 1, bidirectional for
the GRU) -> Y_h flattened -> Linear -> 3 logits, with weights from a fixed
seed, is written as ONNX (gates reordered from PyTorch's i,f,g,o / r,z,n to
ONNX's i,o,f,c / z,r,h) and as a torch module with the same weights.

1. Gradients: one `onyx train` step (SGD, lr 1, --no-shuffle, batch = all
   rows) exports weights w1; (w0 - w1) / lr is Onyx's gradient of the mean
   cross entropy, compared with torch's autograd in float64 (tolerance
   1e-5 absolute + 1e-4 relative: Onyx trains in float32). The first step's
   logged loss matches torch's.
2. Learning: 150 steps of AdamW on a task whose label is the sign pattern
   of the sequence's sums; the mean loss of the last 10 steps is under half
   that of the first 10.

usage: seq_torch_check.py ONYX WORKDIR
Exit 77 (skipped) without python3-torch, python3-onnx or python3-numpy."""
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover
    print("SKIP: %s (Debian: python3-torch python3-onnx python3-numpy)" % e)
    sys.exit(77)

S, F, H, C = 6, 3, 5, 3


def reorder(a, cell, H):
    """PyTorch gate blocks (rows of H) to ONNX's order."""
    blocks = [a[k * H:(k + 1) * H] for k in range(a.shape[0] // H)]
    if cell == "LSTM":  # torch i, f, g, o -> onnx i, o, f, c
        i, f, g, o = blocks
        return np.concatenate([i, o, f, g])
    r, z, n = blocks  # torch r, z, n -> onnx z, r, h
    return np.concatenate([z, r, n])


class Net(torch.nn.Module):
    def __init__(self, cell, bidir):
        super().__init__()
        kind = torch.nn.LSTM if cell == "LSTM" else torch.nn.GRU
        self.rnn = kind(F, H, batch_first=True, bidirectional=bidir)
        self.fc = torch.nn.Linear(H * (2 if bidir else 1), C)

    def forward(self, x):
        out = self.rnn(x)
        h = out[1][0] if isinstance(out[1], tuple) else out[1]  # [D, N, H]
        h = h.transpose(0, 1).reshape(x.shape[0], -1)
        return self.fc(h)


def to_onnx(net, cell, bidir, path):
    D = 2 if bidir else 1
    sfx = ["", "_reverse"][:D]
    W = np.stack([reorder(getattr(net.rnn, "weight_ih_l0" + s).detach().numpy(), cell, H)
                  for s in sfx])
    R = np.stack([reorder(getattr(net.rnn, "weight_hh_l0" + s).detach().numpy(), cell, H)
                  for s in sfx])
    B = np.stack([np.concatenate([
        reorder(getattr(net.rnn, "bias_ih_l0" + s).detach().numpy(), cell, H),
        reorder(getattr(net.rnn, "bias_hh_l0" + s).detach().numpy(), cell, H)]) for s in sfx])
    inits = [numpy_helper.from_array(W.astype(np.float32), "W"),
             numpy_helper.from_array(R.astype(np.float32), "R"),
             numpy_helper.from_array(B.astype(np.float32), "B"),
             numpy_helper.from_array(net.fc.weight.detach().numpy().astype(np.float32), "fc_w"),
             numpy_helper.from_array(net.fc.bias.detach().numpy().astype(np.float32), "fc_b"),
             numpy_helper.from_array(np.array([0, D * H], dtype=np.int64), "shape")]
    attrs = dict(hidden_size=H, layout=1, direction="bidirectional" if bidir else "forward")
    if cell == "GRU":
        attrs["linear_before_reset"] = 1
    outs = ["Y", "Y_h"] + (["Y_c"] if cell == "LSTM" else [])
    nodes = [helper.make_node(cell, ["x", "W", "R", "B"], outs, **attrs),
             helper.make_node("Reshape", ["Y_h", "shape"], ["h"]),
             helper.make_node("Gemm", ["h", "fc_w", "fc_b"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "seq_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", S, F])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return {i.name: numpy_helper.to_array(i) for i in inits}


def train(onyx, work, model, args):
    log = os.path.join(work, "log.jsonl")
    cmd = [onyx, "train", model, "--loss", "cross_entropy", "--data",
           "x=" + os.path.join(work, "x.npy"), "--labels", os.path.join(work, "y.npy"),
           "--threads", "1", "--log", log] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr[-3000:]))
    return [json.loads(l) for l in open(log) if l.strip() and '"step"' in l]


def data(rng, n):
    x = rng.randn(n, S, F).astype(np.float32)
    s = x.sum(axis=1)
    y = ((s[:, 0] > 0).astype(np.int64) + (s[:, 1] > 0).astype(np.int64))  # classes 0..2
    return x, y


def check(onyx, work, cell, bidir):
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(3)
    net = Net(cell, bidir)
    rng = np.random.RandomState(5)
    x, y = data(rng, 16)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "y.npy"), y)
    model = os.path.join(work, "model.onnx")
    w0 = to_onnx(net, cell, bidir, model)
    # torch's gradients in float64 on the float32 weights
    net64 = Net(cell, bidir).double()
    net64.load_state_dict({k: v.double() for k, v in net.state_dict().items()})
    loss = torch.nn.functional.cross_entropy(net64(torch.tensor(x, dtype=torch.float64)),
                                             torch.tensor(y))
    loss.backward()
    ref = to_onnx_grads(net64, cell, bidir)
    out = os.path.join(work, "trained.onnx")
    rows = train(onyx, work, model, ["--batch-size", str(len(y)), "--steps", "1", "--optimizer",
                                     "sgd", "--lr", "1", "--no-shuffle", "--export-inference",
                                     out])
    if abs(rows[0]["loss"] - loss.item()) > 1e-5 * max(1.0, abs(loss.item())):
        sys.exit("FAIL %s: first loss %.8g, torch %.8g" % (cell, rows[0]["loss"], loss.item()))
    w1 = {i.name: numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    for name in ("W", "R", "B", "fc_w", "fc_b"):
        g = w0[name].astype(np.float64) - w1[name].astype(np.float64)
        err = np.abs(g - ref[name]) - (1e-5 + 1e-4 * np.abs(ref[name]))
        if (err > 0).any():
            k = int(np.argmax(err))
            sys.exit("FAIL %s: d%s[%d] = %.8g, torch %.8g" %
                     (cell, name, k, g.flat[k], ref[name].flat[k]))
        print("%s d%s: max |onyx - torch| = %.2e (max |grad| %.3f)" %
              (cell, name, np.abs(g - ref[name]).max(), np.abs(ref[name]).max()))
    # learning
    x, y = data(rng, 256)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "y.npy"), y)
    rows = train(onyx, work, model, ["--batch-size", "32", "--steps", "150", "--optimizer",
                                     "adamw", "--lr", "0.02", "--seed", "1"])
    losses = [r["loss"] for r in rows]
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    print("%s: loss %.4f (first 10 steps) -> %.4f (last 10)" % (cell, first, last))
    if not last < 0.5 * first:
        sys.exit("FAIL %s: the loss did not fall enough" % cell)


def to_onnx_grads(net, cell, bidir):
    D = 2 if bidir else 1
    sfx = ["", "_reverse"][:D]
    g = lambda n: getattr(net.rnn, n).grad.numpy()
    return {
        "W": np.stack([reorder(g("weight_ih_l0" + s), cell, H) for s in sfx]),
        "R": np.stack([reorder(g("weight_hh_l0" + s), cell, H) for s in sfx]),
        "B": np.stack([np.concatenate([reorder(g("bias_ih_l0" + s), cell, H),
                                       reorder(g("bias_hh_l0" + s), cell, H)]) for s in sfx]),
        "fc_w": net.fc.weight.grad.numpy(),
        "fc_b": net.fc.bias.grad.numpy(),
    }


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    onyx, work = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    check(onyx, os.path.join(work, "lstm"), "LSTM", False)
    check(onyx, os.path.join(work, "gru"), "GRU", True)
    print("OK")


if __name__ == "__main__":
    main()
