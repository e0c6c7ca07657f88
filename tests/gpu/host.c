/* dlopen host for the GPU validation: loads the library named in argv[1] and
   calls its run_vadd(); the loader resolves the library's own NEEDED entries
   and its CUDA runtime's dlopen of libcuda.so.1 through their RUNPATHs. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    printf("dlopen failed: %s\n", dlerror());
    return 1;
  }
  int (*run)(void) = (int (*)(void))dlsym(h, "run_vadd");
  if (!run) {
    printf("dlsym failed: %s\n", dlerror());
    return 1;
  }
  return run();
}
