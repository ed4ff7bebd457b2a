/* T2-T4 of issue 18: token windows (stoker/tokens.h) served by the loader
 * from a Megatron corpus whose window index is already built. Driven by
 * bench/tokens.sh, which generates the corpora and prints the table.
 *
 * usage:
 *   tokens t3 PREFIX SEQ_LEN int32|int64 ROUNDS SECONDS THREADS BATCH
 *       steady state: per round, the copy ceiling (THREADS threads each
 *       memcpy'ing 128 MiB buffers, as `stoker doctor` measures it: bytes
 *       copied per second, each read once and written once) and then a
 *       loader over the windows for SECONDS, the consumer taking and
 *       releasing batches; the medians of the
 *       rounds and their ratio, with the disk reads during the loader runs.
 *       The ratio counts the token bytes the loader writes (4 or 8 per
 *       token, whatever the corpus's dtype: a uint16 corpus is read at 2).
 *       Also per second of CPU time (ratio_cpu): the memcpy threads' own
 *       CPU time, and the whole process's while the loader runs (workers,
 *       reader, consumer), which a machine shared with other work moves
 *       far less than the wall-clock rates. bin_pmd_mapped_bytes: how much
 *       of the corpus's .bin is mapped in 2 MiB pages (the page cache's
 *       folios; docs/internals/tokens.md, T3 fourth pass). cpu_share_*:
 *       what part of the process's CPU time in the timed phases went to
 *       the decode workers (thread name stk-decode, time on a CPU from
 *       /proc/self/task/TID/schedstat), the reader (stk-read) and the
 *       consumer (this thread); decode_cpu_ns_per_window: the workers'
 *       CPU time per window delivered; ring_depth_max: the deepest the
 *       batch ring got; sleeps_per_batch_*: the voluntary context switches
 *       (waits that slept) of the workers, the reader and the consumer per
 *       batch delivered. TOKENS_PREFETCH and TOKENS_PREFETCH_MAX in the
 *       environment set the loader's prefetch and prefetch_max (A/B runs
 *       of the ring's depth with one binary).
 *   tokens copy PREFIX SEQ_LEN int32|int64 ROUNDS
 *       the window copy alone, on one thread: per round, 2000 windows in
 *       order, each after asking for the next (stk__tokens_prefetch, as a
 *       loader worker does), into a ring of 4 batches of 8 rows, against
 *       one memcpy of 128 MiB on the same thread; the medians of the
 *       rounds per second of this thread's CPU time (no pipeline, no
 *       other threads: where T3's time goes that is not the copy).
 *   tokens t4 PREFIX SEQ_LEN SAMPLES ROUNDS
 *       resume: stk_tokens_open over a built index (timed), then per round
 *       a state at a large position -> stk_loader_open_tokens(resume) ->
 *       the first batch, timed, its first window checked against
 *       stk_tokens_window.
 *   tokens t2 PREFIX SEQ_LEN SAMPLES LAUNCH_NS
 *       start-up, one process of many: open the corpus and its index
 *       (SAMPLES windows, 0 = one epoch), a
 *       loader, the first batch; one JSON line with the time since
 *       LAUNCH_NS (CLOCK_REALTIME when the script launched them all), the
 *       time inside this process, and whether any index was rebuilt.
 *   tokens digest PREFIX SEQ_LEN int32|int64
 *       a CRC32C of every window, mask and boundary list in order (to
 *       check that a change to the copy serves the same bytes).
 *   tokens evict FILE...
 *       write each file's dirty pages and drop its pages from the page
 *       cache (posix_fadvise DONTNEED; pages another process maps stay),
 *       so that the next reader brings it in as a corpus read from disk
 *       is: T3's cold case, where the loader's MADV_HUGEPAGE mapping
 *       fills the page cache (docs/internals/tokens.md, T3 fifth pass).
 *       Prints the bytes still cached (mincore over a mapping).
 * Every figure is printed as one JSON line on stdout. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/loader/tokens_impl.h"
#include "stoker/stoker.h"

static double clock_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static void die(const char *what, const char *detail) {
  fprintf(stderr, "tokens: %s: %s\n", what, detail);
  exit(1);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct stk_tokens *open_tokens(const char *path, uint32_t seq, int type, uint64_t samples,
                                      double *secs) {
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = seq;
  o.token_type = type;
  o.samples = samples;
  struct stk_tokens *t = NULL;
  char err[STK_ERRMSG_MAX] = "";
  double t0 = now_s();
  if (stk_tokens_open(&t, 1, &path, NULL, &o, err)) die(path, err);
  if (secs) *secs = now_s() - t0;
  return t;
}

static int tok_type(const char *s) {
  if (!strcmp(s, "int32")) return STK_TOKENS_INT32;
  if (!strcmp(s, "int64")) return STK_TOKENS_INT64;
  die(s, "not int32 or int64");
  return 0;
}

static int built(const struct stk_tokens *t) {
  int b = 0;
  for (int i = 0; i < stk_tokens_num_sources(t); i++) {
    struct stk_tokens_source s;
    stk_tokens_source(t, i, &s);
    b |= s.built;
  }
  return b;
}

static struct stk_loader *open_loader(struct stk_tokens *t, uint32_t batch, uint32_t threads,
                                      uint32_t epochs, const struct stk_sampler_state *resume) {
  struct stk_loader_opts lo;
  stk_loader_opts_init(&lo);
  lo.batch_size = batch;
  lo.threads = threads;
  lo.epochs = epochs;
  lo.resume = resume;
  /* The ring's depth, for A/B runs of one binary (docs/internals/tokens_t3.md):
   * TOKENS_PREFETCH and TOKENS_PREFETCH_MAX set stk_loader_opts' prefetch
   * and prefetch_max; unset, the library's defaults. */
  const char *e = getenv("TOKENS_PREFETCH");
  if (e) lo.prefetch = (uint32_t)atoi(e);
  if ((e = getenv("TOKENS_PREFETCH_MAX"))) lo.prefetch_max = (uint32_t)atoi(e);
  struct stk_loader *l = NULL;
  char err[STK_ERRMSG_MAX] = "";
  if (stk_loader_open_tokens(&l, t, &lo, err)) die("stk_loader_open_tokens", err);
  return l;
}

