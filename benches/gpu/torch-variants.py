# Issue 30 on the GPU machine: the PyTorch tree audited by the binaries `new`, `e20`, `head`
# placed beside this script (see BENCHMARKS.md, "Issue 30: the PyTorch tree on the GPU machine").
import os, subprocess, time, statistics, glob
sp = os.path.dirname(os.path.dirname(__import__('torch').__file__))
tree = [os.path.join(sp, d) for d in ('torch', 'nvidia')]
libdirs = [os.path.join(sp, 'torch/lib')] + sorted(glob.glob(os.path.join(sp, 'nvidia/*/lib'))) + sorted(glob.glob(os.path.join(sp, 'nvidia/cu13/lib')))
print("files in tree:", sum(len(fs) for t in tree for _, _, fs in os.walk(t)), flush=True)
here = os.path.dirname(os.path.abspath(__file__))
def run(b, extra, paths):
    s = time.perf_counter(); subprocess.run([os.path.join(here, b), '--cuda-capabilities', '9.0', '--format', 'json', *extra, *paths], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); return (time.perf_counter() - s) * 1e3
cases = [('new', ()), ('new', ('--no-dlopen',)), ('new', ('--no-scan',)), ('new', ('--no-scan', '--no-dlopen')), ('e20', ()), ('e20', ('--no-dlopen',))]
for name, paths in (('tree', tree), ('lib dirs', libdirs)):
    for c in cases: run(c[0], c[1], paths)
    res = {c: [] for c in cases}
    for i in range(5):
        for c in cases: res[c].append(run(c[0], c[1], paths))
    for c in cases: print(f"{name:8} {c[0]} {' '.join(c[1]):22} best {min(res[c]):6.1f} median {statistics.median(res[c]):6.1f} ms", flush=True)
