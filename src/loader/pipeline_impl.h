/* The loader pipeline's shared state: one reader thread (reader.c) turns
 * sampler output into coalesced reads on an I/O engine, a pool of decode
 * workers (workers.c) parses and decodes each sample into its batch's
 * buffer, and finished batches (batch.c) wait in a ring that hands them to
 * the consumer in sequence order (pipeline.c). Job buffers and the memory
 * cap are memory.c's. A token loader reads nothing, so it runs no reader
 * thread: its workers make their jobs with the reader's code
 * (stk__reader_step).
 *
 * A "job" is one batch on its way: it owns the sample slots, the read
 * staging buffer and the output buffer, and is recycled after release, so
 * the steady state allocates nothing. The number of jobs outstanding (in
 * flight plus ready plus held by the consumer) is the ring depth plus two,
 * which bounds memory by depth x batch bytes. Depth grows by one each time
 * the consumer has to wait, while the memory cap allows. */
#ifndef STOKER_LOADER_PIPELINE_IMPL_H
#define STOKER_LOADER_PIPELINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../dataset/dataset.h"
#include "loader_impl.h"

#define ALIGN 4096u
#define FD_CACHE 256
#define MAX_COALESCE (8u << 20) /* bytes per coalesced read */
#define READ_CHUNK (8u << 20)   /* a longer range is read by several requests */
#define MAP_CHUNK (64u << 20)   /* the same for a mapping engine (a multiple of 2 MiB) */
#define HUGE_ALIGN (2u << 20)   /* large buffers: transparent huge pages */
#define ALL_FAILED_LIMIT 64     /* failures in a row that stop a run: all_failed_check */
#define NDECODERS 4             /* stk__loader_decoders, by enum stk_decode_kind */

struct slot {
  uint64_t id;
  uint32_t shard;
  uint64_t off, len;   /* byte range in the shard */
  uint64_t raw_pos;    /* where the range starts in job->raw */
  struct stk_field field; /* the decoded field, kept for a copy phase */
  uint64_t out_off, out_len;
  int32_t label;
  int err;             /* 0, or the sample failed (skip mode) */
  int verified;        /* checksums already checked by the I/O thread */
};

struct job {
  uint64_t seq, epoch;
  uint32_t n;
  struct slot *slots;
  uint64_t *offsets, *lens, *ids;
  int32_t *labels;
  uint8_t *raw;   /* read staging; the batch data for in-place fields. With a
                     mapping engine, an address-space reservation that
                     the shards' pages are mapped into (no memory of ours) */
  size_t raw_cap;
  int mapped;     /* raw holds mappings of an earlier batch */
  uint8_t *out;   /* decode output for copies and fixed-size decodes */
  size_t out_cap;
  struct stk_io_req *reqs;
  struct slot **order;  /* slots in file order */
  /* Request i reads whole samples order[req_lo[i] .. req_hi[i]), or a piece
   * of one sample when lo == hi (that sample is checked by its decoder). */
  uint32_t *req_lo, *req_hi;
  uint32_t nreqs, reqs_cap, reqs_next, reads_pending;
  struct stk_loader *loader;
  atomic_uint tasks_pending;
  int phase;      /* 1: parse+decode, 2: copy into out */
  atomic_int copy; /* batch data lives in out (a copy phase is needed) */
  int err;
  char errmsg[STK_ERRMSG_MAX];
  pthread_mutex_t err_mu;
  uint32_t skipped;
  struct stk_sampler_state state_after;
  struct stk_batch batch;
  struct job *next;
};

struct task {
  struct job *job;
  uint32_t begin, end;
};

struct fdent {
  uint32_t shard;
  int fd;
  uint32_t inflight;
  uint64_t last_use;
};

/* The reader thread's own state (reader.c): the order it draws, the I/O
 * engine it drives, the descriptors it keeps open and the jobs in their
 * read phase. Nothing here is locked: only the reader touches it after
 * open, except what is marked otherwise. */
struct reader {
  struct stk_sampler *sampler;
  const struct stk_io_ops *io_ops; /* also read by stk_loader_engine and memory.c */
  struct stk_io *io;
  int inline_verify;   /* the I/O engine checks checksums as it reads */
  int maps;            /* the I/O engine maps shards into job->raw (no copy); fixed at open */
  uint64_t page;       /* the system's page size */
  uint64_t *file_size; /* plain files: size once known, else UINT64_MAX */
  uint64_t epoch;
  uint64_t epoch_taken;   /* samples drawn in this epoch (for epoch_samples) */
  uint64_t epoch_batches; /* batches this epoch has given */
  int epoch_whole;        /* this epoch began at its first sample (not resumed) */
  int sampler_eof;
  int eof;             /* no job is left to make (stk__reader_step) */
  struct fdent fds[FD_CACHE];
  uint64_t fd_clock;
  uint64_t inflight_bytes;
  uint32_t inflight_reqs;
  struct job *reading[64]; /* jobs in their read phase, oldest first */
  uint32_t nreading;
  struct job *mem_wait; /* filled job waiting for buffer memory */
  /* Samples drawn so far, read by the look-ahead (datasets behind a cache). */
  atomic_uint_fast64_t taken_total;
  pthread_t thread;
};

struct stk_loader {
  struct stk_dataset *ds;
  struct stk_tokens *tok; /* token windows (tokens.c) instead of samples, or NULL */
  struct stk_loader_opts o; /* o.sampler and o.decode point at the two below */
  struct stk_sampler_opts sampler;
  struct stk_decode_cfg decode;
  const struct stk_decode_ops *dec;
  uint64_t fixed_out; /* bytes per sample for fixed-size decoders, else 0 */
  uint64_t mean_sample; /* mean stored bytes of a sample; 0 = unknown */
  struct reader rd;