/* System-wide pages read from storage (/proc/vmstat pgpgin, KiB) and this
 * process's storage reads (/proc/self/io read_bytes). */
static uint64_t vmstat_pgpgin_kib(void) {
  FILE *f = fopen("/proc/vmstat", "r");
  char k[64];
  unsigned long long v;
  uint64_t r = 0;
  while (f && fscanf(f, "%63s %llu", k, &v) == 2)
    if (!strcmp(k, "pgpgin")) r = v;
  if (f) fclose(f);
  return r;
}

static uint64_t self_read_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  char k[64];
  unsigned long long v;
  uint64_t r = 0;
  while (f && fscanf(f, "%63s %llu", k, &v) == 2)
    if (!strcmp(k, "read_bytes:")) r = v;
  if (f) fclose(f);
  return r;
}

/* ---- t3: steady state against the copy ceiling ------------------------ */

struct mc {
  size_t bytes;
  pthread_barrier_t *gate;
  double bps, cpu_bps; /* per second of wall time, of this thread's CPU time */
};

static void *mc_thread(void *p) {
  struct mc *w = p;
  uint8_t *a = aligned_alloc(4096, w->bytes), *b = aligned_alloc(4096, w->bytes);
  if (!a || !b) die("memcpy", "out of memory");
  memset(a, 1, w->bytes), memset(b, 2, w->bytes);
  memcpy(b, a, w->bytes);
  pthread_barrier_wait(w->gate);
  double t[7], c[7];
  for (int i = 0; i < 7; i++) {
    double t0 = now_s(), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    memcpy(i % 2 ? a : b, i % 2 ? b : a, w->bytes);
    t[i] = now_s() - t0;
    c[i] = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  }
  w->bps = (double)w->bytes / median(t, 7);
  w->cpu_bps = (double)w->bytes / median(c, 7);
  free(a), free(b);
  return NULL;
}

/* `stoker doctor`'s memcpy figure, measured here: n threads at once, each
 * copying its own 128 MiB, the sum of their median pass rates; *cpu_bps
 * the mean of their rates per second of their own CPU time. */
/* Bytes of this process's mappings of PREFIX*.bin (PREFIX as given,
 * found anywhere in the mapped path)
 * mapped in 2 MiB pages (FilePmdMapped in /proc/self/smaps): whether the
 * page cache holds the corpus in 2 MiB folios, which T3 depends on
 * (docs/internals/tokens.md, T3 fourth pass). */
