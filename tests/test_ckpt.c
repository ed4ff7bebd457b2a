/* The checkpoint tier (src/ckpt): save and restore round trips, partial
 * and corrupt checkpoints never taken as complete, kill -9 during a save
 * and during a drain, draining to a directory origin, eviction, and
 * re-staging after the local directory is lost. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/ckpt/ckpt_impl.h"
#include "stoker/ckpt.h"
#include "stoker/util.h"
#include "test.h"
#include "test_ckpt.h"

TEST(ckpt_crc_combine) {
  uint8_t *p = random_bytes(7, 100000);
  size_t cuts[] = {0, 1, 7, 4096, 65536, 99999, 100000};
  uint32_t whole = stk_crc32c(0, p, 100000);
  for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
    size_t k = cuts[i];
    uint32_t a = stk_crc32c(0, p, k), b = stk_crc32c(0, p + k, 100000 - k);
    CHECK_EQ(stk__crc32c_combine(a, b, 100000 - k), whole);
  }
  free(p);
}

TEST(ckpt_save_load) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt *c = open_ckpt("local", NULL, err);
  uint64_t step;
  CHECK_EQ(stk_ckpt_latest(c, &step, err), STK_ENOENT);
  save_step(c, 100, 1000003);
  save_step(c, 200, 300000);
  CHECK_OK(stk_ckpt_latest(c, &step, err));
  CHECK_EQ(step, 200);
  struct stk_ckpt_data *d;
  CHECK_OK(stk_ckpt_load(c, UINT64_MAX, &d, err));
  check_data(d, 200, 300000);
  stk_ckpt_data_free(d);
  CHECK_OK(stk_ckpt_load(c, 100, &d, err));
  check_data(d, 100, 1000003);
  stk_ckpt_data_free(d);
  /* The same step again is refused; the manifest names every object. */
  struct stk_ckpt_obj one = {"x", "y", 1};
  CHECK_EQ(stk_ckpt_save(c, 100, &one, 1, err), STK_EEXIST);
  CHECK_CONTAINS(err, "step-000000000100-rank-00000");
  struct stk_ckpt_obj dup[2] = {{"x", "y", 1}, {"x", "z", 1}};
  CHECK_EQ(stk_ckpt_save(c, 300, dup, 2, err), STK_EINVAL);
  CHECK_CONTAINS(err, "'x' given twice");
  char *out = NULL;
  test_sh(&out, "cat local/step-000000000100-rank-00000/MANIFEST.json");
  CHECK_CONTAINS(out, "\"optim \\\"state\\\"\"");
  CHECK_CONTAINS(out, "\"world\": 1");
  free(out);
  struct stk_ckpt_stats st = {0};
  stk_ckpt_stats(c, &st);
  CHECK_EQ(st.saves, 2);
  CHECK_EQ(st.restores, 2);
  stk_ckpt_close(c);

  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "x";
  o.rank = 2;
  o.world = 2;
  CHECK_EQ(stk_ckpt_open(&c, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "rank 2 is not below world size 2");
}

/* A checkpoint without its manifest, or with a torn one, or with an object
 * of the wrong size, is partial: newest complete is loaded, gc removes. */
