/* A stand-in for libcudart, for testing pin_memory on a machine without a
 * GPU: host allocations are page-aligned malloc memory, counted so that a
 * test can check every buffer came from here and went back, and a small
 * model of asynchronous copies and events lets a test check that a pinned
 * buffer is never reused while a copy from it is in flight.
 *
 * The model: the test calls fake_copy(src, n, stream) where a consumer
 * would call x.cuda(non_blocking=True); the copy stays in flight until an
 * event recorded on its stream after it (stream 0, the legacy default
 * stream, covers every stream) completes, which is FAKE_CUDA_EVENT_US
 * microseconds (default 2000) after the record: cudaEventQuery says
 * cudaErrorNotReady before, cudaEventSynchronize sleeps until then. A copy
 * from memory that is still the source of a copy in flight counts as a
 * reuse before completion; a copy whose source bytes changed before it
 * completed counts as corrupted. FAKE_CUDA_DEVICES (default 1) sets the
 * devices; each thread has its own current device (0 until it sets one),
 * and the calls that need a context mark one made on the thread's current
 * device, as the real runtime does. FAKE_CUDA_LOG names a file that gets
 * every call in order, one line each.
 *
 * Only the entry points stoker resolves are provided, with stoker's own
 * types (src/bench/cuda_abi.h, which the header check compares with
 * cuda_runtime_api.h): each is declared from that list first, so a
 * definition here of another type does not compile. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/bench/cuda_abi.h"

#define X(name, type, required) __typeof__(*(type)0) name;
CU_FUNCS(X)
#undef X

enum {
  FAKE_ERROR_INVALID_VALUE = 1,     /* cudaErrorInvalidValue */
  FAKE_ERROR_MEMORY_ALLOCATION = 2, /* cudaErrorMemoryAllocation */
  FAKE_ERROR_INVALID_DEVICE = 101,  /* cudaErrorInvalidDevice */
  FAKE_MAX_COPIES = 1 << 14,
  FAKE_MAX_DEVICES = 8,
};

struct CUevent_st {
  int dev;
  int recorded;
  uintptr_t stream;
  long seq;        /* the call count at its record */
  double ready_at; /* seconds (CLOCK_MONOTONIC) */
};

static struct copy {
  const unsigned char *src;
  size_t n;
  uint64_t hash;
  uintptr_t stream;
  long seq;
  int done;
} copies[FAKE_MAX_COPIES];

static struct buf {
  void *p;
  size_t n;
} bufs[1024]; /* live host allocations, for the check at free */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long allocs, frees, seq, ncopies, reuses, corrupt, completed, not_ready, waits;
static long allocs_on[FAKE_MAX_DEVICES];
static int contexts; /* bit d: a context was made on device d */
static __thread int cur_dev;
static FILE *logf;
static int log_opened;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int ndev(void) {
  const char *s = getenv("FAKE_CUDA_DEVICES");
  int n = s ? atoi(s) : 1;
  return n < 1 ? 1 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n;
}

static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* With mu held. */
static void say(const char *fmt, ...) {
  if (!log_opened) {
    log_opened = 1;
    const char *path = getenv("FAKE_CUDA_LOG");
    if (path) logf = fopen(path, "a");
  }
  seq++;
  if (!logf) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(logf, "%ld ", seq);
  vfprintf(logf, fmt, ap);
  fputc('\n', logf);
  fflush(logf);
  va_end(ap);
}

/* A call that needs a context makes one on the thread's current device. */
static void need_context(void) {
  if (!(contexts & (1 << cur_dev))) {
    contexts |= 1 << cur_dev;
    say("context %d", cur_dev);
  }
}

/* Complete the copies in flight that ev (recorded, ready) covers. */
static void complete(const struct CUevent_st *ev) {
  for (long i = 0; i < ncopies && i < FAKE_MAX_COPIES; i++) {
    struct copy *c = &copies[i];
    if (c->done || c->seq > ev->seq || (ev->stream && c->stream != ev->stream)) continue;
    c->done = 1;
    completed++;
    if (fnv(c->src, c->n) != c->hash) {
      corrupt++;
      say("corrupt %p", (const void *)c->src);
    }
    say("complete %p %p", (const void *)c->src, (const void *)ev);
  }
}

