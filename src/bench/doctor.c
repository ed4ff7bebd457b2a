/* stoker doctor: measures this machine's ceilings on one scratch file in
 * the directory under test (writes, O_DIRECT reads, random IOPS, page
 * cache), in memory (memcpy), on one core (JPEG decode) and over PCIe
 * (pinned copies through a dlopen'ed libcudart), then divides them by each
 * workload preset's per-accelerator demand. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "../base/base.h"
#include "../gen/synth.h"
#include "bench_impl.h"
#include "cuda.h"
#include "doctor_impl.h"
#include "stoker/doctor.h"

#define PC_CHUNK (4u << 20) /* page-cache reads: 4 MiB per read() */
#define JPEG_QUALITY 90

static const struct {
  const char *key, *unit, *title;
} figs[STK_DOCTOR_NFIG] = {
#define STK__DOC_ROW(id, key, unit, title) {key, unit, title},
    STK_DOCTOR_FIGURES(STK__DOC_ROW)
#undef STK__DOC_ROW
};

const char *stk_doctor_fig_key(int i) { return i >= 0 && i < STK_DOCTOR_NFIG ? figs[i].key : NULL; }
const char *stk_doctor_fig_unit(int i) {
  return i >= 0 && i < STK_DOCTOR_NFIG ? figs[i].unit : NULL;
}
const char *stk_doctor_fig_title(int i) {
  return i >= 0 && i < STK_DOCTOR_NFIG ? figs[i].title : NULL;
}

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_dbl);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the phases --------------------------------------------------------- */

static const char *fs_name(long magic, char *buf, size_t n) {
  switch ((unsigned long)magic) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x01021994:
      return "tmpfs";
    case 0x794c7630:
      return "overlayfs";
    case 0x6969:
      return "nfs";
    case 0x65735546:
      return "fuse";
    case 0x2fc12fc1:
      return "zfs";
    case 0x858458f6:
      return "ramfs";
    default:
      snprintf(buf, n, "0x%lx", (unsigned long)magic);
      return buf;
  }
}

/* pgpgin of /proc/vmstat in bytes (the kernel counts KiB), or UINT64_MAX. */
static uint64_t vmstat_pgpgin(void) {
  FILE *f = fopen("/proc/vmstat", "r");
  if (!f) return UINT64_MAX;
  char line[128];
  uint64_t v = UINT64_MAX;
  unsigned long long t;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "pgpgin %llu", &t) == 1) {
      v = (uint64_t)t * 1024;
      break;
    }
  fclose(f);
  return v;
}

/* A start gate: threads check in and wait; the opener waits until the
 * threads it managed to start have all checked in, then lets them go
 * together, so that a timed phase starts with every thread ready (a
 * barrier would hang if a thread could not be created). */
struct gate {
  pthread_mutex_t m;
  pthread_cond_t c;
  uint32_t ready;
  int open;
};

static void gate_init(struct gate *g) {
  pthread_mutex_init(&g->m, NULL);
  pthread_cond_init(&g->c, NULL);
  g->ready = 0;
  g->open = 0;
}

static void gate_destroy(struct gate *g) {
  pthread_cond_destroy(&g->c);
  pthread_mutex_destroy(&g->m);
}

static void gate_wait(struct gate *g) {
  pthread_mutex_lock(&g->m);
  g->ready++;
  pthread_cond_broadcast(&g->c);
  while (!g->open) pthread_cond_wait(&g->c, &g->m);
  pthread_mutex_unlock(&g->m);
}

static void gate_open(struct gate *g, uint32_t n) {
  pthread_mutex_lock(&g->m);
  while (g->ready < n) pthread_cond_wait(&g->c, &g->m);
  g->open = 1;
  pthread_cond_broadcast(&g->c);
  pthread_mutex_unlock(&g->m);
}

struct pc_worker {
  struct run *x;
  int fd;
  uint64_t off, end;
  struct gate *start;
  int err_no;
};