TEST(ckpt_partial_ignored) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt *c = open_ckpt("local", NULL, err);
  save_step(c, 1, 200000);
  save_step(c, 2, 200000);
  save_step(c, 3, 200000);
  save_step(c, 4, 200000);
  stk_ckpt_close(c);
  char *out = NULL;
  CHECK_EQ(test_sh(&out,
                   "cd local && rm step-000000000004-rank-00000/MANIFEST.json && "
                   "head -c 100 step-000000000003-rank-00000/MANIFEST.json > t && "
                   "mv t step-000000000003-rank-00000/MANIFEST.json && "
                   "truncate -s 5 step-000000000002-rank-00000/00001.obj"),
           0);
  free(out);
  c = open_ckpt("local", NULL, err); /* open collects the partial ones */
  struct stk_ckpt_data *d;
  CHECK_OK(stk_ckpt_load(c, UINT64_MAX, &d, err));
  check_data(d, 1, 200000);
  stk_ckpt_data_free(d);
  CHECK_EQ(stk_ckpt_load(c, 4, &d, err), STK_ENOENT);
  stk_ckpt_close(c);
  struct stat st;
  CHECK(stat("local/step-000000000001-rank-00000", &st) == 0);
  CHECK(stat("local/step-000000000002-rank-00000", &st) != 0);
  CHECK(stat("local/step-000000000003-rank-00000", &st) != 0);
  CHECK(stat("local/step-000000000004-rank-00000", &st) != 0);
}

TEST(ckpt_corrupt_detected) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt *c = open_ckpt("local", NULL, err);
  save_step(c, 1, 300000);
  save_step(c, 2, 300000);
  char *out = NULL;
  CHECK_EQ(test_sh(&out, "printf 'Z' | dd of=local/step-000000000002-rank-00000/00000.obj "
                         "bs=1 seek=123456 conv=notrunc 2>/dev/null"),
           0);
  free(out);
  CHECK_EQ(stk_ckpt_verify("local", "step-000000000002-rank-00000", err), STK_ECRC);
  CHECK_CONTAINS(err, "00000.obj: CRC32C");
  CHECK_CONTAINS(err, "model/layer.0.weight");
  CHECK_OK(stk_ckpt_verify("local", "step-000000000001-rank-00000", err));
  struct stk_ckpt_data *d;
  CHECK_EQ(stk_ckpt_load(c, 2, &d, err), STK_ECRC);
  CHECK_OK(stk_ckpt_load(c, UINT64_MAX, &d, err)); /* the one before, with a warning */
  check_data(d, 1, 300000);
  stk_ckpt_data_free(d);
  stk_ckpt_close(c);
}

/* Bytes a process has written so far (its threads included). */
static uint64_t written(pid_t pid) {
  char p[64], line[128];
  snprintf(p, sizeof p, "/proc/%d/io", (int)pid);
  FILE *f = fopen(p, "r");
  uint64_t v = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "wchar: ", 7)) v = strtoull(line + 7, NULL, 10);
  if (f) fclose(f);
  return v;
}

static uint64_t dir_bytes(const char *dir) {
  char *out = NULL;
  test_sh(&out, "du -sb --apparent-size %s 2>/dev/null | cut -f1", dir);
  uint64_t v = out ? strtoull(out, NULL, 10) : 0;
  free(out);
  return v;
}

/* kill -9 a saver at points through its save: the previous checkpoint
 * always loads byte-identical, and the new one is either whole or partial
 * (never loaded, and removed at the next open). */
TEST(ckpt_kill_during_save) {
  char err[STK_ERRMSG_MAX] = "";
  const size_t big = 24u << 20;
  struct stk_ckpt *c = open_ckpt("local", NULL, err);
  save_step(c, 1, 100000);
  stk_ckpt_close(c);
  /* Bytes written when it is killed: none, some, most, every object byte
   * (so during the fsyncs or the manifest), and never (it finishes). */
  uint64_t points[] = {0, 1u << 20, 8u << 20, 20u << 20, 31u << 20, (32u << 20) + 4116, 1ull << 40};
  for (size_t k = 0; k < sizeof points / sizeof *points; k++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      char e[STK_ERRMSG_MAX];
      struct stk_ckpt *cc = open_ckpt("local", NULL, e);
      save_step(cc, 2 + k, big);
      _exit(0);
    }
    uint64_t t0 = stk_now_ns();
    char d[128];
    snprintf(d, sizeof d, "local/step-%012llu-rank-00000", (unsigned long long)(2 + k));
    while (written(pid) < points[k] && stk_now_ns() - t0 < 20000000000ull) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) break;
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    c = open_ckpt("local", NULL, err);
    struct stk_ckpt_data *dd;
    uint64_t latest;
    CHECK_OK(stk_ckpt_latest(c, &latest, err));
    CHECK_OK(stk_ckpt_load(c, UINT64_MAX, &dd, err));
    if (latest == 2 + k) {
      check_data(dd, 2 + k, big); /* it had committed */
    } else {
      CHECK_EQ(latest, 1);
      check_data(dd, 1, 100000);
      struct stat st;
      CHECK_MSG(stat(d, &st) != 0, "partial %s left after open", d);
    }
    stk_ckpt_data_free(dd);
    CHECK_OK(stk_ckpt_load(c, 1, &dd, err));
    check_data(dd, 1, 100000);
    stk_ckpt_data_free(dd);
    stk_ckpt_close(c);
  }
}

