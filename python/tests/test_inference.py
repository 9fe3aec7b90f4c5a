"""The onnxruntime-style inference API of the onyx package.

Models are made here with the onnx package; expected values are computed
with NumPy, never taken from Onyx's own output."""
import json
import os
import shutil
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx


def save(tmp_path, nodes, inputs, outputs, name="model", initializers=(), opset=13,
         **model_kw):
    graph = helper.make_graph(nodes, "g_" + name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              **model_kw)
    model.ir_version = 8
    path = str(tmp_path / (name + ".onnx"))
    onnx.save(model, path)
    return path


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def add_model(tmp_path):
    return save(tmp_path, [helper.make_node("Add", ["a", "b"], ["c"])],
                [vi("a", TensorProto.FLOAT, ["N", 4]), vi("b", TensorProto.FLOAT, ["N", 4])],
                [vi("c", TensorProto.FLOAT, ["N", 4])], name="add")


@pytest.fixture
def mlp_model(tmp_path):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    path = save(tmp_path,
                [helper.make_node("MatMul", ["x", "w"], ["h"]),
                 helper.make_node("Add", ["h", "b"], ["z"]),
                 helper.make_node("Relu", ["z"], ["y"]),
                 helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0)],
                [vi("x", TensorProto.FLOAT, ["batch", 8])],
                [vi("y", TensorProto.FLOAT, ["batch", 5]), vi("s", TensorProto.FLOAT, [])],
                name="mlp",
                initializers=[numpy_helper.from_array(w, "w"),
                              numpy_helper.from_array(b, "b")])
    return path, w, b


# --- Results -----------------------------------------------------------------------------------

def test_add_matches_numpy(add_model):
    sess = onyx.InferenceSession(add_model, providers=["CPUExecutionProvider"])
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
    b = np.array([[0.5, -2, 10, 0], [1, 1, 1, 1]], dtype=np.float32)
    (c,) = sess.run(None, {"a": a, "b": b})
    assert c.dtype == np.float32 and c.shape == (2, 4)
    np.testing.assert_array_equal(c, [[1.5, 0, 13, 4], [6, 7, 8, 9]])


def test_mlp_matches_numpy_and_output_selection(mlp_model):
    path, w, b = mlp_model
    sess = onyx.InferenceSession(path)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    y_ref = np.maximum(x @ w + b, 0)
    y, s = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s, y_ref.sum(), rtol=1e-5)
    assert s.shape == ()
    # A subset of outputs, in the order asked.
    (s2,) = sess.run(["s"], {"x": x})
    np.testing.assert_allclose(s2, y_ref.sum(), rtol=1e-5)
    s3, y3 = sess.run(["s", "y"], {"x": x})
    np.testing.assert_allclose(y3, y_ref, rtol=1e-5, atol=1e-5)


def test_model_from_bytes(add_model):
    with open(add_model, "rb") as f:
        data = f.read()
    sess = onyx.InferenceSession(data)
    a = np.ones((1, 4), np.float32)
    (c,) = sess.run(None, {"a": a, "b": a})
    np.testing.assert_array_equal(c, np.full((1, 4), 2, np.float32))
    assert sess.get_modelmeta().graph_name == "g_add"


def test_non_contiguous_and_byteswapped_feeds(add_model):
    sess = onyx.InferenceSession(add_model)
    base = np.arange(16, dtype=np.float32).reshape(4, 4)
    a = base.T  # Fortran order
    b = base.astype(">f4")  # big-endian
    (c,) = sess.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(c, base.T + base)


def test_outputs_outlive_the_session(add_model):
    sess = onyx.InferenceSession(add_model)
    a = np.full((2, 4), 3, np.float32)
    (c,) = sess.run(None, {"a": a, "b": a})
    sess.close()
    del sess
    np.testing.assert_array_equal(c, np.full((2, 4), 6, np.float32))
    c += 1  # the array owns writable memory
    np.testing.assert_array_equal(c, np.full((2, 4), 7, np.float32))


