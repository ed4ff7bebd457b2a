/* The CUDA runtime, loaded at run time with dlopen so that stoker builds,
 * tests and runs on machines without it: pinned (page-locked) host memory
 * for batch buffers and the host-to-device copy bandwidth that `stoker
 * doctor` reports. Nothing here links against CUDA. */
#ifndef STOKER_BENCH_CUDA_H
#define STOKER_BENCH_CUDA_H

#include <stddef.h>

#include "../base/base.h"
#include "cuda_abi.h"

struct stk__cuda;

/* Load libcudart (libcudart.so, .so.13, .so.12, .so.11.0; the first that
 * dlopens and exports every entry point needed) and check that it sees at
 * least one device. *out is owned by the caller and released with
 * stk__cuda_close. Fails with STK_ENOTSUP and a sentence in err
 * (STK_ERRMSG_MAX bytes, may be NULL) when no library is found ("libcudart
 * not found ..."), when one lacks an entry point, or when it reports no
 * usable device (the runtime's own message is quoted). */
int stk__cuda_open(struct stk__cuda **out, char *err);

/* Unload. The library handle is kept open (the CUDA runtime does not
 * support being unloaded mid-process); c may be NULL. */
void stk__cuda_close(struct stk__cuda *c);

/* Path of the libcudart that was loaded and the name of device 0 (both
 * owned by c, valid until stk__cuda_close). */
const char *stk__cuda_lib_path(const struct stk__cuda *c);
const char *stk__cuda_device_name(const struct stk__cuda *c);

/* Devices the runtime sees (at least 1 once open). */
int stk__cuda_device_count(const struct stk__cuda *c);

/* Make dev the calling thread's current device (cudaSetDevice), unless it
 * already is: the runtime makes its context on the current device, device
 * 0 when a thread never chose one. Not undone afterwards, since going back
 * to a device the thread never used would make a context there. */
int stk__cuda_use_device(struct stk__cuda *c, int dev, char *err);

/* Events, for fencing host buffers against asynchronous copies: new makes
 * one (no timing, blocking sync) on the calling thread's current device;
 * record places it on stream (a cudaStream_t of that device; NULL is the
 * legacy default stream); wait returns once the work before the record has
 * completed (cudaEventQuery, then cudaEventSynchronize if not yet);
 * free destroys it (ev may be NULL). STK_EIO with the runtime's message. */
int stk__cuda_event_new(struct stk__cuda *c, cu_event *ev, char *err);
int stk__cuda_event_record(struct stk__cuda *c, cu_event ev, void *stream, char *err);
int stk__cuda_event_wait(struct stk__cuda *c, cu_event ev, char *err);
void stk__cuda_event_free(struct stk__cuda *c, cu_event ev);

/* Wait for all work on the calling thread's current device. */
int stk__cuda_device_sync(struct stk__cuda *c, char *err);

/* Pinned host memory of at least size bytes aligned to 4096, or NULL
 * (and err filled) when the runtime refuses. Release with
 * stk__cuda_host_free, never with free(). */
void *stk__cuda_host_alloc(struct stk__cuda *c, size_t size, char *err);
void stk__cuda_host_free(struct stk__cuda *c, void *p);

/* struct stk_allocator hooks over pinned memory, ctx being a struct
 * stk__cuda: {stk__cuda_alloc_hook, stk__cuda_free_hook, cuda}. */
void *stk__cuda_alloc_hook(void *ctx, size_t size);
void stk__cuda_free_hook(void *ctx, void *p, size_t size);

/* Host-to-device bandwidth from pinned memory to device 0 in bytes per
 * second: one warm-up copy of bytes, then reps timed synchronous copies;
 * *bps is the median. Device and host buffers are freed before return.
 * STK_ENOMEM or STK_EIO with the runtime's message on failure. */
int stk__cuda_h2d_bw(struct stk__cuda *c, size_t bytes, int reps, double *bps, char *err);

#endif
