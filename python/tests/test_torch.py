"""onyx.torch.OnyxModule: forward and backward in Onyx, checked against
PyTorch's own forward and autograd on the same module (the reference is
PyTorch, computed in the test)."""
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
from onyx.torch import OnyxModule  # noqa: E402

# A fallback to PyTorch fails the test unless it expects one (pytest.warns).
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 6, 3)
        self.fc = torch.nn.Linear(6 * 2 * 2, 5)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.tanh(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


class Block(torch.nn.Module):
    """A pre-norm transformer encoder block: multi-head self-attention and
    a GELU MLP, each with a residual."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.fc2 = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.reshape(b, s, h, d // h).transpose(1, 2)
        k = k.reshape(b, s, h, d // h).transpose(1, 2)
        v = v.reshape(b, s, h, d // h).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def compare(module, x, atol=1e-4):
    """Forward values and the gradients of the input and every parameter
    of OnyxModule(module) against PyTorch's on a copy of the module."""
    import copy
    ref = copy.deepcopy(module)
    wrapped = OnyxModule(module)
    g = torch.randn_like(ref(x))
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to PyTorch
        y1 = wrapped(x1)
    y2 = ref(x2)
    torch.testing.assert_close(y1, y2, atol=atol, rtol=1e-4)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=atol, rtol=1e-4)
    for (n, p1), (_, p2) in zip(wrapped.module.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p1.grad, p2.grad, atol=atol, rtol=1e-4, msg=n)
    return wrapped


def test_cnn_gradients_match_autograd():
    torch.manual_seed(0)
    compare(SmallCNN(), torch.randn(2, 1, 8, 8))


def test_transformer_block_gradients_match_autograd():
    torch.manual_seed(1)
    compare(Block(), torch.randn(2, 5, 16))


def test_parameters_are_shared_with_torch():
    torch.manual_seed(2)
    lin = torch.nn.Linear(3, 2)
    m = OnyxModule(lin)
    assert [p.data_ptr() for p in m.parameters()] == [p.data_ptr() for p in lin.parameters()]
    x = torch.randn(4, 3)
    y0 = m(x)
    with torch.no_grad():
        lin.weight.add_(1.0)  # an in-place update, as an optimizer makes
    y1 = m(x)
    torch.testing.assert_close(y1 - y0, x.sum(1, keepdim=True).expand(4, 2), atol=1e-5,
                               rtol=1e-5)


def test_training_loop_converges():
    torch.manual_seed(3)
    x = torch.randn(64, 4)
    w_true = torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T
    y = x @ w_true + 0.25
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model = OnyxModule(net)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.02 * losses[0]


class Unexportable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(torch.erfinv(x.clamp(-0.9, 0.9)))  # no ONNX export in torch 1.13


def test_fallback_and_raise(monkeypatch, tmp_path):
    torch.manual_seed(4)
    x = torch.randn(2, 3)
    mod = Unexportable()
    monkeypatch.setenv("ONYX_TORCH_FALLBACK", "fallback")
    with pytest.warns(RuntimeWarning, match="running Unexportable in PyTorch"):
        y = OnyxModule(mod)(x)
    torch.testing.assert_close(y, mod(x))
    monkeypatch.setenv("ONYX_TORCH_FALLBACK", "raise")
    with pytest.raises(RuntimeError, match="OnyxModule"):
        OnyxModule(mod)(x)
    monkeypatch.setenv("ONYX_TORCH_FALLBACK", "sometimes")
    with pytest.raises(ValueError, match="ONYX_TORCH_FALLBACK"):
        OnyxModule(mod)


def test_save_onnx(monkeypatch, tmp_path):
    monkeypatch.setenv("ONYX_TORCH_SAVE_ONNX", str(tmp_path / "graphs"))
    OnyxModule(torch.nn.Linear(2, 2))(torch.randn(1, 2))
    saved = sorted(os.listdir(tmp_path / "graphs"))
    assert "exported_0.onnx" in saved and "forward_0.onnx" in saved
    assert os.path.exists(tmp_path / "graphs" / "vjp_0" / "training_model.onnx")


class TwoHeads(torch.nn.Module):
    """An integer input (embedding indices) beside a float one, and two
    outputs."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(7, 4)
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x, idx):
        h = self.lin(x)
        return self.emb(idx).sum(1) + h, torch.sigmoid(h) * 2


def test_integer_input_and_two_outputs():
    import copy
    torch.manual_seed(5)
    net = TwoHeads()
    ref = copy.deepcopy(net)
    model = OnyxModule(net)
    x1 = torch.randn(2, 3, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    idx = torch.tensor([[1, 6, 6], [0, 2, 3]])
    a1, b1 = model(x1, idx)
    a2, b2 = ref(x2, idx)
    torch.testing.assert_close(a1, a2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b1, b2, atol=1e-5, rtol=1e-5)
    # Only the first output takes part: the second's gradient is zeros.
    (a1 ** 2).sum().backward()
    (a2 ** 2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-5)
    for (n, p1), (_, p2) in zip(net.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p1.grad, p2.grad, atol=1e-5, rtol=1e-5, msg=n)
