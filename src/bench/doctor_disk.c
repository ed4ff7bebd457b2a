/* stoker doctor's device ceilings: the scratch file written with buffered
 * writes and with O_DIRECT, read back with O_DIRECT, and read at random,
 * each at a queue depth through io_uring or a thread per slot. */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../gen/synth.h"
#include "doctor_impl.h"

static void fill_random(uint8_t *p, size_t n, uint64_t seed) {
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = stk_rng_next(&r);
    memcpy(p + i, &v, 8);
  }
}

/* ---- direct I/O at a queue depth -------------------------------------- */

/* One O_DIRECT job: sequential over [0, span) once, or random bs-aligned
 * offsets in [0, span) until max_ns has passed. */
struct dio {
  int fd, write, random;
  uint32_t bs, qd;
  uint32_t nbufs;        /* buffers (bs bytes each) the qd requests share; 0 = qd */
  uint64_t base;         /* the job's part of the file: [base, base + span) */
  uint64_t span, max_ns; /* max_ns > 0: sequential wraps around until then */
  struct io_uring *ring; /* set up by the caller (qd entries), or NULL: its own */
  const volatile int *cancel;
  uint8_t *bufs; /* qd * bs bytes, aligned */
  /* results */
  uint64_t bytes, ops, ns;
  int err_no;   /* errno of the first failed request, 0 if none */
  int short_io; /* a request moved fewer than bs bytes */
};

static int dio_stop(const struct dio *d) {
  return d->cancel && __atomic_load_n(d->cancel, __ATOMIC_RELAXED);
}

/* Where the next request goes: the io_uring loop's state. */
struct dio_cursor {
  struct stk_rng rng;
  uint64_t next, deadline, blocks;
};

/* Whether d has more requests to issue, and if so the offset of the next. */
static int dio_next(const struct dio *d, struct dio_cursor *c, uint64_t *off) {
  if (dio_stop(d)) return 0;
  if (d->random) {
    if (stk_now_ns() >= c->deadline) return 0;
    *off = stk_rng_below(&c->rng, c->blocks) * d->bs;
    return 1;
  }
  if (d->max_ns) {
    if (stk_now_ns() >= c->deadline) return 0;
    *off = d->base + c->next % d->span;
  } else {
    if (c->next >= d->span) return 0;
    *off = d->base + c->next;
  }
  c->next += d->bs;
  return 1;
}

static uint8_t *dio_buf(const struct dio *d, uint32_t slot) {
  return d->bufs + (size_t)(slot % (d->nbufs ? d->nbufs : d->qd)) * d->bs;
}

static void dio_prep(struct io_uring *ring, const struct dio *d, uint32_t slot, uint64_t off) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring); /* never NULL: qd entries, <= qd queued */
  uint8_t *buf = dio_buf(d, slot);
  if (d->write)
    io_uring_prep_write(sqe, d->fd, buf, d->bs, off);
  else
    io_uring_prep_read(sqe, d->fd, buf, d->bs, off);
  io_uring_sqe_set_data64(sqe, slot);
}

/* qd requests in flight from one thread; each completion's slot is
 * refilled at once. Returns 0, or -errno when the ring cannot be set up. */
static int dio_uring(struct dio *d) {
  struct io_uring own, *rp = d->ring ? d->ring : &own;
  int rc = d->ring ? 0 : io_uring_queue_init(d->qd, &own, 0);
  if (rc < 0) return rc;
  uint64_t t0 = stk_now_ns(), off, inflight = 0;
  struct dio_cursor c = {.deadline = t0 + d->max_ns, .blocks = d->span / d->bs};
  stk_rng_seed(&c.rng, 0x5eed);
  for (uint32_t s = 0; s < d->qd && dio_next(d, &c, &off); s++, inflight++) dio_prep(rp, d, s, off);
  while (inflight) {
    io_uring_submit(rp);
    struct io_uring_cqe *cqe;
    while ((rc = io_uring_wait_cqe(rp, &cqe)) == -EINTR) {
    }
    if (rc < 0) {
      d->err_no = -rc;
      break; /* io_uring_queue_exit below waits out what is still in flight */
    }
    uint32_t slot = (uint32_t)io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(rp, cqe);
    inflight--;
    if (res < 0) {
      if (!d->err_no) d->err_no = -res;
    } else if ((uint32_t)res != d->bs) {
      d->short_io = 1;
    } else {
      d->bytes += (uint64_t)res;
      d->ops++;
    }
    if (!d->err_no && !d->short_io && dio_next(d, &c, &off)) {
      dio_prep(rp, d, slot, off);
      inflight++;
    }
  }
  d->ns = stk_now_ns() - t0;
  /* Our own ring goes now; a given one too when requests may still be in
   * flight (a failed wait): its exit waits them out before the buffers go. */
  if (!d->ring) {
    io_uring_queue_exit(&own);
  } else if (inflight) {
    io_uring_queue_exit(d->ring);
    d->ring = NULL; /* the caller sees it is gone */
  }
  return 0;
}

