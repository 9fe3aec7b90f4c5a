"""onnxruntime.training.api: CheckpointState, Module, Optimizer, LinearLRScheduler.

    state = CheckpointState.load_checkpoint("art/checkpoint")
    model = Module("art/training_model.onnx", state, "art/eval_model.onnx")
    optimizer = Optimizer("art/optimizer_model.onnx", model)
    model.train()
    loss = model(x, labels)
    optimizer.step()
    model.lazy_reset_grad()

The C training session (onyx_training_session_create) loads the training,
eval and optimizer models of one artifacts folder together: Module takes
that folder from train_model_uri, and the other models must be the ones of
the same folder (generate_artifacts writes them so)."""

import json
import os

import numpy as np

from .. import OrtValue, _invalid_argument, _make_options, _onyx

__all__ = ["CheckpointState", "Parameter", "Module", "Optimizer", "LinearLRScheduler"]

# Onyx's own side file for CheckpointState.properties (the C checkpoint has
# no user properties).
_PROPERTIES_FILE = "properties.json"


class Parameter:
    """One parameter of a CheckpointState (onnxruntime's Parameter)."""

    def __init__(self, state, name):
        self._state = state
        self._name = name

    @property
    def name(self):
        return self._name

    @property
    def data(self):
        """A NumPy copy of the current value."""
        return self._state._ck.get_parameter(self._name)

    @data.setter
    def data(self, value):
        self._state._ck.set_parameter(self._name, np.asarray(value))

    @property
    def requires_grad(self):
        return self._state._ck.trainable(self._name) == 1

    @property
    def grad(self):
        raise NotImplementedError("Parameter.grad: Onyx's training session keeps the "
                                  "accumulated gradients internal")

    def __repr__(self):
        return "Parameter(name=%r, requires_grad=%r)" % (self._name, self.requires_grad)


class Parameters:
    """state.parameters: a mapping name -> Parameter; assigning an array sets
    the value (same dtype and shape)."""

    def __init__(self, state):
        self._state = state

    def _names(self):
        return self._state._ck.parameter_names()

    def __getitem__(self, name):
        if name not in self._names():
            raise KeyError(name)
        return Parameter(self._state, name)

    def __setitem__(self, name, value):
        if isinstance(value, Parameter):
            value = value.data
        self._state._ck.set_parameter(name, np.asarray(value))

    def __contains__(self, name):
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def __len__(self):
        return len(self._names())

    def keys(self):
        return self._names()

    def items(self):
        return [(n, Parameter(self._state, n)) for n in self._names()]


class CheckpointState:
    """The parameters and optimizer state (an OnyxCheckpoint)."""

    def __init__(self, state, properties=None):
        if not isinstance(state, _onyx.Checkpoint):
            raise TypeError("CheckpointState: use CheckpointState.load_checkpoint(path)")
        self._ck = state
        self._properties = dict(properties or {})

    @classmethod
    def load_checkpoint(cls, checkpoint_uri):
        path = os.fspath(checkpoint_uri)
        props = {}
        side = os.path.join(path, _PROPERTIES_FILE)
        if os.path.isfile(side):
            with open(side) as f:
                props = json.load(f)
        return cls(_onyx.Checkpoint(path), props)

    @classmethod
    def save_checkpoint(cls, state, checkpoint_uri, include_optimizer_state=False):
        if not isinstance(state, CheckpointState):
            raise TypeError("save_checkpoint: expected a CheckpointState, got %s"
                            % type(state).__name__)
        path = os.fspath(checkpoint_uri)
        state._ck.save(path, bool(include_optimizer_state))
        side = os.path.join(path, _PROPERTIES_FILE)
        if state._properties:
            with open(side, "w") as f:
                json.dump(state._properties, f)
        elif os.path.exists(side):
            os.unlink(side)

    @property
    def parameters(self):
        return Parameters(self)

    @property
    def properties(self):
        """User properties (int, float or str), saved beside the checkpoint."""
        return _Properties(self._properties)

    @property
    def step(self):
        """Optimizer steps taken (Onyx's)."""
        return self._ck.step()

    def optimizer_state_names(self):
        """The optimizer state tensors, "<param>.<slot>" (Onyx's)."""
        return self._ck.state_names()

    def optimizer_state(self, name):
        """A NumPy copy of one optimizer state tensor (Onyx's)."""
        return self._ck.get_state(name)


