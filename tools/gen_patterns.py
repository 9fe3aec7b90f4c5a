#!/usr/bin/python3
"""gen_patterns.py - writes the pattern suite of `onyx test --patterns`.

The suite holds the subgraphs that providers fuse into groups: MatMul+Add,
Gemm+Relu, Conv+BatchNormalization+Relu, a residual block, a decomposed
LayerNorm, a decomposed Gelu and a BERT self-attention block. Each case is an
ONNX backend-test folder:

    OUTDIR/test_pattern_NAME/model.onnx
    OUTDIR/test_pattern_NAME/test_data_set_0/input_K.pb, output_K.pb

Inputs and weights are float32 drawn from a seeded generator; the expected
outputs are computed here with numpy in float64 from those float32 values
(never by Onyx) and stored as float32.

usage: /usr/bin/python3 tools/gen_patterns.py OUTDIR
Needs the onnx and numpy packages (Debian: python3-onnx, python3-numpy).
Exit status: 0 written, 1 error, 77 onnx or numpy missing.
"""

import math
import os
import shutil
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as err:  # the build skips the suite with this message
    print(f"gen_patterns.py: {err}; the pattern suite needs python3-onnx and python3-numpy",
          file=sys.stderr)
    sys.exit(77)

OPSET = 13  # the opset of BERT-era exports; ReduceMean takes axes as an attribute here
F32 = TensorProto.FLOAT


