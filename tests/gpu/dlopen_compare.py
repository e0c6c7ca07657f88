"""Compares what the loader dlopened on the GPU machine with the audit's
prediction (docs/dlopen.md has the table this prints).

    python3 tests/gpu/dlopen_compare.py LOADED_TSV AUDIT_JSON [ROOT...]

LOADED_TSV comes from tests/gpu/dlopen_workloads.py (every "dynamically
loaded by" line of the loader), AUDIT_JSON from `cuda-elf-inspect --format
json` over the same folders. Only native libraries below ROOT (default: all)
count as callers: the Python interpreter, its extension modules and ctypes
are not a library's own dlopen.

A seen load (caller, name) is predicted when the audit's dlopen findings for
that caller name it (the version ladder counts: `libcudnn_graph.so.9.19.0`,
`.9.19` and `.9` are one target). Prints recall per caller and overall, the
misses, and precision (of the predicted targets of the callers that ran, the
share that was loaded): precision is low by nature, since one workload
exercises few of a library's plugins.
"""

import json
import os
import re
import sys

SONAME = re.compile(r"^lib[A-Za-z0-9_+\-.]*\.so(\.[0-9]+)*$")


def base(name):
    """The name without its version ladder: libx.so.9.19.0 -> libx.so."""
    m = re.match(r"^(.*?\.so)(\.[0-9]+)*$", name)
    return m.group(1) if m else name


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def findings(doc):
    """Every finding object of the audit's JSON, wherever it sits."""
    if isinstance(doc, dict):
        if isinstance(doc.get("check"), str):
            yield doc
        for v in doc.values():
            yield from findings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from findings(v)


def main():
    loaded_tsv, audit_json, *roots = sys.argv[1:]
    roots = [os.path.realpath(r) for r in roots]
    audit = json.load(open(audit_json))
    predicted = {}  # caller real path -> {base name: set of names}
    for f in findings(audit):
        if not f["check"].startswith("dlopen-") or f["check"] == "dlopen-none":
            continue
        caller = f.get("path") or f.get("file")
        if not isinstance(caller, str):
            continue
        caller = os.path.realpath(caller)
        for s in strings(f):
            for word in re.split(r"[\s,;:()'\"`]+", s):
                if SONAME.match(word):
                    predicted.setdefault(caller, {}).setdefault(base(word), set()).add(word)
    # --dlopen-facts: every target of each file, those that get no finding
    # (the driver's, glibc's, the NEEDED closure's) included.
    for file in audit.get("files", []):
        if isinstance(file, dict) and isinstance(file.get("dlopen"), dict):
            caller = os.path.realpath(file["path"])
            for t in file["dlopen"].get("targets", []):
                for word in [t.get("soname", "")] + list(t.get("asked", [])):
                    if SONAME.match(word):
                        predicted.setdefault(caller, {}).setdefault(base(word), set()).add(word)
    seen = {}  # caller -> {base: names}
    for line in open(loaded_tsv).read().splitlines()[1:]:
        workload, caller, name, _resolved = line.split("\t")
        if "/" in name:
            continue  # a path: Python's ctypes or an import
        real = os.path.realpath(caller)
        if roots and not any(real.startswith(r + os.sep) for r in roots):
            continue
        if "/lib-dynload/" in real or real.endswith("/python3") or ".cpython-" in real:
            continue
        seen.setdefault(real, {}).setdefault(base(name), set()).add(name)
    hits = misses = 0
    rows = []
    for caller in sorted(seen):
        for b in sorted(seen[caller]):
            ok = b in predicted.get(caller, {})
            hits += ok
            misses += not ok
            rows.append((caller, b, sorted(seen[caller][b]), ok))
    ran = [c for c in seen if c in predicted]
    pred_total = sum(len(predicted[c]) for c in ran)
    pred_seen = sum(1 for c in ran for b in predicted[c] if b in seen[c])
    print("| caller | target (names tried) | predicted |")
    print("|---|---|---|")
    for caller, b, names, ok in rows:
        print(f"| {os.path.basename(caller)} | {b} ({', '.join(names)}) | {'yes' if ok else 'NO'} |")
    total = hits + misses
    print()
    print(f"recall: {hits}/{total} seen dlopen targets predicted")
    print(f"precision: {pred_seen}/{pred_total} predicted targets of the {len(ran)} callers that ran were loaded")
    print(f"callers with predictions: {len(predicted)}")
    return 0 if misses == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