class _Properties(dict):
    def __init__(self, backing):
        super().__init__(backing)
        self._backing = backing

    def __setitem__(self, key, value):
        if not isinstance(value, (int, float, str)) or isinstance(value, bool):
            raise TypeError("a checkpoint property is an int, float or str, got %s"
                            % type(value).__name__)
        super().__setitem__(key, value)
        self._backing[key] = value

    def __delitem__(self, key):
        super().__delitem__(key)
        del self._backing[key]


_ARTIFACT_NAMES = {"train": "training_model.onnx", "eval": "eval_model.onnx",
                   "optimizer": "optimizer_model.onnx"}


def _check_artifact(uri, kind, folder):
    path = os.path.abspath(os.fspath(uri))
    if not os.path.isfile(path):
        _invalid_argument("%s model '%s': no such file" % (kind, path))
    if os.path.dirname(path) != folder or os.path.basename(path) != _ARTIFACT_NAMES[kind]:
        _invalid_argument("%s model '%s': Onyx loads the training, eval and optimizer models of "
                          "one artifacts folder together; expected %s"
                          % (kind, path, os.path.join(folder, _ARTIFACT_NAMES[kind])))
    return path


class Module:
    """The training and eval models over a CheckpointState (onnxruntime's
    Module). __call__(*inputs) runs a train step (forward, backward,
    gradients accumulated) in training mode and an eval step otherwise,
    and returns the loss. The GIL is released during steps."""

    training = True

    def __init__(self, train_model_uri, state, eval_model_uri=None, device="cpu",
                 session_options=None):
        if not isinstance(state, CheckpointState):
            raise TypeError("Module: state must be a CheckpointState, got %s"
                            % type(state).__name__)
        train_path = os.path.abspath(os.fspath(train_model_uri))
        folder = os.path.dirname(train_path)
        _check_artifact(train_path, "train", folder)
        if eval_model_uri is not None:
            _check_artifact(eval_model_uri, "eval", folder)
        self._folder = folder
        self._state = state
        self._device = device
        providers = None
        if device and device != "cpu":
            providers = [{"cuda": "CUDAExecutionProvider"}.get(device.split(":")[0], device)]
        self._ts = _onyx.TrainingSession(state._ck, folder,
                                         _make_options(session_options, providers, None))
        self.training = True

    def __call__(self, *user_inputs):
        user_inputs = [x.numpy() if isinstance(x, OrtValue) else x for x in user_inputs]
        if self.training:
            return self._ts.train_step(list(user_inputs))
        return self._ts.eval_step(list(user_inputs))

    def train(self, mode=True):
        self.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def lazy_reset_grad(self):
        self._ts.lazy_reset_grad()

    def input_names(self):
        """The inputs __call__ takes: the model's, then the labels."""
        return self._ts.input_names()

    def output_names(self):
        return ["loss"]

    def _trainable(self):
        ck = self._state._ck
        return [n for n in ck.parameter_names() if ck.trainable(n) == 1]

    def get_parameters_size(self, trainable_only=True):
        ck = self._state._ck
        names = self._trainable() if trainable_only else ck.parameter_names()
        return int(sum(ck.get_parameter(n).size for n in names))

    def get_contiguous_parameters(self, trainable_only=False):
        """The parameters flattened into one float32 array, in checkpoint order."""
        ck = self._state._ck
        names = self._trainable() if trainable_only else ck.parameter_names()
        parts = [ck.get_parameter(n).ravel() for n in names]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def copy_buffer_to_parameters(self, buffer, trainable_only=True):
        ck = self._state._ck
        names = self._trainable() if trainable_only else ck.parameter_names()
        buffer = np.asarray(buffer).ravel()
        total = sum(ck.get_parameter(n).size for n in names)
        if buffer.size != total:
            _invalid_argument("copy_buffer_to_parameters: the buffer has %d elements, the "
                              "parameters %d" % (buffer.size, total))
        pos = 0
        for n in names:
            p = ck.get_parameter(n)
            ck.set_parameter(n, buffer[pos:pos + p.size].reshape(p.shape).astype(p.dtype))
            pos += p.size

    def export_model_for_inferencing(self, inference_model_uri="inference_model.onnx",
                                     graph_output_names=None):
        """Writes the inference model with the trained parameters; with
        graph_output_names, only those values are the model's outputs."""
        path = os.fspath(inference_model_uri)
        self._ts.export_for_inference(path)
        if graph_output_names is None:
            return
        names = [graph_output_names] if isinstance(graph_output_names, str) \
            else list(graph_output_names)
        import onnx
        model = onnx.load(path)
        outputs = {o.name: o for o in model.graph.output}
        produced = {v for n in model.graph.node for v in n.output}
        new = []
        for n in names:
            if n in outputs:
                new.append(outputs[n])
            elif n in produced:
                new.append(onnx.helper.make_empty_tensor_value_info(n))
            else:
                _invalid_argument("export_model_for_inferencing: '%s' is not a value of the "
                                  "model (outputs: %s)" % (n, ", ".join(outputs)))
        if [o.name for o in model.graph.output] != names:
            del model.graph.output[:]
            model.graph.output.extend(new)
            onnx.save(model, path)


