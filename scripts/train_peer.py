#!/usr/bin/env python3
"""train_peer.py — `onyx train` against PyTorch on the same models, initial
weights, data and batch order (docs/training.md, "Against PyTorch").

For each model (an MLP, a small ResNet-style CNN with BatchNormalization, a
transformer block and an LSTM classifier) and each optimizer (SGD with momentum 0.9, AdamW), the
script
  1. builds the model in PyTorch with a fixed seed and exports it to ONNX
     (torch.onnx.export, opset 17, a free batch dimension): the exported
     initializers are the initial weights of both runs;
  2. writes deterministic data (numpy RandomState) as .npy files;
  3. trains N steps in PyTorch (train mode, mean cross-entropy, batches in
     row order: batch k is rows [kB, (k+1)B) wrapping per epoch, as
     `onyx train --no-shuffle`), timing each step (forward, backward,
     optimizer step) with time.perf_counter;
  4. runs `onyx train --no-shuffle --log` with the same hyperparameters;
  5. prints, per model and optimizer, the largest relative difference of the
     per-step losses and both throughputs (samples/s from the median step
     time, the first steps excluded as warmup).

With --memory, each training run (PyTorch's and `onyx train`) also runs
alone in a child process of its own, and the child's peak resident set
(os.wait4's ru_maxrss) is reported: the whole process, libraries included
(PyTorch's import alone is most of its figure: `torch_import_rss_mib` is
the peak of a child that only imports torch and builds the model).

With --config CFG, `onyx train` runs with that providers config (for example
providers/onednn/onednn-cpu.json, oneDNN in front of the CPU provider).

With --amp bfloat16 (or float16), both sides train in mixed precision on
the MLP alone: PyTorch's forward pass and loss under torch.autocast(dtype)
(float16 adds a GradScaler, whose default settings are Onyx's), `onyx train
--mixed-precision DTYPE`; the rows carry "amp". float16 autocast on the CPU
needs PyTorch 2.3 or later (torch.amp.GradScaler("cpu")).

usage: scripts/train_peer.py --onyx build/bin/onyx [--steps 30] [--threads 1]
           [--batch 32] [--work DIR] [--json OUT.json] [--memory]
           [--device cuda --config cuda-cpu.json] [--models mlp,resnet]
           [--amp bfloat16|float16]
  --device runs PyTorch there (the GPU peer, synchronized inside each timed
  step); --config is passed to onyx train (scripts/gpu-check.sh, step 9).
Needs python3-torch, python3-onnx, python3-numpy. Exit status 0 when every
pair ran (the differences are reported, not judged).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(256, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class ResNet(nn.Module):
    """conv 3->16, two residual blocks, global average pool, linear 16->10."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(h.mean(dim=(2, 3)))


class Transformer(nn.Module):
    """One pre-norm transformer block (4 heads, width 64, MLP 256, Relu) over
    [N, 16, 64] sequences, mean-pooled into 10 classes."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.d, self.h = d, heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        split = lambda z: z.reshape(n, t, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.h) ** 0.5, dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(n, t, d))
        x = x + self.fc2(F.relu(self.fc1(self.ln2(x))))
        return self.head(x.mean(dim=1))


class LSTMClassifier(nn.Module):
    """One LSTM layer (hidden 64) over [N, 16, 32] sequences (batch first),
    its last step's output into 10 classes."""

    def __init__(self, f=32, hidden=64):
        super().__init__()
        self.lstm = nn.LSTM(f, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


MODELS = {
    "mlp": (MLP, (256,)),
    "resnet": (ResNet, (3, 16, 16)),
    "transformer": (Transformer, (16, 64)),
    "lstm": (LSTMClassifier, (16, 32)),
}
OPTIMIZERS = {
    "sgd": (lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9), ["--momentum", "0.9"], 0.05),
    "adamw": (lambda p, lr: torch.optim.AdamW(p, lr=lr), [], 1e-3),
}


