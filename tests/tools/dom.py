#!/usr/bin/env python3
"""Renders an HTML report in headless Chromium and prints what the browser
made of it, as JSON on stdout (tests/html_report.rs reads it).

    tests/tools/dom.py PAGE.html [FRAGMENT]

FRAGMENT (`show=error`, `show=error,warning&check=ID`) is put after `#` in
the page's URL: the page's script sets its filters from it, as for a user
following such a link.

Chromium runs headless (as root it needs --no-sandbox) with every host name
resolving to nothing and a network log (--log-net-log); `--dump-dom` prints
the DOM after the page's own script ran. The DOM is parsed here with the
standard library's HTML parser (the browser has already parsed and rendered
the page: this only reads its serialisation back).

Printed: the matrix (columns from the header, rows of every group's table
with their cells' class and text), the findings rows (check, severity,
cells, and the messages, one per line of the last cell), the findings'
sections (check, whether hidden, per-severity counts, the count their
heading shows), the text of the elements with an id the page uses for its
statements (`command`, `requested`, `no-files`, ...) and whether each is
hidden, the order of the h2 headings, the legend's first column, the
classes of the findings list, a count of every element by tag, every attribute that could
fetch or navigate (src, href, action, ...), whether the filter form is shown
(the inline script ran under the page's Content-Security-Policy), and every
URL the network log saw that is not the page itself.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

IDS = {"command", "requested", "driver", "summary", "no-files", "no-device-code", "no-findings", "none-shown"}
FETCHING = {"src", "href", "action", "formaction", "data", "poster", "srcset", "background", "ping", "manifest"}


class Dom(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags = {}
        self.fetching = []
        self.columns = []
        self.rows = []
        self.findings = []
        self.filters_hidden = None
        self.scripts = []
        self.stack = []  # (tag, attrs) of open elements we read text of
        self.text = None
        self.in_matrix = False
        self.group = None
        self.row = None
        self.finding = None
        self.section = None
        self.sections = []
        self.ids = {}
        self.headings = []
        self.legend = []
        self.in_legend = False
        self.legend_pending = False
        self.list_class = None
        self.list_only = None
        # Open text captures: [tag, depth, parts, store(text)].
        self.captures = []

    def capture(self, tag, store):
        self.captures.append([tag, 1, [], store])

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for c in self.captures:
            if c[0] == tag:
                c[1] += 1
        if a.get("id") in IDS:
            entry = {"hidden": "hidden" in a}
            self.ids[a["id"]] = entry
            self.capture(tag, lambda t, e=entry: e.__setitem__("text", t))
        if tag == "h2":
            self.headings.append(a.get("id"))
        if tag == "div" and a.get("id") == "findings-list":
            self.list_class = a.get("class", "")
            self.list_only = a.get("data-only")
        if tag == "table" and "legend" in a.get("class", "").split():
            self.in_legend = True
        if self.in_legend and tag == "tr":
            self.legend_pending = True
        if self.in_legend and tag == "td" and self.legend_pending:
            self.legend_pending = False
            self.capture("td", lambda t: self.legend.append(t))
        if tag == "span" and "count" in a.get("class", "").split() and self.sections:
            sec = self.sections[-1]
            self.capture("span", lambda t, e=sec: e.__setitem__("count", t))
        for k, v in attrs:
            if k in FETCHING or k.startswith("on"):
                self.fetching.append({"tag": tag, "attr": k, "value": v})
        if tag == "form" and a.get("id") == "filters":
            self.filters_hidden = "hidden" in a
        if tag == "table" and "matrix" in a.get("class", "").split():
            self.in_matrix = True
        if tag == "section" and "data-check" in a:
            self.section = a["data-check"]
            self.sections.append({
                "check": a["data-check"], "hidden": "hidden" in a,
                **{k: int(a.get("data-" + k, "0")) for k in ("error", "warning", "info")},
            })
        if tag == "script":
            self.scripts.append(a)
        if self.in_matrix:
            if tag == "th" and "data-cap" in a:
                self.columns.append({"cap": a["data-cap"], "requested": "req" in a.get("class", "").split()})
            elif tag == "tr" and "data-path" in a:
                self.row = {"path": a["data-path"], "group": self.group, "cells": [], "name": None}
            elif tag == "th" and a.get("scope") in ("row", "rowgroup"):
                self.text = ("th-" + a["scope"], [])
            elif tag == "td" and self.row is not None:
                self.row["cells"].append({"class": a.get("class", ""), "title": a.get("title", "")})
                self.text = ("td", [])
        elif tag == "tr" and self.section and a.get("class") in ("error", "warning", "info"):
            self.finding = {"check": self.section, "severity": a["class"], "cells": [], "messages": []}
        elif tag == "td" and self.finding is not None:
            self.text = ("finding", [])
        elif tag == "div" and self.finding is not None:
            self.text = ("message", [])

    def handle_data(self, data):
        for c in self.captures:
            c[2].append(data)
        if self.text is not None:
            self.text[1].append(data)

    def handle_endtag(self, tag):
        for c in list(self.captures):
            if c[0] == tag:
                c[1] -= 1
                if c[1] == 0:
                    self.captures.remove(c)
                    c[3]("".join(c[2]))
        if tag == "table" and self.in_legend:
            self.in_legend = False
        if self.text is not None and tag == "div" and self.text[0] == "message":
            self.finding["messages"].append("".join(self.text[1]))
            self.text = ("finding", [])
            return
        if self.text is not None and tag in ("th", "td"):
            kind, parts = self.text
            s = "".join(parts)
            if kind == "th-rowgroup":
                self.group = s
            elif kind == "th-row":
                self.row["name"] = s
            elif kind == "td":
                self.row["cells"][-1]["text"] = s
            elif kind == "finding":
                self.finding["cells"].append(s)
            self.text = None
        if tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None
        if tag == "tr" and self.finding is not None:
            self.findings.append(self.finding)
            self.finding = None
        if tag == "table" and self.in_matrix:
            self.in_matrix = False
        if tag == "section":
            self.section = None


def net_urls(log_path):
    """The URLs Chromium's network log shows requested on the page's behalf:
    requests whose network isolation key is the page's (file://) site. The
    browser's own background requests (time, component updates) carry
    another key and are left out; a page that loads `http://...` shows here
    (tests/html_report.rs checks that with a control page)."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        sys.exit("dom.py: chromium wrote no network log")
    # Written as the browser runs: closed at a clean exit, cut short otherwise.
    try:
        log = json.loads(text)
    except json.JSONDecodeError:
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls = set()
    for e in log.get("events", []):
        p = e.get("params") or {}
        if types.get(e["type"]) == "URL_REQUEST_START_JOB" and str(p.get("network_isolation_key", "")).startswith("file://"):
            urls.add(p.get("url", ""))
    return sorted(urls)


