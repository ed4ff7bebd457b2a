/* Checkpoint emulation: each emulated accelerator is one of DLIO's ranks
 * and writes its own share of the checkpoint (the files and sizes of
 * ckpt_size.c, times the run's scale) into DIR/global_epochE_stepS/, as
 * DLIO names them, with large aligned writes (O_DIRECT with --direct) and
 * an fsync per file when the config asks for one; loads read the files
 * back the same way. The ranks of a process write at once, on up to
 * MAX_THREADS threads (each rank's files in order, as one DLIO rank does).
 * The payload is random bytes, so a compressing or deduplicating file
 * system cannot shrink it. With --checkpoint-io torch each file is written
 * and read instead as DLIO's PyTorch backend does it (ckpt_torch.c): the
 * rank's tensors held in memory, one write() per tensor after its CRC32. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../base/base.h"
#include "bench_impl.h"

#define MAX_THREADS 32
#define CHUNK (4u << 20)
#define ALIGN 4096

struct job {
  uint32_t rank;
  struct stk_ckpt_file f;
  /* --checkpoint-io torch: the file's tensors (bytes each, scaled, adding
   * up to f.bytes) and where the first lies in the state */
  uint64_t *t;
  size_t nt;
  char *state;
};

struct stk__ckpt {
  const struct stk_bench_opts *o;
  struct stk_bench_ckpt *info;
  struct job *jobs; /* grouped by rank */
  size_t njobs;
  uint32_t *rank_start; /* first job of each writing rank; [writers] = njobs */
  uint32_t writers, threads;
  size_t chunk;
  char **buf;          /* [threads], chunk bytes each, aligned */
  uint64_t *ids;       /* saved checkpoints (epoch << 32 | step), for removal */
  size_t nids, capids;
  char made[8][1024];  /* folders this run created, outermost first (removed with it) */
  int nmade;
  double last_s; /* the last save's or load's time */
  char *state;   /* --checkpoint-io torch: every job's tensors, f.bytes each */
  uint32_t crcs; /* the torch writer's CRCs, kept so that they are computed */
};

/* One save or load, shared by its threads. */
struct pass {
  struct stk__ckpt *c;
  char id[64];
  int load;
  pthread_mutex_t mu;
  int err;
  char errmsg[STK_ERRMSG_MAX];
};

struct worker {
  struct pass *p;
  uint32_t t;
  pthread_t th;
};

static void pass_fail(struct pass *p, int code, const char *fmt, const char *path, int e) {
  pthread_mutex_lock(&p->mu);
  if (!p->err) {
    p->err = code;
    char msg[2048];
    snprintf(msg, sizeof msg, fmt, path, strerror(e));
    msg[sizeof p->errmsg - 1] = 0; /* a path too long for the message is cut */
    memcpy(p->errmsg, msg, strlen(msg) + 1);
  }
  pthread_mutex_unlock(&p->mu);
}

static int write_file(struct pass *p, const char *path, uint64_t bytes, char *buf) {
  const struct stk__ckpt *c = p->c;
  int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (c->info->direct ? O_DIRECT : 0);
  int fd = open(path, flags, 0644);
  if (fd < 0) {
    pass_fail(p, stk__from_errno(errno),
              errno == EINVAL && c->info->direct
                  ? "checkpoint %s: the file system does not take O_DIRECT (%s): drop --direct"
                  : "checkpoint %s: cannot create: %s",
              path, errno);
    return -1;
  }
  uint64_t off = 0;
  while (off < bytes) {
    size_t n = (size_t)STK__MIN((uint64_t)c->chunk, bytes - off);
    if (c->info->direct && n % ALIGN) { /* the tail: O_DIRECT takes whole blocks only */
      int fl = fcntl(fd, F_GETFL);
      if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0) break;
    }
    ssize_t w = pwrite(fd, buf, n, (off_t)off);
    if (w <= 0) {
      int e = w < 0 ? errno : ENOSPC;
      if (e == EINTR) continue;
      pass_fail(p, stk__from_errno(e), "checkpoint %s: write failed: %s", path, e);
      close(fd);
      return -1;
    }
    off += (uint64_t)w;
  }
  if (off < bytes) {
    pass_fail(p, STK_EIO, "checkpoint %s: cannot turn O_DIRECT off for the tail: %s", path, errno);
    close(fd);
    return -1;
  }
  if (c->info->fsync && fsync(fd) != 0) {
    pass_fail(p, stk__from_errno(errno), "checkpoint %s: fsync failed: %s", path, errno);
    close(fd);
    return -1;
  }
  if (close(fd) != 0) {
    pass_fail(p, stk__from_errno(errno), "checkpoint %s: close failed: %s", path, errno);
    return -1;
  }
  return 0;
}

