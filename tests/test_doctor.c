/* Tests of stoker doctor: a quick run in the test's directory (every
 * figure valid and positive where the filesystem allows, CUDA invalid with
 * a reason where there is no GPU, the scratch file gone afterwards), the
 * feed-table arithmetic against a hand computation, the JSON keys, the
 * failure paths (missing directory, cancellation, bad options) and the
 * dlopen'ed CUDA helper. Nothing here asserts on a timing beyond > 0. */
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include "../src/bench/cuda.h"
#include "stoker/doctor.h"
#include "test.h"

/* Number of entries in dir other than . and .. */
static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static int is_direct_io(int i) {
  return i == STK_DOCTOR_SEQ_WRITE || i == STK_DOCTOR_SEQ_READ || i == STK_DOCTOR_RAND_IOPS;
}

/* Every figure of r among those measured (only: bits, 0 = all) that this
 * machine can provide is valid and positive; O_DIRECT ones may be invalid
 * only with an O_DIRECT reason, CUDA only with a reason, never as 0. */
static void check_figures(const struct stk_doctor_result *r, unsigned only) {
  for (int i = 0; i < STK_DOCTOR_NFIG; i++) {
    const struct stk_doctor_figure *f = &r->fig[i];
    if (only && !(only & STK_DOCTOR_BIT(i))) {
      CHECK(!f->valid);
      CHECK_CONTAINS(f->reason, "not measured");
      continue;
    }
    if (f->valid) {
      CHECK_MSG(f->value > 0 && isfinite(f->value), "%s = %g", stk_doctor_fig_key(i), f->value);
      continue;
    }
    CHECK_MSG(f->reason[0] != 0, "%s invalid without a reason", stk_doctor_fig_key(i));
    CHECK_MSG(f->value != 0, "%s invalid but reported as 0", stk_doctor_fig_key(i));
    if (i == STK_DOCTOR_CUDA_H2D) continue;
    if (is_direct_io(i)) {
      CHECK_CONTAINS(f->reason, "O_DIRECT");
      fprintf(stderr, "    note: %s not measurable here: %s\n", stk_doctor_fig_key(i), f->reason);
      continue;
    }
    test_fail(__FILE__, __LINE__, "%s invalid: %s", stk_doctor_fig_key(i), f->reason);
  }
}

TEST(doctor_quick_run) {
  struct stk_doctor_opts o = {.dir = ".", .quick = 1, .size = 32u << 20, .threads = 2};
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  char err[STK_ERRMSG_MAX];
  int rc = stk_doctor_run(&o, r, err);
  CHECK_MSG(rc == 0, "stk_doctor_run: %d %s", rc, err);
  check_figures(r, 0);
  CHECK_EQ(dir_entries("."), 0); /* the scratch file is gone */
  CHECK_EQ(r->size, 32u << 20);
  CHECK_EQ(r->threads, 2);
  CHECK(r->cores >= 1);
  CHECK(r->fs_type[0] != 0);
  CHECK(r->jpeg_width >= 400 && r->jpeg_width <= 500);
  CHECK(r->seconds > 0);
  /* 8 presets, and a JPEG line for each of the 2 resnet50 ones. */
  CHECK_EQ(r->nfeed, 10);
  for (int i = 0; i < r->nfeed; i++) {
    const struct stk_doctor_feed *d = &r->feed[i];
    CHECK(d->demand_bps > 0);
    if (!isnan(d->n_seq_read)) CHECK(d->n_limit <= d->n_seq_read);
    CHECK(!isnan(d->n_page_cache));
    CHECK(d->n_limit <= d->n_page_cache);
    CHECK(strcmp(d->limit_by, "unknown") != 0);
    CHECK_EQ(!isnan(d->n_jpeg), d->jpeg);
  }
  free(r);
}

