"""cuDNN split the way Nix splits packages, run on the GPU through ctypes.

    python3 tests/gpu/cudnn_split.py LIBCUDNN CUDART

LIBCUDNN is a `libcudnn.so.9` whose sub-libraries (`libcudnn_graph.so.9`,
`libcudnn_ops.so.9`, ...) live in another folder, with no RUNPATH entry
between them. cuDNN's front library loads them with dlopen on first use, so
the program fails at `cudnnCreate` unless the loader finds them: this is the
negative control and, once `auto-add-driver-runpath --dlopen-search` added
the folder, the positive run. The workload is a real kernel: cudnnAddTensor
(C = 2*A + C) on the GPU, read back and checked. Exit 0 when the result is
right, 3 when cuDNN could not load a sub-library, 1 otherwise.
"""

import ctypes
import sys


def main():
    cudnn = ctypes.CDLL(sys.argv[1])
    cudart = ctypes.CDLL(sys.argv[2])
    print("cudnnGetVersion", cudnn.cudnnGetVersion())
    handle = ctypes.c_void_p()
    status = cudnn.cudnnCreate(ctypes.byref(handle))
    cudnn.cudnnGetErrorString.restype = ctypes.c_char_p
    print("cudnnCreate", status, cudnn.cudnnGetErrorString(status).decode())
    if status != 0:
        return 3
    desc = ctypes.c_void_p()
    assert cudnn.cudnnCreateTensorDescriptor(ctypes.byref(desc)) == 0
    n = 1 * 2 * 4 * 4
    # NCHW (0), float (0)
    assert cudnn.cudnnSetTensor4dDescriptor(desc, 0, 0, 1, 2, 4, 4) == 0
    host_a = (ctypes.c_float * n)(*[float(i) for i in range(n)])
    host_c = (ctypes.c_float * n)(*[1.0] * n)
    dev_a, dev_c = ctypes.c_void_p(), ctypes.c_void_p()
    size = ctypes.c_size_t(4 * n)
    assert cudart.cudaMalloc(ctypes.byref(dev_a), size) == 0
    assert cudart.cudaMalloc(ctypes.byref(dev_c), size) == 0
    assert cudart.cudaMemcpy(dev_a, host_a, size, 1) == 0
    assert cudart.cudaMemcpy(dev_c, host_c, size, 1) == 0
    alpha, beta = ctypes.c_float(2.0), ctypes.c_float(1.0)
    status = cudnn.cudnnAddTensor(
        handle, ctypes.byref(alpha), desc, dev_a, ctypes.byref(beta), desc, dev_c
    )
    print("cudnnAddTensor", status, cudnn.cudnnGetErrorString(status).decode())
    if status != 0:
        return 3
    out = (ctypes.c_float * n)()
    assert cudart.cudaMemcpy(out, dev_c, size, 2) == 0
    want = [2.0 * i + 1.0 for i in range(n)]
    ok = list(out) == want
    print("result", "ok" if ok else f"wrong: {list(out)[:4]}...")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
