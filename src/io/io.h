/* I/O engines: how the loader's reads reach the kernel. One backend per
 * file behind struct stk_io_ops (io_uring, a thread pool doing pread, a
 * thread pool mapping the page cache, one copying out of kept mappings),
 * listed in stk__io_engines[]; "auto" takes the first that opens (the
 * loader itself picks pread, mmap or mapcopy by sample size:
 * src/loader/pipeline.c).
 *
 * The contract is asynchronous and single-submitter: one thread submits
 * requests and reaps completions; the engine may complete them on other
 * threads, in any order. Request memory belongs to the submitter and must
 * stay valid until the request is reaped. */
#ifndef STOKER_IO_H
#define STOKER_IO_H

#include <stdint.h>

#include "../base/base.h"

struct stk_io_req {
  int fd;
  uint64_t off;
  uint64_t len;
  uint64_t need;       /* bytes that must be read; the rest may lie past end
                          of file (O_DIRECT reads rounded up); 0 = len */
  uint8_t *buf;
  void *user;          /* the submitter's */
  /* Optional: run by the engine right after a successful read, in the
   * thread that did it, while the bytes are still in that core's cache
   * (only engines with inline_hook set call it). */
  void (*on_read)(struct stk_io_req *r);
  /* Optional: run by an engine that copies out of a mapping of the file
   * (mapcopy) in place of its own copy and of on_read: it must fill buf
   * with the n bytes at src (the file's bytes at off; need <= n <= len)
   * and may check them in the same pass. */
  void (*on_copy)(struct stk_io_req *r, const uint8_t *src, uint64_t n);
  void *ctx;           /* for on_read and on_copy */
  int res;             /* on completion: 0, STK_ETRUNC (file ended before
                          need bytes), or a code */
  struct stk_io_req *next; /* engine-private linkage */
};

struct stk_io_opts {
  uint32_t depth;   /* requests in flight at most */
  uint32_t threads; /* worker threads (pread pool) */
};

struct stk_io;

struct stk_io_ops {
  const char *name;
  int inline_hook; /* calls on_read in the completing thread */
  /* Maps instead of copying: a request's buf lies in a reservation made by
   * stk__io_region_reserve, and buf and off are page-aligned (congruent
   * modulo STK_IO_MAP_ALIGN for large ranges, so large folios map whole);
   * on completion the file's pages are at buf (a private mapping: a write
   * copies the page, never reaching the file) until the range is mapped
   * over or stk__io_region_reset. */
  int maps;
  /* Create an engine; STK_ENOTSUP when this kernel or sandbox lacks it. */
  int (*open)(struct stk_io **out, const struct stk_io_opts *o, char *err);
  /* Queue one request. Never blocks; the caller keeps fewer than depth in
   * flight. Requests may be batched until the next wait. */
  int (*submit)(struct stk_io *io, struct stk_io_req *r);
  /* Hand back up to max completed requests in done[], waiting for at least
   * one when block != 0 (and any are in flight). Returns how many, or a
   * negative code for an engine failure. */
  int (*reap)(struct stk_io *io, struct stk_io_req **done, int max, int block);
  void (*close)(struct stk_io *io);
};

extern const struct stk_io_ops stk__io_uring;
extern const struct stk_io_ops stk__io_pread;
extern const struct stk_io_ops stk__io_mmap;
extern const struct stk_io_ops stk__io_mapcopy;
/* Files the mapcopy engine keeps mapped at once (the least recently used
 * idle one is unmapped for another). */
#define STK_IO_MAPCOPY_FILES 256
extern const struct stk_io_ops *const stk__io_engines[];

/* Open the engine named, or for "auto"/NULL the first that works in table
 * order (io_uring, then the pread pool). *ops is set to the chosen backend.
 * io_uring is the default because it batches submissions: one system call
 * for many reads, and no thread handoff per request, which matters for
 * small records. The pread pool is the fallback and, for large buffered
 * records with checksums, often faster: its worker checks the checksum
 * right after its copy, while the bytes are in its cache (bench B1 reports
 * both). `direct` is accepted for engines that care. */
int stk__io_open(const char *name, int direct, const struct stk_io_opts *o,
                 const struct stk_io_ops **ops, struct stk_io **io, char *err);

/* The thread pool behind the blocking engines (pool.c): op(ctx, r) runs in
 * a worker per request (returning its res), then the request's on_read,
 * unless copies is set and the request has on_copy, which op then ran. */
int stk__io_pool_open(struct stk_io **out, const struct stk_io_opts *o,
                      int (*op)(void *ctx, struct stk_io_req *r), void *ctx, int copies,
                      const char *what, char *err);
/* The ctx given to stk__io_pool_open (the engine's own state). */
void *stk__io_pool_ctx(struct stk_io *io);
int stk__io_pool_submit(struct stk_io *io, struct stk_io_req *r);
int stk__io_pool_reap(struct stk_io *io, struct stk_io_req **done, int max, int block);
void stk__io_pool_close(struct stk_io *io);
/* A blocking read of one request (pread.c): len bytes, or to end of file
 * once need bytes came (else STK_ETRUNC). */
int stk__io_read_req(const struct stk_io_req *r);

/* Copy n bytes of a mapping at src for request r (its on_copy, else a
 * memcpy to buf) under a guard (guard.c): a bus error reading [src, src+n)
 * (the file truncated under the mapping, a page the device failed) ends
 * the copy with STK_ETRUNC instead of the process. The guard works while
 * stk__io_guard_ready says so: it installs the process's SIGBUS handler
 * (once, chaining to the one it replaces) and is 1 while that handler is
 * still the installed one, 0 where it cannot be installed or another
 * handler was put over it since. */
int stk__io_guarded_copy(struct stk_io_req *r, const uint8_t *src, uint64_t n);
int stk__io_guard_ready(void);

/* Address space for a mapping engine's requests (mmap.c): reserve one of
 * at least need bytes (STK_IO_MAP_ALIGN-aligned, zero pages: no memory
 * behind them until written), releasing the one *p held; reset one to zero pages,
 * dropping every mapping placed in it; free one (NULL allowed). */
#define STK_IO_MAP_ALIGN (2u << 20)
int stk__io_region_reserve(uint8_t **p, size_t *cap, size_t need);
int stk__io_region_reset(uint8_t *p, size_t cap);
void stk__io_region_free(uint8_t *p, size_t cap);

#endif
