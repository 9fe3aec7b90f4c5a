#!/usr/bin/env bash
# test_gpu_train.sh — `onyx train` with a GPU provider placed first gives the
# CPU-only run's per-step losses: the digits MLP of samples/train-mlp, 20
# steps in row order (--no-shuffle), with SGD (momentum 0.9) and AdamW, and
# the digits CNN of samples/train-cnn (Conv, Relu, MaxPool with the Indices
# MaxPoolGrad reads, Gemm), 20 steps with SGD; each pair of loss curves must
# agree within 1e-4 relative at every step.
#
# Then the trained state on the device (docs/training.md, "Where the state
# lives"): from the profile of a GPU run (session.profile, the `copy`
# events), after the first step no copy moves a parameter, an optimizer
# state tensor, the optimizer's new values or a buffer, and each gradient is
# copied at most once (the host path copies it twice: out of the training
# model to the host, into the optimizer); the copy of the batch's labels is seen
# at every step, so copies are recorded. And checkpoint save, resume and export after
# GPU training give the CPU run's tensors and losses.
#
# usage: test_gpu_train.sh ONYX SAMPLES CONFIG WORKDIR
#   CONFIG: the providers' JSON (tests/unit/gpu/gpuemu-cpu.json for the
#   emulated GPU). Needs /usr/bin/python3 with numpy, onnx and sklearn for
#   the sample's generator: without them, exit 77 (skipped).
set -u
ONYX="$1"
SAMPLES="$2"
CONFIG="$3"
WORK="$4"
PY=/usr/bin/python3
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
if ! "$PY" -c "import numpy, onnx, sklearn" 2>/dev/null; then
  echo "SKIP: python3 with numpy, onnx and sklearn is needed for the sample's data"
  exit 77
fi
"$PY" "$SAMPLES/train-mlp/generate.py" "$WORK" >/dev/null || { echo "FAIL: generate.py"; exit 1; }
mkdir -p "$WORK/cnn" && "$PY" "$SAMPLES/train-cnn/generate.py" "$WORK/cnn" >/dev/null ||
  { echo "FAIL: train-cnn/generate.py"; exit 1; }
failures=0
runs=0
for opt in "sgd --momentum 0.9 --lr 0.05" "adamw --lr 0.002" "cnn-sgd --momentum 0.9 --lr 0.05"; do
  name="${opt%% *}"
  dir="$WORK"
  [ "$name" = cnn-sgd ] && dir="$WORK/cnn" && opt="sgd${opt#cnn-sgd}"
  runs=$((runs + 1))
  for where in gpu cpu; do
    cfg=()
    [ "$where" = gpu ] && cfg=(--config "$CONFIG")
    # shellcheck disable=SC2086 # opt holds several words on purpose
    "$ONYX" train "$dir/model.onnx" --loss cross_entropy --batch-size 32 --steps 20 \
      --no-shuffle --optimizer $opt --threads 2 \
      --data x="$dir/train_x.npy" --labels "$dir/train_y.npy" "${cfg[@]}" \
      --log "$WORK/$name-$where.jsonl" >"$WORK/$name-$where.out" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "FAIL: onyx train ($name, $where) exited $rc"
      tail -20 "$WORK/$name-$where.out"
      failures=$((failures + 1))
    fi
  done
  "$PY" - "$WORK/$name-gpu.jsonl" "$WORK/$name-cpu.jsonl" "$name" <<'PYEOF' || failures=$((failures + 1))
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, filter(str.strip, open(path)))
            if "step" in r and "eval" not in r]
g, c = losses(sys.argv[1]), losses(sys.argv[2])
if len(g) != 20 or len(c) != 20:
    print(f"FAIL: {sys.argv[3]}: {len(g)} GPU and {len(c)} CPU steps, expected 20 each")
    sys.exit(1)
worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(g, c))
print(f"{sys.argv[3]}: losses {c[0]:.5f} -> {c[-1]:.5f}; largest relative difference GPU vs CPU {worst:.2e}")
if not worst <= 1e-4 or not c[-1] < c[0]:
    print(f"FAIL: {sys.argv[3]}: GPU {g}\nCPU {c}")
    sys.exit(1)
PYEOF
done

# --- the state stays on the device ------------------------------------------
for m in mlp cnn; do
  dir="$WORK" && [ $m = cnn ] && dir="$WORK/cnn"
  runs=$((runs + 1))
  "$PY" - "$CONFIG" "$WORK/prof-$m.json" "$WORK/trace-$m.json" <<'PYEOF' || { failures=$((failures + 1)); continue; }
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("session", {})["profile"] = sys.argv[3]
json.dump(c, open(sys.argv[2], "w"))
PYEOF
  "$ONYX" train "$dir/model.onnx" --loss cross_entropy --batch-size 32 --steps 4 --no-shuffle \
    --optimizer adamw --lr 0.002 --threads 2 --data x="$dir/train_x.npy" \
    --labels "$dir/train_y.npy" --config "$WORK/prof-$m.json" >"$WORK/prof-$m.out" 2>&1 ||
    { echo "FAIL: onyx train ($m, profiled) exited $?"; tail -20 "$WORK/prof-$m.out"; failures=$((failures + 1)); continue; }
  "$PY" - "$dir/model.onnx" "$WORK/trace-$m.json" "$m" <<'PYEOF' || failures=$((failures + 1))
