"""ONNX-ML map values through the onyx package: ZipMap's seq(map) output as a
list of dicts (as onnxruntime returns it), a dict fed to DictVectorizer and
CastMap. Models are made with the onnx package; expected values are worked
out by hand from the ONNX-ML definitions."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onyx


def save(tmp_path, nodes, inputs, outputs, name):
    graph = helper.make_graph(nodes, "g_" + name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    path = str(tmp_path / (name + ".onnx"))
    onnx.save(model, path)
    return path


def map_vi(name, key, value, seq=False):
    t = onnx.TypeProto()
    t.map_type.key_type = key
    t.map_type.value_type.CopyFrom(helper.make_tensor_type_proto(value, None))
    if seq:
        t = helper.make_sequence_type_proto(t)
    return helper.make_value_info(name, t)


def test_zipmap_list_of_dicts(tmp_path):
    path = save(tmp_path,
                [helper.make_node("ZipMap", ["x"], ["z"], domain="ai.onnx.ml",
                                  classlabels_int64s=[3, 1, 2])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                [map_vi("z", TensorProto.INT64, TensorProto.FLOAT, seq=True)], "zip")
    sess = onyx.InferenceSession(path)
    assert sess.get_outputs()[0].type == "seq(map(int64,tensor(float)))"
    x = np.array([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0]], dtype=np.float32)
    (z,) = sess.run(None, {"x": x})
    assert z == [{3: 0.5, 1: 0.25, 2: 0.25}, {3: 0.0, 1: 1.0, 2: 0.0}]
    assert all(type(k) is int and type(v) is float for d in z for k, v in d.items())


def test_zipmap_string_labels(tmp_path):
    path = save(tmp_path,
                [helper.make_node("ZipMap", ["x"], ["z"], domain="ai.onnx.ml",
                                  classlabels_strings=["no", "yes"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                [map_vi("z", TensorProto.STRING, TensorProto.FLOAT, seq=True)], "zips")
    (z,) = onyx.InferenceSession(path).run(None, {"x": np.array([0.125, 0.875], np.float32)})
    assert z == [{"no": 0.125, "yes": 0.875}]


def test_dict_input(tmp_path):
    # {"b": 2, "q": 7, "a": 1} over [a, b, c] -> [[1, 2, 0]] ("q" is left out)
    path = save(tmp_path,
                [helper.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml",
                                  string_vocabulary=["a", "b", "c"])],
                [map_vi("m", TensorProto.STRING, TensorProto.DOUBLE)],
                [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 3])], "dv")
    sess = onyx.InferenceSession(path)
    assert sess.get_inputs()[0].type == "map(string,tensor(double))"
    (y,) = sess.run(None, {"m": {"b": 2, "q": 7, "a": 1}})
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, [[1.0, 2.0, 0.0]])
    with pytest.raises(Exception, match="keys are str"):
        sess.run(None, {"m": {1: 2.0}})


def test_castmap_dict(tmp_path):
    # {4: 1.5, 0: -2.5} SPARSE over 5 columns -> [[-2.5, 0, 0, 0, 1.5]]
    path = save(tmp_path,
                [helper.make_node("CastMap", ["m"], ["y"], domain="ai.onnx.ml",
                                  cast_to="TO_FLOAT", map_form="SPARSE", max_map=5)],
                [map_vi("m", TensorProto.INT64, TensorProto.FLOAT)],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], "cm")
    (y,) = onyx.InferenceSession(path).run(None, {"m": {4: 1.5, 0: -2.5}})
    np.testing.assert_array_equal(y, np.array([[-2.5, 0, 0, 0, 1.5]], np.float32))
