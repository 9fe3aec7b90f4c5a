"""An onnxruntime script with only its import changed gives the outputs of
the onyx command (`onyx run --output-dir`) on the same model and inputs: a
small CNN made here, and the benchmark models of $ONYX_MODELS (default
/tmp/onyx-models, made by the bench scripts) when they are there."""
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
import ort_script  # noqa: E402

CLI = os.environ.get("ONYX_BIN") or shutil.which("onyx")
MODELS = os.environ.get("ONYX_MODELS", "/tmp/onyx-models")


def cli_outputs(model, input_files, out_dir):
    """{name: array} of `onyx run MODEL --input NAME=FILE ... --output-dir`."""
    cmd = [CLI, "run", model, "--threads", "1", "--output-dir", str(out_dir)]
    for name, path in input_files:
        cmd += ["--input", "%s=%s" % (name, path)]
    subprocess.run(cmd, check=True, capture_output=True)
    outs = {}
    for path in glob.glob(os.path.join(str(out_dir), "*.pb")):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        outs[t.name] = numpy_helper.to_array(t)
    return outs


def check_against_cli(model, arrays, tmp_path):
    graph_inputs = [i.name for i in onnx.load(model, load_external_data=False).graph.input]
    files = []
    for k, (name, x) in enumerate(zip(graph_inputs, arrays)):
        path = tmp_path / ("in_%d.pb" % k)
        path.write_bytes(numpy_helper.from_array(x, name).SerializeToString())
        files.append((name, str(path)))
    got = ort_script.infer(model, arrays)
    want = cli_outputs(model, files, tmp_path / "cli")
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.skipif(CLI is None, reason="the onyx command is not built (set ONYX_BIN)")
def test_small_cnn(tmp_path):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((4 * 4 * 4, 10)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = str(tmp_path / "cnn.onnx")
    onnx.save(model, path)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    check_against_cli(path, [x], tmp_path)
    prob = ort_script.infer(path, [x])["prob"]
    np.testing.assert_allclose(prob.sum(axis=1), [1, 1], rtol=1e-5)


def bench_models():
    return sorted(glob.glob(os.path.join(MODELS, "*", "test_data_set_0")))


@pytest.mark.skipif(CLI is None, reason="the onyx command is not built (set ONYX_BIN)")
@pytest.mark.skipif(not bench_models(), reason="no benchmark models in $ONYX_MODELS")
@pytest.mark.parametrize("data_dir", bench_models(), ids=lambda d: d.split(os.sep)[-2])
def test_benchmark_model(data_dir, tmp_path):
    model = os.path.join(os.path.dirname(data_dir), "model.onnx")
    arrays = []
    for k in range(len(glob.glob(os.path.join(data_dir, "input_*.pb")))):
        t = onnx.TensorProto()
        with open(os.path.join(data_dir, "input_%d.pb" % k), "rb") as f:
            t.ParseFromString(f.read())
        arrays.append(numpy_helper.to_array(t))
    check_against_cli(model, arrays, tmp_path)
