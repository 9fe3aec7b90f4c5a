"""Onyx for Python: the common subset of onnxruntime's inference API.

    import onyx as ort   # instead of: import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    y, = sess.run(None, {"x": x})

The session, its options and runs are libonyx's (the C extension onyx._onyx);
this module maps onnxruntime's names onto them. docs/python.md lists what is
the same as onnxruntime, what differs and what is missing.
"""

import enum
import json
import os
import threading

from . import _onyx

__version__ = _onyx.version()

__all__ = [
    "InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel",
    "ExecutionMode", "ExecutionOrder", "NodeArg", "ModelMetadata", "OnyxError", "Fail",
    "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException",
    "InvalidProtobuf", "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail",
    "get_available_providers", "get_all_providers", "get_device", "devices",
    "get_version_string", "OrtValue", "SessionIOBinding",
]


# --- Errors -------------------------------------------------------------------------------
# onnxruntime raises classes of these names from onnxruntime.capi; here they
# share the base OnyxError, which carries the C status code name in `.code`.

class OnyxError(RuntimeError):
    """An error reported by libonyx; `code` is the status code's name."""
    code = "FAIL"


class Fail(OnyxError):
    pass


class InvalidArgument(OnyxError):
    pass


class NoSuchFile(OnyxError):
    pass


class NoModel(OnyxError):
    pass


class EngineError(OnyxError):
    pass


class RuntimeException(OnyxError):
    pass


class InvalidProtobuf(OnyxError):
    pass


class ModelLoaded(OnyxError):
    pass


class NotImplemented(OnyxError):  # noqa: A001 (onnxruntime's name)
    pass


class InvalidGraph(OnyxError):
    pass


class EPFail(OnyxError):
    pass


class Cancelled(Fail):
    """A run stopped by RunOptions.terminate or a time limit."""


class InvalidConfig(InvalidArgument):
    """A JSON config or a provider option that Onyx refuses."""


class LimitExceeded(RuntimeException):
    """A resource limit of the session options was hit."""


# OnyxStatusCode (sdk/include/onyx/onyx_types.h) -> class.
_ERRORS = {
    1: Fail,               # ONYX_FAIL
    2: InvalidArgument,    # ONYX_INVALID_ARGUMENT
    3: InvalidGraph,       # ONYX_INVALID_MODEL
    4: NoSuchFile,         # ONYX_NOT_FOUND
    5: NotImplemented,     # ONYX_NOT_IMPLEMENTED
    6: EPFail,             # ONYX_NO_DEVICE
    7: EPFail,             # ONYX_ABI_MISMATCH
    8: RuntimeException,   # ONYX_OUT_OF_MEMORY
    9: RuntimeException,   # ONYX_RUNTIME_ERROR
    10: Cancelled,         # ONYX_CANCELLED
    11: InvalidConfig,     # ONYX_INVALID_CONFIG
    12: EPFail,            # ONYX_PLACEMENT_ERROR
    13: LimitExceeded,     # ONYX_LIMIT_EXCEEDED
}
_onyx.set_error_classes(OnyxError, _ERRORS)


def _invalid_argument(message):
    """Raises InvalidArgument for a mistake found on the Python side."""
    exc = InvalidArgument(message)
    exc.code = _onyx.status_code_name(2)  # ONYX_INVALID_ARGUMENT
    raise exc


# --- Types --------------------------------------------------------------------------------

# OnyxElemType (= ONNX TensorProto.DataType) -> onnxruntime's type name.
_TYPE_NAMES = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64",
    14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn",
    18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
    23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2",
}


def _type_string(elem, kind, key=0):
    t = "tensor(%s)" % _TYPE_NAMES.get(elem, "undefined")
    if kind in (4, 5):  # map(K, V) and seq(map(K, V)) of ONNX-ML, as onnxruntime names them
        t = "map(%s,%s)" % (_TYPE_NAMES.get(key, "undefined"), t)
        return "seq(%s)" % t if kind == 5 else t
    if kind == 1:
        return "seq(%s)" % t
    if kind == 2:
        return "optional(%s)" % t
    if kind == 3:
        return "optional(seq(%s))" % t
    return t


