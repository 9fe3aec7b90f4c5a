#!/usr/bin/python3
"""QDQ quantizer for the int8 benchmark: float32 ONNX model -> QDQ ONNX model.

  bench/quantize.py FLOAT_DIR OUT_DIR [--batches 4] [--seed 0]
  bench/quantize.py --accuracy FLOAT_DIR QDQ_DIR [--batches 8] [--onyx build/bin/onyx]

FLOAT_DIR is a model folder (model.onnx, test_data_set_0/input_K.pb, as bench/zoo.py
writes). The first form writes OUT_DIR/model.onnx and OUT_DIR/test_data_set_0 with
the same inputs (the reference outputs are ONNX Runtime's, written by bench/qdq.sh).

What it makes (ONNX Runtime's QDQ conventions):
- weights: int8, symmetric (zero point 0), per channel: per output channel for Conv
  (DequantizeLinear axis 0), per column for a constant 2-D MatMul B (axis 1) and for
  Gemm's B (axis 0 with transB, else 1); other constant operands per tensor;
- biases of Conv and Gemm: int32 with scale x_scale * w_scale[c], zero point 0;
- activations: uint8, asymmetric, per tensor, from the min and max (0 included) seen
  over --batches runs of the float model: the test data set's inputs, then random
  inputs of the same shapes (normal, with each input's mean and deviation; an input
  of at most two distinct values, an attention mask, is kept as it is). The values are
  read by adding them as graph outputs and running ONNX Runtime
  (../shared/peer/ort_run.js);
- QuantizeLinear -> DequantizeLinear on every float input and on the output of each
  Conv, MatMul, Gemm, Add, Mul and GlobalAveragePool; a Relu that is the op's only
  reader is kept inside (the Q follows the Relu). An Add or Mul with an operand whose
  range passes 1e3 (an attention mask's -10000) stays float: one uint8 scale over it
  would flatten the other operand.

The --accuracy form runs the float and the QDQ model on the test data set and on
--batches - 1 random inputs with ONNX Runtime and with Onyx, and prints, per runtime,
the largest absolute and relative (to the float output's largest magnitude) error
and, for a [1, classes] output, how often the arg max agrees; then the largest
difference between the two runtimes' outputs of the QDQ model.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.environ.get("PEER", os.environ.get("ONYX_PEER_SCRIPTS", os.path.join(ROOT, "..", "shared", "peer")))
QUANTIZED = {"Conv", "MatMul", "Gemm", "Add", "Mul", "GlobalAveragePool"}
MASK_RANGE = 1e3


def read_inputs(model_dir):
    ds = os.path.join(model_dir, "test_data_set_0")
    out = []
    k = 0
    while os.path.exists(os.path.join(ds, f"input_{k}.pb")):
        t = TensorProto()
        with open(os.path.join(ds, f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        out.append((t.name, numpy_helper.to_array(t)))
        k += 1
    return out


def random_like(inputs, rng):
    """Random inputs of the data set's shapes; mask-like inputs kept."""
    out = []
    for name, a in inputs:
        if a.dtype.kind != "f" or len(np.unique(a)) <= 2:
            out.append((name, a))
            continue
        std = float(a.std()) or 1.0
        out.append((name, (rng.standard_normal(a.shape) * std + float(a.mean())).astype(a.dtype)))
    return out


