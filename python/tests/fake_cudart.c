/* A stand-in for libcudart with one "device", for testing pin_memory on a
 * machine without a GPU: host allocations are page-aligned malloc memory,
 * counted so that a test can check every buffer came from here and went
 * back. Only the entry points stoker resolves are provided, with stoker's
 * own types (src/bench/cuda_abi.h, which the header check compares with
 * cuda_runtime_api.h): each is declared from that list first, so a
 * definition here of another type does not compile. */
#include <stdlib.h>
#include <string.h>

#include "../../src/bench/cuda_abi.h"

#define X(name, type, required) __typeof__(*(type)0) name;
CU_FUNCS(X)
#undef X

enum { FAKE_ERROR_MEMORY_ALLOCATION = 2 }; /* cudaErrorMemoryAllocation */

static long allocs, frees;

cu_err cudaMallocHost(void **p, size_t size) {
  if (posix_memalign(p, 4096, size ? size : 1)) return FAKE_ERROR_MEMORY_ALLOCATION;
  __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  return CU_SUCCESS;
}
cu_err cudaFreeHost(void *p) {
  free(p);
  __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
  return CU_SUCCESS;
}
cu_err cudaMalloc(void **p, size_t size) {
  return (*p = malloc(size ? size : 1)) ? CU_SUCCESS : FAKE_ERROR_MEMORY_ALLOCATION;
}
cu_err cudaFree(void *p) {
  free(p);
  return CU_SUCCESS;
}
cu_err cudaMemcpy(void *dst, const void *src, size_t n, cu_memcpy_kind kind) {
  (void)kind;
  memcpy(dst, src, n);
  return CU_SUCCESS;
}
cu_err cudaDeviceSynchronize(void) { return CU_SUCCESS; }
cu_err cudaGetDeviceCount(int *n) {
  *n = 1;
  return CU_SUCCESS;
}
const char *cudaGetErrorString(cu_err e) { return e ? "fake error" : "no error"; }
long fake_host_allocs(void) { return __atomic_load_n(&allocs, __ATOMIC_RELAXED); }
long fake_host_frees(void) { return __atomic_load_n(&frees, __ATOMIC_RELAXED); }
