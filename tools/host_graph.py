#!/usr/bin/env python3
"""The host's module graph, from includes and calls, checked against its layers.

    tools/host_graph.py [ROOT] [--quiet]

A module is a folder of host/ (host/libonyx.c is the module "lib"); the
libraries the host builds on (common/, schemas/, kernels-registry/, the SDK
headers, the generated protobuf code) are modules below every host module.
An arrow B -> A means B depends on A:
  * a file of B includes a header of A (`#include "..."`, resolved the way the
    compiler finds it: the including file's folder first, then any folder of
    the tree that holds a header of that name);
  * a .c file of B refers to a function that a .c file of A defines without
    `static` (a call, or the function's address taken).
Definitions and references come from a small C tokenizer: comments, strings
and preprocessor lines are dropped, a name followed by a parenthesised list
and `{` at brace depth 0 is a definition, and any other occurrence of a name
defined elsewhere is a reference. A file's own `static` functions shadow
same-named functions of other modules.

The check fails (exit 1) on a cycle among host modules and on an arrow that
runs back up LAYERS, other than those KNOWN_BACK_ARROWS lists. Modules of one layer may depend on each other as long as
no cycle forms. The arrows are printed in any case.
"""

import os
import re
import sys

# Top to bottom: a module may depend only on modules of its own layer (no
# cycle) or of a layer below it.
LAYERS = [
    ["cli"],  # the `onyx` command, over the public API only
    ["lib"],  # libonyx.c: the shared library's entry
    ["trainer"],  # the training API: artifacts, checkpoints, training sessions
    ["session"],  # sessions and runs, the host-API table: orchestrates the phases below
    ["exec"],  # the frame, the executor, running host ops, thread pool, NVTX
    ["plan"],  # the program; steps, slots, the memory plan, streams, compile cache, nested plans
    ["partition"],  # placement: which provider runs each node; the providers' memory and copies
    ["optimizer"],  # graph transformers and fusions
    ["training"],  # the gradient builder: the Gradient op's expansion (a graph rewrite)
    ["graph", "model"],  # the IR graph, host-op inference; ModelProto <-> IR
    ["profile"],  # services: the profiler
    ["memory", "dist"],  # the arena over any provider allocator; process groups, collectives
    ["providers"],  # provider libraries (given the host-API table), the device list
]
# Back-arrows tolerated while code moves to the module that owns it (or a
# callback where a lower layer must call up); the host has none. An arrow
# listed here is left out of the cycle check; one not listed fails, and so
# does an entry that no longer occurs, so that the list only shrinks.
KNOWN_BACK_ARROWS = set()
# What the host builds on; each is below every host module.
EXTERNAL = {
    "common": "common",
    "schemas": "schemas",
    "kernels-registry": "kreg",
    "sdk": "sdk",
}

KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "do", "else", "case",
    "goto", "break", "continue", "default", "typedef", "struct", "union",
    "enum", "static", "inline", "const", "volatile", "extern", "_Alignof",
    "_Static_assert", "_Generic", "alignof", "defined",
}

TOKEN = re.compile(
    r"""(?P<skip>/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')"""
    r"""|(?P<pp>^[ \t]*\#(?:[^\n]*\\\n)*[^\n]*)"""
    r"""|(?P<id>[A-Za-z_]\w*)"""
    r"""|(?P<num>\d[\w.]*)"""
    r"""|(?P<p>\S)""",
    re.S | re.M,
)
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def tokens(text):
    """The file's identifiers and punctuation, without comments, strings and
    preprocessor lines."""
    out = []
    for m in TOKEN.finditer(text):
        if m.lastgroup in ("skip", "pp", "num"):
            continue
        out.append(m.group(m.lastgroup))
    return out


def scan_c(text):
    """(non-static definitions, static definitions, referenced names)."""
    toks = tokens(text)
    public, private, refs = set(), set(), set()
    depth = 0
    decl_static = False  # the current top-level declaration says `static`
    i = 0
    n = len(toks)
    while i < n:
        t = toks[i]
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0:
                decl_static = False
        elif t == ";" and depth == 0:
            decl_static = False
        elif depth == 0 and t == "static":
            decl_static = True
        elif t[0].isalpha() or t[0] == "_":
            if depth == 0 and i + 1 < n and toks[i + 1] == "(" and t not in KEYWORDS:
                # Find the matching ')' and look at what follows it.
                j, level = i + 1, 0
                while j < n:
                    if toks[j] == "(":
                        level += 1
                    elif toks[j] == ")":
                        level -= 1
                        if level == 0:
                            break
                    j += 1
                k = j + 1
                # __attribute__((...)) or a macro such as OX_PRINTF(3, 4)
                while k < n and toks[k] not in ("{", ";", ","):
                    k += 1
                if k < n and toks[k] == "{":
                    (private if decl_static else public).add(t)
                    i += 1
                    continue
            if t not in KEYWORDS:
                refs.add(t)
        i += 1
    return public, private, refs