IDENTITY_DTYPES = [
    (np.float32, TensorProto.FLOAT, "tensor(float)"),
    (np.float64, TensorProto.DOUBLE, "tensor(double)"),
    (np.float16, TensorProto.FLOAT16, "tensor(float16)"),
    (np.int8, TensorProto.INT8, "tensor(int8)"),
    (np.int16, TensorProto.INT16, "tensor(int16)"),
    (np.int32, TensorProto.INT32, "tensor(int32)"),
    (np.int64, TensorProto.INT64, "tensor(int64)"),
    (np.uint8, TensorProto.UINT8, "tensor(uint8)"),
    (np.uint16, TensorProto.UINT16, "tensor(uint16)"),
    (np.uint32, TensorProto.UINT32, "tensor(uint32)"),
    (np.uint64, TensorProto.UINT64, "tensor(uint64)"),
    (np.bool_, TensorProto.BOOL, "tensor(bool)"),
]


@pytest.mark.parametrize("dtype,elem,type_name", IDENTITY_DTYPES,
                         ids=[d[2] for d in IDENTITY_DTYPES])
def test_dtypes_round_trip(tmp_path, dtype, elem, type_name):
    path = save(tmp_path, [helper.make_node("Identity", ["x"], ["y"])],
                [vi("x", elem, [2, 3])], [vi("y", elem, [2, 3])])
    sess = onyx.InferenceSession(path)
    assert sess.get_inputs()[0].type == type_name
    assert sess.get_outputs()[0].type == type_name
    x = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, x)


def test_int64_arithmetic(tmp_path):
    path = save(tmp_path, [helper.make_node("Mul", ["a", "b"], ["c"])],
                [vi("a", TensorProto.INT64, [3]), vi("b", TensorProto.INT64, [3])],
                [vi("c", TensorProto.INT64, [3])])
    sess = onyx.InferenceSession(path)
    a = np.array([2**40, -3, 7], np.int64)
    b = np.array([3, 5, -7], np.int64)
    (c,) = sess.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(c, [3 * 2**40, -15, -49])


def test_strings(tmp_path):
    path = save(tmp_path, [helper.make_node("Identity", ["x"], ["y"])],
                [vi("x", TensorProto.STRING, [3])], [vi("y", TensorProto.STRING, [3])])
    sess = onyx.InferenceSession(path)
    assert sess.get_inputs()[0].type == "tensor(string)"
    x = np.array(["héllo", "", "a\x00b"], dtype=object)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == object
    assert list(y) == ["héllo", "", "a\x00b"]
    # NumPy's fixed-width unicode arrays are accepted too.
    (y,) = sess.run(None, {"x": np.array(["x", "yy", "zzz"])})
    assert list(y) == ["x", "yy", "zzz"]


# --- Inputs, outputs, metadata, providers ------------------------------------------------------

def test_inputs_and_outputs(tmp_path):
    path = save(tmp_path, [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT64),
                           helper.make_node("Shape", ["x"], ["s"])],
                [vi("x", TensorProto.FLOAT, ["batch", 3, None])],
                [vi("y", TensorProto.INT64, ["batch", 3, None]), vi("s", TensorProto.INT64, [3])])
    sess = onyx.InferenceSession(path)
    (x,) = sess.get_inputs()
    assert (x.name, x.type, x.shape) == ("x", "tensor(float)", ["batch", 3, None])
    y, s = sess.get_outputs()
    assert (y.name, y.type) == ("y", "tensor(int64)")
    assert y.shape[0] == "batch" and y.shape[1] == 3
    assert (s.name, s.type, s.shape) == ("s", "tensor(int64)", [3])
    out_y, out_s = sess.run(None, {"x": np.array([[[1.7], [-2.2], [3.0]]], np.float32)})
    np.testing.assert_array_equal(out_y, [[[1], [-2], [3]]])
    np.testing.assert_array_equal(out_s, [1, 3, 1])