static int read_file(struct pass *p, const char *path, uint64_t bytes, char *buf) {
  const struct stk__ckpt *c = p->c;
  int fd = open(path, O_RDONLY | O_CLOEXEC | (c->info->direct ? O_DIRECT : 0));
  if (fd < 0) {
    pass_fail(p, stk__from_errno(errno), "checkpoint %s: cannot open: %s", path, errno);
    return -1;
  }
  uint64_t off = 0;
  for (;;) {
    ssize_t r = pread(fd, buf, c->chunk, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      pass_fail(p, stk__from_errno(errno), "checkpoint %s: read failed: %s", path, errno);
      close(fd);
      return -1;
    }
    if (r == 0) break;
    off += (uint64_t)r;
  }
  close(fd);
  if (off != bytes) {
    pass_fail(p, STK_ETRUNC, "checkpoint %s: %s (the file's size is not the one written)", path,
              EIO);
    return -1;
  }
  return 0;
}

/* One file as DLIO's PyTorch backend writes or reads it (ckpt_torch.c). */
static int torch_file(struct pass *p, const char *path, const struct job *jb) {
  int fd = p->load ? open(path, O_RDONLY | O_CLOEXEC)
                   : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    pass_fail(p, stk__from_errno(errno), p->load ? "checkpoint %s: cannot open: %s"
                                                 : "checkpoint %s: cannot create: %s", path, errno);
    return -1;
  }
  uint64_t got = 0;
  uint32_t crcs = 0;
  int e = p->load ? stk__ckpt_torch_read(fd, jb->t, jb->nt, &got)
                  : stk__ckpt_torch_write(fd, jb->t, jb->nt, jb->state, &crcs);
  if (e) {
    pass_fail(p, stk__from_errno(e), p->load ? "checkpoint %s: read failed: %s"
                                             : "checkpoint %s: write failed: %s", path, e);
    close(fd);
    return -1;
  }
  __atomic_fetch_xor(&p->c->crcs, crcs, __ATOMIC_RELAXED);
  if (!p->load && p->c->info->fsync && fsync(fd) != 0) {
    pass_fail(p, stk__from_errno(errno), "checkpoint %s: fsync failed: %s", path, errno);
    close(fd);
    return -1;
  }
  if (close(fd) != 0 && !p->load) {
    pass_fail(p, stk__from_errno(errno), "checkpoint %s: close failed: %s", path, errno);
    return -1;
  }
  if (p->load && got != jb->f.bytes) {
    pass_fail(p, STK_ETRUNC, "checkpoint %s: %s (the file's size is not the one written)", path, EIO);
    return -1;
  }
  return 0;
}

static void *worker_main(void *arg) {
  struct worker *wk = arg;
  struct pass *p = wk->p;
  struct stk__ckpt *c = p->c;
  char path[1400];
  for (uint32_t r = wk->t; r < c->writers; r += c->threads) {
    for (uint32_t j = c->rank_start[r]; j < c->rank_start[r + 1]; j++) {
      if (__atomic_load_n(&p->err, __ATOMIC_RELAXED)) return NULL;
      const struct job *jb = &c->jobs[j];
      snprintf(path, sizeof path, "%s/%s/%s", c->info->dir, p->id, jb->f.name);
      if (c->info->io == STK_CKPT_IO_TORCH) {
        if (torch_file(p, path, jb)) return NULL;
      } else if ((p->load ? read_file : write_file)(p, path, jb->f.bytes, c->buf[wk->t])) {
        return NULL;
      }
    }
  }
  return NULL;
}

