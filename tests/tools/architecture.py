#!/usr/bin/env python3
"""The architecture of src/, measured: which layer each top-level module is in,
every import between them, and the rules docs/architecture.md states.

    tests/tools/architecture.py [--graph]

Rules (exit 1 and one line per breach):
  - a module imports only modules of a lower layer (LAYERS below), never up
    and never a peer of its own layer;
  - no import cycle between the files of one folder;
  - at most 8 loose modules at the top of src/;
  - each src/bin/*.rs at most 60 lines, and imports only the library;
  - no function over 120 lines in src/ (test modules aside).
Prints the measures either way (--graph: every edge, with a file that makes it).
Imports are read from the code, not from comments: `crate::a::b` paths and
`use super::...` (rustfmt-formatted code, as `make lint` enforces).
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SRC = os.path.join(ROOT, "src")

# Lower number: lower layer. A module may import only strictly lower layers.
LAYERS = {
    # Foundation: no knowledge of files, ELF or CUDA.
    "error": 0,
    "output": 0,
    "log": 1,
    "buildenv": 1,
    # Readers and the file system: bytes in, types out.
    "fs": 2,
    "elf": 2,
    "fatbin": 2,
    # Knowledge built on them: the store, CUDA's rules, the device-code model.
    "store": 3,
    "cuda": 3,
    "devicecode": 4,
    "dlopen": 4,
    # Engines: one per job of the three binaries.
    "symlinks": 5,
    "driver_runpath": 5,
    "inspect": 5,
    "audit": 5,
    # Emitters of the audit's and the summary's results.
    "report": 6,
    # The pre-flight: checks a sandbox or host, with the audit as one of its parts.
    "preflight": 6,
    # The command-line front ends of the binaries.
    "cli": 7,
}
MAX_LOOSE = 8
MAX_BIN_LINES = 60
MAX_FN_LINES = 120

CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)(?:::([a-z_][a-z0-9_]*))?")
FN_RE = re.compile(
    r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+(\w+)'
)


def code_lines(text):
    """The lines of a file without comments and without #[cfg(test)] modules."""
    out = []
    skip_indent = None
    cfg_test = False
    for line in text.split("\n"):
        if skip_indent is not None:
            if line.startswith(skip_indent + "}"):
                skip_indent = None
            out.append("")
            continue
        stripped = line.strip()
        if stripped == "#[cfg(test)]":
            cfg_test = True
            out.append("")
            continue
        m = re.match(r"^(\s*)(?:pub\s+)?mod\s+\w+\s*\{", line)
        if cfg_test and m:
            skip_indent = m.group(1)
            cfg_test = False
            out.append("")
            continue
        cfg_test = False
        if stripped.startswith("//"):
            out.append("")
            continue
        # A trailing comment (not inside a string: good enough for rustfmt code).
        cut = line.find(" //")
        if cut >= 0 and line[:cut].count('"') % 2 == 0:
            line = line[:cut]
        out.append(line)
    return out


def rust_files(folder):
    for d, _, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def module_of(path):
    """src/a/b.rs -> ['a', 'b']; src/a/mod.rs -> ['a']."""
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    return rel


def imports(path, lines):
    """(module path imported, line number) for each crate:: or super:: path."""
    mod = module_of(path)
    found = []
    for no, line in enumerate(lines, 1):
        for m in CRATE_PATH.finditer(line):
            found.append(([m.group(1)] + ([m.group(2)] if m.group(2) else []), no))
        for m in re.finditer(r"\bsuper::([a-z_][a-z0-9_]*)", line):
            # `super` of a file module is its folder; of a mod.rs, the parent.
            parent = mod[:-1]
            found.append((parent + [m.group(1)], no))
    return found


def function_lengths(path, lines):
    out = []
    i = 0
    while i < len(lines):
        m = FN_RE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, j = m.group(1), i
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(";"):
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].startswith(indent + "}"):
            k += 1
        out.append((k - i + 1, f"{os.path.relpath(path, ROOT)}:{i + 1}", m.group(2)))
        i += 1
    return out


