/* The CUDA runtime's C ABI as stoker declares it, so that nothing needs
 * cuda_runtime_api.h to build: the types and constants stoker passes to
 * libcudart and the entry points it looks up with dlsym (CU_FUNCS).
 * src/bench/cuda.c calls them, python/tests/fake_cudart.c implements them,
 * and tests/tools/check-headers.c compares every line here with the
 * toolkit's cuda_runtime_api.h where one is installed (`make
 * check-headers`; `make` runs it too), so that a wrong type fails the
 * build instead of crashing on a GPU machine. A new entry point or
 * constant is one line in its list below and is checked from then on. */
#ifndef STOKER_BENCH_CUDA_ABI_H
#define STOKER_BENCH_CUDA_ABI_H

#include <stddef.h>

/* cudaError_t and enum cudaMemcpyKind have no negative value, so GCC and
 * clang give them the type unsigned int: declared so, an entry point's
 * type here is exactly the header's, which the check compares with
 * __builtin_types_compatible_p. */
typedef unsigned cu_err;
typedef unsigned cu_memcpy_kind;

/* cudaStream_t and cudaEvent_t: pointers to the driver's opaque structs,
 * named by the same tags, so a stream torch hands out (its cuda_stream
 * integer) is passed on as it is. */
typedef struct CUstream_st *cu_stream;
typedef struct CUevent_st *cu_event;

/* Constants: stoker's name, the header's name, value. */
#define CU_CONSTS(C)                                     \
  C(CU_SUCCESS, cudaSuccess, 0)                          \
  C(CU_ERROR_NOT_READY, cudaErrorNotReady, 600)          \
  C(CU_MEMCPY_HOST_TO_DEVICE, cudaMemcpyHostToDevice, 1) \
  C(CU_EVENT_BLOCKING_SYNC, cudaEventBlockingSync, 1)    \
  C(CU_EVENT_DISABLE_TIMING, cudaEventDisableTiming, 2)

enum {
#define C(ours, theirs, value) ours = value,
  CU_CONSTS(C)
#undef C
};

/* struct cudaDeviceProp begins with char name[256] in every CUDA version;
 * its size changes between versions, so stoker passes a buffer at least as
 * large as any (the check asserts the header's fits) and reads the name. */
struct cu_device_prop {
  char name[256];
  char rest[16384 - 256];
};

/* In the check (STK_CU_ABI_CHECK, defined after the header is included)
 * the entry points take the header's struct; the check compares the two
 * structs' layout instead. */
#ifdef STK_CU_ABI_CHECK
typedef struct cudaDeviceProp cu_device_prop_t;
#else
typedef struct cu_device_prop cu_device_prop_t;
#endif

/* Entry points: name, type, required (0: optional, its use is skipped
 * when the library lacks it). cudaGetDeviceProperties is looked up as
 * cudaGetDeviceProperties_v2 first (CUDA 12's name for the same call). */
#define CU_FUNCS(X)                                                          \
  X(cudaMallocHost, cu_err (*)(void **, size_t), 1)                          \
  X(cudaFreeHost, cu_err (*)(void *), 1)                                     \
  X(cudaMalloc, cu_err (*)(void **, size_t), 1)                              \
  X(cudaFree, cu_err (*)(void *), 1)                                         \
  X(cudaMemcpy, cu_err (*)(void *, const void *, size_t, cu_memcpy_kind), 1) \
  X(cudaDeviceSynchronize, cu_err (*)(void), 1)                              \
  X(cudaGetDeviceCount, cu_err (*)(int *), 1)                                \
  X(cudaGetErrorString, const char *(*)(cu_err), 1)                          \
  X(cudaGetDeviceProperties, cu_err (*)(cu_device_prop_t *, int), 0)         \
  X(cudaGetDevice, cu_err (*)(int *), 1)                                     \
  X(cudaSetDevice, cu_err (*)(int), 1)                                       \
  X(cudaEventCreateWithFlags, cu_err (*)(cu_event *, unsigned), 1)           \
  X(cudaEventRecord, cu_err (*)(cu_event, cu_stream), 1)                     \
  X(cudaEventQuery, cu_err (*)(cu_event), 1)                                 \
  X(cudaEventSynchronize, cu_err (*)(cu_event), 1)                           \
  X(cudaEventDestroy, cu_err (*)(cu_event), 1)

#endif
