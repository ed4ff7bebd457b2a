/* Internals of the checkpoint tier (src/ckpt): the on-disk layout, the
 * manifest, the parallel-for the writers and readers share, and the
 * handle. docs/internals/ckpt.md describes the design. */
#ifndef STOKER_CKPT_IMPL_H
#define STOKER_CKPT_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "stoker/ckpt.h"

/* A checkpoint is one directory DIR/step-%012llu-rank-%05u holding its
 * objects as 00000.obj, 00001.obj, ... (names live in the manifest), the
 * manifest MANIFEST.json (its presence, valid, is the commit), the lock
 * file .lock (flock'd exclusive by whoever writes, drains or removes it,
 * shared by a reader), DRAINED once the origin holds it whole,
 * .drain-progress (one object index a line) while a drain runs, and
 * .upload-NNNNN.obj while that object's S3 multipart upload is under way
 * (its upload id and the parts S3 has: s3.c). */
#define CKPT_MANIFEST "MANIFEST.json"
#define CKPT_MANIFEST_TMP "MANIFEST.json.tmp"
#define CKPT_LOCK ".lock"
#define CKPT_DRAINED "DRAINED"
#define CKPT_PROGRESS ".drain-progress"
#define CKPT_UPLOAD ".upload-" /* + the object's file name: an S3 multipart upload under way */
#define CKPT_NAME_MAX 255
#define CKPT_MANIFEST_MAX (64u << 20)
#define CKPT_ALIGN 4096u
#define CKPT_FLUSH_EVERY (128ull << 20) /* save: device cache flushed every 128 MiB (save.c) */

struct ckpt_obj_meta {
  char *name;
  uint64_t size;
  uint32_t crc;
};

struct ckpt_manifest {
  uint64_t step;
  uint32_t rank, world;
  size_t n;
  struct ckpt_obj_meta *obj;
};

void stk__ckpt_dirname(char out[64], uint64_t step, uint32_t rank);
/* Parse a directory name back; 0, or -1 when it is not one of ours. */
int stk__ckpt_parse_dirname(const char *name, uint64_t *step, uint32_t *rank);
void stk__ckpt_objfile(char out[16], size_t i);
/* "dir/name" into out (n bytes; truncated paths fail their open later). */
void stk__ckpt_join(char *out, size_t n, const char *dir, const char *name);

/* Write the manifest into the checkpoint directory path: to its temporary
 * name, fsynced (unless no_fsync), renamed, directory fsynced. */
int stk__ckpt_manifest_write(const char *path, const struct ckpt_manifest *m, int no_fsync,
                             char *err);
/* Parse a manifest text; STK_EFORMAT naming what is wrong. */
int stk__ckpt_manifest_parse(const char *text, size_t len, struct ckpt_manifest *m,
                             const char *where, char *err);
/* Read and check path/MANIFEST.json: present, parses, and every object file
 * has its size. STK_ENOENT when absent, STK_EFORMAT otherwise. */
int stk__ckpt_manifest_read(const char *path, struct ckpt_manifest *m, char *err);
/* Render the manifest's JSON text (malloc'ed, *len bytes). */
int stk__ckpt_manifest_text(const struct ckpt_manifest *m, char **text, size_t *len);
void stk__ckpt_manifest_free(struct ckpt_manifest *m);

/* CRC32C of A followed by B, from crc(A), crc(B) and B's length. */
uint32_t stk__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* Run fn(arg, i) for i in [0, n) on up to threads threads; the first
 * nonzero return stops handing out work and is returned. */
int stk__ckpt_pfor(uint32_t threads, size_t n, int (*fn)(void *arg, size_t i, char *err),
                   void *arg, char *err);

/* Lock path/.lock (creating it): exclusive or shared, blocking or not.
 * Returns the fd, or STK_EBUSY when nonblocking and held, or an error. */
int stk__ckpt_lock(const char *path, int exclusive, int wait, char *err);
/* Remove a checkpoint directory and everything in it (not recursive
 * beyond one level: a checkpoint has no subdirectories). */
int stk__ckpt_remove_dir(const char *path, char *err);
int stk__ckpt_fsync_path(const char *path);
/* Create dir and its parents. */
int stk__ckpt_mkdirs(const char *dir, char *err);