static void *pc_thread(void *p) {
  struct pc_worker *w = p;
  uint8_t *buf = aligned_alloc(4096, PC_CHUNK);
  gate_wait(w->start);
  if (!buf) {
    w->err_no = ENOMEM;
    return NULL;
  }
  for (uint64_t off = w->off; off < w->end && !canceled(w->x);) {
    ssize_t n = pread(w->fd, buf, STK__MIN((uint64_t)PC_CHUNK, w->end - off), (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      w->err_no = n < 0 ? errno : EIO;
      break;
    }
    off += (uint64_t)n;
  }
  free(buf);
  return NULL;
}

/* One pass of all threads over the file, each over its own contiguous
 * part; *ns is the wall time from the start gate to the last join. */
static int pc_pass(struct run *x, int fd, uint64_t *ns) {
  uint32_t n = x->r->threads, started = 0;
  struct pc_worker *w = calloc(n, sizeof *w);
  pthread_t *th = calloc(n, sizeof *th);
  if (!w || !th) {
    free(w), free(th);
    return stk__errf(x->err, STK_ENOMEM, "out of memory");
  }
  struct gate start;
  gate_init(&start);
  uint64_t part = (x->size / n + 4095) / 4096 * 4096;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t a = STK__MIN(part * i, x->size), b = STK__MIN(a + part, x->size);
    w[i] = (struct pc_worker){.x = x, .fd = fd, .off = a, .end = b, .start = &start};
    if (pthread_create(&th[i], NULL, pc_thread, &w[i]) != 0) break;
    started++;
  }
  gate_open(&start, started);
  uint64_t t0 = stk_now_ns();
  int rc = started < n ? stk__errf(x->err, STK_ESYS, "cannot start %u reader threads", n) : 0;
  for (uint32_t i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    if (w[i].err_no && !rc)
      rc = stk__errf(x->err, stk__from_errno(w[i].err_no), "%s: read: %s", x->path,
                     strerror(w[i].err_no));
  }
  *ns = stk_now_ns() - t0;
  gate_destroy(&start);
  free(w), free(th);
  if (!rc && canceled(x)) rc = STK_ECANCELED;
  return rc;
}

static int phase_page_cache(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_PAGE_CACHE_READ];
  phase(x, STK_DOCTOR_PAGE_CACHE_READ);
  int fd = open(x->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return stk__errf(x->err, stk__from_errno(errno), "%s: %s", x->path, strerror(errno));
  uint64_t ns;
  int rc = pc_pass(x, fd, &ns); /* cold: brings the file into the cache */
  double t[32];
  int passes = 0;
  uint64_t min_ns = x->o->quick ? 200000000ull : 1000000000ull, spent = 0;
  uint64_t in0 = vmstat_pgpgin();
  while (!rc && passes < 32 && (passes < 3 || spent < min_ns)) {
    if ((rc = pc_pass(x, fd, &ns)) == 0) t[passes++] = secs(ns), spent += ns;
  }
  uint64_t in1 = vmstat_pgpgin();
  close(fd);
  if (rc) return rc;
  double bytes = (double)x->size * passes;
  x->r->page_cache_disk_bytes = in0 == UINT64_MAX || in1 == UINT64_MAX ? UINT64_MAX : in1 - in0;
  double disk_share =
      x->r->page_cache_disk_bytes == UINT64_MAX ? 0 : x->r->page_cache_disk_bytes / bytes;
  fig_ok(f, (double)x->size / median(t, passes),
         "median of %d warm passes, %u threads, 4 MiB read()s%s", passes, x->r->threads,
         disk_share > 0.05 ? "; the file did not stay cached (see page_cache_disk_bytes)" : "");
  return 0;
}

struct mc_worker {
  size_t bytes;
  int passes;
  struct gate *start;
  double bps; /* this thread's median pass */
  int failed;
};

static void *mc_thread(void *p) {
  struct mc_worker *w = p;
  uint8_t *a = aligned_alloc(4096, w->bytes), *b = aligned_alloc(4096, w->bytes);
  double t[16];
  if (a && b) {
    memset(a, 1, w->bytes), memset(b, 2, w->bytes); /* fault every page in first */
    memcpy(b, a, w->bytes);
  } else {
    w->failed = 1;
  }
  gate_wait(w->start);
  for (int i = 0; i < w->passes && !w->failed; i++) {
    uint64_t t0 = stk_now_ns();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, w->bytes);
    t[i] = secs(stk_now_ns() - t0);
  }
  if (!w->failed) w->bps = (double)w->bytes / median(t, w->passes);
  free(a), free(b);
  return NULL;
}