TEST(doctor_cuda_invalid_or_measured) {
  struct stk_doctor_opts o = {.quick = 1, .only = STK_DOCTOR_BIT(STK_DOCTOR_CUDA_H2D)};
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  CHECK_OK(stk_doctor_run(&o, r, NULL));
  const struct stk_doctor_figure *f = &r->fig[STK_DOCTOR_CUDA_H2D];
  if (f->valid) {
    CHECK(f->value > 0);
    CHECK(r->cuda_device[0] != 0);
  } else {
    CHECK(isnan(f->value));
    CHECK(f->reason[0] != 0);
    CHECK(strstr(f->reason, "libcudart") || strstr(f->reason, "CUDA"));
  }
  /* Nothing else was measured, so nothing else is valid. */
  for (int i = 0; i < STK_DOCTOR_NFIG; i++)
    if (i != STK_DOCTOR_CUDA_H2D) {
      CHECK(!r->fig[i].valid);
      CHECK_CONTAINS(r->fig[i].reason, "not measured");
    }
  free(r);
}

TEST(doctor_cuda_helper) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk__cuda *c = NULL;
  int rc = stk__cuda_open(&c, err);
  if (rc != 0) {
    CHECK_EQ(rc, STK_ENOTSUP);
    CHECK(c == NULL);
    CHECK(err[0] != 0);
    SKIP(err);
  }
  void *p = stk__cuda_host_alloc(c, 1u << 20, err);
  CHECK_MSG(p != NULL, "%s", err);
  CHECK_EQ((uintptr_t)p % 4096, 0);
  memset(p, 1, 1u << 20);
  stk__cuda_host_free(c, p);
  double bps = 0;
  CHECK_OK(stk__cuda_h2d_bw(c, 8u << 20, 3, &bps, err));
  CHECK(bps > 0);
  stk__cuda_close(c);
}

/* The O_DIRECT phases through blocking threads instead of io_uring. */
TEST(doctor_thread_engine) {
  struct stk_doctor_opts o = {.dir = ".",
                              .quick = 1,
                              .size = 16u << 20,
                              .io_engine = "threads",
                              .only = STK_DOCTOR_BIT(STK_DOCTOR_SEQ_WRITE) |
                                      STK_DOCTOR_BIT(STK_DOCTOR_SEQ_READ) |
                                      STK_DOCTOR_BIT(STK_DOCTOR_RAND_IOPS)};
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_doctor_run(&o, r, err));
  check_figures(r, o.only);
  if (!r->fig[STK_DOCTOR_SEQ_READ].valid) SKIP("no O_DIRECT on this filesystem");
  CHECK_CONTAINS(r->fig[STK_DOCTOR_SEQ_READ].reason, "threads");
  CHECK_CONTAINS(r->fig[STK_DOCTOR_SEQ_READ].reason, "best of depth 1..8 x jobs 1..2");
  CHECK_EQ(r->ncurve, 16); /* a thread per request: depths 1..8 only */
  CHECK_CONTAINS(r->fig[STK_DOCTOR_RAND_IOPS].reason, "threads");
  CHECK(!r->fig[STK_DOCTOR_MEMCPY].valid);
  CHECK_EQ(dir_entries("."), 0);
  o.io_engine = "floppy";
  CHECK_EQ(stk_doctor_run(&o, r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "floppy");
  free(r);
}

/* A hand computation for resnet50 on h100 (batch 400, 114660.07-byte
 * records, 0.224 s per batch) and unet3d on a100 (batch 7, 146600628-byte
 * records, 0.636 s), on made-up ceilings. */
