/* Issue 30: the rate at which one or N threads read a cached file by mmap, mmap + MADV_DONTNEED, pread.
   gcc -O2 -pthread touch-rate.c -o touch-rate; ./touch-rate FILE THREADS CHUNK_KIB (BENCHMARKS.md). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <time.h>
static int fd, mode; static size_t n; static char*m; static int T; static size_t CH;
static unsigned magic=0xBA55ED50;
static void*work(void*a){long k=(long)a; size_t per=(n/T)&~4095UL; size_t s=k*per, e=k==T-1?n:s+per; long hits=0;
 char*b=malloc(CH);
 for(size_t o=s;o<e;o+=CH){size_t l=e-o<CH?e-o:CH;
  if(mode==0){ if(memmem(m+o,l,&magic,4))hits++; madvise(m+o,l,MADV_DONTNEED);} 
  else if(mode==1){ if(memmem(m+o,l,&magic,4))hits++; }
  else { ssize_t r=pread(fd,b,l,o); if(r>0&&memmem(b,r,&magic,4))hits++; } }
 free(b); return (void*)hits;}
static double wall(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){fd=open(v[1],O_RDONLY);struct stat st;fstat(fd,&st);n=st.st_size;T=atoi(v[2]);CH=atoi(v[3])<<10;
 const char*names[]={"mmap+dontneed","mmap keep","pread"};
 for(int rep=0;rep<2;rep++) for(mode=0;mode<3;mode++){ struct rusage r0,r1; getrusage(RUSAGE_SELF,&r0); double w=wall();
  m=mmap(0,n,PROT_READ,MAP_SHARED,fd,0); pthread_t th[64]; for(long k=0;k<T;k++)pthread_create(&th[k],0,work,(void*)k); for(int k=0;k<T;k++)pthread_join(th[k],0); munmap(m,n);
  w=wall()-w; getrusage(RUSAGE_SELF,&r1);
  double cpu=(r1.ru_utime.tv_sec-r0.ru_utime.tv_sec)+(r1.ru_stime.tv_sec-r0.ru_stime.tv_sec)+((r1.ru_utime.tv_usec-r0.ru_utime.tv_usec)+(r1.ru_stime.tv_usec-r0.ru_stime.tv_usec))*1e-6;
  printf("%d threads %zuKB %-14s wall %.1f ms cpu %.1f ms\n",T,CH>>10,names[mode],w*1e3,cpu*1e3);}
}