class NodeArg:
    """An input or output of the model: name, shape (ints; a symbolic dim's
    name as a str; None for a dim without either) and type ("tensor(float)")."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name, shape, type):  # noqa: A002 (onnxruntime's name)
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self):
        return "NodeArg(name=%r, type=%r, shape=%r)" % (self.name, self.type, self.shape)


class ModelMetadata:
    """What the model file says about itself (ModelProto's fields)."""

    def __init__(self, producer_name="", graph_name="", domain="", description="",
                 graph_description="", version=0, custom_metadata_map=None):
        self.producer_name = producer_name
        self.graph_name = graph_name
        self.domain = domain
        self.description = description
        self.graph_description = graph_description
        self.version = version
        self.custom_metadata_map = dict(custom_metadata_map or {})

    def __repr__(self):
        return ("ModelMetadata(producer_name=%r, graph_name=%r, domain=%r, version=%r)"
                % (self.producer_name, self.graph_name, self.domain, self.version))


# --- A reader of the few ModelProto fields the C API does not report ------------------------
# (metadata and the names of symbolic dims). Protobuf wire format: each field
# is a varint key (number << 3 | wire type) and a value; length-delimited
# fields (wire type 2) are skipped without being read, so the weights cost
# nothing.

def _varint(buf, pos):
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf):
    """(field number, wire type, value) of a message; value is an int or a
    memoryview of the bytes."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
        elif wire == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise ValueError("truncated field")
            val, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield num, wire, val


def _text(v):
    return bytes(v).decode("utf-8", "replace")


def _dim_params(value_info):
    """The dims of a ValueInfoProto's tensor or sequence type: int, str or
    None each; None when the shape is not given."""
    for num, wire, v in _fields(value_info):
        if num != 2 or wire != 2:  # ValueInfoProto.type
            continue
        tp = v
        for _ in range(4):  # through sequence_type/optional_type to the tensor
            nested = None
            for tnum, twire, tv in _fields(tp):
                if twire != 2:
                    continue
                if tnum in (1, 8):  # tensor_type, sparse_tensor_type
                    for snum, swire, sv in _fields(tv):
                        if snum == 2 and swire == 2:  # shape
                            dims = []
                            for dnum, dwire, dv in _fields(sv):
                                if dnum != 1 or dwire != 2:
                                    continue
                                d = None
                                for xnum, xwire, xv in _fields(dv):
                                    if xnum == 1 and xwire == 0:
                                        d = xv
                                    elif xnum == 2 and xwire == 2:
                                        d = _text(xv)
                                dims.append(d)
                            return dims
                    return None
                if tnum in (4, 9):  # sequence_type, optional_type: elem_type
                    for enum_, ewire, ev in _fields(tv):
                        if enum_ == 1 and ewire == 2:
                            nested = ev
            if nested is None:
                return None
            tp = nested
    return None


def _read_model_info(buf):
    """(ModelMetadata, {name: dims}) from a serialized ModelProto."""
    meta = ModelMetadata()
    dims = {}
    graph = None
    for num, wire, v in _fields(buf):
        if wire == 2 and num == 2:
            meta.producer_name = _text(v)
        elif wire == 2 and num == 4:
            meta.domain = _text(v)
        elif wire == 0 and num == 5:
            meta.version = v
        elif wire == 2 and num == 6:
            meta.description = _text(v)
        elif wire == 2 and num == 7:
            graph = v
        elif wire == 2 and num == 14:
            key = value = ""
            for knum, kwire, kv in _fields(v):
                if knum == 1 and kwire == 2:
                    key = _text(kv)
                elif knum == 2 and kwire == 2:
                    value = _text(kv)
            meta.custom_metadata_map[key] = value
    if graph is not None:
        for num, wire, v in _fields(graph):
            if wire != 2:
                continue
            if num == 2:
                meta.graph_name = _text(v)
            elif num == 10:
                meta.graph_description = _text(v)
            elif num in (11, 12):  # input, output
                name = None
                for vnum, vwire, vv in _fields(v):
                    if vnum == 1 and vwire == 2:
                        name = _text(vv)
                if name is not None:
                    dims[name] = _dim_params(v)
    return meta, dims


# --- Options --------------------------------------------------------------------------------

class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1


class SessionOptions:
    """onnxruntime.SessionOptions: the settings are applied when a session is
    created with them. Onyx extras: `config` (a JSON config path or dict,
    docs/config.md), `pins` ([(node name or None, op type or None,
    provider)]), `deterministic_compute`, `cache_dir`."""

    def __init__(self):
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.enable_profiling = False
        self.profile_file_prefix = "onyx_profile"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_mem_pattern = True
        self.enable_cpu_mem_arena = True
        self.deterministic_compute = False
        self.use_deterministic_compute = False
        self.optimized_model_filepath = ""
        self.logid = ""
        self.config = None
        self.pins = []
        self._entries = {}

    def add_session_config_entry(self, key, value):
        self._entries[str(key)] = str(value)

    def get_session_config_entry(self, key):
        return self._entries[key]

    def _profile_path(self):
        import time
        return "%s_%s.json" % (self.profile_file_prefix, time.strftime("%Y-%m-%d_%H-%M-%S"))


class RunOptions:
    """onnxruntime.RunOptions: `terminate = True` stops the runs using these
    options at their next node boundary (they raise Cancelled); `run_tag`
    names the run in logs and profiles; `log_severity_level` replaces the
    session's for the run (-1: the session's)."""

    def __init__(self):
        object.__setattr__(self, "_ro", _onyx.RunOptions())
        object.__setattr__(self, "_terminate", False)
        object.__setattr__(self, "_tag", "")
        object.__setattr__(self, "_severity", -1)

    @property
    def terminate(self):
        return self._terminate

    @terminate.setter
    def terminate(self, value):
        if value and not self._terminate:
            self._ro.terminate()
        elif not value and self._terminate:
            # A terminated OnyxRunOptions stays terminated: fresh ones, with
            # the same settings, for later runs.
            ro = _onyx.RunOptions()
            if self._tag:
                ro.set_tag(self._tag)
            if self._severity >= 0:
                ro.set_log_severity(self._severity)
            object.__setattr__(self, "_ro", ro)
        object.__setattr__(self, "_terminate", bool(value))

    @property
    def run_tag(self):
        return self._tag

    @run_tag.setter
    def run_tag(self, value):
        self._ro.set_tag(str(value))
        object.__setattr__(self, "_tag", str(value))

    @property
    def log_severity_level(self):
        return self._severity

    @log_severity_level.setter
    def log_severity_level(self, value):
        value = int(value)
        if value >= 0:
            self._ro.set_log_severity(value)
        object.__setattr__(self, "_severity", value)

    log_verbosity_level = 0


# --- Providers ----------------------------------------------------------------------------------

# onnxruntime's provider names -> Onyx's.
_PROVIDER_ALIASES = {
    "CPUExecutionProvider": "cpu",
    "CUDAExecutionProvider": "cuda",
    "DnnlExecutionProvider": "onednn",
    "ROCMExecutionProvider": "rocm",
}
_ONYX_TO_ORT = {v: k for k, v in _PROVIDER_ALIASES.items()}


def devices():
    """Every provider library on the search path and the devices it sees
    (`onyx devices`): a list of dicts with name, library, loaded, vendor,
    version, score, selected, status, message and devices (name, kind,
    vendor_id, device_id, memory_bytes, properties, message)."""
    return _onyx.providers()


def get_available_providers():
    """The providers that load and see a device, by onnxruntime's name where
    there is one (CPUExecutionProvider last), else Onyx's."""
    names = []
    for p in _onyx.providers():
        if p["selected"] and p["loaded"] and p["status"] == "OK":
            name = _ONYX_TO_ORT.get(p["name"], p["name"])
            if name not in names:
                names.append(name)
    names.sort(key=lambda n: n == "CPUExecutionProvider")
    if "CPUExecutionProvider" not in names:
        names.append("CPUExecutionProvider")
    return names