TEST(doctor_feed_math) {
  struct stk_doctor_result r;
  memset(&r, 0, sizeof r);
  r.cores = 8;
  r.fig[STK_DOCTOR_SEQ_READ] = (struct stk_doctor_figure){.value = 1073741824.0, .valid = 1};
  r.fig[STK_DOCTOR_PAGE_CACHE_READ] = (struct stk_doctor_figure){.value = 8e9, .valid = 1};
  r.fig[STK_DOCTOR_RAND_IOPS] = (struct stk_doctor_figure){.value = 50000, .valid = 1};
  r.fig[STK_DOCTOR_JPEG_PER_CORE] = (struct stk_doctor_figure){.value = 1000, .valid = 1};
  struct stk_workload w;
  stk_workload_init(&w);
  struct stk_doctor_feed d;
  CHECK_OK(stk_workload_preset("resnet50", "h100", &w));

  stk_doctor_feed(&r, &w, 0, &d);
  double sps = 400 / 0.224, demand = sps * 114660.07;
  CHECK(fabs(d.samples_per_s - sps) < 1e-9 * sps);
  CHECK(fabs(d.demand_bps - demand) < 1e-6 * demand);
  CHECK(fabs(d.n_seq_read - 1073741824.0 / demand) < 1e-9); /* 5.244 */
  CHECK(fabs(d.n_page_cache - 8e9 / demand) < 1e-9);        /* 39.07 */
  CHECK(fabs(d.n_iops - 50000 / sps) < 1e-9);               /* 28.0 */
  CHECK(isnan(d.n_jpeg));
  CHECK(fabs(d.n_limit - 1073741824.0 / demand) < 1e-9);
  CHECK_STR(d.limit_by, "device read");
  CHECK_STR(d.workload, "resnet50");
  CHECK_STR(d.accel, "h100");

  stk_doctor_feed(&r, &w, 1, &d);
  CHECK(fabs(d.n_jpeg - 8 * 1000 / sps) < 1e-9); /* 4.48 */
  CHECK(fabs(d.n_limit - 8 * 1000 / sps) < 1e-9);
  CHECK_STR(d.limit_by, "JPEG decode");

  /* Records over 1 MiB are bandwidth-bound: no IOPS column. */
  CHECK_OK(stk_workload_preset("unet3d", "a100", &w));
  stk_doctor_feed(&r, &w, 0, &d);
  demand = 7 / 0.636 * 146600628.0;
  CHECK(fabs(d.demand_bps - demand) < 1e-6 * demand);
  CHECK(isnan(d.n_iops));
  CHECK(fabs(d.n_seq_read - 1073741824.0 / demand) < 1e-9); /* 0.666 */
  CHECK_STR(d.limit_by, "device read");

  /* An invalid figure drops out of the limit; none valid: no limit. */
  r.fig[STK_DOCTOR_SEQ_READ].valid = 0;
  stk_doctor_feed(&r, &w, 0, &d);
  CHECK(isnan(d.n_seq_read));
  CHECK_STR(d.limit_by, "page cache");
  r.fig[STK_DOCTOR_PAGE_CACHE_READ].valid = 0;
  stk_doctor_feed(&r, &w, 0, &d);
  CHECK(isnan(d.n_limit));
  CHECK_STR(d.limit_by, "unknown");
}

