/* The checkpoint tier: one rank's shard of a training checkpoint (a set of
 * named blobs) saved to a node-local directory at disk speed, committed
 * atomically, drained to a durable origin in the background, and restored
 * from the newest complete copy.
 *
 *   save     the objects are written by a small pool of threads in large
 *            aligned writes (O_DIRECT where the file system takes it), each
 *            object's CRC32C computed on the way; then every data file is
 *            fsynced, and the manifest (names, sizes, CRCs, step, rank,
 *            world size) is written to a temporary name, fsynced and
 *            renamed last, and the directory fsynced. A checkpoint without
 *            a valid manifest is partial: never loaded, removed by gc.
 *   drain    a complete checkpoint is copied to the origin (a path, an
 *            http(s):// server taking PUT, or s3://bucket/prefix with
 *            multipart uploads), objects first and
 *            the manifest last, by a background thread; a drain cut short
 *            resumes when the directory is next opened.
 *   evict    with a local byte budget or a count to keep, the oldest
 *            checkpoints already drained are removed; one not yet drained
 *            never is (without an origin the local copy is the only one,
 *            and keep_last alone bounds it).
 *
 * Layout, manifest and recovery rules: docs/internals/ckpt.md; usage:
 * docs/ckpt.md. */
#ifndef STOKER_CKPT_H
#define STOKER_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/error.h"
#include "stoker/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Programs built against this header keep working with a newer library:
 * set the options with stk_ckpt_opts_init() (see stk_loader_opts). */
struct stk_ckpt_opts {
  size_t struct_size;  /* set by stk_ckpt_opts_init(); 0 = this header's */
  const char *dir;     /* node-local checkpoint directory (created); required */
  uint32_t rank;       /* this process's rank */
  uint32_t world;      /* ranks in the job; 0 = 1 */
  uint32_t threads;    /* writer and reader threads; 0 = 4 */
  uint32_t chunk_bytes; /* bytes per write (a multiple of 4096); 0 = 8 MiB */
  int direct;          /* 0: O_DIRECT where the file system takes it, else
                          buffered; -1: buffered always */
  int no_fsync;        /* skip the fsyncs (a power loss may then lose the
                          newest checkpoint; a crash of the process cannot) */
  /* Where complete checkpoints are drained: a directory path (file:// or
   * plain), an http(s):// URL that takes PUT (WebDAV), or
   * s3://bucket/prefix; NULL = none (the local copy is the only one). */
  const char *origin;
  uint64_t max_bytes;  /* local budget: evict drained checkpoints beyond it; 0 = none */
  uint32_t keep_last;  /* local checkpoints of this rank kept; 0 = all */
  /* S3 settings for the origin; NULL = as the cache finds them. */
  const char *s3_endpoint, *s3_region, *s3_profile;
  /* A load the local copy cannot serve (missing, corrupt) reads the
   * origin's copy straight into the returned memory (parallel ranged gets,
   * every CRC32C checked) without writing a local copy; the next load of
   * that step reads the origin again. 0: re-stage it into dir first. */
  int no_stage;
};

#define stk_ckpt_opts_init(o) stk_ckpt_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_ckpt_opts_init_sized(struct stk_ckpt_opts *o, size_t size);

/* One object to save: name (1..255 bytes of any text but NUL), bytes. */
struct stk_ckpt_obj {
  const char *name;
  const void *data;
  uint64_t size;
};

/* A checkpoint found in a directory (stk_ckpt_list). */
struct stk_ckpt_info {
  char name[64];       /* directory name, "step-000000000100-rank-00000" */
  uint64_t step;
  uint32_t rank, world;
  uint32_t objects;
  uint64_t bytes;      /* object bytes (the manifest excluded) */
  int complete;        /* manifest present and valid */
  int drained;         /* the origin holds it whole (its manifest included) */
  int busy;            /* a process is writing or draining it now */
};

/* Filled by stk_ckpt_stats: set struct_size first (stk_ckpt_stats_init,
 * or zero the struct: 0 = this header's); the library writes no further
 * (docs/internals/api.md). */
