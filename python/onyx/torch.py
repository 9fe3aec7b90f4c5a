"""onyx.torch.OnyxModule: a torch.nn.Module whose forward and backward run in Onyx.

    from onyx.torch import OnyxModule
    model = OnyxModule(MyNet())      # then train it as the original
    loss = criterion(model(x), y)
    loss.backward()                  # the module's backward runs in Onyx
    optimizer.step()                 # a torch optimizer on model.parameters()

Per input signature (shapes and dtypes), OnyxModule exports the module with
torch.onnx.export (eval mode, parameters as initializers named as in
named_parameters()), and builds two Onyx sessions:

- forward: the exported graph with the parameters as graph inputs;
- backward: a vector-Jacobian-product model. The exported graph gets
  loss = sum_k ReduceSum(output_k * grad_output_k) as its only output, with
  the floating-point inputs and the parameters as the differentiated
  values; onyx_training_artifacts_generate (loss = the model's output)
  writes its training model, whose Gradient node Onyx expands. Running it
  with the incoming gradients gives d(loss)/d(input) and d(loss)/d(param),
  which are the vector-Jacobian products autograd wants.

Both run inside a torch.autograd.Function. The parameters stay torch
tensors: each call binds them, the inputs and the incoming gradients to
the sessions through DLPack (no copy), and the results come back as torch
tensors over Onyx's memory (torch.from_dlpack, no copy). The backward pass
recomputes the forward inside the backward model.

Environment:
  ONYX_TORCH_FALLBACK=fallback (default): when export or the Onyx sessions
      fail, warn and run the module in PyTorch; =raise: raise the error.
  ONYX_TORCH_SAVE_ONNX=DIR: write the exported, forward and gradient
      graphs there (exported_<n>.onnx, forward_<n>.onnx, vjp_<n>/).

Limits: CPU tensors; the module runs as in eval mode (Dropout off,
BatchNormalization with its running statistics, which stay constants of
the export); buffers and parameters with requires_grad False get no
gradient.
"""

import io
import os
import shutil
import tempfile
import warnings

try:
    import torch
except ImportError as e:  # pragma: no cover (the tests skip without torch)
    raise ImportError("onyx.torch needs PyTorch (python3-torch)") from e

import onnx
from onnx import TensorProto, helper, numpy_helper

from . import InferenceSession, OrtValue
from .training import artifacts as _artifacts

__all__ = ["OnyxModule"]

_OPSET = 17  # LayerNormalization is one op (with a gradient rule) from 17


def _policy():
    p = os.environ.get("ONYX_TORCH_FALLBACK", "fallback").strip().lower()
    if p not in ("raise", "fallback"):
        raise ValueError("ONYX_TORCH_FALLBACK=%r: expected 'raise' or 'fallback'" % p)
    return p


def _to_ortvalue(t):
    """An OrtValue over a torch tensor's memory (no copy)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return OrtValue.from_dlpack(t)


def _to_torch(ov):
    """A torch tensor over an OrtValue's memory (no copy)."""
    return torch.from_dlpack(ov)