import json, re, sys
from collections import Counter
import onnx
model, trace, name = sys.argv[1:4]
params = [t.name for t in onnx.load(model).graph.initializer if t.data_type == 1]
text = open(trace).read()
try:
    events = json.loads(text)["traceEvents"]
except ValueError:  # several sessions write one path: read each event alone
    events = []
    for m in re.finditer(r'\{"name".*?\}\}', text):
        try:
            events.append(json.loads(m.group(0)))
        except ValueError:
            pass
copies = [(e["args"].get("run", 0), e["name"]) for e in events if e.get("cat") == "copy"]
later = [(r, n) for r, n in copies if r >= 2]
steps = sorted({r for r, _ in later})
bad = []
for r in steps:
    names = Counter(n for rr, n in later if rr == r)
    for p in params:
        state = [n for n in names if n == p or n.startswith(p + ".")]
        if state:
            bad.append(f"step {r}: {state} copied")
        if names[p + "_grad"] > 1:
            bad.append(f"step {r}: gradient {p}_grad copied {names[p + '_grad']} times")
    if names["labels"] != 1:
        bad.append(f"step {r}: the batch's labels copied {names['labels']} times, expected 1")
if len(steps) < 3 or not params:
    bad.append(f"{len(steps)} profiled steps after the first, {len(params)} parameters")
print(f"{name}: {len(params)} parameters; copies per step after the first: "
      f"{len(later) // max(len(steps), 1)} ({sorted(set(n for _, n in later))})")
if bad:
    print(f"FAIL: {name}: " + "; ".join(bad))
    sys.exit(1)
PYEOF
done

# --- checkpoint save, resume and export after GPU training --------------------
runs=$((runs + 1))
ok=1
for where in gpu cpu; do
  cfg=()
  [ "$where" = gpu ] && cfg=(--config "$CONFIG")
  rm -rf "$WORK/ck-$where"
  "$ONYX" train "$WORK/model.onnx" --loss cross_entropy --batch-size 32 --steps 10 --no-shuffle \
    --optimizer adamw --lr 0.002 --threads 2 --data x="$WORK/train_x.npy" \
    --labels "$WORK/train_y.npy" "${cfg[@]}" --save-checkpoint "$WORK/ck-$where" \
    --export-inference "$WORK/export-$where.onnx" >"$WORK/ck-$where.out" 2>&1 &&
    "$ONYX" train "$WORK/model.onnx" --loss cross_entropy --batch-size 32 --steps 5 --no-shuffle \
      --optimizer adamw --lr 0.002 --threads 2 --data x="$WORK/train_x.npy" \
      --labels "$WORK/train_y.npy" "${cfg[@]}" --resume "$WORK/ck-$where" \
      --log "$WORK/resume-$where.jsonl" >>"$WORK/ck-$where.out" 2>&1 ||
    { echo "FAIL: onyx train with checkpoints ($where)"; tail -20 "$WORK/ck-$where.out"; ok=0; }
done
[ $ok = 1 ] && "$PY" - "$WORK" <<'PYEOF' || failures=$((failures + 1))
import json, struct, sys
import numpy as np
import onnx
from onnx import numpy_helper
w = sys.argv[1]
def safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (path, k, v["dtype"])
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype="<f4").reshape(v["shape"])
    return out
bad = []
def close(what, g, c):
    if set(g) != set(c):
        bad.append(f"{what}: GPU has {sorted(g)}, CPU {sorted(c)}")
        return
    for k in c:
        if g[k].shape != c[k].shape or not np.allclose(g[k], c[k], rtol=1e-4, atol=1e-6):
            bad.append(f"{what} '{k}': largest difference {np.max(np.abs(g[k] - c[k])):.3g}")
for f in ("parameters.safetensors", "optimizer.safetensors"):
    close(f, safetensors(f"{w}/ck-gpu/{f}"), safetensors(f"{w}/ck-cpu/{f}"))
ex = {s: {t.name: numpy_helper.to_array(t) for t in onnx.load(f"{w}/export-{s}.onnx").graph.initializer}
      for s in ("gpu", "cpu")}
close("export", ex["gpu"], ex["cpu"])
# The export holds the checkpoint's parameters.
ck = safetensors(f"{w}/ck-cpu/parameters.safetensors")
for k in ck:
    if k not in ex["cpu"] or not np.array_equal(ex["cpu"][k], ck[k]):
        bad.append(f"export '{k}' is not the checkpoint's")
def losses(p):
    return [r["loss"] for r in map(json.loads, filter(str.strip, open(p))) if "step" in r and "eval" not in r]
g, c = losses(f"{w}/resume-gpu.jsonl"), losses(f"{w}/resume-cpu.jsonl")
if len(g) != 5 or len(c) != 5:
    bad.append(f"resumed: {len(g)} GPU and {len(c)} CPU steps, expected 5")
else:
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(g, c))
    print(f"checkpoint, export and resume after GPU training: resumed losses {c[0]:.5f} -> {c[-1]:.5f}, "
          f"largest relative difference GPU vs CPU {worst:.2e}")
    if not worst <= 1e-4:
        bad.append(f"resumed losses GPU {g}, CPU {c}")
if bad:
    print("FAIL: checkpoint/export after GPU training: " + "; ".join(bad))
    sys.exit(1)
PYEOF
[ $ok = 1 ] || failures=$((failures + 1))
[ $failures -eq 0 ] && echo "$runs passed, 0 failed" || echo "$failures failed"
exit $((failures > 0))
