#!/usr/bin/env python3
"""Reads an audit's nix-support files the way Hydra's queue runner does
(src/hydra-queue-runner/build-result.cc: getBuildOutput) and checks them
against the audit's own report.json. Used by nix/tests/build-tests.sh.

    hydra-parse.py metrics OUT     hydra-metrics: every line kept by Hydra's
                                   rules, values equal to what report.json says
    hydra-parse.py products OUT    hydra-build-products: every line matches
                                   Hydra's pattern and names a file in OUT
    hydra-parse.py index OUT NAME...
                                   the set's index page: one row per NAME,
                                   each linking its report and JSON (present)

Hydra's rules, as its source states them:
  metrics: a line is split on blanks; fewer than two fields: dropped; the
    name must match [a-zA-Z0-9._-]+ (else dropped); the value is read with
    std::stod (a number prefix; none: dropped); a third field is the unit if
    it matches [a-zA-Z0-9._%-]+, else the unit is empty.
  products: TYPE SUBTYPE PATH [DEFAULT], type and subtype [a-zA-Z0-9_-]+,
    the path unquoted without blanks, < > or ", absolute, in the store and
    existing.
"""
import json
import os
import re
import sys
from html.parser import HTMLParser

NAME = re.compile(r"[a-zA-Z0-9._-]+")
UNIT = re.compile(r"[a-zA-Z0-9._%-]+")
STOD = re.compile(r"\s*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf(inity)?|nan)", re.I)
PRODUCT = re.compile(r'([a-zA-Z0-9_-]+)\s+([a-zA-Z0-9_-]+)\s+("[^"]+"|[^\s<>"]+)(\s+([^\s<>]+))?')


def fail(msg):
    sys.exit("hydra-parse.py: " + msg)


def hydra_metrics(path):
    """The metrics Hydra would record, and the lines it would drop."""
    kept, dropped = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            fields = line.split()
            if not line:
                continue
            if len(fields) < 2 or not NAME.fullmatch(fields[0]):
                dropped.append(line)
                continue
            m = STOD.match(fields[1])
            if not m:
                dropped.append(line)
                continue
            unit = fields[2] if len(fields) >= 3 else ""
            if not UNIT.fullmatch(unit or "x"):
                dropped.append(line + "  (unit dropped)")
                unit = ""
            kept[fields[0]] = (float(m.group(0)), unit)
    return kept, dropped


def expected(report):
    """The metrics report.json implies, computed here from its fields."""
    p = "cuda-elf-inspect."
    want = {p + "files": len(report["files"]), p + "failures": len(report["failures"])}
    for sev in ("error", "warning", "info"):
        want[p + "findings." + sev] = sum(f["severity"] == sev for f in report["findings"])
    for f in report["findings"]:
        key = "%sfindings.%s.%s" % (p, f["check"], f["severity"])
        want[key] = want.get(key, 0) + 1
    device = [f for f in report["files"] if "device" in f]
    want[p + "files.device-code"] = len(device)
    for f in device:
        for c in f.get("coverage", []):
            key = "%scapability.%s.lacking" % (p, c["capability"])
            # A file with kernels (SASS or PTX with an entry) that runs
            # nothing on it; link stubs alone need nothing.
            kernels = bool(f["device"].get("sass")) or bool(f["device"].get("ptx"))
            lacking = c["runs"] == "no" and kernels and "unscanned_container" not in f["device"]
            want[key] = want.get(key, 0) + int(lacking)
        for arch, n in f["device"].get("bytes", {}).items():
            want[p + "device-code." + arch] = want.get(p + "device-code." + arch, 0) + n
    return want


def metrics(out):
    kept, dropped = hydra_metrics(os.path.join(out, "nix-support/hydra-metrics"))
    if dropped:
        fail("Hydra would drop: %r" % dropped)
    with open(os.path.join(out, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    want = expected(report)
    for name, value in want.items():
        if name not in kept:
            fail("no metric %s (report.json implies %s)" % (name, value))
        if kept[name][0] != value:
            fail("%s is %s, report.json implies %s" % (name, kept[name][0], value))
    for name, (value, unit) in kept.items():
        if name.startswith("cuda-elf-inspect.device-code.") and unit != "B":
            fail("%s has unit %r, not B" % (name, unit))
    print("hydra-parse.py: %d metrics kept by Hydra's rules, %d checked against report.json" % (len(kept), len(want)))


def products(out):
    with open(os.path.join(out, "nix-support/hydra-build-products"), encoding="utf-8") as f:
        lines = [l for l in f.read().split("\n") if l]
    if not lines:
        fail("no products")
    for line in lines:
        m = PRODUCT.fullmatch(line)
        if not m:
            fail("Hydra ignores the product line %r" % line)
        path = m.group(3).strip('"')
        if not path.startswith("/") or not os.path.exists(path):
            fail("product %r: no such file" % path)
        if m.group(5) and not os.path.exists(os.path.join(path, m.group(5))):
            fail("product %r: no default %r" % (path, m.group(5)))
    print("hydra-parse.py: %d products" % len(lines))


class Index(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows = {}
        self.current = None
        self.caps = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-package" in a:
            self.current = a["data-package"]
            self.rows[self.current] = []
        elif tag == "a" and self.current is not None:
            self.rows[self.current].append(a["href"])
        elif tag == "th" and "data-cap" in a:
            self.caps.append(a["data-cap"])

    def handle_endtag(self, tag):
        if tag == "tr":
            self.current = None


def index(out, names):
    page = Index()
    with open(os.path.join(out, "index.html"), encoding="utf-8") as f:
        page.feed(f.read())
    if sorted(page.rows) != sorted(names):
        fail("index rows %r, packages %r" % (sorted(page.rows), sorted(names)))
    for name, links in page.rows.items():
        if len(links) != 2 or not links[0].endswith(".html") or not links[1].endswith(".json"):
            fail("%r links %r" % (name, links))
        for link in links:
            if not os.path.isfile(os.path.join(out, link)):
                fail("%r links %s, which is not there" % (name, link))
    products(out)
    print("hydra-parse.py: index links %d packages; capabilities %s" % (len(names), " ".join(page.caps)))


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    what, out = sys.argv[1], sys.argv[2]
    if what == "metrics":
        metrics(out)
    elif what == "products":
        products(out)
    elif what == "index":
        index(out, sys.argv[3:])
    else:
        fail("unknown check " + what)


if __name__ == "__main__":
    main()