class _Compiled:
    """The Onyx sessions of one input signature."""

    def __init__(self, module, inputs, index):
        self.tmp = tempfile.mkdtemp(prefix="onyx_torch_")
        try:
            self._build(module, inputs, index)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise

    def _build(self, module, inputs, index):
        named = dict(module.named_parameters())
        n_in = len(inputs)
        in_names = ["input_%d" % i for i in range(n_in)]
        buf = io.BytesIO()
        was_training = module.training
        # The export merges initializers of equal values (two fresh
        # LayerNorms' weights, say) into one, which would lose the
        # parameter's name: such parameters are made distinct while
        # exporting and restored after (the sessions take the parameters
        # as inputs, so the exported values are not used).
        restore = []
        with torch.no_grad():
            plist = list(named.values())
            for i, p in enumerate(plist):
                if any(q.shape == p.shape and q.dtype == p.dtype and torch.equal(p, q)
                       for q in plist[:i]):
                    restore.append((p, p.detach().clone()))
                    gen = torch.Generator().manual_seed(i)  # not the user's RNG
                    p.add_(torch.rand(p.shape, generator=gen, dtype=p.dtype) + 1.0)
        try:
            torch.onnx.export(module, tuple(inputs), buf, input_names=in_names,
                              opset_version=_OPSET, do_constant_folding=False,
                              export_params=True, keep_initializers_as_inputs=False,
                              training=torch.onnx.TrainingMode.EVAL)
        finally:
            module.train(was_training)
            with torch.no_grad():
                for p, saved in restore:
                    p.copy_(saved)
        exported = onnx.load_from_string(buf.getvalue())
        graph = exported.graph
        self.output_names = [o.name for o in graph.output]
        inits = {t.name: t for t in graph.initializer}
        # Parameters the graph reads, in named_parameters() order.
        self.param_names = [n for n in named if n in inits]
        self.input_float = [inputs[i].is_floating_point() for i in range(n_in)]
        self.in_names = in_names
        save_dir = os.environ.get("ONYX_TORCH_SAVE_ONNX")
        if save_dir:
            os.makedirs(save_dir, exist_ok=True)
            onnx.save(exported, os.path.join(save_dir, "exported_%d.onnx" % index))

        # Forward: the parameters become graph inputs.
        fwd = onnx.ModelProto()
        fwd.CopyFrom(exported)
        keep = [t for t in fwd.graph.initializer if t.name not in self.param_names]
        params = [inits[n] for n in self.param_names]
        del fwd.graph.initializer[:]
        fwd.graph.initializer.extend(keep)
        for t in params:
            fwd.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type,
                                                                 list(t.dims)))
        fwd_path = os.path.join(self.tmp, "forward.onnx")
        onnx.save(fwd, fwd_path)
        if save_dir:
            shutil.copy(fwd_path, os.path.join(save_dir, "forward_%d.onnx" % index))
        self.forward_session = InferenceSession(fwd_path)

        # Backward: the floating-point inputs become initializers (so that
        # the artifacts differentiate them), the incoming gradients inputs,
        # and loss = sum_k ReduceSum(output_k * grad_output_k).
        vjp = onnx.ModelProto()
        vjp.CopyFrom(exported)
        g = vjp.graph
        self.diff_inputs = [in_names[i] for i in range(n_in) if self.input_float[i]]
        kept_inputs = [i for i in g.input if i.name not in self.diff_inputs]
        for i in range(n_in):
            if self.input_float[i]:
                x = inputs[i].detach().cpu().numpy()
                g.initializer.append(numpy_helper.from_array(x * 0, in_names[i]))
        del g.input[:]
        g.input.extend(kept_inputs)
        out_types = {o.name: o.type.tensor_type.elem_type for o in g.output}
        self.diff_outputs = [o for o in self.output_names
                             if out_types[o] in (TensorProto.FLOAT, TensorProto.DOUBLE)]
        terms = []
        for k, name in enumerate(self.diff_outputs):
            go = "onyx_grad_" + name
            out = next(o for o in g.output if o.name == name)
            g.input.append(helper.make_tensor_value_info(go, out_types[name], [
                d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in out.type.tensor_type.shape.dim]))
            prod = "onyx_vjp_prod_%d" % k
            red = "onyx_vjp_sum_%d" % k
            g.node.extend([helper.make_node("Mul", [name, go], [prod]),
                           helper.make_node("ReduceSum", [prod], [red], keepdims=0)])
            terms.append(red)
        if not terms:
            raise ValueError("the module has no floating-point output to differentiate")
        loss = "onyx_vjp_loss"
        if len(terms) == 1:
            g.node.append(helper.make_node("Identity", terms, [loss]))
        else:
            g.node.append(helper.make_node("Sum", terms, [loss]))
        del g.output[:]
        g.output.append(helper.make_tensor_value_info(loss, out_types[self.diff_outputs[0]], []))
        trainable = self.param_names + self.diff_inputs
        frozen = [t.name for t in g.initializer if t.name not in trainable]
        art = os.path.join(self.tmp, "vjp")
        _artifacts.generate_artifacts(vjp, requires_grad=trainable, frozen_params=frozen,
                                      loss=None, optimizer=_artifacts.OptimType.SGD,
                                      artifact_directory=art)
        if save_dir:
            shutil.copytree(art, os.path.join(save_dir, "vjp_%d" % index), dirs_exist_ok=True)
        self.backward_session = InferenceSession(os.path.join(art, "training_model.onnx"))
        self.backward_inputs = [i.name for i in self.backward_session.get_inputs()]

    def forward(self, inputs, params):
        b = self.forward_session.io_binding()
        for name, x in zip(self.in_names, inputs):
            b.bind_ortvalue_input(name, _to_ortvalue(x))
        for name, p in zip(self.param_names, params):
            b.bind_ortvalue_input(name, _to_ortvalue(p))
        for name in self.output_names:
            b.bind_output(name)
        self.forward_session.run_with_iobinding(b)
        return [_to_torch(v) for v in b.get_outputs()]

    def backward(self, inputs, params, grad_outputs):
        """The gradients of the inputs (None for integer ones) and of the
        parameters, given the gradients of the outputs."""
        values = dict(zip(self.in_names, inputs))
        values.update(zip(self.param_names, params))
        grads = dict(zip(self.output_names, grad_outputs))
        b = self.backward_session.io_binding()
        for name in self.backward_inputs:
            if name.startswith("onyx_grad_"):
                out = name[len("onyx_grad_"):]
                t = grads.get(out)
                if t is None:
                    idx = self.output_names.index(out)
                    t = torch.zeros(self._out_shapes[idx], dtype=self._out_dtypes[idx])
                b.bind_ortvalue_input(name, _to_ortvalue(t))
            else:
                b.bind_ortvalue_input(name, _to_ortvalue(values[name]))
        wanted = [n + "_grad" for n in self.diff_inputs + self.param_names]
        for name in wanted:
            b.bind_output(name)
        self.backward_session.run_with_iobinding(b)
        got = dict(zip(wanted, (_to_torch(v) for v in b.get_outputs())))
        in_grads = [got.get(n + "_grad") if f else None
                    for n, f in zip(self.in_names, self.input_float)]
        return in_grads, [got[n + "_grad"] for n in self.param_names]