/* Run one save or load on all threads; its wall time in *secs. */
static int run_pass(struct stk__ckpt *c, uint64_t epoch, uint64_t step, int load, double *secs,
                    char *err) {
  struct pass p;
  memset(&p, 0, sizeof p);
  p.c = c;
  p.load = load;
  snprintf(p.id, sizeof p.id, "global_epoch%llu_step%llu", (unsigned long long)epoch,
           (unsigned long long)step);
  pthread_mutex_init(&p.mu, NULL);
  char dir[1400];
  snprintf(dir, sizeof dir, "%s/%s", c->info->dir, p.id);
  if (!load && mkdir(dir, 0755) != 0 && errno != EEXIST) {
    pthread_mutex_destroy(&p.mu);
    return stk__errf(err, stk__from_errno(errno), "checkpoint folder %s: cannot create: %s", dir,
                     strerror(errno));
  }
  if (!load && c->nids < c->capids) c->ids[c->nids++] = epoch << 32 | (step & 0xffffffffu);
  struct worker w[MAX_THREADS];
  uint32_t started = 0;
  uint64_t t0 = stk_now_ns();
  for (uint32_t t = 0; t < c->threads; t++) {
    w[t].p = &p;
    w[t].t = t;
    if (pthread_create(&w[t].th, NULL, worker_main, &w[t]) != 0) {
      pass_fail(&p, STK_ESYS, "checkpoint %s: cannot start a writer thread: %s", dir, EAGAIN);
      break;
    }
    started++;
  }
  for (uint32_t t = 0; t < started; t++) pthread_join(w[t].th, NULL);
  *secs = (double)(stk_now_ns() - t0) / 1e9;
  pthread_mutex_destroy(&p.mu);
  if (p.err) return stk__errf(err, p.err, "%s", p.errmsg);
  return 0;
}

/* Bytes this process may use: the host's memory, or its cgroup's
 * memory.max (cgroup v2) where that is less; 0 when neither is known. */
static double mem_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  double lim = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
  if (f) {
    unsigned long long v;
    if (fscanf(f, "%llu", &v) == 1 && v > 0 && (lim == 0 || (double)v < lim)) lim = (double)v;
    fclose(f);
  }
  return lim;
}

/* --checkpoint-io torch: each job's tensors, scaled (each rounded down, the
 * rounding put on the largest so that they add up to the file's bytes), and
 * the state holding them all, random, as DLIO's torch.rand tensors. */
