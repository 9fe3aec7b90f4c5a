#!/usr/bin/env python3
"""Prints the names of the ONNX backend tests in SUITE_DIR whose models use
only ops from OPS_FILE (one op type per line, '#' comments), subgraphs
included, one name per line, sorted.

usage: select_tests.py SUITE_DIR OPS_FILE
A test-selection helper for CI (needs Debian's python3-onnx); Onyx never runs Python."""
import os
import sys

import onnx


def ops_of_graph(g, out):
    for n in g.node:
        out.add((n.domain or "ai.onnx", n.op_type))
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops_of_graph(a.g, out)
            for sub in a.graphs:
                ops_of_graph(sub, out)


def main(suite, ops_file):
    allowed = set()
    with open(ops_file) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(("ai.onnx", line))
    for name in sorted(os.listdir(suite)):
        model = os.path.join(suite, name, "model.onnx")
        if not os.path.isfile(model):
            continue
        try:
            m = onnx.load(model, load_external_data=False)
        except Exception:  # a model onnx 1.12 cannot parse: not ours to judge here
            continue
        used = set()
        ops_of_graph(m.graph, used)
        if m.functions:
            continue
        if used and used <= allowed:
            print(name)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
