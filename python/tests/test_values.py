"""OrtValue (DLPack, NumPy) and io_binding. Expected values are computed
with NumPy; "zero-copy" is checked by comparing data pointers."""
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onyx
from onyx import OrtValue


@pytest.fixture
def mm_model(tmp_path):
    """y = MatMul(a, b) + 1, z = Relu(a)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["ab"]),
         helper.make_node("Constant", [], ["one"], value_float=1.0),
         helper.make_node("Add", ["ab", "one"], ["y"]),
         helper.make_node("Relu", ["a"], ["z"])],
        "mm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3]),
               helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "mm.onnx")
    onnx.save(model, path)
    return path


def arrays():
    a = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    b = np.array([[1, -1], [0.5, 2], [-2, 0.25]], np.float32)
    return a, b


def test_ortvalue_from_numpy_shares_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ov = OrtValue.ortvalue_from_numpy(a)
    assert ov.shape() == [2, 3]
    assert ov.data_type() == "tensor(float)"
    assert ov.device_name() == "cpu"
    assert ov.element_type() == np.float32
    assert ov.data_ptr() == a.ctypes.data
    view = ov.numpy()
    assert view.ctypes.data == a.ctypes.data
    a[1, 2] = 42
    assert view[1, 2] == 42
    del a
    np.testing.assert_array_equal(ov.numpy().ravel(), [0, 1, 2, 3, 4, 42])


def test_ortvalue_copies_what_dlpack_cannot_carry():
    b = np.array([[True, False]])
    ov = OrtValue.ortvalue_from_numpy(b)
    assert ov.data_type() == "tensor(bool)"
    np.testing.assert_array_equal(ov.numpy(), b)
    strided = np.arange(10, dtype=np.int64)[::2]
    ov = OrtValue.ortvalue_from_numpy(strided)
    np.testing.assert_array_equal(ov.numpy(), [0, 2, 4, 6, 8])
    assert ov.data_type() == "tensor(int64)"


def test_dlpack_round_trip_numpy():
    a = np.linspace(0, 1, 8, dtype=np.float64).reshape(2, 4)
    ov = OrtValue.from_dlpack(a)
    assert ov.data_ptr() == a.ctypes.data
    assert ov.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(ov)
    assert back.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(back, a)
    cap = ov.to_dlpack()
    ov2 = OrtValue.from_dlpack(cap)
    assert ov2.data_ptr() == a.ctypes.data
    with pytest.raises(onyx.InvalidArgument, match="consumed once"):
        OrtValue.from_dlpack(cap)
    with pytest.raises(TypeError):
        OrtValue.from_dlpack(3)


def test_dlpack_round_trip_torch():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    ov = OrtValue.from_dlpack(t)
    assert ov.data_ptr() == t.data_ptr()
    assert ov.shape() == [3, 4]
    t[0, 0] = -7
    assert ov.numpy()[0, 0] == -7
    back = torch.from_dlpack(ov)
    assert back.data_ptr() == t.data_ptr()
    assert torch.equal(back, t)
    # An Onyx-owned value to torch: the tensor keeps Onyx's memory alive.
    ov = OrtValue.ortvalue_from_numpy(np.ones((2, 2), np.int32) * 5)
    ptr = ov.data_ptr()
    t2 = torch.utils.dlpack.from_dlpack(ov.to_dlpack())
    del ov
    assert t2.data_ptr() == ptr
    assert t2.dtype == torch.int32 and t2.sum().item() == 20


def test_io_binding_equals_run(mm_model):
    sess = onyx.InferenceSession(mm_model)
    a, b = arrays()
    want = sess.run(None, {"a": a, "b": b})
    np.testing.assert_allclose(want[0], a @ b + 1, rtol=1e-6)
    binding = sess.io_binding()
    binding.bind_cpu_input("a", a)
    binding.bind_ortvalue_input("b", OrtValue.ortvalue_from_numpy(b))
    binding.bind_output("y")
    binding.bind_output("z")
    sess.run_with_iobinding(binding)
    got = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], np.maximum(a, 0))
    outs = binding.get_outputs()
    assert [o.shape() for o in outs] == [[4, 2], [4, 3]]
    np.testing.assert_array_equal(outs[0].numpy(), want[0])
    # Preallocated output: written into the caller's memory.
    y = np.zeros((4, 2), np.float32)
    binding.clear_binding_outputs()
    binding.bind_ortvalue_output("y", OrtValue.ortvalue_from_numpy(y))
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(y, want[0])
    # By pointer, as onnxruntime's bind_input / bind_output take it.
    a2 = a * 2
    z = np.empty((4, 3), np.float32)
    binding.clear_binding_inputs()
    binding.clear_binding_outputs()
    binding.bind_input("a", "cpu", 0, np.float32, a2.shape, a2.ctypes.data)
    binding.bind_cpu_input("b", b)
    binding.bind_output("z", "cpu", 0, np.float32, z.shape, z.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(z, np.maximum(a2, 0))
    assert binding.get_outputs_names() == ["z"]


def test_io_binding_threads(mm_model):
    sess = onyx.InferenceSession(mm_model)
    a, b = arrays()
    errors = []

    def worker(k):
        try:
            binding = sess.io_binding()
            x = a + k
            binding.bind_cpu_input("a", x)
            binding.bind_cpu_input("b", b)
            binding.bind_output("y")
            for _ in range(20):
                sess.run_with_iobinding(binding)
                np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], x @ b + 1,
                                           rtol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_io_binding_errors(mm_model, tmp_path):
    sess = onyx.InferenceSession(mm_model)
    binding = sess.io_binding()
    with pytest.raises(onyx.OnyxError, match="nope"):
        binding.bind_cpu_input("nope", np.zeros((1, 3), np.float32))
    with pytest.raises(onyx.OnyxError, match="'a'"):
        binding.bind_cpu_input("a", np.zeros((1, 3), np.int64))
    with pytest.raises(TypeError):
        binding.bind_ortvalue_input("a", np.zeros((1, 3), np.float32))
    other = onyx.InferenceSession(mm_model)
    with pytest.raises(onyx.InvalidArgument, match="SessionIOBinding"):
        other.run_with_iobinding(binding)
    binding.bind_cpu_input("a", np.zeros((1, 3), np.float32))
    binding.bind_output("y")
    with pytest.raises(onyx.OnyxError, match="b"):
        sess.run_with_iobinding(binding)  # input b unbound
    sess.close()
    with pytest.raises(onyx.InvalidArgument, match="closed"):
        sess.run_with_iobinding(binding)
    with pytest.raises(onyx.InvalidArgument, match="closed"):
        sess.io_binding()