static uint64_t bin_pmd_bytes(const char *prefix) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return 0;
  char line[4096], *q;
  uint64_t kib = 0, v;
  int in = 0;
  size_t n = strlen(prefix);
  while (fgets(line, sizeof line, f)) {
    char *path = strchr(line, '/');
    if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ') && path) /* a mapping */
      in = (q = strstr(path, prefix)) && strstr(q + n, ".bin\n");
    else if (in && sscanf(line, "FilePmdMapped: %" SCNu64 " kB", &v) == 1)
      kib += v;
  }
  fclose(f);
  return kib * 1024;
}

/* CPU time in s (time on a CPU, /proc/self/task/TID/schedstat) of this
 * process's loader threads by name: [0] the decode workers (stk-decode),
 * [1] the reader (stk-read); [2] and [3] their voluntary context switches
 * (each a wait that slept: /proc/self/task/TID/status). */
static void loader_cpu(double out[4]) {
  out[0] = out[1] = out[2] = out[3] = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[300], name[32] = "", line[256];
    unsigned long long run = 0, sw = 0;
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(p, "r");
    if (f && !fgets(name, sizeof name, f)) name[0] = 0;
    if (f) fclose(f);
    snprintf(p, sizeof p, "/proc/self/task/%s/schedstat", e->d_name);
    if ((f = fopen(p, "r"))) {
      if (fscanf(f, "%llu", &run) != 1) run = 0;
      fclose(f);
    }
    snprintf(p, sizeof p, "/proc/self/task/%s/status", e->d_name);
    if ((f = fopen(p, "r"))) {
      while (fgets(line, sizeof line, f))
        if (sscanf(line, "voluntary_ctxt_switches: %llu", &sw) == 1) break;
      fclose(f);
    }
    int k = !strcmp(name, "stk-decode\n") ? 0 : !strcmp(name, "stk-read\n") ? 1 : -1;
    if (k >= 0) {
      out[k] += (double)run * 1e-9;
      out[k + 2] += (double)sw;
    }
  }
  if (d) closedir(d);
}

static double memcpy_ceiling(uint32_t n, double *cpu_bps) {
  pthread_t th[64];
  struct mc w[64];
  pthread_barrier_t gate;
  if (n > 64) n = 64;
  pthread_barrier_init(&gate, NULL, n);
  for (uint32_t i = 0; i < n; i++) {
    w[i] = (struct mc){.bytes = (size_t)128 << 20, .gate = &gate};
    if (pthread_create(&th[i], NULL, mc_thread, &w[i])) die("memcpy", "pthread_create");
  }
  double sum = 0;
  *cpu_bps = 0;
  for (uint32_t i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    sum += w[i].bps;
    *cpu_bps += w[i].cpu_bps / n;
  }
  pthread_barrier_destroy(&gate);
  return sum;
}

