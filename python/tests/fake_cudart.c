/* A stand-in for libcudart with one "device", for testing pin_memory on a
 * machine without a GPU: host allocations are page-aligned malloc memory,
 * counted so that a test can check every buffer came from here and went
 * back. Only the entry points stoker resolves are provided. */
#include <stdlib.h>
#include <string.h>

static long allocs, frees;

int cudaMallocHost(void **p, size_t size) {
  if (posix_memalign(p, 4096, size ? size : 1)) return 2;
  __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaFreeHost(void *p) {
  free(p);
  __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaMalloc(void **p, size_t size) { return (*p = malloc(size ? size : 1)) ? 0 : 2; }
int cudaFree(void *p) {
  free(p);
  return 0;
}
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
  (void)kind;
  memcpy(dst, src, n);
  return 0;
}
int cudaDeviceSynchronize(void) { return 0; }
int cudaGetDeviceCount(int *n) {
  *n = 1;
  return 0;
}
const char *cudaGetErrorString(int e) { return e ? "fake error" : "no error"; }
long fake_host_allocs(void) { return __atomic_load_n(&allocs, __ATOMIC_RELAXED); }
long fake_host_frees(void) { return __atomic_load_n(&frees, __ATOMIC_RELAXED); }