struct dio_worker {
  struct dio *d;
  _Atomic uint64_t *next;
  uint64_t deadline;
  uint32_t id;
  uint64_t bytes, ops;
  int err_no, short_io;
};

static void *dio_thread(void *p) {
  struct dio_worker *w = p;
  struct dio *d = w->d;
  struct stk_rng rng;
  stk_rng_seed(&rng, stk_mix64(0x5eed, w->id));
  uint8_t *buf = dio_buf(d, w->id);
  uint64_t blocks = d->span / d->bs;
  while (!dio_stop(d) && !w->err_no && !w->short_io) {
    uint64_t off;
    if (d->random) {
      if (stk_now_ns() >= w->deadline) break;
      off = stk_rng_below(&rng, blocks) * d->bs;
    } else if (d->max_ns) {
      if (stk_now_ns() >= w->deadline) break;
      off = d->base + atomic_fetch_add(w->next, d->bs) % d->span;
    } else if ((off = atomic_fetch_add(w->next, d->bs)) >= d->span) {
      break;
    } else {
      off += d->base;
    }
    ssize_t n =
        d->write ? pwrite(d->fd, buf, d->bs, (off_t)off) : pread(d->fd, buf, d->bs, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      w->err_no = errno;
    else if ((uint32_t)n != d->bs)
      w->short_io = 1;
    else
      w->bytes += (uint64_t)n, w->ops++;
  }
  return NULL;
}

/* The same job with qd threads doing blocking I/O: where io_uring is
 * missing or was not chosen. */
static int dio_threads(struct dio *d) {
  struct dio_worker w[RAND_QD];
  pthread_t th[RAND_QD];
  _Atomic uint64_t next = 0;
  uint32_t n = STK__MIN(d->qd, RAND_QD), started = 0;
  uint64_t t0 = stk_now_ns();
  for (uint32_t i = 0; i < n; i++) {
    w[i] = (struct dio_worker){.d = d, .next = &next, .deadline = t0 + d->max_ns, .id = i};
    if (pthread_create(&th[i], NULL, dio_thread, &w[i]) != 0) break;
    started++;
  }
  for (uint32_t i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    d->bytes += w[i].bytes;
    d->ops += w[i].ops;
    if (w[i].err_no && !d->err_no) d->err_no = w[i].err_no;
    d->short_io |= w[i].short_io;
  }
  d->ns = stk_now_ns() - t0;
  return started ? 0 : -EAGAIN;
}

/* Run d; 0 with d->bytes, ops, ns filled, or a code with err set. */
static int dio_run(struct run *x, struct dio *d, const char *what) {
  d->cancel = x->o->cancel;
  /* Reads by blocking threads get a buffer each: the threads would
   * otherwise write one buffer at once (harmless, the bytes are dropped,
   * but a data race to ThreadSanitizer). */
  if (!x->use_uring && !d->write) d->nbufs = 0;
  size_t nb = d->nbufs ? d->nbufs : d->qd;
  if (!(d->bufs = aligned_alloc(4096, nb * d->bs)))
    return stk__errf(x->err, STK_ENOMEM, "out of memory");
  fill_random(d->bufs, nb * d->bs, 42);
  /* dio_uring fails only when the ring cannot be set up (an old kernel, a
   * seccomp sandbox, a memlock limit): blocking threads instead. */
  int rc = x->use_uring ? dio_uring(d) : -ENOSYS;
  if (rc < 0) {
    x->use_uring = 0;
    if (!d->write && d->nbufs) {
      free(d->bufs);
      d->nbufs = 0;
      if (!(d->bufs = aligned_alloc(4096, (size_t)d->qd * d->bs)))
        return stk__errf(x->err, STK_ENOMEM, "out of memory");
    }
    rc = dio_threads(d);
  }
  free(d->bufs);
  d->bufs = NULL;
  if (rc < 0) return stk__errf(x->err, stk__from_errno(-rc), "%s: %s", what, strerror(-rc));
  if (dio_stop(d)) return STK_ECANCELED;
  if (d->err_no)
    return stk__errf(x->err, stk__from_errno(d->err_no), "%s: %s", what, strerror(d->err_no));
  if (d->short_io)
    return stk__errf(x->err, STK_EIO, "%s: a request moved fewer bytes than asked", what);
  return 0;
}

/* Write the scratch file with buffered 1 MiB writes, the way a dataset
 * writer does, starting writeback of every 32 MiB as soon as it is written
 * (sync_file_range) and ending with fdatasync: the time includes the sync,
 * so it is the device's rate, not the page cache's. Without the early
 * writeback the kernel would only start writing once the dirty threshold
 * (10% of memory) is reached and the sync would then run after the
 * copying instead of beside it, under-reporting the device. */
int stk__doctor_write_buffered(struct run *x, uint64_t *ns) {
  int fd = open(x->path, O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return stk__errf(x->err, stk__from_errno(errno), "%s: %s", x->path, strerror(errno));
  uint8_t *buf = malloc(WR_CHUNK);
  int rc = buf ? 0 : STK_ENOMEM;
  if (buf) fill_random(buf, WR_CHUNK, 7);
  uint64_t t0 = stk_now_ns(), behind = 0;
  for (uint64_t off = 0; !rc && off < x->size; off += WR_CHUNK) {
    if (canceled(x))
      rc = STK_ECANCELED;
    else if ((rc = stk__write_full(fd, buf, WR_CHUNK)) != 0)
      stk__errf(x->err, rc, "%s: write failed: %s", x->path, stk_strerror(rc));
    else if (off + WR_CHUNK - behind >= WR_BEHIND) {
      sync_file_range(fd, (off_t)behind, (off_t)(off + WR_CHUNK - behind), SYNC_FILE_RANGE_WRITE);
      behind = off + WR_CHUNK;
    }
  }
  if (!rc && fdatasync(fd) != 0)
    rc = stk__errf(x->err, stk__from_errno(errno), "%s: fdatasync: %s", x->path, strerror(errno));
  *ns = stk_now_ns() - t0;
  close(fd);
  free(buf);
  x->filled = rc == 0;
  return rc;
}

int stk__doctor_phase_buffered_write(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_BUFFERED_WRITE];
  phase(x, STK_DOCTOR_BUFFERED_WRITE);
  uint64_t ns;
  int rc = stk__doctor_write_buffered(x, &ns);
  if (!rc)
    fig_ok(f, (double)x->size / secs(ns),
           "1 MiB write()s of %.0f MiB, writeback started every 32 MiB, then fdatasync",
           x->size / MiB);
  return rc;
}

/* Open the scratch file with O_DIRECT; -1 with the figure marked invalid
 * when the filesystem refuses it (tmpfs, some FUSE mounts). */
static int open_direct(struct run *x, int flags, struct stk_doctor_figure *f) {
  int fd = open(x->path, flags | O_DIRECT | O_CLOEXEC);
  if (fd < 0)
    fig_bad(f, "O_DIRECT not supported on %s (%s): %s", x->r->dir, x->r->fs_type, strerror(errno));
  return fd;
}

static const char *engine_name(const struct run *x) {
  return x->use_uring ? "io_uring" : "threads";
}

/* A failed O_DIRECT phase: cancellation and running out of memory end the
 * run; anything else (EINVAL: the filesystem refuses O_DIRECT requests; an
 * I/O error) makes only this figure invalid, with the reason. */
static int dio_failed(struct run *x, struct stk_doctor_figure *f, int rc) {
  if (rc == STK_ECANCELED || rc == STK_ENOMEM) return rc;
  if (rc == STK_EINVAL)
    fig_bad(f, "O_DIRECT requests refused on %s (%s): %s", x->r->dir, x->r->fs_type, x->err);
  else
    fig_bad(f, "%s", x->err);
  return 0;
}

/* ---- the sequential curve ----------------------------------------------- */

/* Request size of the sweep: 8 MiB, 1 MiB with quick (where a point at
 * depth 32 x 2 jobs would otherwise move 512 MiB before it can stop). */
static uint32_t seq_bs(const struct run *x) { return x->o->quick ? 1u << 20 : SEQ_BS; }

/* One job of a point, on its own copy of the run (dio_run writes x.err and
 * may clear x.use_uring). */
struct job {
  struct run x;
  struct dio d;
  int rc;
};

static void *job_thread(void *p) {
  struct job *j = p;
  j->rc = dio_run(&j->x, &j->d, j->d.write ? "O_DIRECT write" : "O_DIRECT read");
  return NULL;
}

/* One point: jobs jobs of depth requests in flight each, over their own
 * parts of the file, for the point's time, or with whole each part once
 * (writes: then fdatasync, in the time). Returns 0 with *bps, or a code
 * with x->err set. */
static int seq_point(struct run *x, int fd, int write, uint32_t depth, uint32_t jobs, int whole,
                     double *bps) {
  struct job jb[2];
  pthread_t th[2];
  uint32_t bs = seq_bs(x);
  uint64_t span = x->size / jobs / bs * bs;
  uint64_t max_ns = whole ? 0 : x->o->quick ? 50000000ull : 1000000000ull;
  uint32_t started = 0;
  /* The rings are set up and torn down here, not by the jobs: liburing
   * maps them with raw system calls, so a ring one job unmapped and another
   * got at the same address would look to ThreadSanitizer like a race. */
  struct io_uring rings[2];
  int have_ring[2] = {0, 0};
  for (uint32_t i = 0; x->use_uring && i < jobs; i++)
    have_ring[i] = io_uring_queue_init(depth, &rings[i], 0) == 0;
  if (x->use_uring && (!have_ring[0] || (jobs > 1 && !have_ring[1]))) x->use_uring = 0;
  uint64_t t0 = stk_now_ns();
  for (uint32_t i = 0; i < jobs; i++) {
    jb[i] = (struct job){.x = *x,
                         .d = {.fd = fd,
                               .write = write,
                               .bs = bs,
                               .qd = depth,
                               .nbufs = STK__MIN(depth, SEQ_BUFS),
                               .base = i * span,
                               .span = span,
                               .max_ns = max_ns,
                               .ring = x->use_uring ? &rings[i] : NULL}};
    if (pthread_create(&th[i], NULL, job_thread, &jb[i]) != 0) break;
    started++;
  }
  int rc = started == jobs ? 0 : stk__errf(x->err, STK_ESYS, "cannot start an I/O job");
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    bytes += jb[i].d.bytes;
    if (!jb[i].x.use_uring) x->use_uring = 0;
    if (!rc && jb[i].rc) {
      rc = jb[i].rc;
      memcpy(x->err, jb[i].x.err, sizeof x->err);
    }
  }
  for (uint32_t i = 0; i < jobs; i++) /* unless a job's failure took it down */
    if (have_ring[i] && (i >= started || jb[i].d.ring)) io_uring_queue_exit(&rings[i]);
  if (!rc && write && fdatasync(fd) != 0)
    rc = stk__errf(x->err, stk__from_errno(errno), "%s: fdatasync: %s", x->path, strerror(errno));
  *bps = (double)bytes / secs(stk_now_ns() - t0);
  return rc;
}