cu_err cudaMallocHost(void **p, size_t size) {
  if (posix_memalign(p, 4096, size ? size : 1)) return FAKE_ERROR_MEMORY_ALLOCATION;
  pthread_mutex_lock(&mu);
  need_context();
  allocs++;
  allocs_on[cur_dev]++;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (!bufs[i].p) {
      bufs[i] = (struct buf){*p, size};
      break;
    }
  say("hostalloc %p %d", *p, cur_dev);
  pthread_mutex_unlock(&mu);
  return CU_SUCCESS;
}
cu_err cudaFreeHost(void *p) {
  pthread_mutex_lock(&mu);
  size_t size = 0;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i].p == p) {
      size = bufs[i].n;
      bufs[i].p = NULL;
    }
  const unsigned char *b = p;
  for (long i = 0; i < ncopies && i < FAKE_MAX_COPIES; i++)
    if (!copies[i].done && b <= copies[i].src && copies[i].src < b + size) {
      reuses++; /* freed while a copy reads it */
      say("free-in-flight %p", p);
    }
  frees++;
  say("hostfree %p", p);
  pthread_mutex_unlock(&mu);
  free(p);
  return CU_SUCCESS;
}
cu_err cudaMalloc(void **p, size_t size) {
  pthread_mutex_lock(&mu);
  need_context();
  pthread_mutex_unlock(&mu);
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
cu_err cudaDeviceSynchronize(void) {
  pthread_mutex_lock(&mu);
  need_context();
  struct CUevent_st all = {.dev = cur_dev, .recorded = 1, .stream = 0, .seq = seq};
  say("devicesync");
  complete(&all);
  pthread_mutex_unlock(&mu);
  return CU_SUCCESS;
}
cu_err cudaGetDeviceCount(int *n) {
  *n = ndev();
  return CU_SUCCESS;
}
cu_err cudaGetDevice(int *d) {
  *d = cur_dev;
  return CU_SUCCESS;
}
cu_err cudaSetDevice(int d) {
  if (d < 0 || d >= ndev()) return FAKE_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  cur_dev = d;
  say("setdevice %d", d);
  need_context(); /* CUDA 12: cudaSetDevice initializes the device's context */
  pthread_mutex_unlock(&mu);
  return CU_SUCCESS;
}
cu_err cudaEventCreateWithFlags(cu_event *ev, unsigned flags) {
  (void)flags;
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (!e) return FAKE_ERROR_MEMORY_ALLOCATION;
  pthread_mutex_lock(&mu);
  need_context();
  e->dev = cur_dev;
  say("eventcreate %p %d", (void *)e, cur_dev);
  pthread_mutex_unlock(&mu);
  *ev = e;
  return CU_SUCCESS;
}
cu_err cudaEventRecord(cu_event ev, cu_stream stream) {
  if (!ev) return FAKE_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  cu_err rc = CU_SUCCESS;
  if (ev->dev != cur_dev) { /* the runtime refuses an event of another device */
    say("record-wrong-device %p", (void *)ev);
    rc = FAKE_ERROR_INVALID_VALUE;
  } else {
    const char *us = getenv("FAKE_CUDA_EVENT_US");
    ev->recorded = 1;
    ev->stream = (uintptr_t)stream;
    ev->seq = seq + 1;
    ev->ready_at = now_s() + (us ? atof(us) : 2000.0) / 1e6;
    say("record %p %p %d", (void *)ev, (void *)stream, cur_dev);
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
cu_err cudaEventQuery(cu_event ev) {
  if (!ev) return FAKE_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  cu_err rc = CU_SUCCESS;
  if (ev->recorded && now_s() < ev->ready_at) {
    not_ready++;
    say("query %p not-ready", (void *)ev);
    rc = CU_ERROR_NOT_READY;
  } else {
    say("query %p done", (void *)ev);
    if (ev->recorded) complete(ev);
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
cu_err cudaEventSynchronize(cu_event ev) {
  if (!ev) return FAKE_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  double wait = ev->recorded ? ev->ready_at - now_s() : 0;
  waits++;
  pthread_mutex_unlock(&mu);
  if (wait > 0) {
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&mu);
  say("sync %p", (void *)ev);
  if (ev->recorded) complete(ev);
  pthread_mutex_unlock(&mu);
  return CU_SUCCESS;
}
cu_err cudaEventDestroy(cu_event ev) {
  pthread_mutex_lock(&mu);
  say("eventdestroy %p", (void *)ev);
  pthread_mutex_unlock(&mu);
  free(ev);
  return CU_SUCCESS;
}
const char *cudaGetErrorString(cu_err e) { return e ? "fake error" : "no error"; }

/* The consumer's side: an asynchronous copy of n bytes from src, issued on
 * stream, now. */
void fake_copy(const void *src, size_t n, uintptr_t stream) {
  pthread_mutex_lock(&mu);
  const unsigned char *s = src;
  for (long i = 0; i < ncopies && i < FAKE_MAX_COPIES; i++)
    if (!copies[i].done && copies[i].src < s + n && s < copies[i].src + copies[i].n) {
      reuses++;
      say("reuse-in-flight %p", src);
    }
  if (ncopies < FAKE_MAX_COPIES)
    copies[ncopies] = (struct copy){s, n, fnv(s, n), stream, seq + 1, 0};
  ncopies++;
  say("copy %p %zu %p", src, n, (void *)stream);
  pthread_mutex_unlock(&mu);
}

/* 1 when p lies in a live host allocation made here. */
int fake_is_pinned(const void *p) {
  pthread_mutex_lock(&mu);
  int in = 0;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && !in; i++)
    in = bufs[i].p && (const char *)bufs[i].p <= (const char *)p &&
         (const char *)p < (const char *)bufs[i].p + bufs[i].n;
  pthread_mutex_unlock(&mu);
  return in;
}

static long get(const long *v) {
  pthread_mutex_lock(&mu);
  long x = *v;
  pthread_mutex_unlock(&mu);
  return x;
}
long fake_host_allocs(void) { return get(&allocs); }
long fake_host_frees(void) { return get(&frees); }
long fake_host_allocs_on(int dev) {
  return dev >= 0 && dev < FAKE_MAX_DEVICES ? get(&allocs_on[dev]) : -1;
}
long fake_contexts(void) {
  pthread_mutex_lock(&mu);
  long x = contexts;
  pthread_mutex_unlock(&mu);
  return x;
}
long fake_copies(void) { return get(&ncopies); }
long fake_copies_completed(void) { return get(&completed); }
long fake_reuses_in_flight(void) { return get(&reuses); }
long fake_corrupt(void) { return get(&corrupt); }
long fake_not_ready(void) { return get(&not_ready); }
long fake_waits(void) { return get(&waits); }
