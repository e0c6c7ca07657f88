#!/usr/bin/env python3
"""The reading rule on real libraries (issue 30 item 3; run by benches/reading-survey.sh).

  reading-survey.py survey ROOT BIN OUT.json      per ELF under ROOT: entries by default
                                                  and with --scan (--summary --headers-only),
                                                  and where --scan's containers sit
  reading-survey.py times ROOT OLD NEW OUT.json   per ELF, alternating: OLD's default, NEW's
                                                  default, NEW --scan (the audit, --no-dlopen);
                                                  best of 3, wall and CPU (user+sys) seconds
  reading-survey.py table OLD.json NEW.json TIMES.json   the Markdown table of docs/reading-survey.md
"""
import json
import os
import re
import subprocess
import sys
import time


def elfs(root):
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, 'rb') as h:
                if h.read(4) == b'\x7fELF':
                    yield p


def summary(binary, args, path):
    out = subprocess.run([binary, *args, '--summary', '--headers-only', '--format', 'json', path],
                         capture_output=True, check=False)
    return json.loads(out.stdout)['files'][0]


def sections(path):
    """(name, file offset, size) of the sections with bytes (`readelf -SW`)."""
    out = subprocess.run(['readelf', '-SW', path], capture_output=True, text=True, check=False).stdout
    found = []
    for m in re.finditer(r'\]\s+(\S+)\s+(\S+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)', out):
        name, kind, off, size = m.groups()
        if kind != 'NOBITS':
            found.append((name, int(off, 16), int(size, 16)))
    return found


def survey(root, binary, out):
    rows = []
    for p in sorted(elfs(root)):
        d, s = summary(binary, [], p), summary(binary, ['--scan'], p)
        count = lambda f: len(f.get('entries', [])) + len(f.get('scanned', []))
        where = {}
        secs = sections(p) if s.get('scanned') else []
        for c in sorted({e['container'] for e in s.get('scanned', [])}):
            name, start, size = next(((n, o, z) for n, o, z in secs if o <= c < o + z), ('(none)', c, 0))
            w = where.setdefault(name, {'section_size': size, 'first': c - start, 'containers': 0})
            w['containers'] += 1
            w['first'] = min(w['first'], c - start)
        rows.append(dict(path=os.path.relpath(p, root), size=os.path.getsize(p), default=count(d),
                         scan=count(s), where=where))
        print(f"{rows[-1]['default']:6} {rows[-1]['scan']:6} {rows[-1]['path']}", flush=True)
    with open(out, 'w') as h:
        json.dump(rows, h, indent=1)


def times(root, old, new, out, rounds=3):
    modes = {'old': [old], 'new': [new], 'scan': [new, '--scan']}
    rows = {}
    for p in sorted(elfs(root)):
        best = {}
        for _ in range(rounds):
            for mode, cmd in modes.items():
                t = time.perf_counter()
                run = subprocess.Popen(cmd + ['--no-dlopen', '--cuda-capabilities', '8.0 9.0', '--format', 'json', p],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _, _, use = os.wait4(run.pid, 0)
                wall, cpu = time.perf_counter() - t, use.ru_utime + use.ru_stime
                b = best.setdefault(mode, [wall, cpu, use.ru_maxrss])
                b[0], b[1], b[2] = min(b[0], wall), min(b[1], cpu), min(b[2], use.ru_maxrss)
        rows[os.path.relpath(p, root)] = best
    with open(out, 'w') as h:
        json.dump(rows, h, indent=1)


def table(old_json, new_json, times_json):
    old = {r['path']: r for r in json.load(open(old_json))}
    new = {r['path']: r for r in json.load(open(new_json))}
    t = json.load(open(times_json))
    print('| wheel | file | MB | entries, old rule: default / --scan | new rule: default / --scan '
          '| outside the fatbin sections (section: containers, first at, section MiB) '
          '| audit CPU ms: old default / new default / --scan | wall ms: same |')
    print('|---|---|---|---|---|---|---|---|')
    for p in sorted(new):
        o, n, tt = old[p], new[p], t.get(p, {})
        where = '; '.join(f"`{k}`: {v['containers']} from {v['first']:#x}, {v['section_size'] / 2**20:.1f}"
                          for k, v in n['where'].items())
        missed = ' **missed**' if o['default'] < o['scan'] else ''
        ms = lambda i: ' / '.join(f"{tt[m][i] * 1e3:.0f}" if m in tt else '-' for m in ('old', 'new', 'scan'))
        parts = p.split('/')
        print(f"| {parts[0]} | {parts[-1]} | {n['size'] / 1e6:.1f} | {o['default']} / {o['scan']}{missed} "
              f"| {n['default']} / {n['scan']} | {where} | {ms(1)} | {ms(0)} |")
    tot = lambda m, i: sum(v[m][i] for v in t.values() if m in v)
    print(f"| **all {len(new)}** | | {sum(r['size'] for r in new.values()) / 1e6:.0f} "
          f"| {sum(r['default'] for r in old.values())} / {sum(r['scan'] for r in old.values())} "
          f"| {sum(r['default'] for r in new.values())} / {sum(r['scan'] for r in new.values())} | "
          f"| {tot('old', 1) * 1e3:.0f} / {tot('new', 1) * 1e3:.0f} / {tot('scan', 1) * 1e3:.0f} "
          f"| {tot('old', 0) * 1e3:.0f} / {tot('new', 0) * 1e3:.0f} / {tot('scan', 0) * 1e3:.0f} |")


if __name__ == '__main__':
    cmd, args = sys.argv[1], sys.argv[2:]
    {'survey': survey, 'times': times, 'table': table}[cmd](*args)