static int torch_state(struct stk__ckpt *c, const struct stk_bench_opts *o, char *err) {
  uint64_t total = 0;
  size_t rank_file = 0;
  for (size_t j = 0; j < c->njobs; j++) {
    struct job *jb = &c->jobs[j];
    rank_file = j && c->jobs[j - 1].rank == jb->rank ? rank_file + 1 : 0;
    size_t cap = 6 * ((size_t)o->w->ckpt.num_layers + 3) + 8, nt;
    if (!(jb->t = malloc(cap * sizeof *jb->t)))
      return stk__errf(err, STK_ENOMEM, "out of memory for the checkpoint's tensors");
    int rc = stk__ckpt_file_tensors(o->w, c->info->ranks, jb->rank, rank_file, jb->t, cap, &nt, err);
    if (rc) return rc;
    uint64_t sum = 0;
    size_t big = 0;
    for (size_t k = 0; k < nt; k++) {
      jb->t[k] = (uint64_t)floor((double)jb->t[k] * c->info->scale);
      sum += jb->t[k];
      if (jb->t[k] > jb->t[big]) big = k;
    }
    if (!nt && jb->f.bytes) jb->t[nt++] = 0;
    /* each was rounded down, so sum <= f.bytes but for the doubles' last bit */
    if (nt && sum <= jb->f.bytes) jb->t[big] += jb->f.bytes - sum;
    else if (nt) jb->t[big] -= STK__MIN(jb->t[big], sum - jb->f.bytes);
    jb->nt = nt;
    total += jb->f.bytes;
  }
  /* The state, and during a load each thread's file read into fresh
   * memory beside it, times the job's processes on this host (MPI ranks
   * hold their own shares side by side; each takes the others' to be its
   * own, which the layouts DLIO shards make nearly so), within half of
   * what this process may use: the host's memory or its cgroup's limit,
   * whichever is less. */
  uint64_t largest = 0;
  for (size_t j = 0; j < c->njobs; j++) largest = STK__MAX(largest, c->jobs[j].f.bytes);
  double need = (double)total + (double)STK__MIN(c->writers, MAX_THREADS) * (double)largest;
  uint64_t procs = o->host_procs ? o->host_procs : 1;
  double limit = mem_limit();
  if (limit > 0 && need * (double)procs > limit / 2) {
    char b1[32], b2[32], times[64] = "";
    if (procs > 1)
      snprintf(times, sizeof times, ", times the %llu processes on this host,",
               (unsigned long long)procs);
    return stk__errf(err, STK_ENOMEM, "--checkpoint-io torch holds the ranks' state in memory as "
                     "DLIO does: %s%s with a load's reads%s is more than half of the %s this "
                     "process may use; lower --checkpoint-scale (now %g)",
                     procs > 1 ? "this process's " : "",
                     stk_fmt_bytes((uint64_t)need, b1, sizeof b1), times,
                     stk_fmt_bytes((uint64_t)limit, b2, sizeof b2), c->info->scale);
  }
  /* Held as torch holds a tensor (stk__ckpt_torch_alloc): small pages,
   * no huge-page advice. */
  if (!(c->state = stk__ckpt_torch_alloc(total)))
    return stk__errf(err, STK_ENOMEM, "out of memory for the checkpoint's state (%llu B)",
                     (unsigned long long)total);
  struct stk_rng rng;
  stk_rng_seed(&rng, 0x70c4 ^ o->rank);
  for (uint64_t i = 0; i + 8 <= total; i += 8) {
    uint64_t v = stk_rng_next(&rng);
    memcpy(c->state + i, &v, 8);
  }
  char *at = c->state;
  for (size_t j = 0; j < c->njobs; j++) {
    c->jobs[j].state = at;
    at += c->jobs[j].f.bytes;
  }
  return 0;
}