def module_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "host":
        return "lib" if len(rel) == 2 else rel[1]
    return EXTERNAL.get(rel[0], rel[0])


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    quiet = "--quiet" in argv
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    host = os.path.join(root, "host")

    files = []  # host sources and headers
    for d, _, names in os.walk(host):
        for f in sorted(names):
            if f.endswith((".c", ".h")):
                files.append(os.path.join(d, f))
    # Headers by name, for include resolution: host/ and the folders it names.
    headers = {}
    for top in ["host"] + list(EXTERNAL):
        for d, _, names in os.walk(os.path.join(root, top)):
            for f in names:
                if f.endswith(".h"):
                    p = os.path.join(d, f)
                    headers.setdefault(f, []).append(p)
                    rel = os.path.relpath(p, os.path.join(root, "sdk", "include"))
                    if not rel.startswith(".."):
                        headers.setdefault(rel, []).append(p)

    arrows = {}  # (from, to) -> [reasons]

    def arrow(a, b, why):
        if a != b:
            arrows.setdefault((a, b), []).append(why)

    texts = {}
    for p in files:
        with open(p, encoding="utf-8", errors="replace") as fh:
            texts[p] = fh.read()
    for p in files:
        src = module_of(root, p)
        for name in INCLUDE.findall(texts[p]):
            local = os.path.join(os.path.dirname(p), name)
            if os.path.exists(local):
                target = local
            elif name in headers:
                target = headers[name][0]
            else:
                target = None  # generated (onnx.pb-c.h) or a system header
            if target is not None:
                arrow(src, module_of(root, target),
                      "%s includes %s" % (os.path.relpath(p, root), name))

    defined = {}  # public function name -> defining files
    scans = {}
    for p in files:
        if p.endswith(".c"):
            scans[p] = scan_c(texts[p])
            for name in scans[p][0]:
                defined.setdefault(name, []).append(p)
    for p, (public, private, refs) in scans.items():
        src = module_of(root, p)
        for name in sorted(refs - public - private):
            for q in defined.get(name, []):
                arrow(src, module_of(root, q),
                      "%s uses %s (%s)" % (os.path.relpath(p, root), name,
                                            os.path.relpath(q, root)))

    layer = {}
    for i, mods in enumerate(LAYERS):
        for m in mods:
            layer[m] = i
    below = len(LAYERS)
    host_mods = {module_of(root, p) for p in files}
    errors = []
    for m in sorted(host_mods):
        if m not in layer:
            errors.append("module %s has no layer in tools/host_graph.py LAYERS" % m)

    def level(m):
        return layer.get(m, below if m not in host_mods else -1)

    known = set()
    for (a, b), whys in sorted(arrows.items()):
        up = a in host_mods and level(b) < level(a)
        if up and (a, b) in KNOWN_BACK_ARROWS:
            known.add((a, b))
        elif up:
            errors.append("back-arrow %s -> %s (layer %d up to %d): %s"
                          % (a, b, level(a), level(b), "; ".join(sorted(whys)[:4])))
        if not quiet:
            print("%-10s -> %-10s %s%s" % (a, b, "KNOWN " if (a, b) in known else
                                           "BACK  " if up else "",
                                           sorted(whys)[0]))
            for w in sorted(whys)[1:]:
                print("%27s %s" % ("", w))

    for a, b in sorted(KNOWN_BACK_ARROWS - known):
        errors.append("%s -> %s is in KNOWN_BACK_ARROWS but no longer occurs: remove it" % (a, b))

    # Cycles among host modules: strongly connected components (Tarjan).
    graph = {}
    for (a, b) in arrows:
        if a in host_mods and b in host_mods and (a, b) not in known:
            graph.setdefault(a, set()).add(b)
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(host_mods):
        if v not in index:
            strong(v)
    for comp in sccs:
        errors.append("cycle among host modules: %s" % " <-> ".join(comp))

    if errors:
        for e in errors:
            print("host_graph: " + e, file=sys.stderr)
        print("host_graph: %d problem(s)" % len(errors), file=sys.stderr)
        return 1
    print("host_graph: %d arrows, no cycle; back up the layers: %d known, no new one"
          % (len(arrows), len(known)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
