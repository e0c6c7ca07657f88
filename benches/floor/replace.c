/* The file-system floor of an atomic replacement (BENCHMARKS.md, issue 33):
   what any tool that replaces a file (old file or complete new one at every
   moment) must do, with no ELF work, no checks and no journal.
     replace small DIR THREADS  every regular file of DIR: read it whole,
                                write it plus 64 bytes to a new file beside
                                it (O_EXCL), give it the mode, rename it over
                                the original; THREADS threads share the files.
     replace large FILE         copy_file_range FILE to a new file beside it,
                                64 bytes appended, renameat2(RENAME_EXCHANGE)
                                and unlink of the old file (what
                                auto-add-driver-runpath does for 16 MiB and up).
   cc -O2 -pthread -o replace replace.c */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char **names;
static int count;
static const char *dir;
static atomic_int next;

static int one_small(const char *name) {
  char path[4096], temp[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(temp, sizeof temp, "%s/.%s.floor.tmp", dir, name);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  char *buf = calloc(1, st.st_size + 64);
  if (!buf || pread(fd, buf, st.st_size, 0) != st.st_size) return -1;
  close(fd);
  int out = open(temp, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (out < 0 || pwrite(out, buf, st.st_size + 64, 0) != st.st_size + 64) return -1;
  if (fchmod(out, st.st_mode & 07777) != 0 || close(out) != 0) return -1;
  free(buf);
  return rename(temp, path);
}

static void *worker(void *arg) {
  (void)arg;
  for (int i; (i = atomic_fetch_add(&next, 1)) < count;)
    if (one_small(names[i]) != 0) { perror(names[i]); exit(1); }
  return NULL;
}

static int large(const char *path) {
  char temp[4096];
  snprintf(temp, sizeof temp, "%s.floor.tmp", path);
  int in = open(path, O_RDONLY);
  struct stat st;
  if (in < 0 || fstat(in, &st) != 0) return -1;
  int out = open(temp, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (out < 0) return -1;
  for (off_t left = st.st_size; left > 0;) {
    ssize_t n = copy_file_range(in, NULL, out, NULL, left, 0);
    if (n <= 0) return -1;
    left -= n;
  }
  char tail[64] = {0};
  if (pwrite(out, tail, sizeof tail, st.st_size) != sizeof tail) return -1;
  if (fchmod(out, st.st_mode & 07777) != 0 || close(out) != 0 || close(in) != 0) return -1;
  if (renameat2(AT_FDCWD, temp, AT_FDCWD, path, RENAME_EXCHANGE) != 0) return -1;
  return unlink(temp);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "large") == 0) {
    if (large(argv[2]) != 0) { perror(argv[2]); return 1; }
    return 0;
  }
  if (argc != 4 || strcmp(argv[1], "small") != 0) {
    fprintf(stderr, "usage: %s small DIR THREADS | large FILE\n", argv[0]);
    return 2;
  }
  dir = argv[2];
  int threads = atoi(argv[3]);
  DIR *d = opendir(dir);
  if (!d) { perror(dir); return 1; }
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_type != DT_REG || e->d_name[0] == '.') continue;
    names = realloc(names, sizeof *names * (count + 1));
    names[count++] = strdup(e->d_name);
  }
  closedir(d);
  pthread_t t[64];
  if (threads < 1 || threads > 64) threads = 1;
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  return 0;
}