/* Every thread copies its own buffers, far bigger than the caches, at the
 * same time; the figure is the sum of their median pass rates (bytes
 * copied, not bytes moved: a copy reads and writes each byte). */
static int phase_memcpy(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_MEMCPY];
  phase(x, STK_DOCTOR_MEMCPY);
  uint32_t n = x->r->threads, started = 0;
  /* Far bigger than any cache, but at most 2 GiB of buffers in all. */
  size_t bytes = (size_t)(x->o->quick ? 32 : 128) << 20;
  bytes = STK__MAX(STK__MIN(bytes, ((size_t)1 << 30) / n), (size_t)8 << 20);
  struct mc_worker *w = calloc(n, sizeof *w);
  pthread_t *th = calloc(n, sizeof *th);
  if (!w || !th) {
    free(w), free(th);
    return stk__errf(x->err, STK_ENOMEM, "out of memory");
  }
  struct gate start;
  gate_init(&start);
  for (uint32_t i = 0; i < n; i++) {
    w[i] = (struct mc_worker){.bytes = bytes, .passes = 7, .start = &start};
    if (pthread_create(&th[i], NULL, mc_thread, &w[i]) != 0) break;
    started++;
  }
  gate_open(&start, started);
  double sum = 0;
  int failed = started < n;
  for (uint32_t i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    sum += w[i].bps;
    failed |= w[i].failed;
  }
  gate_destroy(&start);
  free(w), free(th);
  if (failed)
    fig_bad(f, "could not start %u threads with 2 x %zu MiB each", n, bytes >> 20);
  else
    fig_ok(f, sum, "%u threads at once, each copying %zu MiB, median of 7 passes", n, bytes >> 20);
  return canceled(x) ? STK_ECANCELED : 0;
}

/* Full-size decodes to packed RGB of ImageNet-sized synthetic JPEGs on
 * this thread, per second of this thread's CPU time, so that another
 * process on the core does not lower the figure. */
static int phase_jpeg(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_JPEG_PER_CORE];
  phase(x, STK_DOCTOR_JPEG_PER_CORE);
  enum { NIMG = 16 };
  uint8_t *img[NIMG] = {0};
  size_t len[NIMG];
  int w[NIMG], h[NIMG], n = x->o->quick ? 8 : NIMG, rc = 0;
  char err[STK_ERRMSG_MAX];
  uint64_t wsum = 0, hsum = 0;
  for (int i = 0; i < n && !rc; i++) {
    struct stk_rng r;
    stk_rng_seed(&r, stk_mix64(1, (uint64_t)i));
    /* ImageNet's mean is about 400x350; most are 500x375 or 500x333. */
    w[i] = 400 + (int)stk_rng_below(&r, 101);
    h[i] = 333 + (int)stk_rng_below(&r, 43);
    if (stk__jpeg_synth(&r, w[i], h[i], JPEG_QUALITY, &img[i], &len[i], err) != 0) rc = -1;
    wsum += (uint64_t)w[i], hsum += (uint64_t)h[i];
  }
  tjhandle tj = rc ? NULL : tjInitDecompress();
  uint8_t *out = malloc((size_t)512 * 512 * 3);
  if (rc) {
    fig_bad(f, "could not encode test images: %s", err);
  } else if (!tj || !out) {
    fig_bad(f, "could not start turbojpeg");
  } else {
    uint64_t want = x->o->quick ? 250000000ull : 1000000000ull, images = 0, c0 = 0;
    int bad = 0;
    for (int pass = 0; !bad && !canceled(x); pass++) {
      if (pass == 1) c0 = thread_cpu_ns(), images = 0; /* pass 0 warms up */
      for (int i = 0; i < n && !bad; i++, images++)
        if (tjDecompress2(tj, img[i], len[i], out, w[i], 0, h[i], TJPF_RGB, 0) != 0 &&
            tjGetErrorCode(tj) != TJERR_WARNING)
          bad = 1;
      if (pass >= 1 && thread_cpu_ns() - c0 >= want) break;
    }
    if (bad)
      fig_bad(f, "turbojpeg: %s", tjGetErrorStr2(tj));
    else if (!canceled(x))
      fig_ok(
          f, (double)images / secs(thread_cpu_ns() - c0),
          "tjDecompress2 to RGB, %d synthetic images, mean %llux%llu, quality %d, per CPU second",
          n, (unsigned long long)(wsum / (uint64_t)n), (unsigned long long)(hsum / (uint64_t)n),
          JPEG_QUALITY);
    x->r->jpeg_width = (uint32_t)(wsum / (uint64_t)n);
    x->r->jpeg_height = (uint32_t)(hsum / (uint64_t)n);
  }
  if (tj) tjDestroy(tj);
  free(out);
  for (int i = 0; i < n; i++) free(img[i]);
  return canceled(x) ? STK_ECANCELED : 0;
}