int stk__ckpt_open(struct stk__ckpt **out, const struct stk_bench_opts *o, uint32_t nacc,
                   uint32_t expected_saves, struct stk_bench_ckpt *info, char *err) {
  *out = NULL;
  uint32_t world = o->world ? o->world : 1, rank0 = o->rank * nacc;
  memset(info, 0, sizeof *info);
  info->ranks = nacc * world;
  info->scale = o->ckpt_scale > 0 ? o->ckpt_scale : 1;
  info->fsync = o->w->ckpt.fsync;
  info->direct = o->direct;
  info->io = o->ckpt_io;
  if (o->ckpt_io != STK_CKPT_IO_TIER && o->ckpt_io != STK_CKPT_IO_TORCH)
    return stk__errf(err, STK_EINVAL, "checkpoint io %d is not tier (%d) or torch (%d)", o->ckpt_io,
                     STK_CKPT_IO_TIER, STK_CKPT_IO_TORCH);
  if (o->ckpt_io == STK_CKPT_IO_TORCH && o->direct)
    return stk__errf(err, STK_EINVAL, "--checkpoint-io torch writes through the page cache, as "
                     "torch.save does: drop --direct");
  const char *dir = o->ckpt_dir ? o->ckpt_dir : o->w->ckpt.folder[0] ? o->w->ckpt.folder : "checkpoints";
  if (strlen(dir) >= sizeof info->dir - 160)
    return stk__errf(err, STK_ERANGE, "checkpoint folder %s: path too long", dir);
  snprintf(info->dir, sizeof info->dir, "%s", dir);
  if (!(info->scale > 0 && info->scale <= 1))
    return stk__errf(err, STK_EINVAL, "checkpoint scale %g is outside (0, 1]", info->scale);
  uint32_t writers;
  int rc = stk_ckpt_size(o->w, info->ranks, &info->dlio_bytes, &info->files, &writers, err);
  if (rc) return rc;
  struct stk__ckpt *c = calloc(1, sizeof *c);
  size_t cap = (size_t)o->w->ckpt.num_layers + 8, n;
  if (!c) return stk__errf(err, STK_ENOMEM, "out of memory");
  c->o = o;
  c->info = info;
  c->rank_start = calloc((size_t)nacc + 1, sizeof *c->rank_start);
  c->capids = (size_t)expected_saves + 1;
  c->ids = calloc(c->capids, sizeof *c->ids);
  struct stk_ckpt_file *f = malloc(cap * sizeof *f);
  if (!c->rank_start || !c->ids || !f) goto nomem;
  uint64_t largest = 0;
  for (uint32_t a = 0; a < nacc; a++) {
    if ((rc = stk_ckpt_rank_files(o->w, info->ranks, rank0 + a, f, cap, &n, err))) goto fail;
    if (!n) continue;
    struct job *nj = realloc(c->jobs, (c->njobs + n) * sizeof *nj);
    if (!nj) goto nomem;
    c->jobs = nj;
    c->rank_start[c->writers++] = (uint32_t)c->njobs;
    for (size_t i = 0; i < n; i++) {
      struct job *jb = &c->jobs[c->njobs++];
      memset(jb, 0, sizeof *jb);
      jb->rank = rank0 + a;
      jb->f = f[i];
      double b = ceil((double)f[i].bytes * info->scale);
      jb->f.bytes = f[i].bytes ? (uint64_t)STK__MAX(b, 1.0) : 0;
      info->bytes += jb->f.bytes;
      largest = STK__MAX(largest, jb->f.bytes);
    }
  }
  c->rank_start[c->writers] = (uint32_t)c->njobs;
  info->writers = c->writers;
  if (info->io == STK_CKPT_IO_TORCH && (rc = torch_state(c, o, err))) goto fail;
  c->threads = STK__MIN(c->writers, MAX_THREADS);
  c->chunk = (size_t)STK__MIN((uint64_t)CHUNK, (largest + ALIGN - 1) / ALIGN * ALIGN);
  if (c->chunk == 0) c->chunk = ALIGN;
  if (c->threads) {
    c->buf = calloc(c->threads, sizeof *c->buf);
    if (!c->buf) goto nomem;
    struct stk_rng rng;
    stk_rng_seed(&rng, 0xc4ec4 ^ rank0);
    for (uint32_t t = 0; t < c->threads; t++) {
      if (posix_memalign((void **)&c->buf[t], ALIGN, c->chunk)) goto nomem;
      uint64_t *q = (uint64_t *)c->buf[t];
      for (size_t i = 0; i < c->chunk / 8; i++) q[i] = stk_rng_next(&rng);
    }
  }
  /* mkdir -p, as DLIO creates its folder; each folder made is noted. */
  char part[1024];
  int mk = 0;
  for (size_t i = 1, dl = strlen(info->dir); i <= dl && !mk; i++) {
    if (info->dir[i] != '/' && info->dir[i] != 0) continue;
    memcpy(part, info->dir, i);
    part[i] = 0;
    if (mkdir(part, 0755) == 0) {
      if (c->nmade < 8) snprintf(c->made[c->nmade++], sizeof c->made[0], "%s", part);
    } else if (errno != EEXIST)
      mk = -1;
  }
  if (mk) {
    rc = stk__errf(err, stk__from_errno(errno), "checkpoint folder %s: cannot create: %s (give "
                   "--checkpoint-dir)", info->dir, strerror(errno));
    goto fail;
  }
  /* Refuse before writing when the checkpoints this run keeps would not
   * fit (the loads read them back, so all stay until the end). */
  struct statvfs v;
  double need = (double)info->bytes * STK__MAX(expected_saves, 1u);
  if (statvfs(info->dir, &v) == 0 && need > (double)v.f_bavail * (double)v.f_frsize) {
    char b1[32], b2[32];
    rc = stk__errf(err, STK_ENOSPC, "checkpoint folder %s: %u checkpoint(s) of %s need more than "
                   "the %s free there: lower --checkpoint-scale (now %g) or give --checkpoint-dir",
                   info->dir, STK__MAX(expected_saves, 1u), stk_fmt_bytes(info->bytes, b1, sizeof b1),
                   stk_fmt_bytes((uint64_t)v.f_bavail * v.f_frsize, b2, sizeof b2), info->scale);
    goto fail;
  }
  free(f);
  *out = c;
  return 0;
nomem:
  rc = stk__errf(err, STK_ENOMEM, "out of memory for the checkpoint's buffers");
fail:
  free(f);
  stk__ckpt_close(c);
  return rc;
}

