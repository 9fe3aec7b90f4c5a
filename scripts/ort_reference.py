#!/usr/bin/env python3
"""Writes ONNX Runtime's outputs as the expected outputs of ONNX test folders.

usage: python3 ort_reference.py DIR

For each DIR/<name>/model.onnx with DIR/<name>/test_data_set_0/input_K.pb,
runs the model on ONNX Runtime's CPU provider and writes output_K.pb beside
the inputs, so that `onyx test DIR` compares Onyx with ONNX Runtime. The
Python counterpart of tests/conformance/bench_models.sh's use of the peer,
for machines with onnxruntime for Python but no Node.js (scripts/gpu-check.sh).
Needs onnx, numpy and onnxruntime.
"""
import glob
import os
import sys

import onnx
import onnxruntime as ort
from onnx import numpy_helper

MAX_IR_VERSION = 10  # onnxruntime 1.16 and later read it


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    done = 0
    for model in sorted(glob.glob(os.path.join(root, "*", "model.onnx"))):
        case = os.path.dirname(model)
        data = os.path.join(case, "test_data_set_0")
        proto = onnx.load(model)
        # A newer onnx package writes a newer IR version than this
        # onnxruntime may read; the opsets decide what the model means.
        if proto.ir_version > MAX_IR_VERSION:
            proto.ir_version = MAX_IR_VERSION
            onnx.save(proto, model)
        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {}
        for i, meta in enumerate(sess.get_inputs()):
            t = onnx.TensorProto()
            with open(os.path.join(data, "input_%d.pb" % i), "rb") as f:
                t.ParseFromString(f.read())
            feeds[meta.name] = numpy_helper.to_array(t)
        outs = sess.run(None, feeds)
        for i, (meta, value) in enumerate(zip(sess.get_outputs(), outs)):
            t = numpy_helper.from_array(value, meta.name)
            with open(os.path.join(data, "output_%d.pb" % i), "wb") as f:
                f.write(t.SerializeToString())
        print("%s: %d outputs" % (os.path.basename(case), len(outs)))
        done += 1
    if not done:
        sys.exit("ort_reference.py: no */model.onnx under %s" % root)


if __name__ == "__main__":
    main()