TEST(doctor_json_keys) {
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "/data");
  snprintf(r->fs_type, sizeof r->fs_type, "ext4");
  r->cores = r->threads = 4;
  r->page_cache_disk_bytes = UINT64_MAX;
  for (int i = 0; i < STK_DOCTOR_NFIG; i++)
    r->fig[i] = (struct stk_doctor_figure){.value = 1e9 + i, .valid = 1};
  r->fig[STK_DOCTOR_JPEG_PER_CORE].value = 500; /* 4 x 500 / 919.5 = 2.2 accelerators: the limit */
  r->fig[STK_DOCTOR_CUDA_H2D] = (struct stk_doctor_figure){.value = NAN, .valid = 0};
  snprintf(r->fig[STK_DOCTOR_CUDA_H2D].reason, sizeof r->fig[0].reason, "libcudart not found");
  struct stk_workload w;
  stk_workload_init(&w);
  CHECK_OK(stk_workload_preset("resnet50", "a100", &w));
  stk_doctor_feed(r, &w, 1, &r->feed[r->nfeed++]);
  FILE *f = fopen("d.json", "w");
  CHECK_OK(stk_doctor_write_json(r, f));
  fclose(f);
  char *j = (char *)test_read_file("d.json", NULL);
  for (int i = 0; i < STK_DOCTOR_NFIG; i++) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\": {", stk_doctor_fig_key(i));
    CHECK_CONTAINS(j, key);
  }
  static const char *const keys[] = {"\"dir\"",
                                     "\"fs_type\"",
                                     "\"size_bytes\"",
                                     "\"threads\"",
                                     "\"cores\"",
                                     "\"seconds\"",
                                     "\"page_cache_disk_bytes\": null",
                                     "\"jpeg_image\"",
                                     "\"cuda_device\": null",
                                     "\"feed\"",
                                     "\"demand_bytes_per_s\"",
                                     "\"samples_per_s\"",
                                     "\"n_seq_read\"",
                                     "\"n_page_cache\"",
                                     "\"n_iops\"",
                                     "\"n_jpeg\"",
                                     "\"n_limit\"",
                                     "\"limited_by\": \"JPEG decode\""};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK_CONTAINS(j, keys[i]);
  /* The invalid figure: null with its reason, never 0. */
  const char *cuda = strstr(j, "\"cuda_h2d\": {");
  CHECK(cuda != NULL);
  CHECK_CONTAINS(cuda, "\"value\": null");
  CHECK_CONTAINS(cuda, "\"valid\": false");
  CHECK_CONTAINS(cuda, "\"reason\": \"libcudart not found\"");
  /* Python's parser agrees that it is JSON. */
  char *out = NULL;
  int rc = test_sh(&out,
                   "/usr/bin/python3 -c 'import json,sys; d=json.load(open(\"d.json\")); "
                   "print(len(d[\"figures\"]), d[\"feed\"][0][\"n_iops\"] > 0)'");
  if (rc != 127) {
    CHECK_EQ(rc, 0);
    char want[32];
    snprintf(want, sizeof want, "%d True", STK_DOCTOR_NFIG);
    CHECK_CONTAINS(out, want);
  }
  free(out);
  free(j);
  free(r);
}

TEST(doctor_missing_dir) {
  struct stk_doctor_opts o = {.dir = "no-such-dir", .quick = 1};
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk_doctor_run(&o, r, err), STK_ENOENT);
  CHECK_CONTAINS(err, "no-such-dir");
  CHECK(!strchr(err, '\n'));
  test_write_file("plain", "x", 1);
  o.dir = "plain";
  CHECK_EQ(stk_doctor_run(&o, r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "plain: not a directory");
  o.dir = ".";
  o.size = 1u << 20;
  CHECK_EQ(stk_doctor_run(&o, r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "8 MiB");
  o.size = 1ull << 60; /* more than any disk here */
  CHECK_EQ(stk_doctor_run(&o, r, err), STK_ENOSPC);
  CHECK_CONTAINS(err, "does not fit");
  free(r);
}

static void set_flag(void *ctx, const char *phase) {
  (void)phase;
  *(volatile int *)ctx = 1; /* as a Ctrl-C arriving mid-run would */
}

TEST(doctor_cancel_removes_scratch) {
  volatile int stop = 0;
  struct stk_doctor_opts o = {.dir = ".",
                              .quick = 1,
                              .size = 16u << 20,
                              .cancel = &stop,
                              .progress = set_flag,
                              .ctx = (void *)&stop};
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk_doctor_run(&o, r, err), STK_ECANCELED);
  CHECK_CONTAINS(err, "interrupted");
  CHECK_EQ(dir_entries("."), 0);
  free(r);
}

TEST(doctor_fig_names) {
  for (int i = 0; i < STK_DOCTOR_NFIG; i++) {
    CHECK(stk_doctor_fig_key(i) && stk_doctor_fig_unit(i) && stk_doctor_fig_title(i));
    for (int k = 0; k < i; k++) CHECK(strcmp(stk_doctor_fig_key(i), stk_doctor_fig_key(k)) != 0);
  }
  CHECK(stk_doctor_fig_key(STK_DOCTOR_NFIG) == NULL);
  CHECK(stk_doctor_fig_key(-1) == NULL);
}

