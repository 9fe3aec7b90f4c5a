"""On-device training, drop-in for onnxruntime.training's on-device API.

    from onyx.training import artifacts          # onnxruntime.training.artifacts
    from onyx.training.api import CheckpointState, Module, Optimizer

Both sit on libonyx's training API (sdk/include/onyx/onyx_training.h,
docs/training.md); docs/python.md lists what differs from onnxruntime."""

from . import api, artifacts  # noqa: F401

__all__ = ["api", "artifacts"]
