// Driver-prediction program (tests/gpu/driver.sh, issue 16): launches one
// kernel and prints the CUDA error string of the launch and of the
// synchronisation, so that "CUDA driver version is insufficient for CUDA
// runtime version" and "the provided PTX was compiled with an unsupported
// toolchain" are seen as the program sees them. Exit status 0 only when the
// kernel ran and wrote what it should.
#include <cstdio>

__global__ void mark(int *out) { *out = 42; }

int main() {
  int *d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(int));
  if (e != cudaSuccess) {
    printf("malloc: %s\n", cudaGetErrorString(e));
    return 1;
  }
  mark<<<1, 1>>>(d);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  printf("launch: %s\n", cudaGetErrorString(launch));
  printf("sync: %s\n", cudaGetErrorString(sync));
  int h = 0;
  if (launch == cudaSuccess && sync == cudaSuccess) cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("result: %d\n", h);
  return launch == cudaSuccess && sync == cudaSuccess && h == 42 ? 0 : 1;
}
