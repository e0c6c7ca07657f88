# Issue 30 on the GPU machine: the PyTorch tree audited by the binaries `new`, `e20`, `head`
# placed beside this script (see BENCHMARKS.md, "Issue 30: the PyTorch tree on the GPU machine").
import os, subprocess, sys, time, statistics, json
sp = os.path.dirname(os.path.dirname(__import__('torch').__file__))
tree = [os.path.join(sp, d) for d in ('torch', 'nvidia') if os.path.isdir(os.path.join(sp, d))]
libs = [os.path.join(r, f) for t in tree for r, _, fs in os.walk(t) for f in fs if '.so' in f]
size = sum(os.path.getsize(f) for f in libs if os.path.isfile(f) and not os.path.islink(f))
print("tree", tree, len(libs), "files with .so,", size >> 20, "MB", flush=True)
here = os.path.dirname(os.path.abspath(__file__))
def run(binary, threads, extra=()):
    env = dict(os.environ)
    if threads: env['RAYON_NUM_THREADS'] = str(threads)
    t = time.perf_counter()
    p = subprocess.Popen([os.path.join(here, binary), '--cuda-capabilities', '9.0', '--format', 'json', *extra, *tree], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out
cases = [('new', None), ('e20', None), ('head', None), ('new', 1), ('e20', 1), ('head', 1)]
for c in cases: run(*c)  # warm
res = {c: [] for c in cases}
for i in range(7):
    for c in cases:
        w, cpu, rss, out = run(*c)
        res[c].append((w, cpu, rss))
for c in cases:
    ws = sorted(x[0] for x in res[c]); cs = sorted(x[1] for x in res[c]); rs = max(x[2] for x in res[c])
    print(f"{c[0]:5} threads={c[1] or os.cpu_count():3}: wall best {ws[0]*1e3:.1f} ms median {statistics.median(ws)*1e3:.1f} ms; cpu median {statistics.median(cs)*1e3:.1f} ms; peak rss {rs:.1f} MB", flush=True)
a = json.loads(run('new', None)[3]); b = json.loads(run('head', None)[3])
print("findings new/head:", len(a['findings']), len(b['findings']), "files", len(a['files']), len(b['files']), "identical:", a == b)
