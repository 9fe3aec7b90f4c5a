#!/usr/bin/env bash
# Times Onyx (`onyx bench`) on the benchmark models of the peer's make_models.py
# (mlp, bert_layer, convnet, matmul_1024) and, when the peer scripts and ONNX Runtime
# are present, ONNX Runtime too, interleaved round by round (in each round every
# (model, threads) runs Onyx then ORT back to back), and prints a ratio table.
#
#   bench/run.sh [MODELS_DIR]                 # default /tmp/onyx-models
#   ROUNDS=5 ITERS=30 THREADS="1 2" ONYX=build/bin/onyx bench/run.sh
#
# Per (model, threads) it reports the median of the per-round medians (ms) of each
# runtime, ratio = ORT / Onyx (> 1: Onyx faster), the same for the per-round minima
# (least disturbed by other load), session creation (Onyx session_ms,
# ORT load_ms; medians over rounds) and the peak RSS of the process (max over rounds,
# from /usr/bin/time -v, MiB). Raw JSON lines go to $RESULTS/raw.jsonl.
#
# Environment: ONYX (default build/bin/onyx next to this script's repo), PEER (default
# /work/shared/peer, or $ONYX_PEER_SCRIPTS), ONYX_PEER_DIR (where setup.sh installed
# ORT, default ~/.cache/onyx-peer), ROUNDS (3), ITERS (20 timed runs), WARMUP (5),
# THREADS ("1 2"), MODELS ("mlp bert_layer convnet matmul_1024"; bench/zoo.sh times the zoo), RESULTS
# (/tmp/onyx-bench-results), PYTHON (/usr/bin/python3), ALT_CONFIG (a provider config
# for a second Onyx variant timed in the same rounds, e.g.
# providers/onednn/onednn-cpu.json; ALT_NAME names it, default "alt": a second table
# compares it with Onyx's default providers and with ORT).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
MODELS_DIR="${1:-/tmp/onyx-models}"
ONYX="${ONYX:-$ROOT/build/bin/onyx}"
PEER="${PEER:-${ONYX_PEER_SCRIPTS:-/work/shared/peer}}"
PEER_DIR="${ONYX_PEER_DIR:-$HOME/.cache/onyx-peer}"
ROUNDS="${ROUNDS:-3}"
ITERS="${ITERS:-20}"
WARMUP="${WARMUP:-5}"
THREADS="${THREADS:-1 2}"
MODELS="${MODELS:-mlp bert_layer convnet matmul_1024}"
RESULTS="${RESULTS:-/tmp/onyx-bench-results}"
PY="${PYTHON:-/usr/bin/python3}"

[ -x "$ONYX" ] || { echo "run.sh: $ONYX is not an executable (set ONYX)" >&2; exit 1; }
mkdir -p "$RESULTS"
raw="$RESULTS/raw.jsonl"
: > "$raw"

have_ort=0
if [ -f "$PEER/ort_run.js" ] && command -v node >/dev/null &&
  [ -d "$PEER_DIR/node_modules/onnxruntime-node" ]; then
  have_ort=1
else
  echo "note: ONNX Runtime (peer) not found: timing Onyx only" >&2
fi

if [ ! -f "$MODELS_DIR/models.json" ]; then
  [ -f "$PEER/make_models.py" ] || { echo "run.sh: no models in $MODELS_DIR and no $PEER/make_models.py" >&2; exit 1; }
  "$PY" "$PEER/make_models.py" "$MODELS_DIR" >&2
fi

# One timed process: its JSON line with "runtime", "round" and "rss_kib" added.
timed() { # runtime round cmd...
  local rt="$1" r="$2" out err
  shift 2
  err="$(mktemp)"
  out="$(/usr/bin/time -f 'RSS_KIB=%M' "$@" 2>"$err" | tail -n 1)" || {
    echo "run.sh: $rt failed: $*" >&2; cat "$err" >&2; rm -f "$err"; return 1; }
  local rss
  rss="$(sed -n 's/^RSS_KIB=//p' "$err" | tail -n 1)"
  rm -f "$err"
  echo "$out" | sed "s/^{/{\"runtime\":\"$rt\",\"round\":$r,\"rss_kib\":${rss:-0},/" >> "$raw"
}

