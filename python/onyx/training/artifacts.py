"""onnxruntime.training.artifacts: generate_artifacts, LossType, OptimType.

The artifacts are Onyx's (onyx_training_artifacts_generate): in
artifact_directory, training_model.onnx, eval_model.onnx,
optimizer_model.onnx, inference_model.onnx, artifacts.json and checkpoint/.
"""

import enum
import os
import tempfile

from .. import _onyx, _invalid_argument

__all__ = ["LossType", "OptimType", "generate_artifacts"]


class LossType(enum.Enum):
    """The loss appended to the model's first output (onnxruntime's names)."""
    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(enum.Enum):
    """The optimizer of optimizer_model.onnx (onnxruntime's names; Lamb is Onyx's)."""
    AdamW = 1
    SGD = 2
    Lamb = 3


# OnyxLossKind and OnyxOptimizerKind (onyx_training.h).
_LOSS = {LossType.CrossEntropyLoss: 0, LossType.MSELoss: 1, LossType.BCEWithLogitsLoss: 2,
         LossType.L1Loss: 3}
_LOSS_MODEL_OUTPUT = 4
_OPTIM = {OptimType.SGD: 0, OptimType.AdamW: 1, OptimType.Lamb: 2}


def _enum_value(value, cls, table, what):
    if isinstance(value, str):
        try:
            value = cls[value]
        except KeyError:
            _invalid_argument("%s: unknown name %r (expected one of %s)"
                              % (what, value, ", ".join(cls.__members__)))
    if not isinstance(value, cls):
        raise TypeError("%s: expected a %s, got %s" % (what, cls.__name__,
                                                        type(value).__name__))
    return table[value]


def generate_artifacts(model, requires_grad=None, frozen_params=None, loss=None,
                       optimizer=None, artifact_directory=None, prefix="", ort_format=False,
                       custom_op_library=None, additional_output_names=None,
                       nominal_checkpoint=False, loss_input_names=None, learning_rate=1e-3,
                       clip_grad_norm=False, mixed_precision=None):
    """Writes the training artifacts of `model` (an onnx.ModelProto or a path).

    requires_grad: the initializers to train (None: every floating-point
    initializer not in frozen_params); frozen_params: initializers kept
    constant. loss: a LossType (None: the model's first output is the loss
    already). optimizer: an OptimType (None: AdamW). artifact_directory:
    where to write (None: the current folder). learning_rate and
    clip_grad_norm are Onyx's: the checkpoint's initial rate and a
    ClipGradNorm before the optimizer. mixed_precision (Onyx's): None,
    "float16" (with dynamic loss scaling) or "bfloat16" (docs/training.md,
    "Mixed precision")."""
    if prefix:
        raise NotImplementedError("generate_artifacts: prefix is not supported (Onyx's "
                                  "artifacts have fixed names; use another artifact_directory)")
    if ort_format:
        raise NotImplementedError("generate_artifacts: ort_format is not supported")
    if custom_op_library is not None:
        raise NotImplementedError("generate_artifacts: custom_op_library is not supported")
    if additional_output_names:
        raise NotImplementedError("generate_artifacts: additional_output_names is not supported")
    if loss_input_names:
        raise NotImplementedError("generate_artifacts: loss_input_names is not supported")
    if loss is None:
        loss_kind = _LOSS_MODEL_OUTPUT
    elif isinstance(loss, (LossType, str)):
        loss_kind = _enum_value(loss, LossType, _LOSS, "loss")
    else:
        raise NotImplementedError("generate_artifacts: loss must be a LossType or None; custom "
                                  "onnxblock losses are not supported (got %s)"
                                  % type(loss).__name__)
    mixed = {None: 0, "float32": 0, "float16": 1, "bfloat16": 2}.get(mixed_precision, -1)
    if mixed < 0:
        raise ValueError("generate_artifacts: mixed_precision must be None, 'float16' or "
                         "'bfloat16', not %r" % (mixed_precision,))
    optim_kind = _enum_value(optimizer if optimizer is not None else OptimType.AdamW,
                             OptimType, _OPTIM, "optimizer")
    out_dir = os.fspath(artifact_directory) if artifact_directory is not None else os.getcwd()
    trainable = list(requires_grad) if requires_grad is not None else None
    frozen = list(frozen_params) if frozen_params is not None else None
    tmp = None
    try:
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
        elif hasattr(model, "SerializeToString"):
            fd, path = tempfile.mkstemp(suffix=".onnx")
            tmp = path
            with os.fdopen(fd, "wb") as f:
                f.write(model.SerializeToString())
        else:
            raise TypeError("model: expected an onnx.ModelProto or a path, got %s"
                            % type(model).__name__)
        _onyx.generate_artifacts(path, out_dir, loss_kind, optim_kind, float(learning_rate),
                                 trainable, frozen, bool(clip_grad_norm), mixed)
    finally:
        if tmp is not None:
            os.unlink(tmp)