def write_set(d, arrays, prefix="input"):
    os.makedirs(d, exist_ok=True)
    for k, (name, a) in enumerate(arrays):
        with open(os.path.join(d, f"{prefix}_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, name).SerializeToString())


def read_outputs(d, n):
    out = []
    for k in range(n):
        t = TensorProto()
        with open(os.path.join(d, f"output_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        out.append(numpy_helper.to_array(t))
    return out


def ort_run(model_path, input_dir, out_dir):
    subprocess.run(["node", os.path.join(PEER, "ort_run.js"), model_path, "--inputs", input_dir, "--out",
                    out_dir, "--iters", "1", "--warmup", "0"], check=True, stdout=subprocess.DEVNULL)


def simplify(model):
    """Constant nodes become initializers; an Identity of an initializer is bypassed."""
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    keep = []
    rename = {}
    outputs = {o.name for o in g.output}
    for n in g.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            t = TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            g.initializer.append(t)
            inits[t.name] = t
            continue
        src = rename.get(n.input[0], n.input[0]) if n.input else None
        if n.op_type == "Identity" and src in inits and n.output[0] not in outputs:
            rename[n.output[0]] = src
            continue
        keep.append(n)
    for n in keep:
        for i, x in enumerate(n.input):
            if x in rename:
                n.input[i] = rename[x]
    del g.node[:]
    g.node.extend(keep)


class Quantizer:
    def __init__(self, model, ranges):
        self.m = model
        self.g = model.graph
        self.inits = {i.name: numpy_helper.to_array(i) for i in self.g.initializer}
        self.ranges = ranges
        self.dq = {}  # float tensor name -> its dequantized name
        self.new_nodes = []
        self.new_inits = []
        self.count = 0

    def fresh(self, base):
        self.count += 1
        return f"{base}/qdq{self.count}"

    def const(self, name, array):
        self.new_inits.append(numpy_helper.from_array(array, name))
        return name

    def act_params(self, name):
        lo, hi = self.ranges[name]
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
        zp = np.uint8(np.clip(np.round(-lo / scale), 0, 255))
        return scale, zp

    def qdq_activation(self, name):
        """Q -> DQ on the activation `name`; returns the dequantized name."""
        if name in self.dq:
            return self.dq[name]
        scale, zp = self.act_params(name)
        s = self.const(self.fresh(name + "_scale"), np.array(scale, np.float32))
        z = self.const(self.fresh(name + "_zp"), np.array(zp, np.uint8))
        q, d = self.fresh(name + "_q"), self.fresh(name + "_dq")
        self.new_nodes.append(helper.make_node("QuantizeLinear", [name, s, z], [q], name=self.fresh("Q")))
        self.new_nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [d], name=self.fresh("DQ")))
        self.dq[name] = d
        return d

    def weight(self, name, axis):
        """int8 symmetric DQ of a constant, per channel along `axis` (None: per tensor)."""
        w = self.inits[name].astype(np.float32)
        if axis is None:
            scale = np.array(np.float32((float(np.abs(w).max(initial=0.0)) or 1.0) / 127.0))
            q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
        else:
            red = tuple(i for i in range(w.ndim) if i != axis)
            amax = np.abs(w).max(axis=red)
            amax = np.where(amax > 0, amax, 1.0)  # an all-zero channel: any scale, and a bias stays representable
            scale = (amax / 127.0).astype(np.float32)
            shape = [1] * w.ndim
            shape[axis] = -1
            q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        zp = np.zeros(scale.shape, np.int8)
        qn = self.const(self.fresh(name + "_q"), q)
        s = self.const(self.fresh(name + "_scale"), scale)
        z = self.const(self.fresh(name + "_zp"), zp)
        d = self.fresh(name + "_dq")
        attrs = {"axis": axis} if axis is not None else {}
        self.new_nodes.append(helper.make_node("DequantizeLinear", [qn, s, z], [d], name=self.fresh("DQ"), **attrs))
        return d, scale

    def const_activation(self, name):
        """A constant operand of Add / Mul: uint8 per tensor from its own range."""
        a = self.inits[name].astype(np.float32)
        lo, hi = min(float(a.min(initial=0.0)), 0.0), max(float(a.max(initial=0.0)), 0.0)
        scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
        zp = np.uint8(np.clip(np.round(-lo / scale), 0, 255))
        q = np.clip(np.round(a / scale) + zp, 0, 255).astype(np.uint8)
        qn = self.const(self.fresh(name + "_q"), q)
        s = self.const(self.fresh(name + "_scale"), np.array(scale, np.float32))
        z = self.const(self.fresh(name + "_zp"), np.array(zp, np.uint8))
        d = self.fresh(name + "_dq")
        self.new_nodes.append(helper.make_node("DequantizeLinear", [qn, s, z], [d], name=self.fresh("DQ")))
        return d

    def bias(self, name, x_scale, w_scale):
        b = self.inits[name].astype(np.float32)
        scale = (np.float32(x_scale) * w_scale.astype(np.float32)).astype(np.float32)
        scale = np.broadcast_to(scale, b.shape).astype(np.float32) if scale.ndim else scale
        q = np.clip(np.round(b / scale), -2**31, 2**31 - 1).astype(np.int32)
        qn = self.const(self.fresh(name + "_q"), q)
        s = self.const(self.fresh(name + "_scale"), scale)
        z = self.const(self.fresh(name + "_zp"), np.zeros(scale.shape, np.int32))
        d = self.fresh(name + "_dq")
        attrs = {"axis": 0} if scale.ndim else {}
        self.new_nodes.append(helper.make_node("DequantizeLinear", [qn, s, z], [d], name=self.fresh("DQ"), **attrs))
        return d

    def run(self, nodes, plan):
        """nodes: the graph's nodes (copies); plan: node index -> the tensor its Q goes on."""
        consumers = {}
        for n in nodes:
            for x in n.input:
                consumers.setdefault(x, []).append(n)
        out_nodes = []
        for k, n in enumerate(nodes):
            p = plan.get(k)
            if p is None:
                out_nodes.append(n)
                continue
            op = n.op_type
            ins = list(n.input)
            if op == "Conv":
                xd = self.qdq_activation(ins[0])
                x_scale, _ = self.act_params(ins[0])
                wd, ws = self.weight(ins[1], 0)
                ins[0], ins[1] = xd, wd
                if len(ins) > 2 and ins[2]:
                    ins[2] = self.bias(ins[2], x_scale, ws)
            elif op in ("MatMul", "Gemm"):
                trans_b = op == "Gemm" and any(a.name == "transB" and a.i for a in n.attribute)
                ins[0] = self.qdq_activation(ins[0])
                if ins[1] in self.inits:
                    axis = (0 if trans_b else 1) if self.inits[ins[1]].ndim == 2 else None
                    ins[1], ws = self.weight(ins[1], axis)
                    if op == "Gemm" and len(ins) > 2 and ins[2] in self.inits and self.inits[ins[2]].ndim == 1:
                        x_scale, _ = self.act_params(n.input[0])
                        ins[2] = self.bias(ins[2], x_scale, ws)
                else:
                    ins[1] = self.qdq_activation(ins[1])
            else:  # Add, Mul, GlobalAveragePool: every float input per tensor
                for i, x in enumerate(ins):
                    ins[i] = self.const_activation(x) if x in self.inits else self.qdq_activation(x)
            del n.input[:]
            n.input.extend(ins)
            out_nodes.extend(self.new_nodes)
            self.new_nodes = []
            out_nodes.append(n)
            y = p
            if y is not None:
                # The producer writes y_f; Q -> DQ gives y back to every reader.
                prod = n if n.output[0] == y else next(c for c in consumers[n.output[0]])
                yf = self.fresh(y + "_f")
                prod.output[0] = yf
                if prod is not n:
                    out_nodes.append(prod)
                    prod.input[0] = n.output[0]
                scale, zp = self.act_params(y)
                s = self.const(self.fresh(y + "_scale"), np.array(scale, np.float32))
                z = self.const(self.fresh(y + "_zp"), np.array(zp, np.uint8))
                q = self.fresh(y + "_q")
                out_nodes.append(helper.make_node("QuantizeLinear", [yf, s, z], [q], name=self.fresh("Q")))
                out_nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [y], name=self.fresh("DQ")))
                self.dq[y] = y
        # A Relu kept inside a pattern was appended right after its op: drop its first place.
        seen = set()
        final = []
        for n in out_nodes:
            if id(n) in seen:
                continue
            seen.add(id(n))
            final.append(n)
        # Order: a node after the producers of its inputs (the moved Relus).
        produced = {i.name for i in self.g.input} | set(self.inits) | {i.name for i in self.new_inits} | {""}
        ordered, pending = [], final
        while pending:
            rest = []
            for n in pending:
                if all(x in produced for x in n.input):
                    ordered.append(n)
                    produced.update(n.output)
                else:
                    rest.append(n)
            if len(rest) == len(pending):
                raise RuntimeError("quantize: the graph has a cycle or a missing value: " + ", ".join(
                    f"{n.name or n.op_type} ({[x for x in n.input if x not in produced]})" for n in rest[:5]))
            pending = rest
        del self.g.node[:]
        self.g.node.extend(ordered)
        self.g.initializer.extend(self.new_inits)