static int t3(int argc, char **argv) {
  if (argc < 9) die("t3", "PREFIX SEQ_LEN TYPE ROUNDS SECONDS THREADS BATCH");
  uint32_t seq = (uint32_t)atoi(argv[3]), threads = (uint32_t)atoi(argv[7]);
  uint32_t batch = (uint32_t)atoi(argv[8]);
  int type = tok_type(argv[4]), rounds = atoi(argv[5]);
  double secs = atof(argv[6]);
  if (rounds < 1 || rounds > 64) die("t3", "ROUNDS must be 1..64");
  struct stk_tokens *t = open_tokens(argv[2], seq, type, 0, NULL);
  size_t es = type == STK_TOKENS_INT64 ? 8 : 4;
  uint32_t S = stk_tokens_row_len(t);
  double cp[64], tps[64], cpc[64], tpc[64];
  uint64_t disk0 = vmstat_pgpgin_kib(), io0 = self_read_bytes();
  double wait_sum = 0, cpu_all = 0, cpu_dec = 0, cpu_rd = 0, cpu_me = 0, windows = 0;
  uint32_t depth_max = 0;
  double sw_dec = 0, sw_rd = 0, sw_me = 0, batches = 0;
  for (int r = 0; r < rounds; r++) {
    cp[r] = memcpy_ceiling(threads, &cpc[r]);
    struct stk_loader *l = open_loader(t, batch, threads, 1000000, NULL);
    struct stk_batch *b;
    if (stk_loader_next(l, &b)) die("t3", stk_loader_errmsg(l));
    stk_batch_release(l, b); /* the clock starts at the first batch */
    uint64_t tokens = 0;
    double lc0[4], lc1[4], m0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    loader_cpu(lc0);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_THREAD, &ru0);
    double t0 = now_s(), t1 = t0, w = 0, c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    while (t1 - t0 < secs) {
      double a = now_s();
      if (stk_loader_next(l, &b)) die("t3", stk_loader_errmsg(l));
      t1 = now_s();
      w += t1 - a;
      tokens += (uint64_t)b->n * S;
      stk_batch_release(l, b);
    }
    tps[r] = (double)tokens / (t1 - t0);
    double c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    loader_cpu(lc1);
    getrusage(RUSAGE_THREAD, &ru1);
    sw_me += (double)(ru1.ru_nvcsw - ru0.ru_nvcsw);
    cpu_me += clock_s(CLOCK_THREAD_CPUTIME_ID) - m0;
    cpu_all += c1 - c0, cpu_dec += lc1[0] - lc0[0], cpu_rd += lc1[1] - lc0[1];
    sw_dec += lc1[2] - lc0[2], sw_rd += lc1[3] - lc0[3], batches += (double)tokens / S / batch;
    windows += (double)tokens / S;
    tpc[r] = (double)tokens / (c1 - c0);
    wait_sum += w / (t1 - t0);
    struct stk_loader_stats ls;
    stk_loader_stats(l, &ls);
    if (ls.ring_depth_max > depth_max) depth_max = ls.ring_depth_max;
    stk_loader_close(l);
  }
  uint64_t disk = (vmstat_pgpgin_kib() - disk0) * 1024, io = self_read_bytes() - io0;
  double c = median(cp, rounds), tk = median(tps, rounds);
  double cc = median(cpc, rounds), tkc = median(tpc, rounds);
  printf(
      "{\"test\": \"t3\", \"seq_len\": %u, \"type\": \"%s\", \"row_tokens\": %u, "
      "\"batch\": %u, \"threads\": %u, \"rounds\": %d, \"seconds_per_round\": %.2f, "
      "\"tokens_per_s\": %.0f, \"token_bytes_per_s\": %.0f, \"with_mask_bytes_per_s\": %.0f, "
      "\"memcpy_bytes_per_s\": %.0f, \"ratio\": %.3f, \"ratio_with_mask\": %.3f, "
      "\"consumer_wait_share\": %.3f, \"tokens_per_cpu_s\": %.0f, "
      "\"memcpy_bytes_per_cpu_s\": %.0f, \"ratio_cpu\": %.3f, "
      "\"disk_read_bytes_system\": %" PRIu64
      ", \"disk_read_bytes_self\": %" PRIu64 ", \"bin_pmd_mapped_bytes\": %" PRIu64
      ", \"cpu_share_decode\": %.3f, \"cpu_share_read\": %.3f, \"cpu_share_consumer\": %.3f"
      ", \"decode_cpu_ns_per_window\": %.0f, \"ring_depth_max\": %u"
      ", \"sleeps_per_batch_decode\": %.2f, \"sleeps_per_batch_read\": %.2f, \"sleeps_per_batch_consumer\": %.2f}\n",
      seq, argv[4], S, batch, threads, rounds, secs, tk, tk * (double)es, tk * (double)(es + 1), c,
      tk * (double)es / c, tk * (double)(es + 1) / c, wait_sum / rounds, tkc, cc,
      tkc * (double)es / cc, disk, io, bin_pmd_bytes(argv[2]), cpu_dec / cpu_all,
      cpu_rd / cpu_all, cpu_me / cpu_all, cpu_dec / windows * 1e9, depth_max, sw_dec / batches, sw_rd / batches, sw_me / batches);
  stk_tokens_close(t);
  return 0;
}

/* ---- copy: the window copy alone, on one thread ------------------------ */