TEST(ckpt_drain_to_dir) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "local";
  o.origin = "file://localhost/%s/origin"; /* replaced below */
  char url[4200], cwd[4000];
  CHECK(getcwd(cwd, sizeof cwd));
  snprintf(url, sizeof url, "file://%s/master%%20copy", cwd);
  o.origin = url;
  o.keep_last = 1;
  o.chunk_bytes = 64u << 10;
  struct stk_ckpt *c = NULL;
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  save_step(c, 1, 500000);
  save_step(c, 2, 500000);
  save_step(c, 3, 500000);
  CHECK_MSG(stk_ckpt_drain_wait(c, err) == 0, "%s", err);
  struct stk_ckpt_stats st = {0};
  stk_ckpt_stats(c, &st);
  CHECK_EQ(st.drains, 3);
  stk_ckpt_close(c);
  /* The origin has the three whole, in the same layout; locally only the
   * newest is kept (the older ones were drained, so evicted). */
  CHECK_EQ(count_complete("master copy"), 3);
  CHECK_OK(stk_ckpt_verify("master copy", "step-000000000002-rank-00000", err));
  CHECK_EQ(count_complete("local"), 1);

  /* The node loses its disk: the newest is re-staged from the origin. */
  char *out = NULL;
  test_sh(&out, "rm -rf local");
  free(out);
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  uint64_t step;
  CHECK_OK(stk_ckpt_latest(c, &step, err));
  CHECK_EQ(step, 3);
  struct stk_ckpt_data *d;
  CHECK_MSG(stk_ckpt_load(c, UINT64_MAX, &d, err) == 0, "%s", err);
  check_data(d, 3, 500000);
  stk_ckpt_data_free(d);
  /* A corrupt local copy is re-staged too. */
  CHECK_EQ(test_sh(&out, "printf 'Z' | dd of=local/step-000000000003-rank-00000/00001.obj "
                         "bs=1 seek=10 conv=notrunc 2>/dev/null"),
           0);
  free(out);
  CHECK_MSG(stk_ckpt_load(c, 3, &d, err) == 0, "%s", err);
  check_data(d, 3, 500000);
  stk_ckpt_data_free(d);
  stk_ckpt_stats(c, &st);
  CHECK_EQ(st.restaged, 2);
  stk_ckpt_close(c);
}

/* A drain that cannot finish keeps the local copy however tight the
 * budget; kill -9 mid-drain, and the next open resumes it. */