def get_all_providers():
    return list(_PROVIDER_ALIASES) + [
        p["name"] for p in _onyx.providers() if p["name"] not in _ONYX_TO_ORT]


def get_device():
    avail = get_available_providers()
    return "GPU" if any(p in avail for p in ("CUDAExecutionProvider",
                                            "ROCMExecutionProvider")) else "CPU"


def get_version_string():
    return __version__


def _provider_name(p):
    if not isinstance(p, str):
        raise TypeError("a provider is a str, got %s" % type(p).__name__)
    return _PROVIDER_ALIASES.get(p, p)


def _apply_providers(opts, providers, provider_options):
    """Adds `providers` (names, (name, options) pairs, a config path or dict)
    to the _onyx.Options."""
    if providers is None:
        return
    if isinstance(providers, dict):
        opts.load_config_text(json.dumps(providers), "<providers dict>")
        return
    if isinstance(providers, (str, os.PathLike)):
        path = os.fspath(providers)
        if path.endswith(".json") or os.path.sep in path or os.path.exists(path):
            opts.load_config(path)
            return
        providers = [path]
    providers = list(providers)
    if provider_options is not None:
        provider_options = list(provider_options)
        if len(provider_options) != len(providers):
            _invalid_argument("provider_options has %d entries for %d providers"
                              % (len(provider_options), len(providers)))
    for i, p in enumerate(providers):
        options = {}
        if isinstance(p, (tuple, list)):
            if len(p) != 2 or not isinstance(p[1], dict):
                _invalid_argument(
                    "providers[%d]: expected a name or a (name, options dict) pair" % i)
            p, options = p
        if provider_options is not None and provider_options[i]:
            options = dict(options, **provider_options[i])
        name = _provider_name(p)
        device = int(options.pop("device_id", 0))
        opts.add_provider(name, None, device, True)
        for key, value in options.items():
            if isinstance(value, bool):
                value = "1" if value else "0"
            opts.set_provider_option(name, str(key), str(value))
    # onnxruntime runs only the providers listed (CPU included when listed);
    # Onyx keeps its CPU provider as the fallback for nodes the others leave.