static int copy(int argc, char **argv) {
  if (argc < 6) die("copy", "PREFIX SEQ_LEN TYPE ROUNDS");
  int type = tok_type(argv[4]), rounds = atoi(argv[5]);
  if (rounds < 1 || rounds > 64) die("copy", "ROUNDS must be 1..64");
  struct stk_tokens *t = open_tokens(argv[2], (uint32_t)atoi(argv[3]), type, 0, NULL);
  size_t es = type == STK_TOKENS_INT64 ? 8 : 4, mb = (size_t)128 << 20;
  size_t bb = (stk__tokens_batch_bytes(t, 8) + 4095) & ~(size_t)4095;
  uint64_t nwin = stk_tokens_num_windows(t), k = 0;
  uint32_t S = stk_tokens_row_len(t);
  uint8_t *ring[4], *a = aligned_alloc(4096, mb), *b = aligned_alloc(4096, mb);
  if (!a || !b) die("copy", "out of memory");
  memset(a, 1, mb), memset(b, 2, mb);
  for (int i = 0; i < 4; i++) {
    if (!(ring[i] = aligned_alloc(4096, bb))) die("copy", "out of memory");
    memset(ring[i], 0, bb);
  }
  double ns[64], mc[64];
  char err[STK_ERRMSG_MAX] = "";
  for (int r = 0; r < rounds; r++) {
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    memcpy(r % 2 ? a : b, r % 2 ? b : a, mb);
    mc[r] = (double)mb / (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0);
    c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (int n = 0; n < 2000; n++, k++) {
      uint32_t i = (uint32_t)(k % 8);
      if (i + 1 < 8) stk__tokens_prefetch(t, (k + 1) % nwin);
      if (stk__tokens_fill(t, k % nwin, ring[k / 8 % 4], 8, i, err)) die("copy", err);
    }
    ns[r] = (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0) / 2000 * 1e9;
  }
  double w = median(ns, rounds), m = median(mc, rounds);
  printf("{\"test\": \"copy\", \"type\": \"%s\", \"row_tokens\": %u, \"rounds\": %d, "
         "\"cpu_ns_per_window\": %.0f, \"token_bytes_per_cpu_s\": %.0f, "
         "\"memcpy_bytes_per_cpu_s\": %.0f, \"ratio_cpu\": %.3f}\n",
         argv[4], S, rounds, w, (double)S * (double)es / w * 1e9, m,
         (double)S * (double)es / w * 1e9 / m);
  for (int i = 0; i < 4; i++) free(ring[i]);
  free(a), free(b);
  stk_tokens_close(t);
  return 0;
}

/* ---- t4: resume at a large position ----------------------------------- */

static int t4(int argc, char **argv) {
  if (argc < 6) die("t4", "PREFIX SEQ_LEN SAMPLES ROUNDS");
  uint32_t seq = (uint32_t)atoi(argv[3]);
  uint64_t samples = strtoull(argv[4], NULL, 10);
  int rounds = atoi(argv[5]);
  if (rounds < 1 || rounds > 64) die("t4", "ROUNDS must be 1..64");
  double open_s;
  struct stk_tokens *t = open_tokens(argv[2], seq, STK_TOKENS_INT32, samples, &open_s);
  uint64_t nwin = stk_tokens_num_windows(t);
  uint32_t S = stk_tokens_row_len(t);
  int32_t *ref = malloc((size_t)S * 4);
  double el[64];
  struct stk_rng rng;
  stk_rng_seed(&rng, 18);
  uint64_t pos = 0;
  for (int r = 0; r < rounds; r++) {
    /* A position in the last tenth of the order, different every round. */
    pos = nwin - 1 - stk_rng_below(&rng, nwin / 10);
    struct stk_sampler_state st = {
        .seed = 1234, .epoch = 0, .position = pos, .dataset_fp = stk_tokens_fingerprint(t)};
    double t0 = now_s();
    struct stk_loader *l = open_loader(t, 1, 1, 1, &st);
    struct stk_batch *b;
    if (stk_loader_next(l, &b)) die("t4", stk_loader_errmsg(l));
    el[r] = now_s() - t0;
    struct stk_token_batch tb;
    if (stk_batch_tokens(l, b, &tb)) die("t4", "not a token batch");
    char err[STK_ERRMSG_MAX] = "";
    if (stk_tokens_window(t, pos, ref, NULL, NULL, NULL, err)) die("t4", err);
    if (tb.windows[0] != pos || memcmp(tb.tokens, ref, (size_t)S * 4))
      die("t4", "the first batch after resume is not the saved position's window");
    stk_batch_release(l, b);
    stk_loader_close(l);
  }
  double mx = 0;
  for (int r = 0; r < rounds; r++) mx = el[r] > mx ? el[r] : mx;
  printf("{\"test\": \"t4\", \"seq_len\": %u, \"windows\": %" PRIu64 ", \"last_position\": %" PRIu64
         ", \"rounds\": %d, \"resume_to_first_batch_ms_median\": %.3f, "
         "\"resume_to_first_batch_ms_max\": %.3f, \"tokens_open_ms\": %.1f, \"index_built\": %d}\n",
         seq, nwin, pos, rounds, median(el, rounds) * 1e3, mx * 1e3, open_s * 1e3, built(t));
  free(ref);
  stk_tokens_close(t);
  return 0;
}

