#!/usr/bin/env python3
"""zoo.py - exports the benchmark zoo (bench/zoo_models.py) to ONNX.

    /usr/bin/python3 bench/zoo.py OUTDIR [--only a,b] [--opset 17] [--list]

Writes, per architecture, OUTDIR/NAME/model.onnx and OUTDIR/NAME/test_data_set_0/
input_K.pb (fixed-seed inputs), in the layout of the ONNX test suites and of the
peer's make_models.py, plus OUTDIR/models.json (input shapes, file size). The
expected outputs are ONNX Runtime's, written by bench/zoo.sh. Needs Debian's
python3-torch, python3-torchvision and python3-onnx; the models are made at
benchmark time and never committed. docs/performance.md ("Model zoo") lists the
architectures and the figures.
"""
import argparse
import json
import os
import shutil
import sys
import time

import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models  # noqa: E402


def export(name, outdir, opset):
    module, inputs, names, dynamic = zoo_models.build(name)
    d = os.path.join(outdir, name)
    ds = os.path.join(d, "test_data_set_0")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(ds)
    path = os.path.join(d, "model.onnx")
    args = tuple(torch.from_numpy(a) for a in inputs)
    kw = {"input_names": names, "output_names": ["output"], "opset_version": opset}
    if dynamic:
        kw["dynamic_axes"] = dynamic
    # Exported with gradients enabled: under no_grad, nn.MultiheadAttention takes
    # its fused fast path, which the exporter cannot express.
    torch.onnx.export(module, args, path, **kw)
    onnx.checker.check_model(path)
    for k, (n, a) in enumerate(zip(names, inputs)):
        with open(os.path.join(ds, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    ops = sorted({n.op_type for n in onnx.load(path, load_external_data=False).graph.node})
    return {"inputs": {n: [str(a.dtype), list(a.shape)] for n, a in zip(names, inputs)},
            "bytes": os.path.getsize(path), "ops": ops}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--only", help="comma-separated subset of the zoo's names")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--list", action="store_true", help="print the zoo's names and exit")
    a = ap.parse_args()
    if a.list:
        print(" ".join(zoo_models.ZOO))
        return
    if not a.outdir:
        ap.error("OUTDIR is required")
    want = a.only.split(",") if a.only else list(zoo_models.ZOO)
    unknown = [n for n in want if n not in zoo_models.ZOO]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; the zoo has: {' '.join(zoo_models.ZOO)}")
    os.makedirs(a.outdir, exist_ok=True)
    meta_path = os.path.join(a.outdir, "models.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    for name in want:
        t0 = time.time()
        meta[name] = export(name, a.outdir, a.opset)
        print(f"{name}: {meta[name]['bytes'] / 1e6:.1f} MB, {len(meta[name]['ops'])} op types, "
              f"{time.time() - t0:.1f} s", flush=True)
        with open(meta_path, "w") as f:
            json.dump(meta, f, indent=1)
    print(meta_path)


if __name__ == "__main__":
    main()