def node_copies(model):
    """The graph's nodes as objects of their own (protobuf's views have no stable identity)."""
    out = []
    for n in model.graph.node:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        out.append(c)
    return out


def make_plan(model, nodes):
    """Nodes to quantize (by index) and the tensor each one's Q goes on (its output, or its Relu's)."""
    g = model.graph
    inits = {i.name for i in g.initializer}
    consumers = {}
    for n in nodes:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    graph_out = {o.name for o in g.output}
    plan, need = {}, set()
    for k, n in enumerate(nodes):
        if n.op_type not in QUANTIZED or n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type in ("Conv",) and n.input[1] not in inits:
            continue
        if n.op_type == "Gemm" and (n.input[1] not in inits or any(a.name == "transA" and a.i for a in n.attribute)):
            continue
        y = n.output[0]
        cs = consumers.get(y, [])
        if len(cs) == 1 and cs[0].op_type == "Relu" and y not in graph_out:
            y = cs[0].output[0]
        plan[k] = y
        need.add(y)
        for x in n.input:
            if x and x not in inits:
                need.add(x)
    return plan, need


def calibrate(model, need, inputs, batches, seed, tmp):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = sorted(need - {o.name for o in m.graph.output})
    for name in names:
        m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    path = os.path.join(tmp, "calib.onnx")
    onnx.save(m, path)
    outs = [o.name for o in m.graph.output]
    rng = np.random.default_rng(seed)
    ranges = {}
    for b in range(batches):
        arrays = inputs if b == 0 else random_like(inputs, rng)
        d = os.path.join(tmp, f"calib{b}")
        write_set(d, arrays)
        ort_run(path, d, d)
        for name, a in zip(outs, read_outputs(d, len(outs))):
            lo, hi = float(a.min(initial=0.0)), float(a.max(initial=0.0))
            if name in ranges:
                lo, hi = min(lo, ranges[name][0]), max(hi, ranges[name][1])
            ranges[name] = (lo, hi)
    for i, a in inputs:  # graph inputs read directly by a quantized op
        if i in need and i not in ranges:
            ranges[i] = (float(a.min()), float(a.max()))
    return ranges


