/* `stoker doctor`: this machine's ceilings (page-cache and device reads,
 * device writes, 4 KiB random-read IOPS, memcpy, JPEG decode per core,
 * pinned host-to-device copies) and, from them, how many accelerators of
 * each DLIO workload the machine could feed and which resource runs out
 * first. A figure that could not be measured is marked invalid with a
 * reason; it is never reported as 0. */
#ifndef STOKER_DOCTOR_H
#define STOKER_DOCTOR_H

#include <stdint.h>
#include <stdio.h>

#include "stoker/error.h"
#include "stoker/workload.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The figures, in the order they are measured and printed. */
#define STK_DOCTOR_FIGURES(X)                                                                 \
  X(BUFFERED_WRITE, "buffered_write", "bytes/s", "sequential write, buffered + write-behind") \
  X(SEQ_WRITE, "seq_write", "bytes/s", "sequential write, O_DIRECT")                          \
  X(SEQ_READ, "seq_read", "bytes/s", "sequential read, O_DIRECT")                             \
  X(RAND_IOPS, "rand_read_iops", "reads/s", "4 KiB random read, O_DIRECT, QD 32")             \
  X(PAGE_CACHE_READ, "page_cache_read", "bytes/s", "page-cache read")                         \
  X(MEMCPY, "memcpy", "bytes/s", "memcpy")                                                    \
  X(JPEG_PER_CORE, "jpeg_decode_per_core", "images/s", "JPEG decode per core")                \
  X(CUDA_H2D, "cuda_h2d", "bytes/s", "pinned host-to-device copy")

/* clang-format off */
enum stk_doctor_fig {
#define STK__DOC_ENUM(id, key, unit, title) STK_DOCTOR_##id,
  STK_DOCTOR_FIGURES(STK__DOC_ENUM)
#undef STK__DOC_ENUM
  STK_DOCTOR_NFIG
};
/* clang-format on */

/* JSON key ("seq_read"), unit ("bytes/s") and title of figure i; static
 * strings, NULL for i out of range. */
STK_EXPORT const char *stk_doctor_fig_key(int i);
STK_EXPORT const char *stk_doctor_fig_unit(int i);
STK_EXPORT const char *stk_doctor_fig_title(int i);

/* Bit of figure i in stk_doctor_opts.only. */
#define STK_DOCTOR_BIT(i) (1u << (i))

/* Set with stk_doctor_opts_init(): it records struct_size, and the library reads
 * only that many bytes (options added later take their defaults); a
 * struct_size larger than the library's is refused. A struct left zeroed
 * (struct_size 0) is taken to be this header's. */
struct stk_doctor_opts {
  size_t struct_size; /* set by stk_doctor_opts_init(); 0 = this header's */
  const char *dir;       /* where the scratch file goes, on the storage under
                            test; NULL = $TMPDIR, else /var/tmp */
  uint64_t size;         /* scratch file bytes, rounded down to 8 MiB; 0 = 1 GiB
                            (128 MiB with quick); at least 8 MiB */
  uint32_t threads;      /* page-cache and memcpy threads; 0 = online cores */
  int quick;             /* shorter timed phases (for tests; well under 10 s) */
  unsigned only;         /* STK_DOCTOR_BIT()s of the figures to measure; 0 = all */
  const char *io_engine; /* O_DIRECT phases: "io_uring" (one thread keeps
                            the queue full) or "threads" (one thread per
                            request in flight, blocking I/O); NULL or
                            "auto" = io_uring, falling back to threads
                            where the kernel or sandbox refuses it */
  /* Polled between I/O chunks; nonzero stops the run, which then removes
   * its scratch file and returns STK_ECANCELED. May be NULL. */
  const volatile int *cancel;
  /* Called as each phase starts (title of the figure); may be NULL. */
  void (*progress)(void *ctx, const char *phase);
  void *ctx;
};
#define stk_doctor_opts_init(o) stk_doctor_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_doctor_opts_init_sized(struct stk_doctor_opts *o, size_t size);

struct stk_doctor_figure {
  double value; /* in the figure's unit; meaningful only when valid */
  int valid;
  char reason[192]; /* why it is invalid; when valid, a note on how it
                       was measured (may be empty) */
};

/* What the machine could feed of one workload preset. An n_* is the
 * number of accelerators that resource alone could keep busy; NAN where
 * it does not apply or its figure is invalid. */