TEST(ckpt_drain_resume) {
  char err[STK_ERRMSG_MAX] = "";
  char *out = NULL;
  /* An origin where the checkpoint's directory cannot be made. */
  test_sh(&out, "mkdir -p bad && touch bad/step-000000000001-rank-00000 "
                "bad/step-000000000002-rank-00000");
  free(out);
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "local";
  o.origin = "bad";
  o.keep_last = 1;
  struct stk_ckpt *c = NULL;
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  save_step(c, 1, 100000);
  save_step(c, 2, 100000);
  CHECK(stk_ckpt_drain_wait(c, err) != 0);
  CHECK_CONTAINS(err, "bad/step-000000000001-rank-00000");
  stk_ckpt_close(c);
  CHECK_EQ(count_complete("local"), 2); /* neither drained: neither evicted */

  const size_t big = 24u << 20;
  o.origin = "origin";
  o.dir = "local2";
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    struct stk_ckpt *cc = NULL;
    if (stk_ckpt_open(&cc, &o, err)) _exit(1);
    save_step(cc, 7, big);
    stk_ckpt_drain_wait(cc, err);
    _exit(0);
  }
  uint64_t t0 = stk_now_ns();
  while (dir_bytes("origin/step-000000000007-rank-00000") < (20u << 20) &&
         stk_now_ns() - t0 < 20000000000ull) {
    int s;
    if (waitpid(pid, &s, WNOHANG) == pid) break;
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  CHECK_MSG(stk_ckpt_drain_wait(c, err) == 0, "%s", err);
  stk_ckpt_close(c);
  CHECK_EQ(count_complete("origin"), 1);
  CHECK_OK(stk_ckpt_verify("origin", "step-000000000007-rank-00000", err));
  struct stat st;
  CHECK(stat("local2/step-000000000007-rank-00000/DRAINED", &st) == 0);
}

/* ---- S3 (the project's moto server, checking SigV4) ----------------------- */

/* Drain to S3 (a 24 MiB object goes up in two parts), lose the local
 * directory, restore from S3; a wrong secret is a clear error and the
 * local copy stays. */
TEST(ckpt_drain_s3) {
  start_s3("ckpt");
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "local";
  o.origin = "s3://ckpt/run 1/";
  o.keep_last = 1;
  struct stk_ckpt *c = NULL;
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  save_step(c, 5, 24u << 20);
  save_step(c, 6, 1000);
  CHECK_MSG(stk_ckpt_drain_wait(c, err) == 0, "%s", err);
  stk_ckpt_close(c);
  CHECK_EQ(count_complete("local"), 1); /* step 5 was drained, so evicted */
  CHECK_EQ(count_complete("s3://ckpt/run 1/"), 2); /* the origin lists both */

  char *out = NULL;
  test_sh(&out, "rm -rf local");
  free(out);
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  uint64_t step;
  CHECK_OK(stk_ckpt_latest(c, &step, err));
  CHECK_EQ(step, 6);
  struct stk_ckpt_data *d;
  CHECK_MSG(stk_ckpt_load(c, 5, &d, err) == 0, "%s", err);
  check_data(d, 5, 24u << 20);
  stk_ckpt_data_free(d);
  CHECK_MSG(stk_ckpt_load(c, UINT64_MAX, &d, err) == 0, "%s", err);
  check_data(d, 6, 1000);
  stk_ckpt_data_free(d);
  stk_ckpt_close(c);

  setenv("AWS_SECRET_ACCESS_KEY", "wrong", 1);
  o.dir = "local3";
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  save_step(c, 9, 1000);
  CHECK(stk_ckpt_drain_wait(c, err) != 0);
  CHECK_CONTAINS(err, "s3://ckpt/run 1/step-000000000009-rank-00000/");
  CHECK(strstr(err, "wrong") == NULL);
  stk_ckpt_close(c);
  CHECK_EQ(count_complete("local3"), 1);
}

/* An asynchronous save returns once the objects are copied (the caller's
 * buffers may change at once); a save while the one before is still being
 * drained is skipped or waits, as asked, and counted. The drain is held
 * deterministically: its first object at the origin is a FIFO, whose open
 * blocks until the test opens the other end. */
