#!/usr/bin/env python3
"""torch_peer.py - Onyx against PyTorch on the same device, side by side.

    torch_peer.py --onyx BIN --config CFG --work DIR [--device cuda|cpu]
                  [--models a,b,...] [--iters N] [--warmup W] [--out FILE.json]

For each model it measures, in one process on one device:
  * PyTorch eager: float32 with TF32 off, then with TF32 allowed
    (torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32);
    CUDA events around each call (time.perf_counter on the CPU), median of N
    calls after W warm-up calls, inputs already on the device, under
    torch.inference_mode();
  * Onyx: `onyx bench` with the same inputs, median of N after W, with the
    inputs and outputs bound on the device (`--io device`) when the CLI
    offers it, once with CFG and once with CFG plus the CUDA provider's
    `use_tf32` option;
  * agreement: `onyx test` of the model's folder, whose expected outputs are
    PyTorch's own float32 results on the device (TF32 off).

Models:
  * the four benchmark models of the ONNX Runtime peer (make_models.py:
    mlp, bert_layer, convnet, matmul_1024), for which the PyTorch side runs
    the very same ONNX graph op by op with torch functions (TorchGraph);
  * modules written here or taken from torchvision (random weights), which
    PyTorch runs natively and Onyx runs as exported by torch.onnx.export:
    resnet50, mobilenet_v2, bert_base (12 encoder layers, sequence 128, a
    padding mask), gpt_block (one decoder block at sequence 1024 with a
    causal mask and tanh-GELU), matmul_4096 (a 4096^3 product: the GEMM rate);
  * float16 variants of those modules (a name with the suffix _fp16, by
    default gpt_block_fp16): the module and its float inputs in float16
    (module.half()), exported in float16, so Onyx runs a float16 model; both
    sides report their times in the fp32 columns and the TF32 columns stay
    empty; the expected outputs are PyTorch's own float16 results.

Prints a Markdown table and writes every figure to --out. Needs numpy, onnx,
torch (and torchvision for the CNNs); models are made in --work, never
committed. docs/performance.md ("GPU providers") holds the results.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

BENCH = ["mlp", "bert_layer", "convnet", "matmul_1024"]
ZOO = ["resnet50", "mobilenet_v2", "bert_base", "gpt_block", "matmul_4096"]  # zoo_models.GPU_ZOO
HALF = ["gpt_block_fp16"]  # a ZOO module in float16


# --------------------------------------------------------------------------- ONNX graph in torch
class TorchGraph:
    """Runs an ONNX graph node by node with torch functions (the ops of the
    benchmark models). Constant inputs (initializers) live on the device."""

    def __init__(self, model, device):
        self.device = device
        g = model.graph
        self.consts = {}
        for t in g.initializer:
            self.consts[t.name] = torch.from_numpy(numpy_helper.to_array(t).copy()).to(device)
        self.nodes = []
        for n in g.node:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            self.nodes.append((n.op_type, list(n.input), list(n.output), attrs))
        self.outputs = [o.name for o in g.output]
        self.lists = {}  # shape inputs as Python lists, read once

    def as_list(self, name):
        if name not in self.lists:
            self.lists[name] = [int(v) for v in self.consts[name].flatten().tolist()]
        return self.lists[name]

    def __call__(self, feeds):
        env = dict(self.consts)
        env.update(feeds)
        for op, ins, outs, a in self.nodes:
            x = [env[i] if i else None for i in ins]
            env[outs[0]] = self.run(op, ins, x, a)
        return [env[o] for o in self.outputs]

    def run(self, op, ins, x, a):
        if op == "MatMul":
            return torch.matmul(x[0], x[1])
        if op == "Gemm":
            A = x[0].t() if a.get("transA", 0) else x[0]
            B = x[1].t() if a.get("transB", 0) else x[1]
            alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
            if len(x) > 2 and x[2] is not None:
                return torch.addmm(x[2], A, B, beta=beta, alpha=alpha)
            return alpha * (A @ B)
        if op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op]
            return f(x[0], x[1])
        if op == "Relu":
            return torch.relu(x[0])
        if op == "Erf":
            return torch.erf(x[0])
        if op == "Softmax":
            return torch.softmax(x[0], a.get("axis", -1))
        if op == "Reshape":
            shape = self.as_list(ins[1])
            shape = [x[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
            return x[0].reshape(shape)
        if op == "Transpose":
            return x[0].permute(a["perm"])
        if op == "LayerNormalization":
            axis = a.get("axis", -1) % x[0].dim()
            return F.layer_norm(x[0], x[0].shape[axis:], x[1], x[2], a.get("epsilon", 1e-5))
        if op == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            if pads[:2] != pads[2:]:
                raise ValueError("TorchGraph: asymmetric Conv pads")
            return F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, a.get("strides", 1), pads[:2],
                            a.get("dilations", 1), a.get("group", 1))
        if op == "BatchNormalization":
            return F.batch_norm(x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5))
        if op == "MaxPool":
            pads = a.get("pads", [0, 0, 0, 0])
            return F.max_pool2d(x[0], a["kernel_shape"], a.get("strides", 1), pads[:2])
        if op == "GlobalAveragePool":
            return F.adaptive_avg_pool2d(x[0], 1)
        if op == "Flatten":
            axis = a.get("axis", 1)
            return x[0].reshape(math.prod(x[0].shape[:axis]), -1)
        raise ValueError(f"TorchGraph: op {op} is not implemented")


# --------------------------------------------------------------------------- native modules
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import zoo_models  # noqa: E402  (bench/zoo_models.py: the modules, shared with the CPU zoo)


def write_pb(path, name, arr):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name).SerializeToString())


def export(name, module, inputs, in_names, folder, device):
    """Exports the module to folder/model.onnx and writes test_data_set_0 with
    PyTorch's float32 outputs on the device (TF32 off) as the expectation."""
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    module = module.eval()
    args = tuple(torch.from_numpy(a) for a in inputs)
    path = os.path.join(folder, "model.onnx")
    names = {"input_names": in_names, "output_names": ["output"]}
    try:  # the TorchScript exporter, where this torch still has it
        torch.onnx.export(module, args, path, opset_version=17, dynamo=False, **names)
    except TypeError:  # an exporter without the dynamo switch
        torch.onnx.export(module, args, path, opset_version=17, **names)
    except Exception as e:  # only the dynamo exporter is left
        print(f"{name}: TorchScript export failed ({type(e).__name__}); using dynamo=True",
              file=sys.stderr)
        torch.onnx.export(module, args, path, opset_version=18, dynamo=True, **names)
    set_tf32(False)
    with torch.inference_mode():
        out = module.to(device)(*(a.to(device) for a in args))
    for i, (n, a) in enumerate(zip(in_names, inputs)):
        write_pb(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), n, a)
    # float16 modules keep their outputs' type (the exported model's); the
    # others are compared in float32.
    out = out if out.dtype == torch.float16 else out.float()
    write_pb(os.path.join(folder, "test_data_set_0", "output_0.pb"), "output", out.cpu().numpy())