static int phase_cuda(struct run *x) {
  struct stk_doctor_figure *f = &x->r->fig[STK_DOCTOR_CUDA_H2D];
  phase(x, STK_DOCTOR_CUDA_H2D);
  char err[STK_ERRMSG_MAX];
  struct stk__cuda *c;
  if (stk__cuda_open(&c, err) != 0) {
    fig_bad(f, "%s", err);
    return 0;
  }
  snprintf(x->r->cuda_device, sizeof x->r->cuda_device, "%s", stk__cuda_device_name(c));
  size_t bytes = (size_t)(x->o->quick ? 64 : 256) << 20;
  double bps;
  if (stk__cuda_h2d_bw(c, bytes, 5, &bps, err) != 0)
    fig_bad(f, "%s", err);
  else
    fig_ok(f, bps, "cudaMemcpy of %zu MiB from cudaMallocHost memory to device 0 (%s), median of 5",
           bytes >> 20, x->r->cuda_device[0] ? x->r->cuda_device : "unnamed");
  stk__cuda_close(c);
  return 0;
}

/* ---- setup, the run, the feed table ------------------------------------ */

static int check_dir(struct run *x, const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return stk__errf(x->err, errno == ENOENT ? STK_ENOENT : stk__from_errno(errno), "%s: %s", dir,
                     errno == ENOENT ? "no such directory" : strerror(errno));
  if (!S_ISDIR(st.st_mode)) return stk__errf(x->err, STK_EINVAL, "%s: not a directory", dir);
  struct statfs sf;
  char hex[16];
  if (statfs(dir, &sf) == 0)
    snprintf(x->r->fs_type, sizeof x->r->fs_type, "%s", fs_name((long)sf.f_type, hex, sizeof hex));
  else
    snprintf(x->r->fs_type, sizeof x->r->fs_type, "unknown");
  struct statvfs sv;
  if (statvfs(dir, &sv) == 0) {
    uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize, headroom = 64u << 20;
    if (avail < headroom || avail - headroom < x->size) {
      /* Say the whole need (file + headroom) and the largest --size that
       * fits, so the user is not left to guess why "900 MiB free" refuses
       * an 880 MiB file. */
      char a[32], b[32], c[32], fix[96];
      uint64_t fits = avail > headroom ? (avail - headroom) >> 20 << 20 : 0;
      if (fits >= (8u << 20))
        snprintf(fix, sizeof fix, "use --size %lluMiB or less, or another --dir",
                 (unsigned long long)(fits >> 20));
      else
        snprintf(fix, sizeof fix, "free some space or use another --dir");
      return stk__errf(x->err, STK_ENOSPC,
                       "%s: the %s scratch file does not fit: it needs %s free (the file plus "
                       "64 MiB of headroom), and %s is; %s",
                       dir, stk_fmt_bytes(x->size, a, sizeof a),
                       stk_fmt_bytes(x->size > UINT64_MAX - headroom ? UINT64_MAX
                                                                     : x->size + headroom,
                                     c, sizeof c),
                       stk_fmt_bytes(avail, b, sizeof b), fix);
    }
  }
  return 0;
}