TEST(ckpt_async_save) {
  char err[STK_ERRMSG_MAX] = "";
  char *out = NULL;
  CHECK_EQ(test_sh(&out, "mkdir -p origin/step-000000000001-rank-00000 && "
                         "mkfifo origin/step-000000000001-rank-00000/00000.obj"),
           0);
  free(out);
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "local";
  o.origin = "origin";
  struct stk_ckpt *c = NULL;
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  struct stk_ckpt_obj objs[NOBJ];
  uint8_t *bufs[NOBJ];
  make_objs(1, 300000, objs, bufs);
  CHECK_OK(stk_ckpt_save_async(c, 1, objs, NOBJ, STK_CKPT_WAIT, err));
  for (int i = 0; i < NOBJ; i++) memset(bufs[i], 0xEE, objs[i].size + 1); /* ours again */
  CHECK_MSG(stk_ckpt_save_wait(c, err) == 0, "%s", err);
  /* Committed locally; its drain is stuck on the FIFO, so the next save is
   * busy. */
  CHECK_EQ(stk_ckpt_save_async(c, 2, objs, NOBJ, STK_CKPT_SKIP, err), STK_EBUSY);
  CHECK_CONTAINS(err, "step 2 skipped: the save before it is still being drained");
  /* The FIFO gets its reader a second from now, in the background, so
   * the drain is still stuck when the next call looks (a reader started
   * at once could let the drain end first on a loaded machine, and the
   * call would find nothing to wait for). */
  CHECK_EQ(test_sh(&out, "(sleep 1; cat origin/step-000000000001-rank-00000/00000.obj) "
                         ">/dev/null </dev/null 2>&1 &"),
           0);
  free(out);
  /* The drain then fails (a FIFO cannot be fsynced) and this one waits
   * for it to end before starting. */
  CHECK_OK(stk_ckpt_save_async(c, 2, objs, NOBJ, STK_CKPT_WAIT, err));
  CHECK_MSG(stk_ckpt_save_wait(c, err) == 0, "%s", err);
  struct stk_ckpt_stats st = {0};
  stk_ckpt_stats(c, &st);
  CHECK_EQ(st.async_saves, 2);
  CHECK_EQ(st.busy_skips, 1);
  CHECK_EQ(st.busy_waits, 1);
  CHECK_EQ(st.saves, 2);
  struct stk_ckpt_data *d;
  CHECK_OK(stk_ckpt_load(c, 1, &d, err));
  check_data(d, 1, 300000); /* the bytes as they were at the call */
  stk_ckpt_data_free(d);
  CHECK_OK(stk_ckpt_load(c, 2, &d, err));
  CHECK_EQ(stk_ckpt_data_count(d), NOBJ);
  uint64_t n;
  const uint8_t *p = stk_ckpt_data_bytes(d, 0, &n);
  CHECK(n == 300000 && p[0] == 0xEE && p[n - 1] == 0xEE);
  stk_ckpt_data_free(d);
  free_objs(bufs);
  stk_ckpt_close(c);
}

/* A disk that cannot hold the checkpoint (a file-size limit stands in for
 * a full disk): the save fails naming the file, before writing, and leaves
 * nothing; the checkpoint before it still loads. */
TEST(ckpt_full_disk) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt *c = open_ckpt("local", NULL, err);
  save_step(c, 1, 100000);
  stk_ckpt_close(c);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1u << 20, 1u << 20};
    setrlimit(RLIMIT_FSIZE, &rl);
    struct stk_ckpt *cc = open_ckpt("local", NULL, err);
    struct stk_ckpt_obj o[NOBJ];
    uint8_t *bufs[NOBJ];
    make_objs(2, 4u << 20, o, bufs);
    int rc = stk_ckpt_save(cc, 2, o, NOBJ, err);
    FILE *f = fopen("child.err", "w");
    fprintf(f, "%d %s\n", rc, err);
    fclose(f);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  char *msg = (char *)test_read_file("child.err", NULL);
  CHECK_CONTAINS(msg, "step-000000000002-rank-00000/00000.obj: cannot reserve 4194304 bytes");
  free(msg);
  struct stat st;
  CHECK(stat("local/step-000000000002-rank-00000", &st) != 0);
  c = open_ckpt("local", NULL, err);
  struct stk_ckpt_data *d;
  CHECK_OK(stk_ckpt_load(c, UINT64_MAX, &d, err));
  check_data(d, 1, 100000);
  stk_ckpt_data_free(d);
  stk_ckpt_close(c);
}