# --------------------------------------------------------------------------- timing
def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def time_torch(fn, device, iters, warmup):
    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        times = []
        if device == "cuda":
            torch.cuda.synchronize()
            for _ in range(iters):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
        else:
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def onyx_bench(args, folder, config, io_device):
    cmd = [args.onyx, "bench", folder, "--config", config, "--inputs",
           os.path.join(folder, "test_data_set_0"), "--iters", str(args.iters), "--warmup",
           str(args.warmup)]
    if io_device:
        cmd += ["--io", "device"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip().splitlines()[-1:]
    line = [l for l in r.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line), None


def onyx_check(args, folder, config):
    """`onyx test` of the model's folder against its expected outputs: the
    verdict ('pass', or the failure with its reason)."""
    work, name = os.path.split(os.path.abspath(folder))
    verdicts = os.path.join(work, f"verdicts_{name}.txt")
    r = subprocess.run([args.onyx, "test", work, "--config", config, "--filter", f"^{name}$",
                        "--verdicts", verdicts], capture_output=True, text=True, timeout=args.timeout)
    try:
        with open(verdicts) as f:
            lines = [l.rstrip("\n").split("\t", 1) for l in f if l.startswith(name + "\t")]
    except OSError:
        lines = []
    if not lines:
        return "no verdict: " + " ".join((r.stdout + r.stderr).strip().splitlines()[-2:])[:300]
    return lines[0][1][:300]


def tf32_config(config, work):
    with open(config) as f:
        cfg = json.load(f)
    for p in cfg.get("providers", []):
        if p.get("name") == "cuda":
            p.setdefault("options", {})["use_tf32"] = "1"
    path = os.path.join(work, "config_tf32.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onyx", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--work", required=True, help="folder for the models (made when missing)")
    ap.add_argument("--make-models", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                          "shared", "peer", "make_models.py"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default=",".join(BENCH + ZOO + HALF))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--no-tf32", action="store_true", help="skip the TF32 rows")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = args.device
    os.makedirs(args.work, exist_ok=True)
    names = [n for n in (args.models or ",".join(BENCH + ZOO + HALF)).split(",") if n]
    if any(n in BENCH for n in names) and not all(
            os.path.isfile(os.path.join(args.work, n, "model.onnx")) for n in names if n in BENCH):
        subprocess.run([sys.executable, args.make_models, args.work], check=True,
                       stdout=subprocess.DEVNULL)
        # make_models.py writes the IR version of the onnx package it runs with;
        # the models use nothing past IR 8, so a newer package's number is lowered
        # to one every runtime here reads.
        for n in BENCH:
            path = os.path.join(args.work, n, "model.onnx")
            if n in names and os.path.isfile(path):
                m = onnx.load(path)
                if m.ir_version > 10:
                    m.ir_version = 10
                    onnx.save(m, path)
    help_text = subprocess.run([args.onyx, "bench", "--help"], capture_output=True, text=True).stdout
    io_device = "--io" in help_text and dev == "cuda"
    cfg32 = args.config
    cfg_tf = None if args.no_tf32 or dev != "cuda" else tf32_config(args.config, args.work)
    if dev == "cuda":
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}", flush=True)
    rows = []
    for name in names:
        folder = os.path.join(args.work, name)
        t0 = time.time()
        try:
            if name in BENCH:
                model = onnx.load(os.path.join(folder, "model.onnx"))
                tg = TorchGraph(model, dev)
                feeds = {}
                real = [vi for vi in model.graph.input if vi.name not in tg.consts]
                for i, vi in enumerate(real):
                    t = onnx.TensorProto()
                    with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "rb") as f:
                        t.ParseFromString(f.read())
                    feeds[vi.name] = torch.from_numpy(numpy_helper.to_array(t).copy()).to(dev)
                fn = lambda: tg(feeds)  # noqa: E731
                if not os.path.isfile(os.path.join(folder, "test_data_set_0", "output_0.pb")):
                    set_tf32(False)
                    with torch.inference_mode():
                        outs = fn()
                    for i, (vo, o) in enumerate(zip(model.graph.output, outs)):
                        write_pb(os.path.join(folder, "test_data_set_0", f"output_{i}.pb"), vo.name,
                                 o.float().cpu().numpy())
            else:
                half = name.endswith("_fp16")
                module, inputs, in_names, _ = zoo_models.build(name[:-5] if half else name,
                                                               zoo_models.GPU_ZOO)
                if half:
                    module = module.half()
                    inputs = [a.astype(np.float16) if a.dtype == np.float32 else a for a in inputs]
                if not os.path.isfile(os.path.join(folder, "model.onnx")):
                    export(name, module, inputs, in_names, folder, dev)
                module = module.eval().to(dev)
                xs = [torch.from_numpy(a).to(dev) for a in inputs]
                fn = lambda: module(*xs)  # noqa: E731
            row = {"model": name}
            set_tf32(False)
            row["torch_fp32_ms"] = time_torch(fn, dev, args.iters, args.warmup)
            tf_row = cfg_tf and not name.endswith("_fp16")
            if tf_row:
                set_tf32(True)
                row["torch_tf32_ms"] = time_torch(fn, dev, args.iters, args.warmup)
                set_tf32(False)
            row["check"] = onyx_check(args, folder, cfg32)
            res, err = onyx_bench(args, folder, cfg32, io_device)
            row["onyx_fp32_ms"] = res["median_ms"] if res else None
            row["onyx_session_ms"] = res.get("session_ms") if res else None
            if err:
                row["onyx_error"] = err
            if tf_row:
                res, err = onyx_bench(args, folder, cfg_tf, io_device)
                row["onyx_tf32_ms"] = res["median_ms"] if res else None
                if err:
                    row["onyx_tf32_error"] = err
            row["io"] = "device" if io_device else "host"
            if name.startswith("matmul_"):  # the GEMM rate, TFLOP/s: PyTorch's is cuBLAS's own
                flop = 2.0 * int(name.split("_")[1]) ** 3
                for k in ("torch_fp32_ms", "torch_tf32_ms", "onyx_fp32_ms", "onyx_tf32_ms"):
                    if row.get(k):
                        row[k.replace("_ms", "_tflops")] = round(flop / row[k] / 1e9, 2)
            row["wall_s"] = round(time.time() - t0, 1)
        except Exception as e:  # one model's failure must not lose the others' figures
            row = {"model": name, "error": f"{type(e).__name__}: {e}"[:300]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if dev == "cuda":
            torch.cuda.empty_cache()

    def ratio(a, b):
        return f"{a / b:.2f}" if a and b else "-"

    def ms(v):
        return f"{v:.3f}" if v else "-"

    print("\n| model | PyTorch fp32 ms | Onyx fp32 ms | PyTorch/Onyx | PyTorch TF32 ms | Onyx TF32 ms | "
          "PyTorch/Onyx | Onyx vs PyTorch outputs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | error: {r['error']} |")
            continue
        print(f"| {r['model']} | {ms(r['torch_fp32_ms'])} | {ms(r['onyx_fp32_ms'])} | "
              f"{ratio(r['torch_fp32_ms'], r['onyx_fp32_ms'])} | {ms(r.get('torch_tf32_ms'))} | "
              f"{ms(r.get('onyx_tf32_ms'))} | {ratio(r.get('torch_tf32_ms'), r.get('onyx_tf32_ms'))} | "
              f"{r['check']} |")
    for r in rows:
        if r["model"].startswith("matmul_") and "error" not in r:
            print(f"{r['model']} TFLOP/s: " + ", ".join(
                f"{k[:-7]} {r[k]}" for k in r if k.endswith("_tflops")))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