class Optimizer:
    """The optimizer model of the Module's artifacts (onnxruntime's Optimizer)."""

    def __init__(self, optimizer_uri, module):
        if not isinstance(module, Module):
            raise TypeError("Optimizer: module must be a Module, got %s"
                            % type(module).__name__)
        _check_artifact(optimizer_uri, "optimizer", module._folder)
        self._module = module

    def step(self):
        """One update of every trainable parameter with the accumulated
        gradients (the GIL released)."""
        self._module._ts.optimizer_step()

    def set_learning_rate(self, learning_rate):
        self._module._ts.set_learning_rate(float(learning_rate))

    def get_learning_rate(self):
        return self._module._ts.get_learning_rate()


class LinearLRScheduler:
    """onnxruntime's LinearLRScheduler: the rate of optimizer step t is
    initial_lr * t / warmup during warmup, then initial_lr * (total - t) /
    (total - warmup), floored at 0. step() sets the rate of the next
    optimizer step."""

    def __init__(self, optimizer, warmup_step_count, total_step_count, initial_lr):
        if not isinstance(optimizer, Optimizer):
            raise TypeError("LinearLRScheduler: optimizer must be an Optimizer, got %s"
                            % type(optimizer).__name__)
        warmup_step_count = int(warmup_step_count)
        total_step_count = int(total_step_count)
        if warmup_step_count < 0 or total_step_count < warmup_step_count:
            _invalid_argument("LinearLRScheduler: expected 0 <= warmup_step_count (%d) <= "
                              "total_step_count (%d)" % (warmup_step_count, total_step_count))
        self._optimizer = optimizer
        self._warmup = warmup_step_count
        self._total = total_step_count
        self._initial_lr = float(initial_lr)
        self._apply()

    def _multiplier(self, t):
        if t < self._warmup:
            return t / max(1, self._warmup)
        return max(0.0, (self._total - t) / max(1, self._total - self._warmup))

    def _apply(self):
        t = self._optimizer._module._state.step
        self._optimizer.set_learning_rate(self._initial_lr * self._multiplier(t))

    def step(self):
        self._apply()