/* ---- t2: one process of many starting at once -------------------------- */

static int t2(int argc, char **argv) {
  double t0 = now_s();
  if (argc < 6) die("t2", "PREFIX SEQ_LEN SAMPLES LAUNCH_NS");
  uint32_t seq = (uint32_t)atoi(argv[3]);
  uint64_t samples = strtoull(argv[4], NULL, 10), launch = strtoull(argv[5], NULL, 10);
  double open_s;
  struct stk_tokens *t = open_tokens(argv[2], seq, STK_TOKENS_INT32, samples, &open_s);
  struct stk_loader *l = open_loader(t, 8, 1, 1, NULL);
  struct stk_batch *b;
  if (stk_loader_next(l, &b)) die("t2", stk_loader_errmsg(l));
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  double in_proc = now_s() - t0;
  double since = ((double)rt.tv_sec * 1e9 + (double)rt.tv_nsec - (double)launch) * 1e-9;
  stk_batch_release(l, b);
  printf(
      "{\"test\": \"t2\", \"first_batch_s\": %.4f, \"in_process_s\": %.4f, "
      "\"tokens_open_s\": %.4f, \"index_built\": %d}\n",
      since, in_proc, open_s, built(t));
  stk_loader_close(l);
  stk_tokens_close(t);
  return 0;
}

/* ---- digest ------------------------------------------------------------- */

static int digest(int argc, char **argv) {
  if (argc < 5) die("digest", "PREFIX SEQ_LEN TYPE");
  int type = tok_type(argv[4]);
  struct stk_tokens *t = open_tokens(argv[2], (uint32_t)atoi(argv[3]), type, 0, NULL);
  uint32_t S = stk_tokens_row_len(t), ncu;
  size_t es = type == STK_TOKENS_INT64 ? 8 : 4;
  uint8_t *tok = malloc((size_t)S * es), *mask = malloc(S);
  int32_t *cu = malloc(((size_t)S + 1) * 4);
  uint32_t crc = 0;
  uint64_t n = stk_tokens_num_windows(t);
  char err[STK_ERRMSG_MAX] = "";
  for (uint64_t k = 0; k < n; k++) {
    if (stk_tokens_window(t, k, tok, mask, cu, &ncu, err)) die("digest", err);
    crc = stk_crc32c(crc, tok, (size_t)S * es);
    crc = stk_crc32c(crc, mask, S);
    crc = stk_crc32c(crc, cu, (size_t)ncu * 4);
  }
  printf("{\"test\": \"digest\", \"windows\": %" PRIu64 ", \"crc32c\": \"%08x\"}\n", n, crc);
  free(tok), free(mask), free(cu);
  stk_tokens_close(t);
  return 0;
}

/* ---- evict -------------------------------------------------------------- */

/* Bytes of fd's pages (len bytes) in the page cache. */
static uint64_t cached_bytes(int fd, size_t len) {
  if (len == 0) return 0;
  void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 0;
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (len + pg - 1) / pg;
  unsigned char *v = malloc(n);
  uint64_t in = 0;
  if (v && mincore(p, len, v) == 0)
    for (size_t i = 0; i < n; i++) in += v[i] & 1;
  free(v);
  munmap(p, len);
  return in * pg;
}

static int evict(int argc, char **argv) {
  if (argc < 3) die("evict", "FILE...");
  for (int i = 2; i < argc; i++) {
    int fd = open(argv[i], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) die(argv[i], strerror(errno));
    if (fdatasync(fd) != 0) die(argv[i], strerror(errno));
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (rc) die(argv[i], strerror(rc));
    printf("{\"test\": \"evict\", \"bytes\": %lld, \"cached_bytes\": %" PRIu64 "}\n",
           (long long)st.st_size, cached_bytes(fd, (size_t)st.st_size));
    close(fd);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) die("usage", "tokens t2|t3|t4|copy|digest|evict ... (see bench/tokens.c)");
  if (!strcmp(argv[1], "t3")) return t3(argc, argv);
  if (!strcmp(argv[1], "t4")) return t4(argc, argv);
  if (!strcmp(argv[1], "copy")) return copy(argc, argv);
  if (!strcmp(argv[1], "t2")) return t2(argc, argv);
  if (!strcmp(argv[1], "digest")) return digest(argc, argv);
  if (!strcmp(argv[1], "evict")) return evict(argc, argv);
  die(argv[1], "not t2, t3, t4, copy, digest or evict");
  return 1;
}
