"""Real PyTorch workloads whose dlopen calls are recorded under LD_DEBUG.

Run on the GPU machine only (CI has no GPU):

    python3 tests/gpu/dlopen_workloads.py OUT_DIR [WORKLOAD...]

Each workload runs in its own process with LD_DEBUG=files,libs and
LD_DEBUG_OUTPUT, so the loader itself reports every object it loads and who
asked for it. OUT_DIR receives one raw log per workload (ld-<name>.<pid>) and
`loaded.tsv`: workload, caller, the name passed to dlopen, the file it
resolved to ("-" when the loader found nothing), the ground truth the audit's
dlopen prediction is compared with (docs/dlopen.md).
"""

import os
import re
import subprocess
import sys

WORKLOADS = {
    "matmul": """
import torch
a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
(a @ a).sum().item()
a32 = torch.randn(512, 512, device="cuda")
(a32 @ a32).sum().item()
""",
    "conv": """
import torch
x = torch.randn(8, 16, 64, 64, device="cuda")
conv = torch.nn.Conv2d(16, 32, 3).cuda()
torch.backends.cudnn.benchmark = True
conv(x).sum().backward()
torch.cuda.synchronize()
""",
    "fft": """
import torch
x = torch.randn(4096, device="cuda", dtype=torch.complex64)
torch.fft.fft(x).abs().sum().item()
torch.fft.rfft2(torch.randn(256, 256, device="cuda")).abs().sum().item()
""",
    "solve": """
import torch
a = torch.randn(256, 256, device="cuda", dtype=torch.float64)
b = torch.randn(256, 4, device="cuda", dtype=torch.float64)
torch.linalg.solve(a, b).sum().item()
torch.linalg.eigh(a @ a.T).eigenvalues.sum().item()
torch.linalg.svd(a).S.sum().item()
""",
    "sdpa": """
import torch
import torch.nn.functional as F
q = torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.float16)
for backend in (None,):
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().item()
from torch.nn.attention import sdpa_kernel, SDPBackend
for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
    try:
        with sdpa_kernel(b):
            F.scaled_dot_product_attention(q, q, q).sum().item()
    except Exception as e:
        print("sdpa backend", b, "failed:", e)
""",
    "jiterator": """
import torch
code = "template <typename T> T my_op(T x, T y) { return x * y + x; }"
fn = torch.cuda.jiterator._create_jit_fn(code)
x = torch.randn(1000, device="cuda")
fn(x, x).sum().item()
""",
    "sparse": """
import torch
i = torch.tensor([[0, 1, 1], [2, 0, 2]], device="cuda")
v = torch.tensor([3.0, 4.0, 5.0], device="cuda")
s = torch.sparse_coo_tensor(i, v, (2, 3)).to_sparse_csr()
(s @ torch.randn(3, 4, device="cuda")).sum().item()
torch.rand(100, device="cuda").sum().item()
""",
    "nccl": """
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1)
t = torch.ones(1024, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
assert t[0].item() == 1.0
dist.destroy_process_group()
""",
}

# "file=NAME [0];  dynamically loaded by CALLER [0]"
LOADED = re.compile(r"file=(\S+) \[\d+\];\s+dynamically loaded by (\S+) \[\d+\]")
# "file=NAME [0];  generating link map" follows when NAME was found
FOUND = re.compile(r"file=(\S+) \[\d+\];\s+generating link map")
# "find library=NAME [0]; searching" then "trying file=PATH"
TRYING = re.compile(r"trying file=(\S+)")


def parse(log):
    """Pairs (caller, name, resolved-file-or-'-') from one LD_DEBUG log."""
    out = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        m = LOADED.search(line)
        if not m:
            continue
        name, caller = m.group(1), m.group(2)
        resolved = "-"
        for nxt in lines[i + 1 : i + 40]:
            f = FOUND.search(nxt)
            if f:
                resolved = f.group(1) if f.group(1) != name or "/" in name else name
                break
            if LOADED.search(nxt):
                break
        out.append((caller, name, resolved))
    return out


def main():
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    names = sys.argv[2:] or list(WORKLOADS)
    rows = []
    for name in names:
        prefix = os.path.join(out, f"ld-{name}")
        env = dict(os.environ, LD_DEBUG="files,libs", LD_DEBUG_OUTPUT=prefix)
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        proc = subprocess.run(
            [sys.executable, "-c", WORKLOADS[name]],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        print(f"{name}: {status}", proc.stderr[-2000:] if proc.returncode else "")
        for f in sorted(os.listdir(out)):
            if f.startswith(f"ld-{name}."):
                with open(os.path.join(out, f), errors="replace") as fh:
                    for caller, lib, resolved in parse(fh.read()):
                        rows.append((name, caller, lib, resolved))
    with open(os.path.join(out, "loaded.tsv"), "w") as fh:
        fh.write("workload\tcaller\tname\tresolved\n")
        for r in sorted(set(rows)):
            fh.write("\t".join(r) + "\n")
    print(f"{len(set(rows))} dlopen rows in {out}/loaded.tsv")


if __name__ == "__main__":
    main()