def export(model, example, path):
    """Exports in training mode (an eval-mode export folds BatchNormalization
    into the convolutions), then turns each BatchNormalization back into its
    inference form (training_mode 0, one output): the model Onyx's artifacts
    expect, whose training model runs it in training mode again."""
    import onnx

    import inspect

    model.train()
    kw = dict(opset_version=17, input_names=["x"], output_names=["logits"],
              dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, do_constant_folding=False,
              training=torch.onnx.TrainingMode.PRESERVE)
    # The TorchScript exporter honours TrainingMode.PRESERVE; the dynamo one
    # (the default from PyTorch 2.9) does not, so it is asked for where the
    # `dynamo` argument exists.
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kw["dynamo"] = False
    torch.onnx.export(model, example, path, **kw)
    m = onnx.load(path)
    n_bn = sum(isinstance(x, torch.nn.modules.batchnorm._BatchNorm) for x in model.modules())
    n_bn_onnx = sum(n.op_type == "BatchNormalization" for n in m.graph.node)
    if n_bn != n_bn_onnx:
        sys.exit(f"{path}: the export has {n_bn_onnx} BatchNormalization nodes for the "
                 f"model's {n_bn} BatchNorm modules; the training comparison needs them as nodes")
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            keep = [a for a in n.attribute if a.name != "training_mode"]
            del n.attribute[:]
            n.attribute.extend(keep)
            del n.output[1:]
    onnx.checker.check_model(m)
    onnx.save(m, path)


def torch_run(model, x, y, opt, batch, steps, amp=None):
    """amp: None, or "bfloat16" / "float16": the forward pass and the loss
    under torch.autocast, with a GradScaler for float16 (GradScaler's
    defaults: init 65536, growth interval 2000, as Onyx's)."""
    model.train()
    losses, times = [], []
    per_epoch = len(y) // batch
    dtype = getattr(torch, amp) if amp else None
    scaler = torch.amp.GradScaler(x.device.type) if amp == "float16" else None
    for k in range(steps):
        j = k % per_epoch
        xb, yb = x[j * batch:(j + 1) * batch], y[j * batch:(j + 1) * batch]
        t0 = time.perf_counter()
        with torch.autocast(x.device.type, dtype=dtype, enabled=amp is not None):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if xb.is_cuda:  # the step's kernels finish inside the timed span
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        losses.append(loss.item())
    return losses, times