def test_modelmeta(tmp_path):
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "the_graph",
                              [vi("x", TensorProto.FLOAT, [1])], [vi("y", TensorProto.FLOAT, [1])],
                              doc_string="graph doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="pytest", domain="org.test", model_version=7,
                              doc_string="model doc")
    model.ir_version = 8
    helper.set_model_props(model, {"author": "me", "license": "MIT"})
    path = str(tmp_path / "meta.onnx")
    onnx.save(model, path)
    meta = onyx.InferenceSession(path).get_modelmeta()
    assert meta.producer_name == "pytest"
    assert meta.graph_name == "the_graph"
    assert meta.domain == "org.test"
    assert meta.version == 7
    assert meta.description == "model doc"
    assert meta.graph_description == "graph doc"
    assert meta.custom_metadata_map == {"author": "me", "license": "MIT"}


def test_providers(add_model):
    avail = onyx.get_available_providers()
    assert "CPUExecutionProvider" in avail and avail[-1] == "CPUExecutionProvider"
    assert onyx.InferenceSession(add_model).get_providers() == ["CPUExecutionProvider"]
    sess = onyx.InferenceSession(add_model, providers=["cpu"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    sess = onyx.InferenceSession(add_model, providers=[("CPUExecutionProvider", {})])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert "Add" in sess.explain()
    assert sess.placement() == {"cpu": 1}


def test_provider_config_dict_and_path(add_model, tmp_path):
    config = {"providers": [{"name": "cpu"}], "session": {"optimization_level": "basic"}}
    sess = onyx.InferenceSession(add_model, providers=config)
    assert sess.get_providers() == ["CPUExecutionProvider"]
    cfg = tmp_path / "providers.json"
    cfg.write_text(json.dumps(config))
    sess = onyx.InferenceSession(add_model, providers=str(cfg))
    a = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": a})[0], 2 * a)


def test_devices_lists_cpu():
    cpu = [p for p in onyx.devices() if p["name"] == "cpu" and p["selected"]]
    assert len(cpu) == 1
    assert cpu[0]["loaded"] and cpu[0]["status"] == "OK"
    assert len(cpu[0]["devices"]) >= 1


def test_session_options(mlp_model, tmp_path):
    path, w, b = mlp_model
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    y_ref = np.maximum(x @ w + b, 0)
    for level in onyx.GraphOptimizationLevel:
        so = onyx.SessionOptions()
        so.graph_optimization_level = level
        so.intra_op_num_threads = 2
        so.log_severity_level = 3
        so.deterministic_compute = True
        sess = onyx.InferenceSession(path, so)
        np.testing.assert_allclose(sess.run(["y"], {"x": x})[0], y_ref, rtol=1e-5, atol=1e-5)
        assert sess.get_session_options() is so


def test_profiling_writes_a_trace(mlp_model, tmp_path):
    so = onyx.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = onyx.InferenceSession(mlp_model[0], so)
    sess.run(None, {"x": np.zeros((1, 8), np.float32)})
    sess.close()
    traces = [p for p in os.listdir(tmp_path) if p.startswith("prof")]
    assert len(traces) == 1
    events = json.loads((tmp_path / traces[0]).read_text())
    assert events


# --- Errors ------------------------------------------------------------------------------------

def test_bad_feed_name(add_model):
    sess = onyx.InferenceSession(add_model)
    a = np.ones((1, 4), np.float32)
    with pytest.raises(onyx.InvalidArgument, match="unknown input 'x'") as e:
        sess.run(None, {"x": a, "b": a})
    assert e.value.code == "INVALID_ARGUMENT"
    assert isinstance(e.value, onyx.OnyxError)


def test_missing_feed(add_model):
    sess = onyx.InferenceSession(add_model)
    with pytest.raises(onyx.InvalidArgument, match="'b'"):
        sess.run(None, {"a": np.ones((1, 4), np.float32)})


def test_bad_feed_dtype(add_model):
    sess = onyx.InferenceSession(add_model)
    a = np.ones((1, 4), np.float32)
    with pytest.raises(onyx.InvalidArgument, match="input 'a'.*float32.*float64"):
        sess.run(None, {"a": a.astype(np.float64), "b": a})
    with pytest.raises(onyx.InvalidArgument, match="input 'a'.*no ONNX element type"):
        sess.run(None, {"a": np.array([np.datetime64("2020-01-01")] * 4), "b": a})


def test_bad_feed_shape(add_model):
    sess = onyx.InferenceSession(add_model)
    a = np.ones((1, 4), np.float32)
    with pytest.raises(onyx.InvalidArgument, match="input 'a'.*shape"):
        sess.run(None, {"a": np.ones((1, 3), np.float32), "b": a})


def test_bad_output_name(add_model):
    sess = onyx.InferenceSession(add_model)
    a = np.ones((1, 4), np.float32)
    with pytest.raises(onyx.OnyxError, match="'nope'"):
        sess.run(["nope"], {"a": a, "b": a})


def test_bad_input_feed_type(add_model):
    sess = onyx.InferenceSession(add_model)
    with pytest.raises(TypeError, match="input_feed"):
        sess.run(None, [np.ones((1, 4), np.float32)])


def test_bad_provider(add_model):
    with pytest.raises(onyx.OnyxError, match="no_such_provider"):
        onyx.InferenceSession(add_model, providers=["no_such_provider"])
    with pytest.raises(onyx.InvalidArgument, match="provider_options has 2 entries"):
        onyx.InferenceSession(add_model, providers=["cpu"], provider_options=[{}, {}])


def test_bad_config(add_model):
    with pytest.raises(onyx.OnyxError):
        onyx.InferenceSession(add_model, providers={"providers": 3})


def test_missing_and_invalid_model(tmp_path):
    missing = str(tmp_path / "missing.onnx")
    with pytest.raises(onyx.NoSuchFile, match="missing.onnx"):
        onyx.InferenceSession(missing)
    with pytest.raises(onyx.OnyxError):
        onyx.InferenceSession(b"this is not a protobuf")
    with pytest.raises(TypeError):
        onyx.InferenceSession(42)


def test_closed_session(add_model):
    sess = onyx.InferenceSession(add_model)
    a = np.ones((1, 4), np.float32)
    sess.close()
    with pytest.raises(onyx.InvalidArgument, match="closed"):
        sess.run(None, {"a": a, "b": a})
    with pytest.raises(onyx.InvalidArgument, match="closed"):
        sess.explain()
    sess.close()  # twice is fine
    with onyx.InferenceSession(add_model) as s2:
        s2.run(None, {"a": a, "b": a})
    with pytest.raises(onyx.InvalidArgument, match="closed"):
        s2.run(None, {"a": a, "b": a})


def test_run_options_terminate(add_model):
    sess = onyx.InferenceSession(add_model)
    a = np.ones((1, 4), np.float32)
    ro = onyx.RunOptions()
    ro.run_tag = "req-1"
    sess.run(None, {"a": a, "b": a}, ro)
    ro.terminate = True
    with pytest.raises(onyx.Cancelled, match="req-1") as e:
        sess.run(None, {"a": a, "b": a}, ro)
    assert isinstance(e.value, onyx.Fail)
    ro.terminate = False
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": a}, ro)[0], 2 * a)


# --- Threads -----------------------------------------------------------------------------------

def test_threads_share_one_session(mlp_model):
    path, w, b = mlp_model
    sess = onyx.InferenceSession(path)
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(100):
                x = rng.standard_normal((2, 8)).astype(np.float32)
                y, s = sess.run(None, {"x": x})
                ref = np.maximum(x @ w + b, 0)
                np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(s, ref.sum(), rtol=1e-4, atol=1e-5)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_close_while_threads_run(mlp_model):
    path, _, _ = mlp_model
    sess = onyx.InferenceSession(path)
    x = np.ones((64, 8), np.float32)
    stop = threading.Event()
    outcomes = []

    def worker():
        while not stop.is_set():
            try:
                sess.run(None, {"x": x})
            except onyx.InvalidArgument as e:
                outcomes.append(str(e))
                return

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    sess.close()
    stop.set()
    for t in threads:
        t.join()
    assert all("closed" in o for o in outcomes)


# --- Overhead ----------------------------------------------------------------------------------

def test_run_overhead(tmp_path, capsys):
    """Python run() of an Add of two 4-element arrays against `onyx bench`
    of the same model (the C call alone). Prints both figures; asserts only
    a loose bound, as the machine may be busy."""
    path = save(tmp_path, [helper.make_node("Add", ["a", "b"], ["c"])],
                [vi("a", TensorProto.FLOAT, [4]), vi("b", TensorProto.FLOAT, [4])],
                [vi("c", TensorProto.FLOAT, [4])], name="tiny_add")
    sess = onyx.InferenceSession(path)
    feed = {"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)}
    for _ in range(1000):
        sess.run(None, feed)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(500):
            sess.run(None, feed)
        times.append((time.perf_counter() - t0) / 500 * 1e6)
    py_us = min(times)
    c_us = None
    cli = os.environ.get("ONYX_BIN") or shutil.which("onyx")
    if cli:
        out = subprocess.run([cli, "bench", path, "--iters", "10000", "--warmup", "1000"],
                             capture_output=True, text=True, check=True).stdout
        c_us = json.loads(out.strip().splitlines()[-1])["min_ms"] * 1000
    with capsys.disabled():
        print("\nrun() overhead: python min %.2f us/run, C (onyx bench) min %s us/run, "
              "overhead %s us" % (py_us, "%.2f" % c_us if c_us is not None else "n/a",
                                  "%.2f" % (py_us - c_us) if c_us is not None else "n/a"))
    assert py_us < 1000


def test_sequence_output(tmp_path):
    seq_type = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    path = save(tmp_path, [helper.make_node("Neg", ["a"], ["n"]),
                           helper.make_node("SequenceConstruct", ["a", "n"], ["s"])],
                [vi("a", TensorProto.FLOAT, [2])], [seq_type], opset=15)
    sess = onyx.InferenceSession(path)
    assert sess.get_outputs()[0].type == "seq(tensor(float))"
    (s,) = sess.run(None, {"a": np.array([1.5, -2], np.float32)})
    assert isinstance(s, list) and len(s) == 2
    np.testing.assert_array_equal(s[0], [1.5, -2])
    np.testing.assert_array_equal(s[1], [-1.5, 2])


def test_run_releases_the_gil(tmp_path):
    """While one thread is inside a long run(), another keeps executing
    Python. The main thread counts its loop iterations that fall strictly
    inside the worker's run (10 ms margins on both sides, more than Python's
    5 ms switch interval): with the GIL held through the C call there would
    be none, whatever the machine's load."""
    import threading
    import time
    n = 1536
    path = save(tmp_path, [helper.make_node("MatMul", ["a", "b"], ["c"])],
                [vi("a", TensorProto.FLOAT, [n, n]), vi("b", TensorProto.FLOAT, [n, n])],
                [vi("c", TensorProto.FLOAT, [n, n])], name="big_matmul")
    so = onyx.SessionOptions()
    so.intra_op_num_threads = 1
    sess = onyx.InferenceSession(path, so)
    feed = {"a": np.ones((n, n), np.float32), "b": np.ones((n, n), np.float32)}
    (c,) = sess.run(None, feed)
    assert c[0, 0] == n
    window = []
    done = threading.Event()

    def worker():
        t0 = time.perf_counter()
        sess.run(None, feed)
        window.append((t0, time.perf_counter()))
        done.set()

    ticks = []
    t = threading.Thread(target=worker)
    t.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
    t.join()
    t0, t1 = window[0]
    assert t1 - t0 > 0.05, "the run is too short to tell (%.1f ms)" % ((t1 - t0) * 1e3)
    inside = sum(1 for x in ticks if t0 + 0.01 < x < t1 - 0.01)
    assert inside > 0, ("the main thread never ran during a %.1f ms run" % ((t1 - t0) * 1e3))
    print("gil: a %.1f ms run, %d main-thread iterations inside it" % ((t1 - t0) * 1e3, inside))