int stk__ckpt_save(struct stk__ckpt *c, uint64_t epoch, uint64_t step, double *secs, char *err) {
  int rc = run_pass(c, epoch, step, 0, secs, err);
  if (rc) return rc;
  c->last_s = *secs;
  c->info->saves++;
  c->info->save_s += *secs;
  c->info->save_max_s = STK__MAX(c->info->save_max_s, *secs);
  return 0;
}

int stk__ckpt_load(struct stk__ckpt *c, uint64_t epoch, uint64_t step, double *secs, char *err) {
  int rc = run_pass(c, epoch, step, 1, secs, err);
  if (rc) return rc;
  c->last_s = *secs;
  c->info->loads++;
  c->info->load_s += *secs;
  c->info->load_max_s = STK__MAX(c->info->load_max_s, *secs);
  return 0;
}

void stk__ckpt_extend(struct stk__ckpt *c, int load, double secs) {
  c->last_s += secs;
  if (load) {
    c->info->load_s += secs;
    c->info->load_max_s = STK__MAX(c->info->load_max_s, c->last_s);
  } else {
    c->info->save_s += secs;
    c->info->save_max_s = STK__MAX(c->info->save_max_s, c->last_s);
  }
}

void stk__ckpt_close(struct stk__ckpt *c) {
  if (!c) return;
  if (!c->o->keep_checkpoints) {
    char path[1400];
    for (size_t i = 0; i < c->nids; i++) {
      char id[64];
      snprintf(id, sizeof id, "global_epoch%llu_step%llu", (unsigned long long)(c->ids[i] >> 32),
               (unsigned long long)(c->ids[i] & 0xffffffffu));
      for (size_t j = 0; j < c->njobs; j++) {
        snprintf(path, sizeof path, "%s/%s/%s", c->info->dir, id, c->jobs[j].f.name);
        unlink(path);
      }
      snprintf(path, sizeof path, "%s/%s", c->info->dir, id);
      rmdir(path); /* fails while another process's ranks still have files there */
    }
    for (int i = c->nmade - 1; i >= 0; i--) rmdir(c->made[i]); /* each only when empty */
  }
  for (uint32_t t = 0; c->buf && t < c->threads; t++) free(c->buf[t]);
  free(c->buf);
  for (size_t j = 0; c->jobs && j < c->njobs; j++) free(c->jobs[j].t);
  free(c->state);
  free(c->jobs);
  free(c->rank_start);
  free(c->ids);
  free(c);
}