def drop_wide(model, nodes, plan, ranges):
    """Add / Mul with an operand wider than MASK_RANGE stay float."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for k, n in enumerate(nodes):
        if k not in plan or n.op_type not in ("Add", "Mul"):
            continue
        for x in n.input:
            r = (float(inits[x].min()), float(inits[x].max())) if x in inits else ranges.get(x, (0.0, 0.0))
            if max(abs(r[0]), abs(r[1])) > MASK_RANGE:
                del plan[k]
                break


def quantize(src_dir, out_dir, batches, seed):
    model = onnx.load(os.path.join(src_dir, "model.onnx"))
    simplify(model)
    inputs = read_inputs(src_dir)
    nodes = node_copies(model)
    plan, need = make_plan(model, nodes)
    with tempfile.TemporaryDirectory() as tmp:
        ranges = calibrate(model, need, inputs, batches, seed, tmp)
    drop_wide(model, nodes, plan, ranges)
    q = Quantizer(model, ranges)
    q.run(nodes, plan)
    os.makedirs(os.path.join(out_dir, "test_data_set_0"), exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    onnx.checker.check_model(model)
    onnx.save(model, path)
    write_set(os.path.join(out_dir, "test_data_set_0"), inputs)
    ops = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print(json.dumps({"model": path, "quantized_nodes": len(plan), "ops": ops}))


def onyx_run(onyx, model_dir, input_dir, out_dir):
    """Onyx's first output for the inputs in input_dir, written to out_dir as output_0.pb."""
    feeds = []
    for f in sorted(os.listdir(input_dir)):
        if f.startswith("input_"):
            t = TensorProto()
            with open(os.path.join(input_dir, f), "rb") as h:
                t.ParseFromString(h.read())
            feeds += ["--input", f"{t.name}={os.path.join(input_dir, f)}"]
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([onyx, "run", model_dir, *feeds, "--threads", "1", "--output-dir", out_dir],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False).graph.output[0].name
    os.replace(os.path.join(out_dir, out + ".pb"), os.path.join(out_dir, "output_0.pb"))


