"""zoo_models.py - the architectures of the benchmark zoo, as PyTorch modules.

Imported by bench/zoo.py (exports them to ONNX for the CPU comparison with ONNX
Runtime) and scripts/torch_peer.py (runs them natively as the GPU peer).
Weights are random (fixed seeds): speed and agreement between runtimes do not
depend on trained values. Each entry of ZOO builds (module, inputs, input
names, dynamic axes) where inputs are numpy float32 arrays.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F


class EncoderLayer(torch.nn.Module):
    """A BERT encoder layer: post-norm, erf GELU, additive padding mask."""

    def __init__(self, d=768, heads=12, ffn=3072):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.o = torch.nn.Linear(d, d)
        self.ln1 = torch.nn.LayerNorm(d, eps=1e-12)
        self.f1 = torch.nn.Linear(d, ffn)
        self.f2 = torch.nn.Linear(ffn, d)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask_add):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.reshape(b, s, self.h, self.dh).transpose(1, 2)
        k = k.reshape(b, s, self.h, self.dh).transpose(1, 2)
        v = v.reshape(b, s, self.h, self.dh).transpose(1, 2)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh) + mask_add, dim=-1)
        ctx = (p @ v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.f2(F.gelu(self.f1(x))))


class Bert(torch.nn.Module):
    """`layers` BERT encoder layers over hidden states, with a 0/1 padding mask."""

    def __init__(self, layers=12, d=768, heads=12, ffn=3072):
        super().__init__()
        self.layers = torch.nn.ModuleList(EncoderLayer(d, heads, ffn) for _ in range(layers))

    def forward(self, x, mask):
        mask_add = ((1.0 - mask) * -10000.0)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask_add)
        return x


class GptBlock(torch.nn.Module):
    """A GPT-2 style decoder block: pre-norm, causal mask, tanh GELU."""

    def __init__(self, d=768, heads=12, seq=1024):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.o = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.f1 = torch.nn.Linear(d, 4 * d)
        self.f2 = torch.nn.Linear(4 * d, d)
        self.register_buffer("causal", torch.triu(torch.full((seq, seq), -1e9), diagonal=1))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.reshape(b, s, self.h, self.dh).transpose(1, 2)
        k = k.reshape(b, s, self.h, self.dh).transpose(1, 2)
        v = v.reshape(b, s, self.h, self.dh).transpose(1, 2)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh) + self.causal, dim=-1)
        x = x + self.o((p @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.f2(F.gelu(self.f1(self.ln2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, blocks, seq, d=768, heads=12):
        super().__init__()
        self.blocks = torch.nn.ModuleList(GptBlock(d, heads, seq) for _ in range(blocks))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class RnnClassifier(torch.nn.Module):
    """An LSTM or GRU over a sequence, then a linear layer on the last step."""

    def __init__(self, kind, bidirectional, layers=2, features=128, hidden=256, classes=10):
        super().__init__()
        rnn = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
        self.rnn = rnn(features, hidden, num_layers=layers, bidirectional=bidirectional,
                       batch_first=False)
        self.fc = torch.nn.Linear(hidden * (2 if bidirectional else 1), classes)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[-1])


class UNet(torch.nn.Module):
    """A small U-Net: two poolings down, one ConvTranspose and one Resize up."""

    def __init__(self, c=32):
        super().__init__()

        def block(ci, co):
            return torch.nn.Sequential(torch.nn.Conv2d(ci, co, 3, padding=1), torch.nn.ReLU(),
                                       torch.nn.Conv2d(co, co, 3, padding=1), torch.nn.ReLU())

        self.d1, self.d2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2 = torch.nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.u2 = block(4 * c, 2 * c)
        self.red1 = torch.nn.Conv2d(2 * c, c, 1)
        self.u1 = block(2 * c, c)
        self.out = torch.nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        u = self.u2(torch.cat([self.up2(m), b], 1))
        u = F.interpolate(self.red1(u), scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.out(self.u1(torch.cat([u, a], 1)))


class MatMul(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = torch.nn.Parameter(torch.randn(n, n) / math.sqrt(n))

    def forward(self, a):
        return a @ self.b


def _vision(name, batch=1, size=224, dynamic=False):
    def make(rng):
        import torchvision

        m = getattr(torchvision.models, name)(weights=None)
        x = rng.standard_normal((batch, 3, size, size), dtype=np.float32)
        return m, [x], ["input"], ({"input": {0: "batch"}, "output": {0: "batch"}} if dynamic else None)

    return make


def _bert(layers, seq=128):
    def make(rng):
        mask = np.ones((1, seq), np.float32)
        mask[:, -seq // 8:] = 0.0
        x = rng.standard_normal((1, seq, 768), dtype=np.float32)
        return Bert(layers), [x, mask], ["hidden_states", "attention_mask"], None

    return make


def _gpt(blocks, seq):
    def make(rng):
        return Gpt(blocks, seq), [rng.standard_normal((1, seq, 768), dtype=np.float32)], ["x"], None

    return make


def _rnn(kind, bidirectional):
    def make(rng):
        x = rng.standard_normal((64, 1, 128), dtype=np.float32)  # [seq, batch, features]
        return RnnClassifier(kind, bidirectional), [x], ["x"], None

    return make


def _unet(rng):
    return UNet(), [rng.standard_normal((1, 3, 128, 128), dtype=np.float32)], ["input"], None


def _matmul(n):
    def make(rng):
        return MatMul(n), [rng.standard_normal((n, n), dtype=np.float32)], ["A"], None

    return make


# The CPU zoo (bench/zoo.py): sizes a 2-core machine times in seconds per model.
ZOO = {
    "resnet18": _vision("resnet18"),
    "resnet50": _vision("resnet50"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "mobilenet_v3_small": _vision("mobilenet_v3_small"),
    "mobilenet_v3_large": _vision("mobilenet_v3_large"),
    "efficientnet_b0": _vision("efficientnet_b0"),
    "squeezenet1_1": _vision("squeezenet1_1"),
    "shufflenet_v2_x1_0": _vision("shufflenet_v2_x1_0"),
    "densenet121": _vision("densenet121"),
    "regnet_y_400mf": _vision("regnet_y_400mf"),
    "convnext_tiny": _vision("convnext_tiny"),
    "mnasnet1_0": _vision("mnasnet1_0"),
    "vit_b_32": _vision("vit_b_32"),
    "resnet18_batch4_dynamic": _vision("resnet18", batch=4, dynamic=True),
    "bert_encoder_2l": _bert(2),
    "gpt_decoder_2b": _gpt(2, 256),
    "lstm": _rnn("lstm", False),
    "lstm_bidirectional": _rnn("lstm", True),
    "gru": _rnn("gru", False),
    "gru_bidirectional": _rnn("gru", True),
    "unet_small": _unet,
}

# The GPU comparison (scripts/torch_peer.py): the sizes the GPU issue names.
GPU_ZOO = {
    "resnet50": _vision("resnet50"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "bert_base": _bert(12),
    "gpt_block": _gpt(1, 1024),
    "matmul_4096": _matmul(4096),
}


def build(name, table=None):
    """(module in eval mode, inputs, input names, dynamic axes or None)."""
    table = ZOO if table is None else table
    rng = np.random.default_rng(7)
    torch.manual_seed(7)
    m, inputs, names, dyn = table[name](rng)
    return m.eval(), inputs, names, dyn