/* The sequential O_DIRECT ceilings come from a depth x jobs sweep: every
 * point is kept (12 a direction); the read figure is the best point, the
 * write figure the best point's setting over the whole file once (a 1 s
 * point's flush can be cheap by luck); each says which setting, and the
 * JSON carries the curve. */
TEST(doctor_seq_sweep) {
  struct stk_doctor_opts o = {
      .dir = ".",
      .quick = 1,
      .size = 32u << 20,
      .only = STK_DOCTOR_BIT(STK_DOCTOR_SEQ_WRITE) | STK_DOCTOR_BIT(STK_DOCTOR_SEQ_READ)};
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_doctor_run(&o, r, err) == 0, "%s", err);
  if (!r->fig[STK_DOCTOR_SEQ_READ].valid) SKIP("no O_DIRECT on this filesystem");
  CHECK_EQ(r->ncurve, 24);
  for (int w = 0; w < 2; w++) {
    const struct stk_doctor_figure *f = &r->fig[w ? STK_DOCTOR_SEQ_WRITE : STK_DOCTOR_SEQ_READ];
    double best = 0;
    int points = 0, deep = 0, two = 0;
    for (int i = 0; i < r->ncurve; i++) {
      const struct stk_doctor_point *p = &r->curve[i];
      if (p->write != w) continue;
      points++;
      CHECK(p->bytes_per_s > 0);
      deep |= p->depth == 32;
      two |= p->jobs == 2;
      if (p->bytes_per_s > best) best = p->bytes_per_s;
    }
    CHECK_EQ(points, 12);
    CHECK(deep && two);
    if (!w) {
      CHECK(f->valid && f->value == best);
      CHECK_CONTAINS(f->reason, "best of depth 1..32 x jobs 1..2");
      continue;
    }
    /* Writes: the best point's setting run again over the whole file, once,
     * with its fdatasync; the method names that setting and the point. */
    CHECK(f->valid && f->value > 0);
    CHECK_CONTAINS(f->reason, "the whole ");
    CHECK_CONTAINS(f->reason, "at the best setting of a sweep of depth 1..32 x jobs 1..2");
    const struct stk_doctor_point *bp = NULL;
    for (int i = 0; i < r->ncurve; i++)
      if (r->curve[i].write && r->curve[i].bytes_per_s == best) bp = &r->curve[i];
    CHECK(bp != NULL);
    char set[64];
    snprintf(set, sizeof set, "depth %u, %u job", bp->depth, bp->jobs);
    CHECK_CONTAINS(f->reason, set);
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *mf = open_memstream(&buf, &len);
  CHECK_OK(stk_doctor_write_json(r, mf));
  fclose(mf);
  CHECK_CONTAINS(buf, "\"seq_curve\"");
  CHECK_CONTAINS(buf, "\"depth\": 32");
  free(buf);
  CHECK_EQ(dir_entries("."), 0);
  free(r);
}

/* A file of one 8 MiB request (the smallest --size) leaves the second job
 * of a 2-job point no request: those points are skipped (they divided by a
 * span of 0 before), and the write figure comes from the 1-job points. */
TEST(doctor_seq_small_file_skips_two_job_points) {
  struct stk_doctor_opts o = {
      .dir = ".", .size = 8u << 20, .only = STK_DOCTOR_BIT(STK_DOCTOR_SEQ_WRITE)};
  struct stk_doctor_result *r = calloc(1, sizeof *r);
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_doctor_run(&o, r, err) == 0, "%s", err);
  const struct stk_doctor_figure *f = &r->fig[STK_DOCTOR_SEQ_WRITE];
  if (!f->valid && strstr(f->reason, "O_DIRECT")) SKIP("no O_DIRECT on this filesystem");
  CHECK_MSG(f->valid, "%s", f->reason);
  CHECK(r->ncurve > 0);
  for (int i = 0; i < r->ncurve; i++) CHECK_EQ(r->curve[i].jobs, 1u);
  CHECK_CONTAINS(f->reason, "the whole 8 MiB file");
  free(r);
}