  pthread_mutex_t mu; /* guards everything below that is not atomic */
  pthread_cond_t cv_free, cv_ready, cv_task;
  struct job **jobs;  /* all jobs ever made */
  uint32_t njobs, maxjobs;
  struct job *free_jobs;
  struct job **ready; /* by seq % maxjobs */
  uint64_t next_seq;  /* next batch the consumer gets */
  uint64_t made_seq;  /* batches the reader has started */
  uint64_t outstanding;
  uint32_t depth;
  int reader_done;    /* no more jobs will be made */
  /* A token loader has nothing to read: no reader thread runs, and a
   * worker that needs a job makes it (stk__reader_step), one worker at a
   * time (rd_busy). */
  int self_fill, rd_busy;
  int room_waiter;    /* a worker waits for a ring place (counted as reader_idle_ns) */
  uint32_t ready_waiters; /* consumers asleep on cv_ready */
  int failed;         /* a job failed in fail mode: stop */
  atomic_int cancel;
  struct task *tasks; /* circular task queue */
  uint32_t tasks_cap, task_head, task_len;
  int stop_workers;
  atomic_uint_fast64_t max_job_bytes; /* largest job's buffers (reader writes) */
  uint64_t releases;  /* batches released so far */
  atomic_uint_fast64_t reader_idle_ns; /* reader blocked on a full ring */
  uint64_t grow_mark; /* reader_idle_ns when the ring last grew */
  uint64_t mem_wait_seq; /* the seq of rd.mem_wait, valid while mem_wait_on */
  uint64_t mem_wait_rel; /* releases when it began to wait */
  int mem_wait_on;
  int mem_force;      /* the consumer waits for mem_wait and holds the rest:
                         let it exceed the cap rather than deadlock */
  int alloc_waited;   /* the allocator refused a buffer once (warned) */

  pthread_t *workers;
  uint32_t nworkers;

  struct stage_ctr st[STK_STAGE_COUNT];
  struct stk_hist wait_hist;  /* consumer thread only */
  uint64_t consumer_wait_ns;
  uint64_t t_open;
  uint64_t batches_out, samples_out, bytes_out, skipped_out;
  atomic_uint_fast64_t read_ops, read_bytes, mem_bytes, mem_peak, mem_over;
  uint32_t depth_max_seen;
  struct stk_sampler_state state;
  struct stk__lookahead *la; /* stages the shards the reader needs next */
  struct stk__tok_lookahead *tla; /* or the chunks of a remote corpus's windows */
  struct stk__publish *pub; /* counters for `stoker watch` (publish.c) */
  _Atomic uint64_t ds_fp;   /* stk_sampler_fingerprint, taken at the first save */
  /* on_error skip: samples skipped so far, failures in a row, and the
   * latest failure (stk__note_skip, all_failed_check). */
  atomic_uint_fast64_t skips_seen, fail_streak;
  pthread_mutex_t skip_mu;
  int last_skip_code;
  char last_skip[STK_ERRMSG_MAX + 32];
  char err[STK_ERRMSG_MAX];
};

static inline void ctr_add(_Atomic uint64_t *c, uint64_t v) {
  atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* ---- memory.c: job buffers within the memory cap ----------------------- */

extern const struct stk_allocator stk__default_allocator;
struct job *stk__job_new(struct stk_loader *l);
void stk__job_free(struct stk_loader *l, struct job *j);
/* Grow a pooled buffer to at least need bytes (content not kept). */
int stk__buf_reserve(struct stk_loader *l, uint8_t **buf, size_t *cap, size_t need);
/* Buffers for a filled job within the memory cap: 0, STK_EAGAIN when it
 * must wait for the consumer to release a batch, or a code with
 * j->errmsg set. The reader's. */
int stk__job_memory(struct stk_loader *l, struct job *j, uint64_t raw, uint64_t out);

/* ---- batch.c: failures and the ring ------------------------------------ */

/* Record a job's first failure. */
void stk__job_fail(struct job *j, int code, const char *msg);
/* A sample left out under on_error skip (or the default), logged. */
void stk__note_skip(struct stk_loader *l, uint64_t id, int code, const char *msg);
int stk__skips(const struct stk_loader *l, int code);
/* A sample failed: skipped, or its job fails (on_error fail). */
void stk__slot_fail(struct stk_loader *l, struct job *j, struct slot *s, int code,
                    const char *msg);
/* At the end of a run: every sample failed under the default policy? Then
 * the loader fails (returned), else 0. The consumer's, under l->mu. */
int stk__all_skipped_check(struct stk_loader *l);
/* Make the batch view and publish the job for the consumer. */
void stk__ring_put(struct stk_loader *l, struct job *j);

/* ---- workers.c: decode workers ------------------------------------------ */

/* By kind (enum stk_decode_kind). */
extern const struct stk_decode_ops *const stk__loader_decoders[NDECODERS];
/* Queue a job whose reads are done for its decode phase. */
void stk__push_tasks(struct stk_loader *l, struct job *j);
void *stk__worker_main(void *arg);

/* ---- reader.c: the reader thread ---------------------------------------- */

void *stk__reader_main(void *arg);
/* A token loader's worker, as the reader (l->rd_busy set, l->mu not
 * held): make the next job and queue its tasks, or wait for memory (then
 * retried by a later call). Returns the ns it took, counted as the read
 * stage's busy time. */
uint64_t stk__reader_step(struct stk_loader *l);
/* Under l->mu: whether stk__reader_step could make a job now. */
int stk__reader_can_step(struct stk_loader *l);
/* Close the reader's descriptors, engine and sampler (after its thread
 * ended, or when it never started). */
void stk__reader_free(struct stk_loader *l);

#endif
