// GPU validation program (tests/gpu/run.sh): adds two vectors on the GPU and
// checks the result on the host. Built as an executable (default) or, with
// -DVADD_LIBRARY, as a library exporting run_vadd() for a dlopen test.
#include <cstdio>

__global__ void vadd(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

static int fail(cudaError_t e) {
  printf("vadd error: %s\n", cudaGetErrorString(e));
  return 1;
}

extern "C" int run_vadd(void) {
  const int n = 1 << 20;
  static float a[1 << 20], b[1 << 20], c[1 << 20];
  for (int i = 0; i < n; i++) {
    a[i] = i;
    b[i] = 2 * i;
  }
  float *da, *db, *dc;
  cudaError_t e = cudaMalloc(&da, sizeof a);
  if (e != cudaSuccess) return fail(e);
  cudaMalloc(&db, sizeof b);
  cudaMalloc(&dc, sizeof c);
  cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
  vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return fail(e);
  cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += c[i];
  double want = 3.0 * (double)n * (n - 1) / 2;
  printf("vadd %s: sum %.0f (want %.0f)\n", sum == want ? "ok" : "WRONG", sum, want);
  return sum == want ? 0 : 1;
}

#ifndef VADD_LIBRARY
int main() { return run_vadd(); }
#endif
