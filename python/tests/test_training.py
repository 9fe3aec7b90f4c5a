"""onyx.training: the onnxruntime-training on-device API over libonyx's
training API. Expected values are computed here with NumPy (losses,
parameter updates, learning rates), never taken from Onyx's output."""
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.training import artifacts
from onyx.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer

sys.path.insert(0, os.path.dirname(__file__))
import ort_training_script  # noqa: E402


def mlp(n_in, n_hidden, n_out, seed=0):
    """x [N, n_in] -> Gemm -> Relu -> Gemm -> logits [N, n_out]."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)).astype(np.float32)
    b1 = np.zeros(n_hidden, np.float32)
    w2 = (rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)).astype(np.float32)
    b2 = np.zeros(n_out, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n_in])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", n_out])],
        [numpy_helper.from_array(a, n) for a, n in
         ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"w1": w1, "b1": b1, "w2": w2, "b2": b2}


def linear_model(tmp_path):
    """y = x @ w + b (w [3, 2], b [2]) for the MSE and SGD checks."""
    w = np.array([[0.5, -1.0], [0.25, 2.0], [-0.75, 1.0]], np.float32)
    b = np.array([0.1, -0.2], np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["y"])],
        "lin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "lin.onnx")
    onnx.save(model, path)
    return path, w, b


def test_ort_script_trains_digits(tmp_path):
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(1)
    order = rng.permutation(len(x))[:1024]
    x, y = x[order], y[order]
    batches = [(x[i:i + 64], y[i:i + 64]) for i in range(0, len(x), 64)]
    model, _ = mlp(64, 32, 10)
    art = str(tmp_path / "art")
    ort_training_script.offline(model, ["w1", "b1", "w2", "b2"], [], art)
    for f in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"):
        assert os.path.exists(os.path.join(art, f)), f
    epoch_losses, eval_loss, trained, state = ort_training_script.train(art, batches, 4, 1e-2)
    # Untrained: about ln(10) = 2.30; four epochs of AdamW bring it far down.
    assert epoch_losses[0] > epoch_losses[-1]
    assert epoch_losses[-1] < 0.5 * np.log(10)
    # The eval loss is the cross-entropy of the exported model's logits,
    # computed here with NumPy.
    out = str(tmp_path / "trained.onnx")
    trained.export_model_for_inferencing(out, ["logits"])
    sess = onyx.InferenceSession(out)
    ce = []
    for xb, yb in batches:
        logits = sess.run(None, {"x": xb})[0].astype(np.float64)
        m = logits.max(axis=1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        ce.append(-logp[np.arange(len(yb)), yb].mean())
    assert abs(np.mean(ce) - eval_loss) < 1e-4
    accuracy = np.mean([np.argmax(sess.run(None, {"x": xb})[0], 1) == yb
                        for xb, yb in batches])
    assert accuracy > 0.85
    # The checkpoint holds the trained parameters: the exported ones.
    exported = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    np.testing.assert_array_equal(state.parameters["w1"].data, exported["w1"])


def test_mse_loss_and_sgd_step(tmp_path):
    path, w, b = linear_model(tmp_path)
    art = str(tmp_path / "art")
    artifacts.generate_artifacts(path, requires_grad=["w", "b"], loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.SGD, artifact_directory=art)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state,
                    os.path.join(art, "eval_model.onnx"))
    opt = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    opt.set_learning_rate(0.1)
    assert abs(opt.get_learning_rate() - 0.1) < 1e-7
    assert module.input_names() == ["x", "labels"]
    x = np.array([[1, 2, 3], [-1, 0, 2]], np.float32)
    t = np.array([[0, 1], [1, 0]], np.float32)
    pred = x @ w + b
    want_loss = np.mean((pred - t) ** 2)
    loss = module(x, t)
    assert abs(float(loss) - want_loss) < 1e-5
    # SGD: p -= lr * dL/dp with dL/dpred = 2 (pred - t) / numel.
    d = 2 * (pred - t) / pred.size
    opt.step()
    np.testing.assert_allclose(state.parameters["w"].data, w - 0.1 * x.T @ d, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(state.parameters["b"].data, b - 0.1 * d.sum(0), rtol=1e-5,
                               atol=1e-6)
    assert state.step == 1
    # Gradients accumulate until lazy_reset_grad: two train steps on the
    # same batch, then a step, move twice as far.
    module.lazy_reset_grad()
    w1, b1 = state.parameters["w"].data, state.parameters["b"].data
    pred1 = x @ w1 + b1
    d1 = 2 * (pred1 - t) / pred1.size
    module(x, t)
    module(x, t)
    opt.step()
    np.testing.assert_allclose(state.parameters["w"].data, w1 - 0.2 * x.T @ d1, rtol=1e-5,
                               atol=1e-6)
    # eval mode: the loss, no gradient.
    module.eval()
    assert not module.training
    w2 = state.parameters["w"].data
    pred2 = x @ w2 + state.parameters["b"].data
    assert abs(float(module(x, t)) - np.mean((pred2 - t) ** 2)) < 1e-5
    # OrtValues are accepted as inputs too.
    loss = module(onyx.OrtValue.ortvalue_from_numpy(x), onyx.OrtValue.ortvalue_from_numpy(t))
    assert abs(float(loss) - np.mean((pred2 - t) ** 2)) < 1e-5
    assert module.train() is module and module.training


def test_checkpoint_parameters_properties_and_save(tmp_path):
    path, w, b = linear_model(tmp_path)
    art = str(tmp_path / "art")
    artifacts.generate_artifacts(path, requires_grad=["w"], frozen_params=["b"],
                                 loss=artifacts.LossType.L1Loss, artifact_directory=art)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    assert "w" in state.parameters
    assert list(state.parameters) == ["w"]
    assert len(state.parameters) == 1
    p = state.parameters["w"]
    assert p.name == "w" and p.requires_grad
    np.testing.assert_array_equal(p.data, w)
    with pytest.raises(KeyError):
        state.parameters["nope"]
    state.parameters["w"] = np.full((3, 2), 2.0, np.float32)
    np.testing.assert_array_equal(state.parameters["w"].data, np.full((3, 2), 2.0))
    with pytest.raises(onyx.OnyxError, match="w"):
        state.parameters["w"] = np.zeros((2, 2), np.float32)
    state.properties["epoch"] = 3
    state.properties["note"] = "run a"
    with pytest.raises(TypeError):
        state.properties["bad"] = [1]
    out = str(tmp_path / "saved")
    CheckpointState.save_checkpoint(state, out)
    again = CheckpointState.load_checkpoint(out)
    np.testing.assert_array_equal(again.parameters["w"].data, np.full((3, 2), 2.0))
    assert again.properties == {"epoch": 3, "note": "run a"}


def test_linear_lr_scheduler(tmp_path):
    path, _, _ = linear_model(tmp_path)
    art = str(tmp_path / "art")
    artifacts.generate_artifacts(path, loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.SGD, artifact_directory=art)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state)
    opt = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    sched = LinearLRScheduler(opt, warmup_step_count=2, total_step_count=6, initial_lr=0.5)
    x = np.ones((1, 3), np.float32)
    t = np.zeros((1, 2), np.float32)
    # onnxruntime's rule: lr(t) = 0.5 t/2 for t < 2, then 0.5 (6 - t)/4.
    want = [0.0, 0.25, 0.5, 0.375, 0.25, 0.125, 0.0, 0.0]
    got = []
    for _ in range(8):
        got.append(opt.get_learning_rate())
        module(x, t)
        opt.step()
        module.lazy_reset_grad()
        sched.step()
    np.testing.assert_allclose(got, want, atol=1e-7)


def test_errors(tmp_path):
    path, _, _ = linear_model(tmp_path)
    art = str(tmp_path / "art")
    with pytest.raises(onyx.OnyxError, match="nope"):
        artifacts.generate_artifacts(path, requires_grad=["nope"],
                                     loss=artifacts.LossType.MSELoss, artifact_directory=art)
    with pytest.raises(onyx.InvalidArgument, match="Loss"):
        artifacts.generate_artifacts(path, loss="HingeLoss", artifact_directory=art)
    with pytest.raises(TypeError):
        artifacts.generate_artifacts(42, loss=artifacts.LossType.MSELoss,
                                     artifact_directory=art)
    with pytest.raises(NotImplementedError, match="prefix"):
        artifacts.generate_artifacts(path, loss=artifacts.LossType.MSELoss,
                                     artifact_directory=art, prefix="a_")
    with pytest.raises(onyx.OnyxError):
        CheckpointState.load_checkpoint(str(tmp_path / "missing"))
    artifacts.generate_artifacts(path, loss=artifacts.LossType.MSELoss, artifact_directory=art)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    with pytest.raises(onyx.InvalidArgument, match="no such file"):
        Module(str(tmp_path / "none.onnx"), state)
    module = Module(os.path.join(art, "training_model.onnx"), state,
                    os.path.join(art, "eval_model.onnx"))
    with pytest.raises(onyx.InvalidArgument, match="takes 2"):
        module(np.ones((1, 3), np.float32))
    with pytest.raises(onyx.OnyxError, match="x|labels"):
        module(np.ones((1, 4), np.float32), np.zeros((1, 2), np.float32))
    with pytest.raises(onyx.InvalidArgument, match="optimizer_model.onnx"):
        Optimizer(path, module)
    opt = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    with pytest.raises(onyx.InvalidArgument, match="warmup"):
        LinearLRScheduler(opt, 5, 2, 0.1)
    with pytest.raises(onyx.InvalidArgument, match="'zz'"):
        module.export_model_for_inferencing(str(tmp_path / "e.onnx"), ["zz"])


@pytest.mark.parametrize("loss_type", list(artifacts.LossType))
def test_each_loss_against_numpy(tmp_path, loss_type):
    path, w, b = linear_model(tmp_path)
    art = str(tmp_path / "art")
    artifacts.generate_artifacts(path, loss=loss_type, artifact_directory=art)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state)
    x = np.array([[1, 2, 3], [-1, 0, 2], [0.5, -0.5, 1]], np.float32)
    p = (x @ w + b).astype(np.float64)
    if loss_type is artifacts.LossType.CrossEntropyLoss:
        labels = np.array([1, 0, 1], np.int64)
        m = p.max(axis=1, keepdims=True)
        logp = p - m - np.log(np.exp(p - m).sum(axis=1, keepdims=True))
        want = -logp[np.arange(3), labels].mean()
    else:
        labels = np.array([[0, 1], [1, 0], [0.25, 0.75]], np.float32)
        if loss_type is artifacts.LossType.MSELoss:
            want = np.mean((p - labels) ** 2)
        elif loss_type is artifacts.LossType.L1Loss:
            want = np.mean(np.abs(p - labels))
        else:  # BCEWithLogitsLoss: -(y log s(p) + (1 - y) log(1 - s(p)))
            s = 1 / (1 + np.exp(-p))
            want = -np.mean(labels * np.log(s) + (1 - labels) * np.log(1 - s))
    assert abs(float(module(x, labels)) - want) < 1e-5


def test_steps_release_the_gil_and_guard_the_checkpoint(tmp_path):
    """While one thread is inside a long train step, another keeps executing
    Python: a write to the checkpoint from it is refused ("another thread")
    rather than racing the step. The refusal happens only while a step is
    running, so the main thread ran Python during a step: with the GIL held
    through the step it could not have."""
    import threading
    n = 640
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / n).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    art = str(tmp_path / "art")
    artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.SGD, artifact_directory=art)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    so = onyx.SessionOptions()
    so.intra_op_num_threads = 1
    module = Module(os.path.join(art, "training_model.onnx"), state, session_options=so)
    x = np.ones((n, n), np.float32)
    t = np.zeros((n, n), np.float32)
    module(x, t)
    refused = 0
    for _ in range(3):  # a busy machine may not schedule the main thread in time
        done = threading.Event()

        def worker():
            for _ in range(2):
                module(x, t)
            done.set()

        th = threading.Thread(target=worker)
        th.start()
        while not done.is_set():
            try:
                state.parameters["w"] = w
            except onyx.InvalidArgument as e:
                assert "another thread" in str(e)
                refused += 1
        th.join()
        if refused:
            break
    assert refused > 0