def sccs(nodes, edges):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
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
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    show_graph = "--graph" in sys.argv
    breaches = []
    top_edges = {}  # (from, to) -> example "file:line"
    file_edges = {}  # folder -> {file module -> set(file modules)}
    long_fns = []
    lib_files = [p for p in rust_files(SRC) if not os.path.relpath(p, SRC).startswith("bin" + os.sep)]
    file_modules = {"::".join(module_of(p)) for p in lib_files}
    for path in lib_files:
        lines = code_lines(open(path, encoding="utf-8").read())
        mod = module_of(path)
        top = mod[0] if mod != ["lib"] else None
        if top is not None and top not in LAYERS:
            breaches.append(f"{os.path.relpath(path, ROOT)}: module `{top}` has no layer in tests/tools/architecture.py")
        for target, no in imports(path, lines):
            if top is None or not target:
                continue
            to = target[0]
            where = f"{os.path.relpath(path, ROOT)}:{no}"
            if to != top:
                top_edges.setdefault((top, to), where)
            elif len(mod) >= 2 and len(target) >= 2:
                # Within one folder: file-level edges for the cycle check.
                src_mod = "::".join(mod)
                dst = "::".join(target[:2])
                if dst in file_modules and dst != src_mod and not src_mod.startswith(dst + "::"):
                    file_edges.setdefault(top, {}).setdefault(src_mod, set()).add(dst)
        long_fns += [f for f in function_lengths(path, lines) if f[0] > MAX_FN_LINES]

    for (a, b), where in sorted(top_edges.items()):
        if b not in LAYERS:
            continue
        if LAYERS[b] >= LAYERS[a]:
            kind = "a peer" if LAYERS[b] == LAYERS[a] else "a higher layer"
            breaches.append(f"{where}: `{a}` (layer {LAYERS[a]}) imports `{b}`, {kind} (layer {LAYERS[b]})")

    top_graph = {}
    for a, b in top_edges:
        top_graph.setdefault(a, set()).add(b)
    cycles = sccs(set(LAYERS), top_graph)
    for folder, edges in sorted(file_edges.items()):
        nodes = set(edges) | {n for v in edges.values() for n in v}
        cycles += sccs(nodes, edges)
    for c in cycles:
        breaches.append(f"import cycle: {' <-> '.join(c)}")

    loose = sorted(f[:-3] for f in os.listdir(SRC) if f.endswith(".rs") and f != "lib.rs")
    if len(loose) > MAX_LOOSE:
        breaches.append(f"{len(loose)} loose modules at the top of src/ (at most {MAX_LOOSE}): {', '.join(loose)}")

    bins = []
    for path in rust_files(os.path.join(SRC, "bin")):
        text = open(path, encoding="utf-8").read()
        n = text.count("\n")
        bins.append((os.path.relpath(path, ROOT), n))
        if n > MAX_BIN_LINES:
            breaches.append(f"{os.path.relpath(path, ROOT)}: {n} lines (at most {MAX_BIN_LINES})")
        for line in code_lines(text):
            if re.search(r"\bmod\s+\w+\s*[;{]", line) or "crate::" in line:
                breaches.append(f"{os.path.relpath(path, ROOT)}: a binary holds its own modules; move them into the library")
                break
        long_fns += [f for f in function_lengths(path, code_lines(text)) if f[0] > MAX_FN_LINES]
    for n, where, name in sorted(long_fns, reverse=True):
        breaches.append(f"{where}: fn {name} is {n} lines (at most {MAX_FN_LINES})")

    folders = sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)) and d != "bin")
    print(f"modules: {len(lib_files)} files; top level: {len(folders)} folders ({', '.join(folders)}), "
          f"{len(loose)} loose ({', '.join(loose)})")
    print(f"imports between top-level modules: {len(top_edges)}; upward or peer imports: "
          f"{sum(1 for b in breaches if 'imports `' in b)}; cycles: {len(cycles)}")
    print("binaries: " + ", ".join(f"{p} {n} lines" for p, n in bins))
    print(f"functions over {MAX_FN_LINES} lines: {len(long_fns)}")
    for layer in sorted(set(LAYERS.values())):
        names = sorted(m for m, l in LAYERS.items() if l == layer)
        uses = sorted({b for (a, b) in top_edges if a in names and b in LAYERS})
        print(f"  layer {layer}: {', '.join(names)}" + (f"  -> {', '.join(uses)}" if uses else ""))
    if show_graph:
        for (a, b), where in sorted(top_edges.items()):
            print(f"  {a} -> {b}  ({where})")
    for b in breaches:
        print("BREACH: " + b)
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