static int measure(struct run *x) {
  int rc = 0;
  int need_file = wanted(x, STK_DOCTOR_BUFFERED_WRITE) || wanted(x, STK_DOCTOR_SEQ_WRITE) ||
                  wanted(x, STK_DOCTOR_SEQ_READ) || wanted(x, STK_DOCTOR_RAND_IOPS) ||
                  wanted(x, STK_DOCTOR_PAGE_CACHE_READ);
  if (need_file) {
    snprintf(x->path, sizeof x->path, "%s/stoker-doctor.XXXXXX", x->r->dir);
    int fd = mkstemp(x->path);
    if (fd < 0) {
      int e = errno;
      x->path[0] = 0;
      return stk__errf(x->err, stk__from_errno(e), "%s: cannot create a scratch file: %s",
                       x->r->dir, strerror(e));
    }
    close(fd);
  }
  if (!rc && wanted(x, STK_DOCTOR_BUFFERED_WRITE)) rc = stk__doctor_phase_buffered_write(x);
  if (!rc && wanted(x, STK_DOCTOR_SEQ_WRITE)) rc = stk__doctor_phase_seq_write(x);
  int need_data = wanted(x, STK_DOCTOR_SEQ_READ) || wanted(x, STK_DOCTOR_RAND_IOPS) ||
                  wanted(x, STK_DOCTOR_PAGE_CACHE_READ);
  uint64_t ns;
  if (!rc && need_data && !x->filled) rc = stk__doctor_write_buffered(x, &ns);
  if (!rc && wanted(x, STK_DOCTOR_SEQ_READ)) rc = stk__doctor_phase_seq_read(x);
  if (!rc && wanted(x, STK_DOCTOR_RAND_IOPS)) rc = stk__doctor_phase_rand_iops(x);
  if (!rc && wanted(x, STK_DOCTOR_PAGE_CACHE_READ)) rc = phase_page_cache(x);
  if (x->path[0]) { /* the scratch file is no longer needed: free the space now */
    unlink(x->path);
    x->path[0] = 0;
  }
  if (!rc && wanted(x, STK_DOCTOR_MEMCPY)) rc = phase_memcpy(x);
  if (!rc && wanted(x, STK_DOCTOR_JPEG_PER_CORE)) rc = phase_jpeg(x);
  if (!rc && wanted(x, STK_DOCTOR_CUDA_H2D)) rc = phase_cuda(x);
  if (!rc && canceled(x)) rc = STK_ECANCELED;
  if (rc == STK_ECANCELED) stk__errf(x->err, rc, "interrupted; removed the scratch file");
  return rc;
}

