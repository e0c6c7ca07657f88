# Issue 30 on the GPU machine: the PyTorch tree (and its library folders) audited by the binaries
# new2, new, e20 placed beside this script, on 16 threads and on one, with each pass switched off
# (BENCHMARKS.md, "Issue 30: the PyTorch tree on the GPU machine, the walk's files opened once").
import os, subprocess, time, statistics, glob, json
sp = os.path.dirname(os.path.dirname(__import__('torch').__file__))
tree = [os.path.join(sp, d) for d in ('torch', 'nvidia')]
libdirs = [os.path.join(sp, 'torch/lib')] + sorted(glob.glob(os.path.join(sp, 'nvidia/*/lib'))) + sorted(glob.glob(os.path.join(sp, 'nvidia/cu13/lib')))
here = os.path.dirname(os.path.abspath(__file__))
def run(b, threads, extra, paths):
    env = dict(os.environ)
    if threads: env['RAYON_NUM_THREADS'] = str(threads)
    s = time.perf_counter()
    p = subprocess.Popen([os.path.join(here, b), '--cuda-capabilities', '9.0', '--format', 'json', *extra, *paths], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = p.stdout.read(); _, st, ru = os.wait4(p.pid, 0)
    return (time.perf_counter() - s) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3, ru.ru_maxrss / 1024, out
cases = [('new2', None, ()), ('e20', None, ()), ('new', None, ()), ('new2', 1, ()), ('e20', 1, ()), ('new2', None, ('--no-dlopen',)), ('new2', None, ('--no-scan',)), ('new2', None, ('--no-scan', '--no-dlopen'))]
for name, paths in (('tree', tree), ('libdirs', libdirs)):
    for c in cases: run(c[0], c[1], c[2], paths)
    res = {c: [] for c in cases}
    for i in range(7):
        for c in cases: res[c].append(run(c[0], c[1], c[2], paths)[:3])
    for c in cases:
        ws = sorted(x[0] for x in res[c]); cs = statistics.median(x[1] for x in res[c]); rs = max(x[2] for x in res[c])
        print(f"{name:8} {c[0]:5} thr={c[1] or os.cpu_count():3} {' '.join(c[2]):22} best {ws[0]:6.1f} median {statistics.median(ws):6.1f} ms cpu {cs:6.1f} rss {rs:5.1f}", flush=True)
a = json.loads(run('new2', None, (), tree)[3]); b = json.loads(run('new2', 1, (), tree)[3])
print("files", len(a['files']), "findings", len(a['findings']), "16 vs 1 thread identical:", a == b)