class Case:
    """One model under construction: initializers, nodes, inputs, outputs."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.inputs = []  # (ValueInfoProto, numpy value)
        self.outputs = []  # (ValueInfoProto, float64 reference)

    def randn(self, shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def weight(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def const(self, name, value, dtype=np.float32):
        return self.weight(name, np.array(value, dtype=dtype))

    def node(self, op, inputs, outputs, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs,
                                           name=f"{outputs[0]}_{op.lower()}", **attrs))
        return outputs[0]

    def input(self, name, value):
        elem = {np.dtype(np.float32): F32, np.dtype(np.int64): TensorProto.INT64}[value.dtype]
        self.inputs.append((helper.make_tensor_value_info(name, elem, list(value.shape)), value))
        return name

    def output(self, name, reference):
        self.outputs.append(
            (helper.make_tensor_value_info(name, F32, list(reference.shape)), reference))

    def write(self, out_dir):
        graph = helper.make_graph(self.nodes, self.name, [vi for vi, _ in self.inputs],
                                  [vi for vi, _ in self.outputs], initializer=self.inits)
        model = helper.make_model(graph, producer_name="onyx tools/gen_patterns.py",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        onnx.checker.check_model(model, full_check=True)
        folder = os.path.join(out_dir, self.name)
        data = os.path.join(folder, "test_data_set_0")
        os.makedirs(data)
        onnx.save(model, os.path.join(folder, "model.onnx"))
        for k, (vi, value) in enumerate(self.inputs):
            write_pb(os.path.join(data, f"input_{k}.pb"), value, vi.name)
        for k, (vi, ref) in enumerate(self.outputs):
            write_pb(os.path.join(data, f"output_{k}.pb"), ref.astype(np.float32), vi.name)


def write_pb(path, value, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(value, name).SerializeToString())


def f64(a):
    return np.asarray(a, dtype=np.float64)


# --- float64 references -------------------------------------------------------------------
def conv2d(x, w, b, pad):
    """NCHW convolution, stride 1, symmetric zero padding, group 1."""
    x = np.pad(f64(x), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + oh, j:j + ow]  # [n, c, oh, ow]
            y += np.einsum("nchw,mc->nmhw", patch, f64(w[:, :, i, j]))
    return y + f64(b).reshape(1, m, 1, 1)


def relu(x):
    return np.maximum(x, 0.0)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


ERF = np.vectorize(math.erf)


# --- The cases ------------------------------------------------------------------------------
def matmul_add(name="test_pattern_matmul_add", seed=1, x_shape=(2, 4, 16)):
    """Y = X @ W + B on a batch of sequences (a dense layer)."""
    c = Case(name, seed)
    x = c.randn(x_shape)
    w = c.randn((16, 8), 1 / 4)
    b = c.randn((8,))
    c.input("x", x)
    c.node("MatMul", ["x", c.weight("w", w)], ["xw"])
    c.node("Add", ["xw", c.weight("b", b)], ["y"])
    c.output("y", f64(x) @ f64(w) + f64(b))
    return c


def matmul_add_2d():
    """Y = X @ W + B with a 2-D X (the shape of an MLP layer)."""
    return matmul_add("test_pattern_matmul_add_2d", 8, (4, 16))


def gemm_relu():
    """Y = Relu(Gemm(A, B^T, C))."""
    c = Case("test_pattern_gemm_relu", 2)
    a = c.randn((4, 16))
    bt = c.randn((8, 16), 1 / 4)
    bias = c.randn((8,))
    c.input("a", a)
    c.node("Gemm", ["a", c.weight("w", bt), c.weight("bias", bias)], ["g"], transB=1)
    c.node("Relu", ["g"], ["y"])
    c.output("y", relu(f64(a) @ f64(bt).T + f64(bias)))
    return c


def batchnorm(x, scale, bias, mean, var, eps):
    shape = (1, -1, 1, 1)
    return ((x - f64(mean).reshape(shape)) / np.sqrt(f64(var).reshape(shape) + eps) *
            f64(scale).reshape(shape) + f64(bias).reshape(shape))


def conv_bn_relu():
    """Y = Relu(BatchNormalization(Conv(X, W, B))) (inference BatchNorm)."""
    c = Case("test_pattern_conv_bn_relu", 3)
    x = c.randn((1, 3, 8, 8))
    w = c.randn((4, 3, 3, 3), 1 / math.sqrt(27))
    b = c.randn((4,), 0.1)
    scale = (1 + 0.2 * c.rng.standard_normal(4)).astype(np.float32)
    bias = c.randn((4,), 0.1)
    mean = c.randn((4,), 0.1)
    var = (0.5 + c.rng.random(4)).astype(np.float32)
    eps = 1e-5
    c.input("x", x)
    c.node("Conv", ["x", c.weight("w", w), c.weight("b", b)], ["conv"], kernel_shape=[3, 3],
           pads=[1, 1, 1, 1])
    c.node("BatchNormalization", [
        "conv",
        c.weight("bn_scale", scale),
        c.weight("bn_bias", bias),
        c.weight("bn_mean", mean),
        c.weight("bn_var", var)
    ], ["bn"], epsilon=eps)
    c.node("Relu", ["bn"], ["y"])
    c.output("y", relu(batchnorm(conv2d(x, w, b, 1), scale, bias, mean, var, eps)))
    return c


def residual_block():
    """Y = Relu(X + Conv(Relu(Conv(X)))) (a ResNet basic block, BatchNorm folded)."""
    c = Case("test_pattern_residual_block", 4)
    x = c.randn((1, 4, 8, 8))
    w1 = c.randn((4, 4, 3, 3), 1 / 6)
    b1 = c.randn((4,), 0.1)
    w2 = c.randn((4, 4, 3, 3), 1 / 6)
    b2 = c.randn((4,), 0.1)
    c.input("x", x)
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    c.node("Conv", ["x", c.weight("w1", w1), c.weight("b1", b1)], ["c1"], **conv)
    c.node("Relu", ["c1"], ["r1"])
    c.node("Conv", ["r1", c.weight("w2", w2), c.weight("b2", b2)], ["c2"], **conv)
    c.node("Add", ["c2", "x"], ["sum"])
    c.node("Relu", ["sum"], ["y"])
    r1 = relu(conv2d(x, w1, b1, 1))
    c.output("y", relu(conv2d(r1, w2, b2, 1) + f64(x)))
    return c


def layernorm():
    """LayerNormalization over the last axis as exporters decompose it."""
    c = Case("test_pattern_layernorm", 5)
    x = c.randn((2, 5, 16), 2.0) + np.float32(0.5)
    gamma = (1 + 0.1 * c.rng.standard_normal(16)).astype(np.float32)
    beta = c.randn((16,), 0.1)
    eps = 1e-5
    c.input("x", x)
    c.node("ReduceMean", ["x"], ["mean"], axes=[-1], keepdims=1)
    c.node("Sub", ["x", "mean"], ["d"])
    c.node("Pow", ["d", c.const("two", 2.0)], ["d2"])
    c.node("ReduceMean", ["d2"], ["var"], axes=[-1], keepdims=1)
    c.node("Add", ["var", c.const("eps", eps)], ["var_eps"])
    c.node("Sqrt", ["var_eps"], ["std"])
    c.node("Div", ["d", "std"], ["norm"])
    c.node("Mul", ["norm", c.weight("gamma", gamma)], ["scaled"])
    c.node("Add", ["scaled", c.weight("beta", beta)], ["y"])
    xd = f64(x)
    mu = xd.mean(axis=-1, keepdims=True)
    v = ((xd - mu)**2).mean(axis=-1, keepdims=True)
    c.output("y", (xd - mu) / np.sqrt(v + np.float64(np.float32(eps))) * f64(gamma) + f64(beta))
    return c


def gelu():
    """Gelu(x) = x * 0.5 * (1 + erf(x / sqrt(2))) as exporters decompose it."""
    c = Case("test_pattern_gelu", 6)
    x = c.randn((2, 5, 16), 2.0)
    sqrt2 = np.float32(math.sqrt(2.0))
    c.input("x", x)
    c.node("Div", ["x", c.const("sqrt2", sqrt2)], ["xs"])
    c.node("Erf", ["xs"], ["erf"])
    c.node("Add", ["erf", c.const("one", 1.0)], ["erf1"])
    c.node("Mul", ["x", "erf1"], ["xe"])
    c.node("Mul", ["xe", c.const("half", 0.5)], ["y"])
    xd = f64(x)
    c.output("y", xd * 0.5 * (1 + ERF(xd / np.float64(sqrt2))))
    return c


def bert_attention():
    """BERT self-attention as exported from PyTorch: Q, K, V projections,
    heads split with Reshape/Transpose, scaled scores, the additive mask
    (1 - mask) * -10000 from an int64 attention mask, Softmax, the context
    MatMul, heads merged with Transpose/Reshape."""
    c = Case("test_pattern_bert_attention", 7)
    batch, seq, hidden, heads = 2, 4, 16, 2
    head = hidden // heads
    x = c.randn((batch, seq, hidden))
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=np.int64)  # last token of row 1 padded
    c.input("x", x)
    c.input("attention_mask", mask)
    proj = {}
    for p in ("q", "k", "v"):
        w = c.randn((hidden, hidden), 1 / 4)
        b = c.randn((hidden,), 0.1)
        proj[p] = (w, b)
        c.node("MatMul", ["x", c.weight(f"w{p}", w)], [f"{p}_mm"])
        c.node("Add", [f"{p}_mm", c.weight(f"b{p}", b)], [f"{p}_proj"])
        c.node("Reshape", [f"{p}_proj", c.const(f"{p}_heads_shape", [0, 0, heads, head], np.int64)],
               [f"{p}_heads"])
    c.node("Transpose", ["q_heads"], ["q_t"], perm=[0, 2, 1, 3])  # [B, h, S, d]
    c.node("Transpose", ["k_heads"], ["k_t"], perm=[0, 2, 3, 1])  # [B, h, d, S]
    c.node("Transpose", ["v_heads"], ["v_t"], perm=[0, 2, 1, 3])  # [B, h, S, d]
    c.node("MatMul", ["q_t", "k_t"], ["scores"])
    scale = np.float32(math.sqrt(head))
    c.node("Div", ["scores", c.const("scale", scale)], ["scaled"])
    c.node("Unsqueeze", ["attention_mask", c.const("mask_axes", [1, 2], np.int64)], ["mask4"])
    c.node("Cast", ["mask4"], ["mask_f"], to=F32)
    c.node("Sub", [c.const("one", 1.0), "mask_f"], ["inv_mask"])
    c.node("Mul", ["inv_mask", c.const("neg_big", -10000.0)], ["mask_bias"])
    c.node("Add", ["scaled", "mask_bias"], ["masked"])
    c.node("Softmax", ["masked"], ["probs"], axis=-1)
    c.node("MatMul", ["probs", "v_t"], ["context"])
    c.node("Transpose", ["context"], ["context_t"], perm=[0, 2, 1, 3])  # [B, S, h, d]
    c.node("Reshape", ["context_t", c.const("merge_shape", [0, 0, hidden], np.int64)], ["y"])

    def split(p):
        w, b = proj[p]
        return (f64(x) @ f64(w) + f64(b)).reshape(batch, seq, heads, head).transpose(0, 2, 1, 3)

    q, k, v = split("q"), split("k"), split("v")
    scores = q @ k.transpose(0, 1, 3, 2) / np.float64(scale)
    bias = (1.0 - f64(mask)[:, None, None, :]) * -10000.0
    context = softmax(scores + bias) @ v
    c.output("y", context.transpose(0, 2, 1, 3).reshape(batch, seq, hidden))
    return c


CASES = [matmul_add, matmul_add_2d, gemm_relu, conv_bn_relu, residual_block, layernorm, gelu, bert_attention]


def main(argv):
    if len(argv) != 2:
        print("usage: gen_patterns.py OUTDIR", file=sys.stderr)
        return 1
    out_dir = argv[1]
    # The folder is the generator's own: rewritten whole, so a renamed case
    # leaves nothing stale behind.
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for make in CASES:
        make().write(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