/* The origin fails: the first requests get 503, then some are reset or
 * answered 500/429 (faultproxy in front of the S3 server). The drain's
 * requests are retried, the checkpoint lands whole, and restores
 * byte-identical after the local directory is lost. */
TEST(ckpt_drain_s3_faults) {
  start_s3("ckpt");
  char cmd[1024], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "%s/tests/tools/serve proxy %s --fail-first 3 --p500 0.1 --p429 0.05 --p-reset 0.1 "
           "--seed 7 2>serve.err",
           getenv("STOKER_ROOT"), getenv("AWS_ENDPOINT_URL"));
  CHECK_EQ(test_sh(&out, "%s", cmd), 0);
  out[strcspn(out, "\n")] = 0;
  setenv("AWS_ENDPOINT_URL", out, 1);
  char proxy[256];
  snprintf(proxy, sizeof proxy, "%s", out);
  free(out);
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "local";
  o.origin = "s3://ckpt/faults";
  struct stk_ckpt *c = NULL;
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  save_step(c, 3, 20u << 20);
  CHECK_MSG(stk_ckpt_drain_wait(c, err) == 0, "%s", err);
  stk_ckpt_close(c);
  /* The faults did hit: at least the first three requests failed. */
  CHECK_EQ(test_sh(&out, "curl -s %s/__proxy/stats | python3 -c 'import json,sys; "
                         "s = json.load(sys.stdin); print(s[\"e500\"] + s[\"resets\"])'",
                   proxy),
           0);
  CHECK_MSG(atoi(out) >= 3, "faults injected: %s", out);
  free(out);
  test_sh(&out, "rm -rf local");
  free(out);
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  struct stk_ckpt_data *d;
  CHECK_MSG(stk_ckpt_load(c, UINT64_MAX, &d, err) == 0, "%s", err);
  check_data(d, 3, 20u << 20);
  stk_ckpt_data_free(d);
  stk_ckpt_close(c);
}

/* kill -9 while a checkpoint is being drained to S3 (requests slowed by a
 * proxy; killed once the multipart upload has begun): nothing at the
 * origin looks complete, and the next open resumes the drain to the end. */
TEST(ckpt_drain_s3_resume) {
  start_s3("ckpt");
  char cmd[1024], *out = NULL, proxy[256];
  snprintf(cmd, sizeof cmd, "%s/tests/tools/serve proxy %s --latency-ms 300 2>serve.err",
           getenv("STOKER_ROOT"), getenv("AWS_ENDPOINT_URL"));
  CHECK_EQ(test_sh(&out, "%s", cmd), 0);
  out[strcspn(out, "\n")] = 0;
  snprintf(proxy, sizeof proxy, "%s", out);
  setenv("AWS_ENDPOINT_URL", proxy, 1);
  free(out);
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "local";
  o.origin = "s3://ckpt/resume";
  char err[STK_ERRMSG_MAX] = "";
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    struct stk_ckpt *cc = NULL;
    if (stk_ckpt_open(&cc, &o, err)) _exit(1);
    save_step(cc, 4, 20u << 20);
    stk_ckpt_drain_wait(cc, err);
    _exit(0);
  }
  uint64_t t0 = stk_now_ns();
  for (;;) { /* the upload begun: a few requests through the proxy */
    test_sh(&out, "curl -s %s/__proxy/stats | python3 -c 'import json,sys; "
                  "print(json.load(sys.stdin)[\"requests\"])'", proxy);
    int n = atoi(out);
    free(out);
    int st;
    if (n >= 3 || waitpid(pid, &st, WNOHANG) == pid || stk_now_ns() - t0 > 60000000000ull) break;
    stk_sleep_ns(20000000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  test_sh(&out, "curl -s -X POST -d '{\"latency_ms\": 0}' %s/__proxy/config", proxy);
  free(out);
  struct stat st;
  CHECK(stat("local/step-000000000004-rank-00000/DRAINED", &st) != 0);
  struct stk_ckpt *c = NULL;
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err); /* queues the drain again */
  CHECK_MSG(stk_ckpt_drain_wait(c, err) == 0, "%s", err);
  stk_ckpt_close(c);
  CHECK(stat("local/step-000000000004-rank-00000/DRAINED", &st) == 0);
  test_sh(&out, "rm -rf local");
  free(out);
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  struct stk_ckpt_data *d;
  CHECK_MSG(stk_ckpt_load(c, UINT64_MAX, &d, err) == 0, "%s", err);
  check_data(d, 4, 20u << 20);
  stk_ckpt_data_free(d);
  stk_ckpt_close(c);
}