struct stk_ckpt_stats {
  size_t struct_size;                    /* set by stk_ckpt_stats_init(); 0 = this header's */
  uint64_t saves, save_bytes, save_ns;   /* completed saves, their bytes and time */
  uint64_t direct_writes;                /* chunks written with O_DIRECT */
  uint64_t drains, drain_bytes, drain_ns; /* completed drains */
  uint64_t drain_errors;                 /* drains that failed (retried on reopen) */
  uint64_t evicted;                      /* local checkpoints removed by the budget */
  uint64_t restores, restore_bytes;      /* loads that succeeded */
  uint64_t restaged;                     /* loads served from the origin */
  /* Asynchronous saves: started, the caller's blocking time in all (the
   * copy into host memory, and any back-pressure wait), back-pressure
   * waits and their time, and saves skipped under STK_CKPT_SKIP. */
  uint64_t async_saves, async_block_ns;
  uint64_t busy_waits, busy_wait_ns, busy_skips;
};
#define stk_ckpt_stats_init(st) stk_ckpt_stats_init_sized((st), sizeof *(st))
STK_EXPORT void stk_ckpt_stats_init_sized(struct stk_ckpt_stats *st, size_t size);

struct stk_ckpt;

/* Open (creating) the local directory for this rank. Drains that an earlier
 * process left unfinished are queued again. Returns 0, or a code with one
 * sentence in errmsg (STK_ERRMSG_MAX bytes, may be NULL). */
STK_EXPORT int stk_ckpt_open(struct stk_ckpt **out, const struct stk_ckpt_opts *o, char *errmsg);
/* Wait for an asynchronous save and queued drains to finish, then free.
 * NULL is a no-op. */
STK_EXPORT void stk_ckpt_close(struct stk_ckpt *c);

/* Save n objects as checkpoint `step` of this rank and commit it; returns
 * once it is durable locally (its drain, if any, queued). Names must be
 * distinct. STK_EEXIST when this step is already complete here. */
STK_EXPORT int stk_ckpt_save(struct stk_ckpt *c, uint64_t step, const struct stk_ckpt_obj *objs,
                             size_t n, char *errmsg);

/* What an asynchronous save does when the one before is still being
 * written or drained. */
enum stk_ckpt_busy {
  STK_CKPT_WAIT = 0, /* block until it is done, then start (counted in busy_waits) */
  STK_CKPT_SKIP = 1, /* save nothing: STK_EBUSY at once (counted in busy_skips) */
};

/* Save in the background: the objects are copied into host memory owned by
 * the handle (in parallel, so the caller's buffers may change as soon as
 * this returns), then written, committed and drained as stk_ckpt_save does
 * by a thread of the handle. One save is in flight at a time: when the one
 * before is still being written or drained, `busy` says whether to wait or
 * to skip this one (STK_EBUSY). An error of the background save is
 * returned by the next stk_ckpt_save_wait or stk_ckpt_save_async. */
STK_EXPORT int stk_ckpt_save_async(struct stk_ckpt *c, uint64_t step,
                                   const struct stk_ckpt_obj *objs, size_t n, int busy,
                                   char *errmsg);
/* Wait until the asynchronous save in flight is committed locally; its
 * error (with its sentence), else 0. */
STK_EXPORT int stk_ckpt_save_wait(struct stk_ckpt *c, char *errmsg);

/* Newest complete checkpoint of this rank, locally or at the origin:
 * *step, 0; STK_ENOENT when there is none. */
STK_EXPORT int stk_ckpt_latest(struct stk_ckpt *c, uint64_t *step, char *errmsg);

/* A restored checkpoint: objects in the order they were saved. */
struct stk_ckpt_data;
/* Load checkpoint `step` (UINT64_MAX = the newest complete one) of this
 * rank, every object's CRC32C checked: from the local copy when it is there
 * and intact, else re-staged from the origin into the local directory
 * (or, with opts.no_stage, read from the origin into memory only).
 * STK_ENOENT when no complete checkpoint exists, STK_ECRC when every copy
 * is corrupt. */
