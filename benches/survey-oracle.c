/* The loader oracle of benches/survey.sh: what glibc itself would search when
 * CALLER calls dlopen(NAME) with a bare name.
 *
 *   survey-oracle OUT CALLER
 *
 * Loads CALLER with dlopen(CALLER, RTLD_LAZY) and writes to OUT (not stdout:
 * a library's constructor may print) one line per folder of glibc's search
 * list for lookups made *from* CALLER (dlinfo RTLD_DI_SERINFO: its RPATH chain
 * when it has no RUNPATH, LD_LIBRARY_PATH, its RUNPATH with $ORIGIN expanded,
 * the default folders), after the same list for the program itself
 * (dlopen(NULL)), which holds only LD_LIBRARY_PATH and the defaults, so that
 * survey.py can cut the caller's own part out. glibc uses the RUNPATH of the
 * object that calls dlopen, so this is the list the caller's own dlopen
 * searches (ld.so.cache aside: it is not a folder, and a Nix store file's
 * glibc has none). Lines: "main\tDIR", "caller\tDIR", "error\tTEXT", "end".
 * Exits with _exit(0) so that no destructor of CALLER runs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int dump(FILE *out, const char *tag, void *handle) {
  Dl_serinfo size;
  if (dlinfo(handle, RTLD_DI_SERINFOSIZE, &size) != 0) return -1;
  Dl_serinfo *info = malloc(size.dls_size);
  if (info == NULL) return -1;
  if (dlinfo(handle, RTLD_DI_SERINFOSIZE, info) != 0 ||
      dlinfo(handle, RTLD_DI_SERINFO, info) != 0) {
    free(info);
    return -1;
  }
  for (unsigned int i = 0; i < info->dls_cnt; i++)
    fprintf(out, "%s\t%s\n", tag, info->dls_serpath[i].dls_name);
  free(info);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s OUT CALLER\n", argv[0]);
    return 2;
  }
  FILE *out = fopen(argv[1], "w");
  if (out == NULL) {
    perror(argv[1]);
    return 2;
  }
  void *self = dlopen(NULL, RTLD_LAZY);
  if (self == NULL || dump(out, "main", self) != 0) {
    fprintf(out, "error\tdlinfo of the program: %s\n", dlerror());
  } else {
    fflush(out);
    void *caller = dlopen(argv[2], RTLD_LAZY | RTLD_LOCAL);
    if (caller == NULL)
      fprintf(out, "error\t%s\n", dlerror());
    else if (dump(out, "caller", caller) != 0)
      fprintf(out, "error\tdlinfo of the caller: %s\n", dlerror());
  }
  fprintf(out, "end\n");
  fclose(out);
  _exit(0);
}