/* Sweep depth x jobs in one direction, each point into r->curve; the best
 * into f with its setting. */
static int seq_sweep(struct run *x, int fd, int write, struct stk_doctor_figure *f) {
  double best = 0;
  uint32_t bd = 0, bj = 0, deepest = 0;
  for (size_t ji = 0; ji < STK__ARRAY_LEN(SEQ_JOBS); ji++)
    for (size_t di = 0; di < STK__ARRAY_LEN(SEQ_DEPTHS); di++) {
      /* A thread and a buffer per request: the threads engine stops at 8. */
      if (!x->use_uring && SEQ_DEPTHS[di] > SEQ_THREADS_DEPTH_MAX) break;
      if (x->size / SEQ_JOBS[ji] / seq_bs(x) == 0) break; /* no request for each job */
      deepest = STK__MAX(deepest, SEQ_DEPTHS[di]);
      double bps = 0;
      int rc = seq_point(x, fd, write, SEQ_DEPTHS[di], SEQ_JOBS[ji], 0, &bps);
      if (rc) return rc;
      if (x->r->ncurve < STK_DOCTOR_MAX_CURVE)
        x->r->curve[x->r->ncurve++] =
            (struct stk_doctor_point){write, SEQ_DEPTHS[di], SEQ_JOBS[ji], bps};
      if (bps > best) best = bps, bd = SEQ_DEPTHS[di], bj = SEQ_JOBS[ji];
    }
  if (!bj) {
    fig_bad(f, "no point moved any bytes (a file of %.0f MiB, %u MiB requests)",
            (double)x->size / MiB, seq_bs(x) >> 20);
    return 0;
  }
  if (!write) {
    fig_ok(f, best,
           "best of depth 1..%u x jobs 1..2 at %u MiB requests (%s, %.2f s a point): depth %u, "
           "%u job%s",
           deepest, seq_bs(x) >> 20, engine_name(x), x->o->quick ? 0.05 : 1.0, bd, bj,
           bj > 1 ? "s" : "");
    return 0;
  }
  /* A write point's fdatasync flushes only what that point wrote, and a
   * device with a volatile cache takes that flush in anywhere from a few
   * milliseconds to most of a second: the best of the points is the one
   * that met a cheap flush, above what the device sustains (above fio's
   * --end_fsync figure on the development VM). The ceiling is the best
   * setting run again over the whole file, once, with its fdatasync: what
   * a save of that size pays, and what fio --size --end_fsync=1 measures. */
  double whole = 0;
  int rc = seq_point(x, fd, 1, bd, bj, 1, &whole);
  if (rc) return rc;
  fig_ok(f, whole,
         "the whole %.0f MiB file written once, fdatasync in it, at the best setting of a sweep "
         "of depth 1..%u x jobs 1..2 at %u MiB requests (%s, %.2f s a point, fdatasync in each): "
         "depth %u, %u job%s, whose point gave %.0f MiB/s",
         (double)(x->size / bj / seq_bs(x) * seq_bs(x) * bj) / MiB, deepest, seq_bs(x) >> 20,
         engine_name(x), x->o->quick ? 0.05 : 1.0, bd, bj, bj > 1 ? "s" : "", best / MiB);
  return 0;
}