def _make_options(sess_options, providers, provider_options):
    o = _onyx.Options()
    so = sess_options
    if so is not None:
        if so.config is not None:
            if isinstance(so.config, dict):
                o.load_config_text(json.dumps(so.config), "<SessionOptions.config>")
            else:
                o.load_config(os.fspath(so.config))
        level = int(so.graph_optimization_level)
        o.set_optimization_level(level)
        if so.intra_op_num_threads:
            o.set_threads(int(so.intra_op_num_threads))
        o.set_log_severity(int(so.log_severity_level))
        if so.enable_profiling:
            o.set_profile(so._profile_path())
        o.set_execution_order(int(so.execution_order))
        if so.deterministic_compute or so.use_deterministic_compute:
            o.set_deterministic(True)
        if not so.enable_mem_pattern:
            o.set_memory_pattern(False)
        for node, op, provider in so.pins:
            o.add_pin(node, op, _provider_name(provider))
    _apply_providers(o, providers, provider_options)
    return o


# --- Session --------------------------------------------------------------------------------------

class InferenceSession:
    """onnxruntime.InferenceSession over an Onyx session.

    path_or_bytes: a model path or its bytes. providers: onnxruntime's names
    (CPUExecutionProvider, CUDAExecutionProvider, DnnlExecutionProvider,
    ROCMExecutionProvider), Onyx's (cpu, cuda, ...), (name, options) pairs,
    or an Onyx JSON config as a path or a dict. run() releases the GIL: any
    number of threads may run one session at once."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        self._model_path = None
        self._model_bytes = None
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            self._model_bytes = bytes(path_or_bytes)
            model = self._model_bytes
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            self._model_path = os.fspath(path_or_bytes)
            model = self._model_path
        else:
            raise TypeError("path_or_bytes: expected a path or bytes, got %s"
                            % type(path_or_bytes).__name__)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._sess = _onyx.Session(model, _make_options(sess_options, providers,
                                                        provider_options))
        self._inputs_raw = self._sess.inputs()
        self._outputs_raw = self._sess.outputs()
        self._input_names = [i[0] for i in self._inputs_raw]
        self._output_names = [o[0] for o in self._outputs_raw]
        self._info_lock = threading.Lock()
        self._model_info = None
        if sess_options is not None and sess_options.optimized_model_filepath:
            self._sess.save_model(sess_options.optimized_model_filepath)

    # Model information -------------------------------------------------------------------

    def _info(self):
        """(ModelMetadata, {name: dims}) read from the model file, once."""
        with self._info_lock:
            if self._model_info is None:
                try:
                    if self._model_bytes is not None:
                        buf = memoryview(self._model_bytes)
                    else:
                        with open(self._model_path, "rb") as f:
                            buf = memoryview(f.read())
                    self._model_info = _read_model_info(buf)
                except (OSError, ValueError):
                    self._model_info = (ModelMetadata(), {})
            return self._model_info

    def _node_args(self, raw):
        out = []
        names = None
        for name, elem, kind, dims, key in raw:
            shape = None
            if dims is not None:
                shape = list(dims)
                if any(d < 0 for d in dims):
                    if names is None:
                        names = self._info()[1]
                    declared = names.get(name)
                    for k, d in enumerate(dims):
                        if d < 0:
                            sym = declared[k] if declared and k < len(declared) else None
                            shape[k] = sym if isinstance(sym, str) and sym else None
            out.append(NodeArg(name, shape, _type_string(elem, kind, key)))
        return out

    def get_inputs(self):
        return self._node_args(self._inputs_raw)

    def get_outputs(self):
        return self._node_args(self._outputs_raw)

    def get_overridable_initializers(self):
        return []

    def get_modelmeta(self):
        return self._info()[0]

    def get_providers(self):
        """The providers the session uses, in priority order (onnxruntime's
        names where there is one)."""
        return [_ONYX_TO_ORT.get(n, n) for n, _ in self._sess.providers()]

    def get_provider_options(self):
        return {p: {} for p in self.get_providers()}

    def get_session_options(self):
        return self._sess_options

    def explain(self):
        """Onyx's placement report: every node's provider, the reasons
        providers declined nodes, the fused groups and the copies."""
        return self._sess.explain()

    def placement(self):
        """{provider: number of nodes it runs} (Onyx's names)."""
        return dict(self._sess.providers())

    # Runs ----------------------------------------------------------------------------------

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model: output_names None or empty for every output;
        input_feed {name: array}. Returns a list of NumPy arrays."""
        if not output_names:
            output_names = self._output_names
        elif not isinstance(output_names, list):
            output_names = list(output_names)
        if not isinstance(input_feed, dict):
            raise TypeError("input_feed: expected a dict of name -> array, got %s"
                            % type(input_feed).__name__)
        ro = run_options._ro if run_options is not None else None
        return self._sess.run(output_names, list(input_feed), list(input_feed.values()), ro)

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """run() with OrtValues (or arrays) in and OrtValues out."""
        feed = {k: (v.numpy() if isinstance(v, OrtValue) else v)
                for k, v in input_dict_ort_values.items()}
        return [OrtValue.ortvalue_from_numpy(a)
                for a in self.run(output_names, feed, run_options)]

    def io_binding(self):
        """A SessionIOBinding over this session."""
        return SessionIOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        """Runs with the binding's inputs and outputs (the GIL released);
        results: iobinding.get_outputs() or copy_outputs_to_cpu()."""
        if not isinstance(iobinding, SessionIOBinding) or iobinding._session is not self:
            _invalid_argument("run_with_iobinding: expected a SessionIOBinding of this session")
        iobinding._run(run_options)

    def end_profiling(self):
        return ""

    def close(self):
        """Releases the session (at once, or when the last run in flight ends);
        later calls raise InvalidArgument."""
        self._sess.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


from ._values import OrtValue, SessionIOBinding  # noqa: E402