STK_EXPORT int stk_ckpt_load(struct stk_ckpt *c, uint64_t step, struct stk_ckpt_data **out,
                             char *errmsg);
STK_EXPORT uint64_t stk_ckpt_data_step(const struct stk_ckpt_data *d);
STK_EXPORT size_t stk_ckpt_data_count(const struct stk_ckpt_data *d);
/* Object i: its name, bytes and size; NULL past the end. */
STK_EXPORT const char *stk_ckpt_data_name(const struct stk_ckpt_data *d, size_t i);
STK_EXPORT const void *stk_ckpt_data_bytes(const struct stk_ckpt_data *d, size_t i,
                                           uint64_t *size);
/* Index of the object called name, or -1. */
STK_EXPORT long stk_ckpt_data_find(const struct stk_ckpt_data *d, const char *name);
STK_EXPORT void stk_ckpt_data_free(struct stk_ckpt_data *d);

/* Block until every queued drain has finished; the first drain error since
 * the last call (with its sentence), else 0. */
STK_EXPORT int stk_ckpt_drain_wait(struct stk_ckpt *c, char *errmsg);

STK_EXPORT void stk_ckpt_stats(struct stk_ckpt *c, struct stk_ckpt_stats *st);

/* ---- a checkpoint directory, whoever wrote it (stoker ckpt) ---------- */

/* Every checkpoint in dir, complete or partial, every rank, oldest step
 * first. cb returning nonzero stops with that code. dir may be an origin's
 * URL (s3://bucket/prefix, file://...): its checkpoints with a valid
 * manifest are complete (and drained), the others partial. */
STK_EXPORT int stk_ckpt_list(const char *dir,
                             int (*cb)(void *arg, const struct stk_ckpt_info *info), void *arg,
                             char *errmsg);
/* Read every object of checkpoint `name` in dir and check its size and
 * CRC32C: 0, STK_ECRC / STK_ETRUNC naming the object, STK_EFORMAT for a
 * partial one. dir may be an origin's URL: the objects are then read back
 * from the origin in parallel ranged gets. */
STK_EXPORT int stk_ckpt_verify(const char *dir, const char *name, char *errmsg);
/* Remove partial checkpoints no process is writing (left by a crash);
 * *removed counts them. On an origin's URL: stk_ckpt_gc_origin(dir, 0). */
STK_EXPORT int stk_ckpt_gc(const char *dir, uint32_t *removed, char *errmsg);
/* At an origin's URL (s3://bucket/prefix, http(s):// with WebDAV DELETE,
 * file://): remove the complete checkpoints of each rank beyond its newest
 * keep_last (0 = none), and the partial ones older than the newest
 * complete checkpoint of their rank. Each goes manifest first, so one cut
 * short is partial, never complete with objects missing. Run it when no
 * restore reads the checkpoints it removes. *removed counts them. */
STK_EXPORT int stk_ckpt_gc_origin(const char *url, uint32_t keep_last, uint32_t *removed,
                                  char *errmsg);
/* The three above with o's S3 settings (s3_endpoint, s3_region,
 * s3_profile; the rest of o is not read) for an s3:// dir or url; o NULL
 * = as the cache finds them (the environment, then AWS's own). */
STK_EXPORT int stk_ckpt_list_opts(const char *dir, const struct stk_ckpt_opts *o,
                                  int (*cb)(void *arg, const struct stk_ckpt_info *info),
                                  void *arg, char *errmsg);
STK_EXPORT int stk_ckpt_verify_opts(const char *dir, const char *name,
                                    const struct stk_ckpt_opts *o, char *errmsg);
STK_EXPORT int stk_ckpt_gc_origin_opts(const char *url, const struct stk_ckpt_opts *o,
                                       uint32_t keep_last, uint32_t *removed, char *errmsg);

#ifdef __cplusplus
}
#endif
#endif