# Forks and execs argv[1:], prints the child's ru_maxrss (KiB). A fresh
# small interpreter does the fork: Linux carries a process's peak RSS over
# fork and exec, so a child forked from this script (torch loaded) would
# start from this script's size. The launcher's own few MiB are the floor.
RSS_LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(ru.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss_mib(cmd):
    """Runs cmd in a child process of its own; its peak resident set in
    MiB, or None when it failed."""
    r = subprocess.run([sys.executable, "-c", RSS_LAUNCHER] + cmd, capture_output=True, text=True)
    return round(int(r.stdout.split()[-1]) / 1024.0, 1) if r.returncode == 0 else None


def torch_child(spec):
    """The PyTorch side of one run alone (for --memory): spec is
    WORK,MODEL,OPTIMIZER,BATCH,STEPS,THREADS; OPTIMIZER "none" only builds
    the model."""
    work, name, opt_name, batch, steps, threads = spec.split(",")
    torch.set_num_threads(int(threads))
    cls, _ = MODELS[name]
    x = torch.from_numpy(np.load(os.path.join(work, f"{name}_x.npy")))
    y = torch.from_numpy(np.load(os.path.join(work, f"{name}_y.npy")))
    torch.manual_seed(0)
    model = cls()
    if opt_name != "none":
        make_opt, _, lr = OPTIMIZERS[opt_name]
        torch_run(model, x, y, make_opt(model.parameters(), lr), int(batch), int(steps))
    return 0


def throughput(ms, batch, warmup=3):
    steady = sorted(ms[warmup:] if len(ms) > warmup else ms)
    return batch / (steady[len(steady) // 2] / 1000.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onyx", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--work")
    ap.add_argument("--json")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--torch-child", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu", help="PyTorch's device (cuda: the GPU peer)")
    ap.add_argument("--config", help="providers JSON passed to onyx train (e.g. cuda first)")
    ap.add_argument("--models", default="", help="comma-separated subset of the models")
    ap.add_argument("--amp", choices=["bfloat16", "float16"],
                    help="mixed precision on both sides (the MLP only)")
    a = ap.parse_args()
    if a.amp and a.memory:
        ap.error("--memory measures float32 runs; leave it out with --amp")
    if a.amp:
        a.models = "mlp"
    if a.torch_child:
        return torch_child(a.torch_child)
    torch.set_num_threads(a.threads)
    work = a.work or tempfile.mkdtemp(prefix="train_peer-")
    os.makedirs(work, exist_ok=True)
    results = []
    for name, (cls, shape) in MODELS.items():
        if a.models and name not in a.models.split(","):
            continue
        rng = np.random.RandomState(0)
        x = rng.standard_normal((a.rows,) + shape).astype(np.float32)
        y = rng.randint(0, 10, a.rows).astype(np.int64)
        np.save(os.path.join(work, f"{name}_x.npy"), x)
        np.save(os.path.join(work, f"{name}_y.npy"), y)
        torch.manual_seed(0)
        base = cls()
        onnx_path = os.path.join(work, f"{name}.onnx")
        state = {k: v.clone() for k, v in base.state_dict().items()}
        export(base, torch.from_numpy(x[:a.batch]), onnx_path)
        for opt_name, (make_opt, extra, lr) in OPTIMIZERS.items():
            model = cls()
            model.load_state_dict(state)
            model.to(a.device)
            t_losses, t_ms = torch_run(model, torch.from_numpy(x).to(a.device),
                                       torch.from_numpy(y).to(a.device),
                                       make_opt(model.parameters(), lr), a.batch, a.steps,
                                       a.amp)
            log = os.path.join(work, f"{name}_{opt_name}.jsonl")
            cmd = [a.onyx, "train", onnx_path, "--loss", "cross_entropy",
                   "--data", f"x={os.path.join(work, name + '_x.npy')}",
                   "--labels", os.path.join(work, f"{name}_y.npy"),
                   "--batch-size", str(a.batch), "--steps", str(a.steps), "--no-shuffle",
                   "--optimizer", opt_name, "--lr", str(lr), "--threads", str(a.threads),
                   "--log", log] + extra + (["--config", a.config] if a.config else []) + \
                  (["--mixed-precision", a.amp] if a.amp else [])
            r = subprocess.run(cmd, capture_output=True, text=True)
            row = {"model": name, "optimizer": opt_name, "steps": a.steps, "batch": a.batch,
                   "threads": a.threads, "torch_device": a.device, "amp": a.amp,
                   "torch_samples_per_s": round(throughput(t_ms, a.batch), 1)}
            if r.returncode != 0:
                row["onyx_error"] = r.stderr.strip()[-500:]
            else:
                steps = [json.loads(l) for l in open(log) if l.strip()]
                steps = [s for s in steps if "eval" not in s]
                o_losses = [s["loss"] for s in steps]
                rel = [abs(o - t) / max(abs(t), 1e-12) for o, t in zip(o_losses, t_losses)]
                row.update({
                    "max_rel_diff": float(max(rel)),
                    "first_loss": [round(t_losses[0], 6), round(o_losses[0], 6)],
                    "last_loss": [round(t_losses[-1], 6), round(o_losses[-1], 6)],
                    "onyx_samples_per_s": round(throughput([s["ms"] for s in steps], a.batch), 1),
                })
            if a.memory:
                child = [sys.executable, os.path.abspath(__file__), "--onyx", a.onyx,
                         "--torch-child"]
                spec = f"{work},{name},{{}},{a.batch},{a.steps},{a.threads}"
                row["torch_peak_rss_mib"] = peak_rss_mib(child + [spec.format(opt_name)])
                row["torch_import_rss_mib"] = peak_rss_mib(child + [spec.format("none")])
                row["onyx_peak_rss_mib"] = peak_rss_mib(cmd)
            results.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all("onyx_error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
