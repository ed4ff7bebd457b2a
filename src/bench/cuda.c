/* The CUDA runtime through dlopen: the few entry points stoker needs for
 * pinned host buffers and for timing host-to-device copies, declared in
 * cuda_abi.h (checked against cuda_runtime_api.h by `make check-headers`
 * where the toolkit is installed) and resolved by name, so that no build
 * depends on CUDA being installed. */
#include "cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

struct stk__cuda {
  void *lib;
  int ndev;
  char path[64];
  char name[256];
#define X(fn, type, required) __typeof__(type) fn;
  CU_FUNCS(X)
#undef X
};

static const char *const lib_names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                        "libcudart.so.11.0"};

static const char *cu_msg(const struct stk__cuda *c, cu_err e) {
  const char *s = c->cudaGetErrorString ? c->cudaGetErrorString(e) : NULL;
  return s ? s : "unknown CUDA error";
}

/* Resolve every entry point; the name of the first required one missing,
 * or NULL when all are there. */
static const char *resolve(struct stk__cuda *c) {
  /* Function pointers travel through void * here, as dlsym requires. */
#define X(fn, type, required)            \
  *(void **)&c->fn = dlsym(c->lib, #fn); \
  if ((required) && !c->fn) return #fn;
  CU_FUNCS(X)
#undef X
  /* CUDA 12 gives its own cudaDeviceProp layout to the _v2 name (the
   * plain one keeps CUDA 11's); CUDA 13 has the plain name only. Both
   * begin with the name, all stoker reads. */
  void *v2 = dlsym(c->lib, "cudaGetDeviceProperties_v2");
  if (v2) *(void **)&c->cudaGetDeviceProperties = v2;
  return NULL;
}

int stk__cuda_open(struct stk__cuda **out, char *err) {
  *out = NULL;
  struct stk__cuda *c = calloc(1, sizeof *c);
  if (!c) return stk__errf(err, STK_ENOMEM, "out of memory");
  /* A runtime already in the process first (torch's, when torch is
   * imported): one runtime's per-thread device is then the one torch sets,
   * and its streams and events are that runtime's own. */
  for (int pass = 0; pass < 2 && !c->lib; pass++)
    for (size_t i = 0; i < STK__ARRAY_LEN(lib_names) && !c->lib; i++)
      if ((c->lib = dlopen(lib_names[i], RTLD_NOW | RTLD_LOCAL | (pass ? 0 : RTLD_NOLOAD))))
        snprintf(c->path, sizeof c->path, "%s", lib_names[i]);
  if (!c->lib) {
    free(c);
    return stk__errf(err, STK_ENOTSUP,
                     "libcudart not found (tried libcudart.so, .so.13, .so.12, .so.11.0)");
  }
  const char *missing = resolve(c);
  if (missing) {
    stk__errf(err, STK_ENOTSUP, "%s lacks %s", c->path, missing);
    free(c);
    return STK_ENOTSUP;
  }
  int n = 0;
  cu_err e = c->cudaGetDeviceCount(&n);
  if (e != CU_SUCCESS || n < 1) {
    stk__errf(err, STK_ENOTSUP, "no CUDA device: %s",
              e ? cu_msg(c, e) : "cudaGetDeviceCount found none");
    free(c);
    return STK_ENOTSUP;
  }
  c->ndev = n;
  if (c->cudaGetDeviceProperties) {
    struct cu_device_prop *prop = calloc(1, sizeof *prop);
    if (prop && c->cudaGetDeviceProperties(prop, 0) == CU_SUCCESS)
      snprintf(c->name, sizeof c->name, "%.255s", prop->name);
    free(prop);
  }
  *out = c;
  return 0;
}

void stk__cuda_close(struct stk__cuda *c) {
  /* The handle stays loaded: the runtime registers exit handlers and
   * threads that must not outlive its code. */
  free(c);
}

const char *stk__cuda_lib_path(const struct stk__cuda *c) { return c->path; }
int stk__cuda_device_count(const struct stk__cuda *c) { return c->ndev; }

int stk__cuda_use_device(struct stk__cuda *c, int dev, char *err) {
  int cur = -1;
  cu_err e = c->cudaGetDevice(&cur);
  if (e == CU_SUCCESS && cur == dev) return 0;
  if ((e = c->cudaSetDevice(dev)) != CU_SUCCESS)
    return stk__errf(err, STK_EIO, "cudaSetDevice(%d): %s", dev, cu_msg(c, e));
  return 0;
}

int stk__cuda_event_new(struct stk__cuda *c, cu_event *ev, char *err) {
  /* Blocking sync: the thread that waits sleeps instead of spinning on a
   * core the decode workers need; no timing, the cheapest event. */
  cu_err e = c->cudaEventCreateWithFlags(ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC);
  if (e != CU_SUCCESS) return stk__errf(err, STK_EIO, "cudaEventCreateWithFlags: %s", cu_msg(c, e));
  return 0;
}

int stk__cuda_event_record(struct stk__cuda *c, cu_event ev, void *stream, char *err) {
  cu_err e = c->cudaEventRecord(ev, (cu_stream)stream);
  if (e != CU_SUCCESS)
    return stk__errf(err, STK_EIO, "cudaEventRecord on stream %p: %s", stream, cu_msg(c, e));
  return 0;
}

int stk__cuda_event_wait(struct stk__cuda *c, cu_event ev, char *err) {
  cu_err e = c->cudaEventQuery(ev);
  if (e == CU_SUCCESS) return 0;
  if (e == CU_ERROR_NOT_READY) e = c->cudaEventSynchronize(ev);
  if (e != CU_SUCCESS) return stk__errf(err, STK_EIO, "waiting for a CUDA event: %s", cu_msg(c, e));
  return 0;
}

void stk__cuda_event_free(struct stk__cuda *c, cu_event ev) {
  if (ev) c->cudaEventDestroy(ev);
}

int stk__cuda_device_sync(struct stk__cuda *c, char *err) {
  cu_err e = c->cudaDeviceSynchronize();
  if (e != CU_SUCCESS) return stk__errf(err, STK_EIO, "cudaDeviceSynchronize: %s", cu_msg(c, e));
  return 0;
}
const char *stk__cuda_device_name(const struct stk__cuda *c) { return c->name; }

void *stk__cuda_host_alloc(struct stk__cuda *c, size_t size, char *err) {
  void *p = NULL;
  cu_err e = c->cudaMallocHost(&p, size ? size : 1);
  if (e != CU_SUCCESS || !p) {
    stk__errf(err, STK_ENOMEM, "cudaMallocHost(%zu): %s", size, cu_msg(c, e));
    return NULL;
  }
  if ((uintptr_t)p % 4096) { /* page-aligned in practice; callers rely on it */
    c->cudaFreeHost(p);
    stk__errf(err, STK_ENOTSUP, "cudaMallocHost returned memory not aligned to 4096");
    return NULL;
  }
  return p;
}

void stk__cuda_host_free(struct stk__cuda *c, void *p) {
  if (p) c->cudaFreeHost(p);
}

void *stk__cuda_alloc_hook(void *ctx, size_t size) { return stk__cuda_host_alloc(ctx, size, NULL); }

void stk__cuda_free_hook(void *ctx, void *p, size_t size) {
  (void)size;
  stk__cuda_host_free(ctx, p);
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int stk__cuda_h2d_bw(struct stk__cuda *c, size_t bytes, int reps, double *bps, char *err) {
  if (reps < 1 || reps > 64 || bytes == 0) return stk__errf(err, STK_EINVAL, "bad H2D parameters");
  void *host = stk__cuda_host_alloc(c, bytes, err), *dev = NULL;
  if (!host) return STK_ENOMEM;
  int rc = 0;
  cu_err e = c->cudaMalloc(&dev, bytes);
  if (e != CU_SUCCESS) {
    rc = stk__errf(err, STK_ENOMEM, "cudaMalloc(%zu): %s", bytes, cu_msg(c, e));
    goto out;
  }
  memset(host, 0x5a, bytes); /* touch every page before timing */
  double t[64];
  for (int i = -1; i < reps && !rc; i++) {
    uint64_t t0 = stk_now_ns();
    if ((e = c->cudaMemcpy(dev, host, bytes, CU_MEMCPY_HOST_TO_DEVICE)) != CU_SUCCESS ||
        (e = c->cudaDeviceSynchronize()) != CU_SUCCESS)
      rc = stk__errf(err, STK_EIO, "cudaMemcpy host to device: %s", cu_msg(c, e));
    else if (i >= 0)
      t[i] = (double)(stk_now_ns() - t0) / 1e9;
  }
  if (!rc) {
    qsort(t, (size_t)reps, sizeof t[0], cmp_dbl);
    *bps = t[reps / 2] > 0 ? (double)bytes / t[reps / 2] : 0;
    if (!(*bps > 0)) rc = stk__errf(err, STK_EIO, "H2D copies took no measurable time");
  }
out:
  if (dev) c->cudaFree(dev);
  stk__cuda_host_free(c, host);
  return rc;
}