void stk_doctor_opts_init_sized(struct stk_doctor_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

/* The run into a whole result of this library's size (r zeroed). */
static int doctor_run(const struct stk_doctor_opts *o, struct stk_doctor_result *r, char *errmsg) {
  for (int i = 0; i < STK_DOCTOR_NFIG; i++) fig_bad(&r->fig[i], "not measured (--only)");
  r->page_cache_disk_bytes = UINT64_MAX;
  struct run x = {.o = o, .r = r, .use_uring = 1};
  uint64_t t0 = stk_now_ns();
  const char *dir = o->dir;
  if (!dir || !*dir) dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/var/tmp";
  snprintf(r->dir, sizeof r->dir, "%s", dir);
  uint64_t size = o->size ? o->size : (o->quick ? 128u << 20 : 1u << 30);
  if (size < (8u << 20))
    return stk__errf(errmsg, STK_EINVAL, "scratch file size must be at least 8 MiB");
  x.size = r->size = size / SEQ_BS * SEQ_BS; /* whole O_DIRECT requests only */
  const char *eng = o->io_engine;
  if (eng && strcmp(eng, "auto") && strcmp(eng, "io_uring") && strcmp(eng, "threads"))
    return stk__errf(errmsg, STK_EINVAL, "unknown I/O engine '%s' (auto, io_uring, threads)", eng);
  x.use_uring = !eng || strcmp(eng, "threads") != 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  r->cores = cores > 0 ? (uint32_t)cores : 1;
  r->threads = o->threads ? STK__MIN(o->threads, 256u) : r->cores;
  int rc = check_dir(&x, dir);
  if (!rc) rc = measure(&x);
  if (x.path[0]) unlink(x.path);
  r->seconds = secs(stk_now_ns() - t0);
  if (rc) return stk__errf(errmsg, rc, "%s", x.err);
  struct stk_workload w;
  stk_workload_init(&w);
  for (int i = 0; stk_workload_preset_at(i, &w) == 0 && r->nfeed < STK_DOCTOR_MAX_FEED - 1; i++) {
    stk_doctor_feed(r, &w, 0, &r->feed[r->nfeed++]);
    if (!strcmp(w.name, "resnet50")) stk_doctor_feed(r, &w, 1, &r->feed[r->nfeed++]);
  }
  return 0;
}

void stk_doctor_result_init_sized(struct stk_doctor_result *r, size_t size) {
  stk__opts_init(r, sizeof *r, size);
}

int stk_doctor_run(const struct stk_doctor_opts *user, struct stk_doctor_result *rout,
                   char *errmsg) {
  struct stk_doctor_opts own;
  int rc = stk__opts_take(&own, sizeof own, user, "stk_doctor_opts", errmsg);
  if (rc) return rc;
  /* The caller's result gets no more than its struct_size. */
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  if (!r) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  rc = doctor_run(&own, r, errmsg);
  stk__result_give(rout, r, sizeof *r);
  free(r);
  return rc;
}

static double ratio(const struct stk_doctor_figure *f, double per) {
  return f->valid && per > 0 ? f->value / per : NAN;
}

void stk_doctor_feed(const struct stk_doctor_result *rin, const struct stk_workload *win, int jpeg,
                     struct stk_doctor_feed *out) {
  memset(out, 0, sizeof *out);
  /* Only fig and cores are read, which every struct_size holds (struct_size
   * 0 = this header's; below cores: nothing to read). */
  size_t rn = rin->struct_size ? rin->struct_size : sizeof *rin;
  if (rn < offsetof(struct stk_doctor_result, cores) + sizeof rin->cores) return;
  const struct stk_doctor_result *r = rin;
  struct stk_workload own; /* a larger struct than this library's: logged, left empty */
  char err[STK_ERRMSG_MAX];
  if (stk__workload_take(&own, win, err)) {
    stk_log(STK_LOG_ERROR, "%s", err);
    return;
  }
  const struct stk_workload *w = &own;
  /* (bounded: the caller's copy need not be terminated) */
  snprintf(out->workload, sizeof out->workload, "%.*s", (int)sizeof w->name - 1, w->name);
  snprintf(out->accel, sizeof out->accel, "%.*s", (int)sizeof w->accel - 1, w->accel);
  out->jpeg = jpeg;
  out->samples_per_s = w->compute_s > 0 ? w->batch / w->compute_s : NAN;
  /* A token window reads seq_len tokens of the corpus (record_bytes is a
   * document's bytes, doc_tokens its tokens); a sample, its record. */
  double per_sample = w->seq_len && w->doc_tokens
                          ? w->seq_len * (w->record_bytes / (double)w->doc_tokens)
                          : w->record_bytes;
  out->demand_bps = out->samples_per_s * per_sample;
  out->n_seq_read = ratio(&r->fig[STK_DOCTOR_SEQ_READ], out->demand_bps);
  out->n_page_cache = ratio(&r->fig[STK_DOCTOR_PAGE_CACHE_READ], out->demand_bps);
  /* Small records cost one request each, so the device's random-read rate
   * bounds them; big ones are bounded by bandwidth, counted above. */
  out->n_iops =
      w->record_bytes <= MiB ? ratio(&r->fig[STK_DOCTOR_RAND_IOPS], out->samples_per_s) : NAN;
  out->n_jpeg =
      jpeg ? ratio(&r->fig[STK_DOCTOR_JPEG_PER_CORE], out->samples_per_s) * r->cores : NAN;
  const double n[] = {out->n_seq_read, out->n_page_cache, out->n_iops, out->n_jpeg};
  static const char *const by[] = {"device read", "page cache", "random IOPS", "JPEG decode"};
  out->n_limit = NAN;
  out->limit_by = "unknown";
  for (size_t i = 0; i < STK__ARRAY_LEN(n); i++)
    if (!isnan(n[i]) && (isnan(out->n_limit) || n[i] < out->n_limit)) {
      out->n_limit = n[i];
      out->limit_by = by[i];
    }
}

/* ---- reports ------------------------------------------------------------ */

static const char *fmt_rate(double bps, char *buf, size_t n) {
  if (bps >= 1024 * MiB)
    snprintf(buf, n, "%.2f GiB/s", bps / (1024 * MiB));
  else
    snprintf(buf, n, "%.1f MiB/s", bps / MiB);
  return buf;
}

static const char *fmt_n(double v, char *buf, size_t n) {
  if (isnan(v))
    snprintf(buf, n, "-");
  else if (v >= 1000)
    snprintf(buf, n, "%.0f", v);
  else
    snprintf(buf, n, "%.1f", v);
  return buf;
}

static void print_full(const struct stk_doctor_result *r, FILE *f) {
  char a[48];
  fprintf(f, "stoker doctor: %s (%s), %s scratch file, %u threads, %u cores, %.1f s\n\n", r->dir,
          r->fs_type, stk_fmt_bytes(r->size, a, sizeof a), r->threads, r->cores, r->seconds);
  fprintf(f, "  %-42s %s\n", "ceiling", "value");
  for (int i = 0; i < STK_DOCTOR_NFIG; i++) {
    const struct stk_doctor_figure *g = &r->fig[i];
    if (!g->valid) {
      fprintf(f, "  %-42s invalid: %s\n", figs[i].title, g->reason);
      continue;
    }
    fprintf(f, "  %-42s ", figs[i].title);
    if (!strcmp(figs[i].unit, "bytes/s"))
      fprintf(f, "%s\n", fmt_rate(g->value, a, sizeof a));
    else if (i == STK_DOCTOR_RAND_IOPS)
      fprintf(f, "%.0f reads/s (%s)\n", g->value, fmt_rate(g->value * RAND_BS, a, sizeof a));
    else
      fprintf(f, "%.0f %s\n", g->value, figs[i].unit);
  }
  for (int w = 1; w >= 0; w--) { /* the curve behind the sequential figures */
    int any = 0;
    for (int i = 0; i < r->ncurve; i++) {
      const struct stk_doctor_point *p = &r->curve[i];
      if (p->write != w) continue;
      if (!any++)
        fprintf(f, "  %-42s", w ? "  O_DIRECT write curve (depth x jobs)"
                                : "  O_DIRECT read curve (depth x jobs)");
      if (any > 1 && (any - 1) % 4 == 0) fprintf(f, "\n  %-42s", "");
      fprintf(f, " %2ux%u %-11s", p->depth, p->jobs, fmt_rate(p->bytes_per_s, a, sizeof a));
    }
    if (any) fputc('\n', f);
  }
  if (r->fig[STK_DOCTOR_PAGE_CACHE_READ].valid && r->page_cache_disk_bytes != UINT64_MAX)
    fprintf(f, "  (page-cache passes read %s from disk)\n",
            stk_fmt_bytes(r->page_cache_disk_bytes, a, sizeof a));
  if (!r->nfeed) return;
  fprintf(
      f,
      "\naccelerators this machine could feed, by resource (demand per accelerator =\n"
      "batch x record size / compute time per batch; '-' = does not apply or not measured)\n\n");
  fprintf(f, "  %-10s %-6s %14s %9s %9s %9s %9s %7s  %s\n", "workload", "accel", "demand/accel",
          "dev read", "pg cache", "IOPS", "JPEG", "limit", "limited by");
  for (int i = 0; i < r->nfeed; i++) {
    const struct stk_doctor_feed *d = &r->feed[i];
    char c1[16], c2[16], c3[16], c4[16], c5[16];
    fprintf(f, "  %-10s %-6s %14s %9s %9s %9s %9s %7s  %s\n", d->workload, d->accel,
            fmt_rate(d->demand_bps, a, sizeof a), fmt_n(d->n_seq_read, c1, sizeof c1),
            fmt_n(d->n_page_cache, c2, sizeof c2), fmt_n(d->n_iops, c3, sizeof c3),
            fmt_n(d->n_jpeg, c4, sizeof c4), fmt_n(d->n_limit, c5, sizeof c5), d->limit_by);
    if (d->jpeg)
      fprintf(f, "  %-17s ^ if the records were JPEGs decoded on this CPU (%u cores)\n", "",
              r->cores);
  }
}

static int json_full(const struct stk_doctor_result *r, FILE *f) {
  struct stk_json j;
  stk_json_init(&j, f, 2);
  stk_json_obj_begin(&j);
  stk_json_kstr(&j, "dir", r->dir);
  stk_json_kstr(&j, "fs_type", r->fs_type);
  stk_json_ku64(&j, "size_bytes", r->size);
  stk_json_ku64(&j, "threads", r->threads);
  stk_json_ku64(&j, "cores", r->cores);
  stk_json_kdbl(&j, "seconds", r->seconds);
  stk_json_key(&j, "figures");
  stk_json_obj_begin(&j);
  for (int i = 0; i < STK_DOCTOR_NFIG; i++) {
    const struct stk_doctor_figure *g = &r->fig[i];
    stk_json_key(&j, figs[i].key);
    stk_json_obj_begin(&j);
    stk_json_kdbl(&j, "value", g->valid ? g->value : NAN);
    stk_json_kstr(&j, "unit", figs[i].unit);
    stk_json_key(&j, "valid");
    stk_json_bool(&j, g->valid);
    stk_json_kstr(&j, g->valid ? "method" : "reason", g->reason);
    stk_json_obj_end(&j);
  }
  stk_json_obj_end(&j);
  stk_json_key(&j, "seq_curve");
  stk_json_arr_begin(&j);
  for (int i = 0; i < r->ncurve; i++) {
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "rw", r->curve[i].write ? "write" : "read");
    stk_json_ku64(&j, "depth", r->curve[i].depth);
    stk_json_ku64(&j, "jobs", r->curve[i].jobs);
    stk_json_kdbl(&j, "bytes_per_s", r->curve[i].bytes_per_s);
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_key(&j, "page_cache_disk_bytes");
  if (r->page_cache_disk_bytes == UINT64_MAX)
    stk_json_null(&j);
  else
    stk_json_u64(&j, r->page_cache_disk_bytes);
  stk_json_key(&j, "jpeg_image");
  stk_json_obj_begin(&j);
  stk_json_ku64(&j, "width", r->jpeg_width);
  stk_json_ku64(&j, "height", r->jpeg_height);
  stk_json_ku64(&j, "quality", JPEG_QUALITY);
  stk_json_obj_end(&j);
  stk_json_key(&j, "cuda_device");
  if (r->cuda_device[0])
    stk_json_str(&j, r->cuda_device);
  else
    stk_json_null(&j);
  stk_json_key(&j, "feed");
  stk_json_arr_begin(&j);
  for (int i = 0; i < r->nfeed; i++) {
    const struct stk_doctor_feed *d = &r->feed[i];
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "workload", d->workload);
    stk_json_kstr(&j, "accel", d->accel);
    stk_json_key(&j, "jpeg");
    stk_json_bool(&j, d->jpeg);
    stk_json_kdbl(&j, "demand_bytes_per_s", d->demand_bps);
    stk_json_kdbl(&j, "samples_per_s", d->samples_per_s);
    stk_json_kdbl(&j, "n_seq_read", d->n_seq_read);
    stk_json_kdbl(&j, "n_page_cache", d->n_page_cache);
    stk_json_kdbl(&j, "n_iops", d->n_iops);
    stk_json_kdbl(&j, "n_jpeg", d->n_jpeg);
    stk_json_kdbl(&j, "n_limit", d->n_limit);
    stk_json_kstr(&j, "limited_by", d->limit_by);
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_obj_end(&j);
  fputc('\n', f);
  return ferror(f) ? STK_EIO : 0;
}

/* The caller's result, read no further than its struct_size. */
static struct stk_doctor_result *take_result(const struct stk_doctor_result *rin) {
  struct stk_doctor_result *r = malloc(sizeof *r);
  if (r) stk__result_take(r, sizeof *r, rin);
  return r;
}

void stk_doctor_print(const struct stk_doctor_result *rin, FILE *f) {
  struct stk_doctor_result *r = take_result(rin);
  if (r) print_full(r, f);
  free(r);
}

int stk_doctor_write_json(const struct stk_doctor_result *rin, FILE *f) {
  struct stk_doctor_result *r = take_result(rin);
  int rc = r ? json_full(r, f) : STK_ENOMEM;
  free(r);
  return rc;
}