/* Drain to an HTTP origin that takes PUT (nginx with WebDAV's PUT): large
 * objects streamed from the file, the manifest last; the origin lists its
 * checkpoints from its directory pages and re-stages after the local
 * directory is lost. A server that refuses PUT (a read-only nginx) is a
 * clear error and the local copy stays. */
TEST(ckpt_drain_http) {
  const char *root = getenv("STOKER_ROOT");
  if (!root) SKIP("STOKER_ROOT is not set");
  if (access("/usr/sbin/nginx", X_OK) != 0) SKIP("nginx is not installed (scripts/install-deps test)");
  mkdir("www", 0755);
  char *out = NULL, url[256], ro[256];
  CHECK_EQ(test_sh(&out, "%s/tests/tools/serve nginx-dav www 2>serve.err", root), 0);
  snprintf(url, sizeof url, "%.*s/run", (int)strcspn(out, "\n"), out);
  free(out);
  CHECK_EQ(test_sh(&out, "%s/tests/tools/serve nginx www 2>serve.err", root), 0);
  snprintf(ro, sizeof ro, "%.*s/ro", (int)strcspn(out, "\n"), out);
  free(out);
  char err[STK_ERRMSG_MAX] = "";
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = "local";
  o.origin = url;
  struct stk_ckpt *c = NULL;
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  save_step(c, 8, 3u << 20);
  save_step(c, 9, 1000);
  CHECK_MSG(stk_ckpt_drain_wait(c, err) == 0, "%s", err);
  stk_ckpt_close(c);
  CHECK_EQ(count_complete("www/run"), 2); /* the server's files: a checkpoint directory */
  CHECK_OK(stk_ckpt_verify("www/run", "step-000000000008-rank-00000", err));
  CHECK_EQ(count_complete(url), 2);
  test_sh(&out, "rm -rf local");
  free(out);
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  struct stk_ckpt_data *d;
  CHECK_MSG(stk_ckpt_load(c, 8, &d, err) == 0, "%s", err);
  check_data(d, 8, 3u << 20);
  stk_ckpt_data_free(d);
  CHECK_MSG(stk_ckpt_load(c, UINT64_MAX, &d, err) == 0, "%s", err);
  check_data(d, 9, 1000);
  stk_ckpt_data_free(d);
  stk_ckpt_close(c);

  o.origin = ro;
  o.dir = "local2";
  CHECK_MSG(stk_ckpt_open(&c, &o, err) == 0, "%s", err);
  save_step(c, 1, 1000);
  CHECK(stk_ckpt_drain_wait(c, err) != 0);
  CHECK_CONTAINS(err, "/ro/step-000000000001-rank-00000/00000.obj");
  stk_ckpt_close(c);
  CHECK_EQ(count_complete("local2"), 1);
}
