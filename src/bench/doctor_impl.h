/* Internals shared by the files of stoker doctor: doctor.c (the memory,
 * CPU and PCIe ceilings, the run, the feed table, the reports) and
 * doctor_disk.c (the ceilings of the directory's device: buffered and
 * O_DIRECT writes and reads, random IOPS). */
#ifndef STOKER_DOCTOR_IMPL_H
#define STOKER_DOCTOR_IMPL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
#include "stoker/doctor.h"

#define MiB (1024.0 * 1024.0)
/* Sequential O_DIRECT reads and writes: 8 MiB requests (fio's best on the
 * development VM), swept over depth (requests in flight per job) and jobs
 * (each with its own ring over its own part of the file), each point run
 * for a fixed time; the figure is the best point, the whole curve is kept
 * (r->curve). A single setting was 2x below fio's best on the same disk:
 * a ceiling must not be low. */
#define SEQ_BS (8u << 20)
#define SEQ_BUFS 4u /* buffers per job, shared by its requests (contents do not matter) */
static const uint32_t SEQ_DEPTHS[] = {1, 2, 4, 8, 16, 32};
static const uint32_t SEQ_JOBS[] = {1, 2};
#define SEQ_THREADS_DEPTH_MAX 8u /* the threads engine: a thread and, reading, a buffer a request */
#define WR_CHUNK (1u << 20)   /* buffered writes: 1 MiB write()s ... */
#define WR_BEHIND (32u << 20) /* ... with writeback started every 32 MiB */
#define RAND_BS 4096u
#define RAND_QD 32u

/* ---- one run's context ------------------------------------------------ */

struct run {
  const struct stk_doctor_opts *o;
  struct stk_doctor_result *r;
  char path[1100]; /* the scratch file; "" when none exists */
  uint64_t size;
  int use_uring;            /* io_uring for O_DIRECT phases (else a thread per slot) */
  int filled;               /* the scratch file holds size bytes of data */
  char err[STK_ERRMSG_MAX]; /* detail of the failure; copied out at the end */
};

static inline int canceled(const struct run *x) {
  return x->o->cancel && __atomic_load_n(x->o->cancel, __ATOMIC_RELAXED);
}

static inline int wanted(const struct run *x, int fig) {
  return !x->o->only || (x->o->only & STK_DOCTOR_BIT(fig));
}

static inline void phase(const struct run *x, int fig) {
  if (x->o->progress) x->o->progress(x->o->ctx, stk_doctor_fig_title(fig));
}

static inline void fig_note(struct stk_doctor_figure *f, const char *fmt, va_list ap) {
  vsnprintf(f->reason, sizeof f->reason, fmt, ap);
}

/* A measured value with a note on how; a value that is not a positive
 * finite number becomes invalid instead, never a reported 0. */
__attribute__((format(printf, 3, 4))) static inline void fig_ok(struct stk_doctor_figure *f,
                                                                double v, const char *fmt, ...) {
  if (!(v > 0) || !isfinite(v)) {
    snprintf(f->reason, sizeof f->reason, "measured no time or no work");
    f->valid = 0;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  fig_note(f, fmt, ap);
  va_end(ap);
  f->value = v;
  f->valid = 1;
}

__attribute__((format(printf, 2, 3))) static inline void fig_bad(struct stk_doctor_figure *f,
                                                                 const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fig_note(f, fmt, ap);
  va_end(ap);
  f->value = NAN;
  f->valid = 0;
}

static inline double secs(uint64_t ns) { return (double)ns / 1e9; }

/* The device phases (doctor_disk.c). write_buffered fills the scratch file
 * (x->filled) and gives the time taken; each phase fills its figure and
 * returns 0, or an error that ends the run. */
int stk__doctor_write_buffered(struct run *x, uint64_t *ns);
int stk__doctor_phase_buffered_write(struct run *x);
int stk__doctor_phase_seq_write(struct run *x);
int stk__doctor_phase_seq_read(struct run *x);
int stk__doctor_phase_rand_iops(struct run *x);

#endif
