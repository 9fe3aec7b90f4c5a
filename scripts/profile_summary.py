#!/usr/bin/env python3
"""Sums an Onyx profile (docs/debugging.md, Chrome trace) per provider and op.

  profile_summary.py TRACE.json [--top N]

Prints one line per (provider, op) pair of the `node` and `copy` events:
total microseconds, share of the summed node and copy time, event count and
mean, largest total first. Several sessions writing one path (the training
session, eval and optimizer sessions of `onyx train`) may leave a file that
is not one JSON document; the events that parse are summed and the rest are
counted as unreadable.
"""
import argparse
import json
import re
import sys
from collections import defaultdict


def events(text):
    try:
        doc = json.loads(text)
        return doc.get("traceEvents", []), 0
    except json.JSONDecodeError:
        pass
    # One event per object: read each {...} that parses on its own.
    out, bad = [], 0
    for m in re.finditer(r"\{\"name\".*?\}\}", text):
        try:
            out.append(json.loads(m.group(0)))
        except json.JSONDecodeError:
            bad += 1
    return out, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    try:
        text = open(a.trace, encoding="utf-8", errors="replace").read()
    except OSError as e:
        sys.exit(f"{a.trace}: {e.strerror}")
    evs, bad = events(text)
    total = defaultdict(float)
    count = defaultdict(int)
    runs = 0
    for e in evs:
        cat = e.get("cat")
        if cat == "run":
            runs += 1
        if cat not in ("node", "copy"):
            continue
        args = e.get("args", {})
        key = (args.get("provider", "?") if cat == "node" else "copy", args.get("op", "?"))
        total[key] += float(e.get("dur", 0))
        count[key] += 1
    s = sum(total.values())
    print(f"{a.trace}: {len(evs)} events, {runs} runs, {bad} unreadable; "
          f"node + copy time {s / 1000:.2f} ms")
    for key, t in sorted(total.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"  {key[0]:8} {key[1]:32} {t / 1000:9.3f} ms {100 * t / max(s, 1e-9):5.1f}% "
              f"{count[key]:6}x {t / count[key]:9.1f} us")


if __name__ == "__main__":
    main()
