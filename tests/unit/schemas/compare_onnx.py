#!/usr/bin/env python3
"""Checks onyx's built-in ai.onnx schema table against the schemas of the
onnx Python package, for every opset that package knows.

usage: compare_onnx.py DUMP_EXECUTABLE
Exit 0: all equal; 1: differences (listed); 77: onnx not installed (skip)."""
import subprocess
import sys

try:
    import onnx
    import onnx.defs as defs
except ImportError:
    print("onnx Python package not available: skipped")
    sys.exit(77)

OPT = {0: "S", 1: "O", 2: "V"}


def parse_dump(text):
    table, cur = {}, None
    for line in text.splitlines():
        tag, rest = line[0], line[2:].split(" ")
        if tag == "S":
            cur = {"I": [], "O": [], "T": {}, "A": {}}
            table[(rest[0], int(rest[1]))] = cur
        elif tag in "IO":
            cur[tag].append(tuple(rest))
        elif tag == "T":
            cur["T"][rest[0]] = set(rest[1:])
        elif tag == "A":
            cur["A"][rest[0]] = (rest[1], rest[2] == "1", rest[3] if len(rest) > 3 else None)
    return table


def onnx_entry(s):
    e = {"I": [], "O": [], "T": {}, "A": {}}
    for tag, fs in (("I", s.inputs), ("O", s.outputs)):
        for f in fs:
            e[tag].append((f.name, f.typeStr, OPT[int(f.option)]))
    for tc in s.type_constraints:
        e["T"][tc.type_param_str] = {t[7:-1] for t in tc.allowed_type_strs if t.startswith("tensor(")}
    for name, a in s.attributes.items():
        ty = str(a.type).split(".")[-1]
        default = None
        if a.default_value.name:
            v = onnx.helper.get_attribute_value(a.default_value)
            default = v.decode() if isinstance(v, bytes) else v
        e["A"][name] = (ty, bool(a.required), default)
    return e


def same_default(ours, theirs, ty):
    if ty in ("INTS", "FLOATS", "STRINGS"):
        return True  # list defaults are not in the dump; kernels apply them
    if theirs is None or ours is None:
        return ours is None and theirs is None
    if ty == "FLOAT":
        return abs(float(ours) - theirs) <= 1e-6 * max(1.0, abs(theirs))
    if ty == "INT":
        return int(ours) == theirs
    return ours == str(theirs)


def main():
    ours = parse_dump(subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout)
    top = defs.onnx_opset_version()
    ops = {op for op, _ in ours}
    errors = []
    expected = {(s.name, s.since_version) for s in defs.get_all_schemas_with_history()
                if s.domain == "" and s.name in ops and s.since_version <= top}
    for key in sorted(expected - set(ours)):
        errors.append(f"{key[0]}-{key[1]}: missing from onyx")
    for (op, ver), e in sorted(ours.items()):
        if ver > top:
            continue
        if (op, ver) not in expected:
            errors.append(f"{op}-{ver}: onnx has no such version")
            continue
        ref = onnx_entry(defs.get_schema(op, ver, ""))
        for name, types in e["T"].items():
            if types == {"?"}:  # a container-type constraint: not compared
                ref["T"][name] = types
        for tag in "IO":
            if e[tag] != ref[tag]:
                errors.append(f"{op}-{ver} {tag}: onyx {e[tag]} onnx {ref[tag]}")
        if e["T"] != ref["T"]:
            errors.append(f"{op}-{ver} constraints: onyx {e['T']} onnx {ref['T']}")
        if set(e["A"]) != set(ref["A"]):
            errors.append(f"{op}-{ver} attributes: onyx {sorted(e['A'])} onnx {sorted(ref['A'])}")
        for name in set(e["A"]) & set(ref["A"]):
            (ty, req, d), (rty, rreq, rd) = e["A"][name], ref["A"][name]
            if ty != rty or req != rreq or not same_default(d, rd, ty):
                errors.append(f"{op}-{ver} attribute {name}: onyx {e['A'][name]} onnx {ref['A'][name]}")
    checked = sum(1 for (_, v) in ours if v <= top)
    for line in errors:
        print(line)
    print(f"{checked - len(errors) if checked >= len(errors) else 0} passed, {len(errors)} failed "
          f"(onyx schemas up to opset {top} against onnx {onnx.__version__})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