struct stk_doctor_feed {
  char workload[64], accel[32];
  int jpeg;             /* 1: the "if the records were JPEGs decoded on
                           this CPU" variant (resnet50) */
  double demand_bps;    /* bytes/s one accelerator consumes:
                           batch * record_bytes / compute_s */
  double samples_per_s; /* records/s one accelerator consumes */
  double n_seq_read, n_page_cache, n_iops, n_jpeg;
  double n_limit;       /* the smallest valid n_*; NAN if none is */
  const char *limit_by; /* static name of that resource, or "unknown" */
};

#define STK_DOCTOR_MAX_FEED 32
#define STK_DOCTOR_MAX_CURVE 32

/* Filled by stk_doctor_run: set struct_size first (stk_doctor_result_init,
 * or zero the struct: 0 = this header's), and the library writes no
 * further than it (a newer program's larger struct gets what this library
 * knows; the rest is left as it was); the print, JSON and feed functions
 * read no further than it. */
struct stk_doctor_result {
  size_t struct_size; /* set by stk_doctor_result_init(); 0 = this header's */
  struct stk_doctor_figure fig[STK_DOCTOR_NFIG];
  char dir[1024];                   /* where the scratch file was */
  char fs_type[16];                 /* "ext4", "tmpfs", ... or a hex magic */
  uint64_t size;                    /* scratch file bytes */
  uint32_t threads, cores;          /* threads used; online cores */
  uint32_t jpeg_width, jpeg_height; /* mean size of the decoded images */
  /* Bytes the kernel read from block devices (/proc/vmstat pgpgin)
   * during the timed page-cache pass; UINT64_MAX when unreadable. Well
   * above 0 means the file did not stay cached. */
  uint64_t page_cache_disk_bytes;
  char cuda_device[256]; /* device 0's name when libcudart loaded */
  double seconds;        /* wall time of the whole run */
  struct stk_doctor_feed feed[STK_DOCTOR_MAX_FEED];
  int nfeed;
  /* The sequential O_DIRECT curve behind seq_write and seq_read: every
   * point swept (8 MiB requests, depth in flight per job, jobs), its
   * bandwidth; the figures are each direction's best point. */
  struct stk_doctor_point {
    int write; /* 1: sequential write (fdatasync included), 0: read */
    uint32_t depth, jobs;
    double bytes_per_s;
  } curve[STK_DOCTOR_MAX_CURVE];
  int ncurve;
};
#define stk_doctor_result_init(r) stk_doctor_result_init_sized((r), sizeof *(r))
STK_EXPORT void stk_doctor_result_init_sized(struct stk_doctor_result *r, size_t size);

/* Measure every figure (or those in o->only) and fill the feed table for
 * every built-in workload preset. o may be NULL for defaults. Writes one
 * scratch file in the directory and removes it before returning, on
 * failure and on cancellation too. A figure the machine cannot provide
 * (O_DIRECT on tmpfs, CUDA without a GPU) is invalid with a reason and is
 * not an error. Fails (errmsg, STK_ERRMSG_MAX bytes, may be NULL) with
 * STK_ENOENT when the directory does not exist, STK_ENOSPC when the file
 * does not fit, STK_EINVAL for a bad size or engine name, STK_ECANCELED when o->cancel
 * was set, or an I/O code when the scratch file cannot be written. */
STK_EXPORT int stk_doctor_run(const struct stk_doctor_opts *o, struct stk_doctor_result *r, char *errmsg);

/* Fill *out with what the figures in r say about workload w: jpeg = 1
 * adds the JPEG-decode limit (cores * per-core rate over samples_per_s).
 * Pure arithmetic on r->fig and r->cores; used by stk_doctor_run and
 * usable on a result filled by hand. */
STK_EXPORT void stk_doctor_feed(const struct stk_doctor_result *r, const struct stk_workload *w, int jpeg,
                     struct stk_doctor_feed *out);

/* Print the figures and the feed table for people, in MiB/s and GiB/s. */
STK_EXPORT void stk_doctor_print(const struct stk_doctor_result *r, FILE *f);

/* Write every figure (invalid ones as null with their reason) and the feed
 * table as one JSON object to f. Returns 0, or STK_EIO when f reports a
 * write error. */
STK_EXPORT int stk_doctor_write_json(const struct stk_doctor_result *r, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
