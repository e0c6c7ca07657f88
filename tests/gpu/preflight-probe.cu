// The pre-flight matrix's witness (tests/gpu/preflight-matrix.sh, issue 32):
// what really happens to a CUDA program in a sandbox. Calls cuInit through
// the driver API and prints its status, then launches one kernel through
// the runtime and prints the launch's and the synchronisation's status.
// Exit status 0 only when the kernel ran and wrote what it should. The
// driver is loaded as the static runtime loads it (dlopen of libcuda.so.1,
// found through LD_LIBRARY_PATH = the driver link), so no stub is linked.
#include <cstdio>
#include <dlfcn.h>

__global__ void mark(int *out) { *out = 42; }

int main() {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  typedef int (*init_fn)(unsigned);
  init_fn cu_init = (init_fn)dlsym(lib, "cuInit");
  int init = cu_init ? cu_init(0) : -1;
  printf("cuInit: %d\n", init);
  int *d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(int));
  if (e != cudaSuccess) {
    printf("malloc: %d %s\n", (int)e, cudaGetErrorString(e));
    return 1;
  }
  mark<<<1, 1>>>(d);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  int h = 0;
  if (launch == cudaSuccess && sync == cudaSuccess) cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("launch: %d sync: %d result: %d\n", (int)launch, (int)sync, h);
  return init == 0 && launch == cudaSuccess && sync == cudaSuccess && h == 42 ? 0 : 1;
}