/* The written file is overwritten in place, never extended: a write that
 * extends a file is serialized by the file system (ext4, XFS), which held
 * the old single-setting figure at depth 1 whatever the queue. The
 * checkpoint tier and fio both write into space already allocated. */
int stk__doctor_phase_seq_write(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_SEQ_WRITE];
  phase(x, STK_DOCTOR_SEQ_WRITE);
  uint64_t ns;
  int rc = x->filled ? 0 : stk__doctor_write_buffered(x, &ns);
  if (rc) return rc;
  int fd = open_direct(x, O_WRONLY, f);
  if (fd < 0) return 0;
  rc = seq_sweep(x, fd, 1, f);
  close(fd);
  return rc ? dio_failed(x, f, rc) : 0;
}

static void drop_cache(struct run *x) {
  int fd = open(x->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

int stk__doctor_phase_seq_read(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_SEQ_READ];
  phase(x, STK_DOCTOR_SEQ_READ);
  drop_cache(x);
  int fd = open_direct(x, O_RDONLY, f);
  if (fd < 0) return 0;
  int rc = seq_sweep(x, fd, 0, f);
  close(fd);
  return rc ? dio_failed(x, f, rc) : 0;
}

int stk__doctor_phase_rand_iops(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_RAND_IOPS];
  phase(x, STK_DOCTOR_RAND_IOPS);
  int fd = open_direct(x, O_RDONLY, f);
  if (fd < 0) return 0;
  double want_s = x->o->quick ? 0.5 : 3.0;
  struct dio d = {.fd = fd,
                  .random = 1,
                  .bs = RAND_BS,
                  .qd = RAND_QD,
                  .span = x->size,
                  .max_ns = (uint64_t)(want_s * 1e9)};
  int rc = dio_run(x, &d, "O_DIRECT random read");
  close(fd);
  if (rc) return dio_failed(x, f, rc);
  fig_ok(f, (double)d.ops / secs(d.ns), "%llu reads in %.2f s over %.0f MiB, %u in flight (%s)",
         (unsigned long long)d.ops, secs(d.ns), x->size / MiB, RAND_QD, engine_name(x));
  return 0;
}