class _OnyxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, comp, n_in, *tensors):
        inputs, params = tensors[:n_in], tensors[n_in:]
        outs = comp.forward(inputs, params)
        comp._out_shapes = [tuple(o.shape) for o in outs]
        comp._out_dtypes = [o.dtype for o in outs]
        ctx.comp = comp
        ctx.n_in = n_in
        ctx.save_for_backward(*tensors)
        for o in outs:
            if not o.is_floating_point():
                ctx.mark_non_differentiable(o)
        return tuple(outs) if len(outs) > 1 else outs[0]

    @staticmethod
    def backward(ctx, *grad_outputs):
        tensors = ctx.saved_tensors
        n_in = ctx.n_in
        inputs, params = tensors[:n_in], tensors[n_in:]
        grads = [None if g is None else g.contiguous() for g in grad_outputs]
        in_grads, param_grads = ctx.comp.backward(inputs, params, grads)
        in_grads = [g if (g is not None and x.requires_grad) else None
                    for g, x in zip(in_grads, inputs)]
        param_grads = [g if p.requires_grad else None for g, p in zip(param_grads, params)]
        return (None, None, *in_grads, *param_grads)


class OnyxModule(torch.nn.Module):
    """Wraps `module`: forward and backward run in Onyx (see the module's
    docstring). parameters(), state_dict() and the optimizer work on the
    wrapped module's own tensors."""

    def __init__(self, module):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError("OnyxModule: expected a torch.nn.Module, got %s"
                            % type(module).__name__)
        self._original_module = module
        self._compiled = {}
        self._fallback = set()
        _policy()  # reject a bad setting early

    @property
    def module(self):
        return self._original_module

    def _signature(self, inputs):
        return tuple((tuple(x.shape), x.dtype) for x in inputs)

    def forward(self, *inputs):
        if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
            raise TypeError("OnyxModule: the inputs must be torch tensors")
        key = self._signature(inputs)
        if key in self._fallback:
            return self._original_module(*inputs)
        comp = self._compiled.get(key)
        if comp is None:
            if any(x.device.type != "cpu" for x in inputs):
                return self._give_up(key, inputs, RuntimeError(
                    "OnyxModule runs CPU tensors; got a tensor on %s"
                    % next(x.device for x in inputs if x.device.type != "cpu")))
            try:
                comp = _Compiled(self._original_module, inputs, len(self._compiled))
            except Exception as e:  # noqa: BLE001 (export and Onyx errors of any kind)
                return self._give_up(key, inputs, e)
            self._compiled[key] = comp
        named = dict(self._original_module.named_parameters())
        params = [named[n] for n in comp.param_names]
        return _OnyxFunction.apply(comp, len(inputs), *inputs, *params)

    def _give_up(self, key, inputs, error):
        if _policy() == "raise":
            raise RuntimeError("OnyxModule: %s: %s" % (type(error).__name__, error)) from error
        warnings.warn("OnyxModule: running %s in PyTorch (%s: %s)"
                      % (type(self._original_module).__name__, type(error).__name__, error),
                      RuntimeWarning, stacklevel=3)
        self._fallback.add(key)
        return self._original_module(*inputs)

    def __del__(self):
        for comp in getattr(self, "_compiled", {}).values():
            shutil.rmtree(comp.tmp, ignore_errors=True)
