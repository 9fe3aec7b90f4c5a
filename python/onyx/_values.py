"""onnxruntime's OrtValue and SessionIOBinding over _onyx.Value and
_onyx.IoBinding (_onyx_values.c).

OrtValue.ortvalue_from_numpy shares the array's memory (no copy) when the
array is C-contiguous, writeable and of a numeric dtype; other arrays
(bool, strings, views with strides) are copied. to_dlpack, __dlpack__ and
from_dlpack exchange memory with torch and NumPy without copies."""

import numpy as np

from . import _onyx, _invalid_argument

__all__ = ["OrtValue", "SessionIOBinding"]

# OnyxElemType by NumPy dtype and back.
_ELEM_OF_DTYPE = {
    np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
    np.dtype(np.uint16): 4, np.dtype(np.int16): 5, np.dtype(np.int32): 6,
    np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.float16): 10,
    np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13,
    np.dtype(np.complex64): 14, np.dtype(np.complex128): 15,
}
_DTYPE_OF_ELEM = {v: k for k, v in _ELEM_OF_DTYPE.items()}
_DEVICE_NAMES = {0: "cpu", 1: "cuda", 2: "rocm"}  # OnyxDeviceKind where named
_DL_DEVICE = {"cpu": 1, "cuda": 2, "gpu": 2, "rocm": 10}


def _elem_of(element_type):
    try:
        return _ELEM_OF_DTYPE[np.dtype(element_type)]
    except (TypeError, KeyError):
        _invalid_argument("element type %r has no ONNX element type" % (element_type,))


class OrtValue:
    """A tensor value (onnxruntime's OrtValue)."""

    def __init__(self, value, keep=None):
        if not isinstance(value, _onyx.Value):
            raise TypeError("OrtValue: use OrtValue.ortvalue_from_numpy or from_dlpack")
        self._value = value
        self._keep = keep  # an object whose memory the value borrows

    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id=0):
        if device_type != "cpu":
            raise NotImplementedError("ortvalue_from_numpy: only device_type 'cpu' (bind the "
                                      "value with bind_input to have it copied to a device)")
        return OrtValue(_onyx.Value.from_numpy(np.asarray(numpy_obj)))

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id=0):
        if device_type != "cpu":
            raise NotImplementedError("ortvalue_from_shape_and_type: only device_type 'cpu'")
        return OrtValue(_onyx.Value.from_numpy(np.zeros(tuple(shape), np.dtype(element_type))))

    @staticmethod
    def from_dlpack(data, is_bool_tensor=False):
        """A value sharing the memory of a DLPack capsule or of an object
        with __dlpack__ (a torch tensor, a NumPy array)."""
        if is_bool_tensor:
            raise NotImplementedError("from_dlpack: bool tensors have no DLPack 0.6 type")
        return OrtValue(_onyx.Value.from_dlpack(data))

    def to_dlpack(self):
        """A DLPack capsule sharing this value's memory."""
        return self._value.to_dlpack()

    def __dlpack__(self, stream=None):
        return self._value.__dlpack__(stream)

    def __dlpack_device__(self):
        return self._value.__dlpack_device__()

    def numpy(self):
        """A NumPy array over this value's host memory (no copy)."""
        return self._value.numpy()

    def shape(self):
        return self._value.shape()

    def data_type(self):
        from . import _type_string
        return _type_string(self._value.elem_type(), 0)

    def element_type(self):
        return _DTYPE_OF_ELEM.get(self._value.elem_type())

    def device_name(self):
        return _DEVICE_NAMES.get(self._value.device()[0], "device")

    def data_ptr(self):
        return self._value.data_ptr()

    def is_tensor(self):
        return self._value.is_tensor()

    def has_value(self):
        return True

    def __repr__(self):
        return "OrtValue(%s, shape=%s, %s)" % (self.data_type(), self.shape(),
                                                self.device_name())


class SessionIOBinding:
    """Inputs and outputs bound to an InferenceSession once, for repeated
    runs with run_with_iobinding (onnxruntime's SessionIOBinding)."""

    def __init__(self, session):
        self._session = session
        self._binding = _onyx.IoBinding(session._sess)
        self._keep = {}  # values whose memory bound inputs/outputs borrow, by name

    def bind_cpu_input(self, name, arr_on_cpu):
        value = _onyx.Value.from_numpy(np.asarray(arr_on_cpu), True)
        self._binding.bind_input(name, value)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        if device_type not in _DL_DEVICE:
            _invalid_argument("bind_input '%s': unknown device_type %r" % (name, device_type))
        value = _onyx.Value.from_pointer(int(buffer_ptr), _elem_of(element_type),
                                         [int(d) for d in shape], _DL_DEVICE[device_type],
                                         int(device_id))
        self._binding.bind_input(name, value)

    def bind_ortvalue_input(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue):
            raise TypeError("bind_ortvalue_input: expected an OrtValue, got %s"
                            % type(ortvalue).__name__)
        self._binding.bind_input(name, ortvalue._value)
        self._keep[("in", name)] = ortvalue

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                    buffer_ptr=None):
        if buffer_ptr is None:
            if device_type != "cpu":
                raise NotImplementedError("bind_output '%s': device outputs without a buffer "
                                          "are not supported here (bind an OrtValue)" % name)
            self._binding.bind_output(name, None)
            return
        if element_type is None or shape is None:
            _invalid_argument("bind_output '%s': a buffer_ptr needs element_type and shape"
                              % name)
        if device_type not in _DL_DEVICE:
            _invalid_argument("bind_output '%s': unknown device_type %r" % (name, device_type))
        value = _onyx.Value.from_pointer(int(buffer_ptr), _elem_of(element_type),
                                         [int(d) for d in shape], _DL_DEVICE[device_type],
                                         int(device_id))
        self._binding.bind_output(name, value)

    def bind_ortvalue_output(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue):
            raise TypeError("bind_ortvalue_output: expected an OrtValue, got %s"
                            % type(ortvalue).__name__)
        self._binding.bind_output(name, ortvalue._value)
        self._keep[("out", name)] = ortvalue

    def get_outputs(self):
        """The last run's outputs as OrtValues (sharing their memory)."""
        return [OrtValue(v) for v in self._binding.get_outputs()]

    def copy_outputs_to_cpu(self):
        """The last run's outputs as NumPy arrays (copies)."""
        return [np.array(v.numpy(), copy=True) for v in self._binding.get_outputs()]

    def get_outputs_names(self):
        return self._binding.output_names()

    def clear_binding_inputs(self):
        self._binding.clear_inputs()
        self._keep = {k: v for k, v in self._keep.items() if k[0] != "in"}

    def clear_binding_outputs(self):
        self._binding.clear_outputs()
        self._keep = {k: v for k, v in self._keep.items() if k[0] != "out"}

    def synchronize_inputs(self):
        pass

    def synchronize_outputs(self):
        pass  # every run ends synchronized (onyx.h)

    def _run(self, run_options):
        ro = run_options._ro if run_options is not None else None
        self._binding.run(ro)