def main():
    page = os.path.abspath(sys.argv[1])
    fragment = sys.argv[2] if len(sys.argv) > 2 else None
    chromium = shutil.which("chromium")
    if not chromium:
        sys.exit("dom.py: chromium not found (make tools installs Debian's chromium)")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        log = os.path.join(tmp, "netlog.json")
        url = "file://" + page + ("#" + fragment if fragment else "")
        cmd = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--log-net-log=" + log,
            "--net-log-capture-mode=Everything", "--user-data-dir=" + os.path.join(tmp, "profile"),
            "--virtual-time-budget=5000", "--dump-dom", url,
        ]
        out = subprocess.run(cmd, capture_output=True, timeout=600)
        if out.returncode != 0 or not out.stdout:
            sys.exit("dom.py: chromium failed (%d): %s" % (out.returncode, out.stderr.decode(errors="replace")[-2000:]))
        dom = Dom()
        dom.feed(out.stdout.decode("utf-8"))
        dom.close()
        json.dump(
            {
                "columns": dom.columns,
                "rows": dom.rows,
                "findings": dom.findings,
                "sections": dom.sections,
                "ids": dom.ids,
                "headings": dom.headings,
                "legend": dom.legend,
                "findings_list_class": dom.list_class,
                "findings_list_only": dom.list_only,
                "tags": dom.tags,
                "fetching": dom.fetching,
                "scripts": dom.scripts,
                "filters_shown": dom.filters_hidden is False,
                "net": net_urls(log),
                "dom_bytes": len(out.stdout),
            },
            sys.stdout,
        )


if __name__ == "__main__":
    main()