for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    dir="$MODELS_DIR/$m"
    inputs=()
    [ -d "$dir/test_data_set_0" ] && inputs=(--inputs "$dir/test_data_set_0")
    for t in $THREADS; do
      echo "round $r: $m, $t thread(s)" >&2
      timed onyx "$r" "$ONYX" bench "$dir" "${inputs[@]}" --threads "$t" --iters "$ITERS" \
        --warmup "$WARMUP"
      if [ -n "${ALT_CONFIG:-}" ]; then
        timed alt "$r" "$ONYX" bench "$dir" "${inputs[@]}" --threads "$t" --iters "$ITERS" \
          --warmup "$WARMUP" --config "$ALT_CONFIG"
      fi
      if [ "$have_ort" = 1 ]; then
        timed ort "$r" env ONYX_PEER_DIR="$PEER_DIR" node "$PEER/ort_run.js" "$dir/model.onnx" \
          --name "$m" "${inputs[@]}" --threads "$t" --iters "$ITERS" --warmup "$WARMUP"
      fi
    done
  done
done

"$PY" - "$raw" "${ALT_NAME:-alt}" <<'EOF'
import json, math, statistics, sys
alt_name = sys.argv[2]
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
key = lambda r: (r["model"], r["threads"])
order = []
for r in rows:
    if key(r) not in order:
        order.append(key(r))
def pick(rt, k, field, agg=statistics.median):
    v = [r[field] for r in rows if r["runtime"] == rt and key(r) == k and field in r]
    return agg(v) if v else None
fmt = lambda v, f="%.2f": "-" if v is None else f % v
print("| model | threads | Onyx ms | ORT ms | ratio ORT/Onyx | Onyx min ms | ORT min ms | min ratio | Onyx session ms | ORT session ms | Onyx RSS MiB | ORT RSS MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for k in order:
    o, t = pick("onyx", k, "median_ms"), pick("ort", k, "median_ms")
    ratio = t / o if o and t else None
    omin, tmin = pick("onyx", k, "min_ms"), pick("ort", k, "min_ms")
    mratio = tmin / omin if omin and tmin else None
    print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        k[0], k[1], fmt(o), fmt(t), fmt(ratio), fmt(omin), fmt(tmin), fmt(mratio),
        fmt(pick("onyx", k, "session_ms"), "%.1f"),
        fmt(pick("ort", k, "load_ms"), "%.1f"),
        fmt(pick("onyx", k, "rss_kib", max) and pick("onyx", k, "rss_kib", max) / 1024, "%.0f"),
        fmt(pick("ort", k, "rss_kib", max) and pick("ort", k, "rss_kib", max) / 1024, "%.0f")))
def geomean(vals):
    vals = [v for v in vals if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
def ratios(num, den, field, t):
    out = []
    for k in order:
        if k[1] != t:
            continue
        a, b = pick(num, k, field), pick(den, k, field)
        out.append(a / b if a and b else None)
    return out
for t in sorted({k[1] for k in order}):
    n = sum(1 for v in ratios("ort", "onyx", "median_ms", t) if v)
    print("geometric mean ORT/Onyx at %d thread(s) over %d model(s): %s (medians), %s (minima)" % (
        t, n, fmt(geomean(ratios("ort", "onyx", "median_ms", t))),
        fmt(geomean(ratios("ort", "onyx", "min_ms", t)))))
if any(r["runtime"] == "alt" for r in rows):
    print()
    print("| model | threads | %s ms | Onyx (default providers) ms | ORT ms | ratio Onyx/%s | ratio ORT/%s | %s session ms | %s RSS MiB |" % ((alt_name,) * 5))
    print("|---|---|---|---|---|---|---|---|---|")
    for k in order:
        a, o, t = pick("alt", k, "median_ms"), pick("onyx", k, "median_ms"), pick("ort", k, "median_ms")
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            k[0], k[1], fmt(a), fmt(o), fmt(t), fmt(o / a if a and o else None),
            fmt(t / a if a and t else None), fmt(pick("alt", k, "session_ms"), "%.1f"),
            fmt(pick("alt", k, "rss_kib", max) and pick("alt", k, "rss_kib", max) / 1024, "%.0f")))
    for t in sorted({k[1] for k in order}):
        print("geometric mean ORT/%s at %d thread(s): %s" % (
            alt_name, t, fmt(geomean(ratios("ort", "alt", "median_ms", t)))))
EOF