struct stk_ckpt {
  struct stk_ckpt_opts o;
  char *dir, *origin;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* Drain queue (steps of this rank), worked by one thread. */
  uint64_t *queue;
  size_t qlen, qcap;
  int draining, stop;
  pthread_t thread;
  int have_thread;
  int drain_rc;
  char drain_err[STK_ERRMSG_MAX];
  struct stk_ckpt_stats st;
  /* The asynchronous save (async.c): one job at a time, staged in stage
   * (objects at 4 KiB-aligned offsets, so O_DIRECT writes need no copy). */
  pthread_t saver;
  int have_saver, job_pending, job_running, saver_stop;
  uint64_t job_step;
  struct stk_ckpt_obj *job_objs;
  size_t job_n;
  uint8_t *stage;
  size_t stage_cap;
  int async_rc;
  char async_err[STK_ERRMSG_MAX];
  struct stk_origin *org; /* the origin, for reads (re-stage) and S3 writes */
  char *origin_path;      /* a directory origin's local path; NULL for S3 */
};

/* Stop the asynchronous saver after its job (async.c). */
void stk__ckpt_async_stop(struct stk_ckpt *c);
/* Open the origin the options name (drain.c). */
int stk__ckpt_origin_open(struct stk_ckpt *c, const struct stk_ckpt_opts *o, char *err);
void stk__ckpt_origin_close(struct stk_ckpt *c);
struct stk_origin;
/* S3 writes (s3.c): an object from a local file (multipart when large,
 * the upload recorded in the local file record so that a drain killed
 * mid-object resumes it), a small one from memory; durable at the origin
 * when they return. */
int stk__ckpt_s3_put_file(struct stk_origin *o, const char *name, int fd, uint64_t size,
                          const char *record, int no_fsync, char *err);
int stk__ckpt_s3_put_mem(struct stk_origin *o, const char *name, const char *text, size_t len,
                         char *err);
/* Drain one checkpoint directory of c->dir (drain.c); *bytes put. */
int stk__ckpt_drain_one(struct stk_ckpt *c, const char *name, uint64_t *bytes, char *err);
/* stk_ckpt_list of an origin's URL (remote.c); o: its S3 settings or NULL. */
int stk__ckpt_list_origin(const char *url, const struct stk_ckpt_opts *o,
                          int (*cb)(void *arg, const struct stk_ckpt_info *info), void *arg,
                          char *err);
/* Open the origin at url (s3://, http(s)://, a directory) with o's S3
 * settings where url is s3:// and o has them (drain.c). */
int stk__ckpt_url_open(struct stk_origin **org, const char *url, const struct stk_ckpt_opts *o,
                       char *err);
/* This rank's complete local steps, newest first (load.c). */
int stk__ckpt_local_steps(struct stk_ckpt *c, uint64_t **steps, size_t *n, char *err);
/* Drain (drain.c): queue a step, start the thread if needed; resume
 * unfinished drains found at open; stop. */
void stk__ckpt_drain_enqueue(struct stk_ckpt *c, uint64_t step);
int stk__ckpt_drain_resume(struct stk_ckpt *c, char *err);
void stk__ckpt_drain_stop(struct stk_ckpt *c);
/* Apply keep_last and max_bytes to this rank's local checkpoints. */
void stk__ckpt_evict(struct stk_ckpt *c);
/* Copy checkpoint dirname from the origin into the local directory,
 * manifest last; STK_ENOENT when the origin has no complete copy. */
int stk__ckpt_restage(struct stk_ckpt *c, const char *dirname, char *err);
/* Newest complete step of this rank at the origin, or STK_ENOENT. */
int stk__ckpt_origin_latest(struct stk_ckpt *c, uint64_t *step, char *err);
/* The manifest of checkpoint name at the origin, parsed (restage.c). */
int stk__ckpt_origin_manifest(struct stk_origin *org, const char *name, struct ckpt_manifest *m,
                              char *err);
/* Every object of checkpoint name (manifest m) from the origin into fds[i]
 * at its offset 0, in parallel gets (a piece of about total/threads
 * bytes each, 16..256 MiB; an object within one piece whole), each object's
 * CRC32C checked (an empty one: that it exists); STK_ECRC naming the
 * object (restage.c). */
int stk__ckpt_fetch(struct stk_origin *org, const char *name, const struct ckpt_manifest *m,
                    const int *fds, uint32_t threads, char *err);
/* stk_ckpt_verify and stk_ckpt_gc_origin of an origin's URL (admin.c). */
int stk__ckpt_verify_origin(const char *url, const char *name, const struct stk_ckpt_opts *o,
                            char *err);

#endif