def accuracy(float_dir, qdq_dir, batches, seed, onyx):
    inputs = read_inputs(float_dir)
    rng = np.random.default_rng(seed + 1)
    res = {}
    between = 0.0  # Onyx against ONNX Runtime on the QDQ model
    with tempfile.TemporaryDirectory() as tmp:
        for b in range(batches):
            arrays = inputs if b == 0 else random_like(inputs, rng)
            d = os.path.join(tmp, f"in{b}")
            write_set(d, arrays)
            qdq_out = {}
            for rt in ("ort", "onyx"):
                outs = {}
                for kind, md in (("float", float_dir), ("qdq", qdq_dir)):
                    od = os.path.join(tmp, f"{rt}_{kind}{b}")
                    if rt == "ort":
                        ort_run(os.path.join(md, "model.onnx"), d, od)
                    else:
                        onyx_run(onyx, md, d, od)
                    outs[kind] = read_outputs(od, 1)[0].astype(np.float64)
                f, q = outs["float"], outs["qdq"]
                qdq_out[rt] = q
                r = res.setdefault(rt, {"max_abs": 0.0, "max_rel": 0.0, "top1": 0, "n": 0, "classes": False})
                err = float(np.abs(f - q).max())
                r["max_abs"] = max(r["max_abs"], err)
                r["max_rel"] = max(r["max_rel"], err / max(float(np.abs(f).max()), 1e-30))
                if f.ndim == 2 and f.shape[0] == 1:
                    r["classes"] = True
                    r["top1"] += int(np.argmax(f) == np.argmax(q))
                r["n"] += 1
            between = max(between, float(np.abs(qdq_out["ort"] - qdq_out["onyx"]).max()))
    for rt, r in res.items():
        top1 = f", top-1 agreement {r['top1']}/{r['n']}" if r["classes"] else ""
        print(f"{rt}: QDQ against float32 over {r['n']} inputs: max abs error {r['max_abs']:.4g}, "
              f"max relative error {r['max_rel']:.4g}{top1}")
    print(f"onyx against ort on the QDQ model: max abs difference {between:.4g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--onyx", default=os.path.join(ROOT, "build", "bin", "onyx"))
    a = ap.parse_args()
    if a.accuracy:
        accuracy(a.src, a.out, a.batches or 8, a.seed, a.onyx)
    else:
        quantize(a.src, a.out, a.batches or 4, a.seed)


if __name__ == "__main__":
    sys.exit(main())
