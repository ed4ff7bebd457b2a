/* stoker watch and the loaders' publication files: input stall charged to
 * the job, a real loader's counters, and the files as untrusted input
 * (cut, grown, swapped, garbage, flooded, another user's, another
 * version, hostile strings: issue 21, "Safe as root"). */
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include "test_watch.h"

TEST(watch_input_stall_goes_to_the_job) {
  /* GPU 0 runs this process, mapped to job J; its loader's consumer waits
   * 0.5 s of each 1 s interval. */
  static const double util[5] = {40, 40, 80, 0, 100};
  FILE *f = fopen("sc.txt", "w");
  fprintf(f, "gpu 0\n");
  for (int s = 0; s < 5; s++) fprintf(f, "at %d gpu 0 util %g proc %d\n", s, util[s], (int)getpid());
  fclose(f);
  mkdir("map", 0755);
  write_str("map/0", "J\n");
  mkdir("rt", 0755);
  struct stk_pub *p = fake_pub("rt", 0);
  struct stk_watch_opts o = {.mapping_dir = "map", .runtime_dir = "rt"};
  struct stk_watch *w = agent("sc.txt", &o);
  double stalled = 0, idle = 0, productive = 0;
  for (int s = 0; s < 5; s++) {
    p->consumer_wait_ns = (uint64_t)s * 500000000ull;
    CHECK_OK(stk_watch_sample(w));
    if (s) {
      double i = 1 - util[s] / 100, st = i < 0.5 ? i : 0.5;
      stalled += st;
      idle += i - st;
      productive += util[s] / 100;
    }
  }
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"J\",Hostname=\"node1\",bucket=\"input_stalled\"}"), stalled);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"J\",Hostname=\"node1\",bucket=\"idle\"}"), idle);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"J\",Hostname=\"node1\",bucket=\"productive\"}"), productive);
  CHECK_NEAR(metric(t, "stoker_job_input_wait_seconds_total{hpc_job=\"J\""), 2.0);
  char pre[128];
  snprintf(pre, sizeof pre, "stoker_loader_consumer_wait_seconds_total{pid=\"%d\",loader=\"99\",hpc_job=\"J\"}", (int)getpid());
  CHECK_NEAR(metric(t, pre), 2.0);
  free(t);
  /* A publication from another version is not read as this one. */
  p->version = 2;
  CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK(isnan(metric(t, pre)));
  free(t);
  stk_watch_close(w);
  munmap(p, STK_PUB_SIZE);
}

TEST(watch_real_loader_published_under_job) {
  char *out = NULL;
  int rc = test_sh(&out, "%s gen d --format tfrecord --samples 400 --size 2000 --samples-per-shard 100 -q",
                   test_stoker_bin());
  CHECK_MSG(rc == 0, "gen: %s", out);
  free(out);
  mkdir("rt", 0755);
  setenv("STOKER_RUNTIME_DIR", "rt", 1);
  FILE *f = fopen("sc.txt", "w");
  fprintf(f, "gpu 0\nat 0 gpu 0 util 50 proc %d\n", (int)getpid());
  fclose(f);
  mkdir("map", 0755);
  write_str("map/0", "train-1\n");
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_open(&ds, "d", NULL, err));
  struct stk_loader_opts lo = {.batch_size = 16, .threads = 1};
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &lo, err));
  struct stk_batch *b;
  for (int i = 0; i < 10; i++) {
    CHECK_OK(stk_loader_next(l, &b));
    stk_batch_release(l, b);
  }
  /* Past the publication's rate limit, one more batch publishes. */
  stk_sleep_ns(120000000);
  CHECK_OK(stk_loader_next(l, &b));
  stk_batch_release(l, b);
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  struct stk_watch_opts o = {.mapping_dir = "map", .runtime_dir = "rt"};
  struct stk_watch *w = agent("sc.txt", &o);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  char pre[160];
  snprintf(pre, sizeof pre, "stoker_loader_consumer_wait_seconds_total{pid=\"%d\",loader=\"0\",hpc_job=\"train-1\"}", (int)getpid());
  CHECK_NEAR(metric(t, pre), (double)st.consumer_wait_ns / 1e9);
  snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%d\",loader=\"0\",hpc_job=\"train-1\"}", (int)getpid());
  CHECK_NEAR(metric(t, pre), 11);
  snprintf(pre, sizeof pre, "stoker_loader_stage_busy_seconds_total{pid=\"%d\",loader=\"0\",stage=\"decode\",hpc_job=\"train-1\"}", (int)getpid());
  CHECK(metric(t, pre) > 0);
  free(t);
  /* More batches, then a second sample: the job is charged exactly its
   * loader's new consumer wait, as input-stalled time within GPU 0's idle
   * half (the fake's clock: one interval is 1 s). */
  for (int i = 0; i < 5; i++) {
    CHECK_OK(stk_loader_next(l, &b));
    stk_batch_release(l, b);
  }
  stk_sleep_ns(120000000);
  CHECK_OK(stk_loader_next(l, &b));
  stk_batch_release(l, b);
  struct stk_loader_stats st2;
  stk_loader_stats(l, &st2);
  CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  double dwait = (double)(st2.consumer_wait_ns - st.consumer_wait_ns) / 1e9;
  CHECK_NEAR(metric(t, "stoker_job_input_wait_seconds_total{hpc_job=\"train-1\""), dwait);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"train-1\",Hostname=\"node1\",bucket=\"input_stalled\"}"),
             dwait < 0.5 ? dwait : 0.5);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"train-1\",Hostname=\"node1\",bucket=\"productive\"}"), 0.5);
  free(t);
  stk_loader_close(l);
  /* Closed: the file is gone and the loader's series with it. */
  CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK(strstr(t, "stoker_loader_batches_total{") == NULL);
  free(t);
  CHECK_OK(test_sh(&out, "ls rt | wc -l"));
  CHECK_STR(out, "0\n");
  free(out);
  stk_watch_close(w);
  stk_dataset_close(ds);
}

TEST(watch_stale_publication_removed) {
  mkdir("rt", 0755);
  struct stk_pub *p = fake_pub("rt", 5);
  p->pid = 0x7ffffff0u; /* no such process */
  struct stk_watch_opts o = {.nvml_lib = "none", .runtime_dir = "rt"};
  struct stk_watch *w = agent("none.txt", &o);
  CHECK_OK(stk_watch_sample(w));
  char path[256];
  snprintf(path, sizeof path, "rt/loader-%d-99.pub", (int)getpid());
  CHECK(access(path, F_OK) != 0);
  stk_watch_close(w);
  munmap(p, STK_PUB_SIZE);
}

TEST(watch_publication_off) {
  char *out = NULL;
  CHECK_OK(test_sh(&out, "%s gen d --format tfrecord --samples 50 --size 100 -q && "
                         "mkdir rt && STOKER_RUNTIME_DIR=rt STOKER_PUBLISH=0 %s feed d -q >/dev/null && ls rt | wc -l",
                   test_stoker_bin(), test_stoker_bin()));
  CHECK_STR(out, "0\n");
  free(out);
}

/* ---- publications are untrusted input (issue 21, "Safe as root") ---- */

/* A version 1.0 publication for pid (its start time from the real /proc). */
static void pub_for(struct stk_pub *p, uint32_t pid) {
  memset(p, 0, sizeof *p);
  memcpy(p->magic, STK_PUB_MAGIC, 8);
  p->version = STK_PUB_VERSION;
  p->minor = STK_PUB_MINOR;
  p->size = STK_PUB_SIZE;
  p->pid = pid;
  p->pid_start_ticks = stk__pid_start_ticks("/proc", (long)pid);
  p->batches = 7;
  snprintf(p->stage[0].name, 16, "read");
}

/* Write len bytes of *p (zeros past it) to path, owned by uid. */
static void write_pub(const char *path, const struct stk_pub *p, size_t len, uid_t uid) {
  uint8_t *b = calloc(1, len + 1);
  CHECK(b != NULL);
  memcpy(b, p, len < sizeof *p ? len : sizeof *p);
  test_write_file(path, b, len);
  free(b);
  CHECK(chown(path, uid, (gid_t)-1) == 0);
}

static double loader_series(const char *text, long pid) {
  char pre[128];
  snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%ld\"", pid);
  return metric(text, pre);
}

static double rejected(const char *text, const char *reason) {
  char pre[128];
  snprintf(pre, sizeof pre, "stoker_watch_loader_errors_total{reason=\"%s\"}", reason);
  return metric(text, pre);
}

/* Any local user can write the runtime directory. Files that are cut,
 * grown, replaced or garbage while the root agent reads them are skipped
 * and counted once each, never a signal: before the agent read by copy, the
 * first truncation killed it with SIGBUS. */
TEST(watch_publication_truncated_grown_swapped_garbage) {
  mkdir("rt", 0755);
  struct stk_pub *cut = fake_pub_n("rt", 1, 5); /* mapped, as a loader keeps it */
  struct stk_pub *half = fake_pub_n("rt", 2, 5);
  struct stk_pub *grown = fake_pub_n("rt", 3, 5);
  struct stk_pub *swapped = fake_pub_n("rt", 4, 5);
  struct stk_watch_opts o = {.nvml_lib = "none", .runtime_dir = "rt"};
  struct stk_watch *w = agent("none.txt", &o);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(loader_series(t, getpid()), 0);
  free(t);
  char path[256];
  snprintf(path, sizeof path, "rt/loader-%d-1.pub", (int)getpid());
  CHECK(truncate(path, 0) == 0);
  snprintf(path, sizeof path, "rt/loader-%d-2.pub", (int)getpid());
  CHECK(truncate(path, 512) == 0);
  snprintf(path, sizeof path, "rt/loader-%d-3.pub", (int)getpid());
  CHECK(truncate(path, STK_PUB_SIZE + 8) == 0);
  /* Another file put in number 4's place: judged afresh, and counted. */
  struct stk_pub p;
  pub_for(&p, (uint32_t)getpid());
  p.batches = 42;
  write_pub("rt/new.tmp", &p, STK_PUB_SIZE, getuid());
  snprintf(path, sizeof path, "rt/loader-%d-4.pub", (int)getpid());
  CHECK(rename("rt/new.tmp", path) == 0);
  /* Garbage, and a file whose magic never comes. */
  test_write_file("rt/loader-1-1.pub", "garbage, not a publication", 26);
  uint8_t zeros[STK_PUB_SIZE] = {0};
  test_write_file("rt/loader-1-2.pub", zeros, sizeof zeros);
  for (int s = 0; s < 8; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK_NEAR(rejected(t, "size"), 3);    /* cut to 0, cut to 512, grown: once each */
  CHECK_NEAR(rejected(t, "format"), 2);  /* the garbage, the file never finished */
  CHECK_NEAR(rejected(t, "swapped"), 1);
  CHECK_NEAR(loader_series(t, getpid()), 42); /* only the file now in number 4's place */
  free(t);
  stk_watch_close(w);
  munmap(cut, STK_PUB_SIZE);
  munmap(half, STK_PUB_SIZE);
  munmap(grown, STK_PUB_SIZE);
  munmap(swapped, STK_PUB_SIZE);
}

/* One user's flood of files cannot crowd out another's loader, and a
 * writer that never lets go of the sequence lock is dropped, not read
 * forever. */
TEST(watch_publication_flood_and_busy_writer) {
  if (geteuid() != 0) SKIP("needs root (chown)");
  mkdir("rt", 01777);
  char path[64];
  for (int i = 0; i < 300; i++) {
    snprintf(path, sizeof path, "rt/loader-9-%d.pub", i);
    test_write_file(path, "garbage, not a publication", 26);
    CHECK(chown(path, 65534, 65534) == 0);
  }
  struct stk_pub p;
  pub_for(&p, (uint32_t)getpid());
  write_pub("rt/loader-1-1.pub", &p, STK_PUB_SIZE, 0);
  pub_for(&p, (uint32_t)getpid());
  p.seq = 1; /* odd, for good */
  write_pub("rt/loader-1-2.pub", &p, STK_PUB_SIZE, 0);
  struct stk_watch_opts o = {.nvml_lib = "none", .runtime_dir = "rt"};
  struct stk_watch *w = agent("none.txt", &o);
  for (int s = 0; s < 6; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(loader_series(t, getpid()), 7);
  CHECK_NEAR(rejected(t, "format"), 256); /* the rest of uid 65534's are left out */
  CHECK(rejected(t, "limit") >= 44);
  CHECK_NEAR(rejected(t, "busy"), 1);
  free(t);
  stk_watch_close(w);
}

/* A child that becomes uid 65534 and waits to be killed. */
static pid_t child_of_another_user(void) {
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t c = fork();
  CHECK(c >= 0);
  if (c == 0) {
    close(ready[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(1);
    (void)!write(ready[1], "x", 1);
    for (;;) pause();
  }
  close(ready[1]);
  char x;
  CHECK_MSG(read(ready[0], &x, 1) == 1, "the child could not become uid 65534");
  close(ready[0]);
  return c;
}

/* A publication speaks only for processes of its own owner: a user's file
 * naming another user's process would inflate that job's input stall. */
TEST(watch_publication_for_another_users_pid) {
  if (geteuid() != 0) SKIP("needs root (chown, setuid)");
  mkdir("rt", 01777);
  pid_t other = child_of_another_user();
  struct stk_pub p;
  /* A file of uid 65534 naming this (root's) process. */
  pub_for(&p, (uint32_t)getpid());
  write_pub("rt/loader-1-1.pub", &p, STK_PUB_SIZE, 65534);
  /* A root's file naming uid 65534's process. */
  pub_for(&p, (uint32_t)other);
  write_pub("rt/loader-1-2.pub", &p, STK_PUB_SIZE, 0);
  /* uid 65534's own file for its own process: believed. */
  p.batches = 11;
  write_pub("rt/loader-1-3.pub", &p, STK_PUB_SIZE, 65534);
  struct stk_watch_opts o = {.nvml_lib = "none", .runtime_dir = "rt"};
  struct stk_watch *w = agent("none.txt", &o);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK(isnan(loader_series(t, getpid())));
  CHECK_NEAR(loader_series(t, other), 11);
  CHECK_NEAR(rejected(t, "owner"), 2);
  free(t);
  stk_watch_close(w);
  kill(other, SIGKILL);
  waitpid(other, NULL, 0);
}

/* A publication's own job id (its environment's) cannot take it into a
 * job whose GPU processes all belong to another user. */
TEST(watch_publication_job_claim_for_another_users_job) {
  if (geteuid() != 0) SKIP("needs root (setuid)");
  pid_t other = child_of_another_user();
  FILE *f = fopen("sc.txt", "w");
  fprintf(f, "gpu 0\nat 0 gpu 0 util 50 proc %d\n", (int)other);
  fclose(f);
  mkdir("map", 0755);
  write_str("map/0", "theirs\n");
  mkdir("rt", 0755);
  struct stk_pub p;
  pub_for(&p, (uint32_t)getpid()); /* this process: no GPU, no cgroup job */
  snprintf(p.job, sizeof p.job, "theirs");
  write_pub("rt/loader-1-1.pub", &p, STK_PUB_SIZE, getuid());
  pub_for(&p, (uint32_t)getpid());
  p.batches = 3;
  snprintf(p.job, sizeof p.job, "mine");
  write_pub("rt/loader-1-2.pub", &p, STK_PUB_SIZE, getuid());
  struct stk_watch_opts o = {.mapping_dir = "map", .runtime_dir = "rt", .proc_root = "proc"};
  fake_proc_host(1, 1, 0);
  char path[64];
  snprintf(path, sizeof path, "proc/%d", (int)other);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "proc/%d/status", (int)other);
  write_str(path, "Name:\tother\nUid:\t65534\t65534\t65534\t65534\n");
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  char pre[160];
  snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%d\",loader=\"1\",hpc_job=\"pid-%d\"}", (int)getpid(),
           (int)getpid());
  CHECK_NEAR(metric(t, pre), 7);
  snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%d\",loader=\"2\",hpc_job=\"mine\"}", (int)getpid());
  CHECK_NEAR(metric(t, pre), 3);
  snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%d\",loader=\"1\",hpc_job=\"theirs\"}", (int)getpid());
  CHECK(isnan(metric(t, pre)));
  free(t);
  stk_watch_close(w);
  kill(other, SIGKILL);
  waitpid(other, NULL, 0);
}

/* The version rule of stoker/publication.h: a newer minor of version 1
 * (longer, its extra bytes unknown here) is read as 1.0; another major, or
 * a size field that is not the file's length, is skipped and counted. */
TEST(watch_publication_version_rule) {
  mkdir("rt", 0755);
  struct stk_pub p;
  pub_for(&p, (uint32_t)getpid());
  p.minor = STK_PUB_MINOR + 1;
  p.size = 2048;
  p.batches = 5;
  write_pub("rt/loader-1-1.pub", &p, 2048, getuid());
  pub_for(&p, (uint32_t)getpid());
  p.version = STK_PUB_VERSION + 1;
  write_pub("rt/loader-1-2.pub", &p, STK_PUB_SIZE, getuid());
  pub_for(&p, (uint32_t)getpid());
  p.size = 2048; /* but 1,024 bytes long */
  write_pub("rt/loader-1-3.pub", &p, STK_PUB_SIZE, getuid());
  pub_for(&p, (uint32_t)getpid());
  p.size = 1000; /* shorter than version 1.0 */
  write_pub("rt/loader-1-4.pub", &p, 1000, getuid());
  struct stk_watch_opts o = {.nvml_lib = "none", .runtime_dir = "rt"};
  struct stk_watch *w = agent("none.txt", &o);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(loader_series(t, getpid()), 5);
  CHECK_NEAR(rejected(t, "version"), 1);
  CHECK_NEAR(rejected(t, "size"), 2);
  free(t);
  stk_watch_close(w);
}

/* Strings in a publication become label values: whatever bytes a user
 * writes, the page stays printable ASCII and valid UTF-8 (one bad label
 * value makes Prometheus drop the whole scrape). */
TEST(watch_publication_strings_cannot_break_the_page) {
  mkdir("rt", 0755);
  struct stk_pub p;
  pub_for(&p, (uint32_t)getpid());
  memcpy(p.job, "a\"b\\c\nd\xff}", 10);
  memcpy(p.stage[1].name, "\xe2\x82 {x=\"1\"}", 11);
  memcpy(p.dataset, "/d/\xc3\xa9t\xc3\xa9/\xed\xa0\x80/\x01\x7f", 15);
  write_pub("rt/loader-1-1.pub", &p, STK_PUB_SIZE, getuid());
  struct stk_watch_opts o = {.nvml_lib = "none", .runtime_dir = "rt", .proc_root = "proc"};
  fake_proc_host(1, 1, 0); /* no cgroup job: the publication's job id is used */
  struct stk_watch *w = agent("none.txt", &o);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  char pre[160];
  snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%d\",loader=\"1\",hpc_job=\"a_b_c_d__\"}", (int)getpid());
  CHECK_NEAR(metric(t, pre), 7);
  CHECK(strstr(t, "stage=\"____x__1__\"") != NULL);
  for (const unsigned char *c = (const unsigned char *)t; *c; c++)
    CHECK_MSG(*c == '\n' || (*c >= 0x20 && *c < 0x7f), "byte 0x%02x in the exposition", *c);
  free(t);
  FILE *f = fopen("out.json", "w");
  struct stk_json j;
  stk_json_init(&j, f, 0);
  stk_watch_json(w, &j);
  fclose(f);
  char *out = NULL;
  CHECK_OK(test_sh(&out, "/usr/bin/python3 -c 'import json; d=json.load(open(\"out.json\", encoding=\"utf-8\")); "
                         "print(ascii(d[\"loaders\"][0][\"dataset\"]))'"));
  CHECK_STR(out, "'/d/\\xe9t\\xe9/?" "?" "?/?" "?'\n"); /* split: no trigraphs */
  free(out);
  stk_watch_close(w);
}

/* Publications in a pod's own /dev/shm/stoker, read through its GPU
 * processes' roots (/proc/PID/root) with --pod-publications: no hostPath
 * for the training pods. The directory is opened a component at a time
 * without following links: a pod whose dev is a link elsewhere is not
 * read through it. Only processes whose cgroup names a pod are looked at,
 * from their second sample on (the cgroup is read at the first). */
TEST(watch_pod_publications_through_proc_root) {
  fake_proc_host(1, 1, 0);
  int me = (int)getpid(), evil = 999999;
  char path[256];
  snprintf(path, sizeof path, "proc/%d/root/dev/shm/stoker", me);
  CHECK(test_sh(NULL, "mkdir -p %s evil/dev/shm/stoker proc/%d/root", path, evil) == 0);
  struct stk_pub p;
  pub_for(&p, (uint32_t)me);
  p.batches = 11;
  snprintf(path, sizeof path, "proc/%d/root/dev/shm/stoker/loader-%d-1.pub", me, me);
  write_pub(path, &p, STK_PUB_SIZE, getuid());
  snprintf(path, sizeof path, "evil/dev/shm/stoker/loader-%d-2.pub", me);
  write_pub(path, &p, STK_PUB_SIZE, getuid());
  snprintf(path, sizeof path, "proc/%d/root/dev", evil);
  CHECK(symlink("../../../evil/dev", path) == 0);
  /* Both are a pod's processes (their cgroups say so); a host process's
   * root is never looked at. */
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "proc/%d/cgroup", i ? evil : me);
    write_str(path, "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                    "pod1234abcd_5678_90ef_1234_567890abcdef.slice/cri-containerd-1.scope\n");
  }
  char sc[256];
  snprintf(sc, sizeof sc, "gpu 0\nat 0 gpu 0 util 50 proc %d used_mib 1 proc %d used_mib 1\n", me, evil);
  write_str("sc.txt", sc);
  mkdir("rt", 0755);
  for (int on = 0; on < 3; on++) {
    if (on == 2) { /* a process in no pod: its root is not read */
      snprintf(path, sizeof path, "proc/%d/cgroup", me);
      write_str(path, "0::/user.slice/session-1.scope\n");
    }
    struct stk_watch_opts o = {.runtime_dir = "rt", .proc_root = "proc", .pod_publications = on > 0};
    struct stk_watch *w = agent("sc.txt", &o);
    for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
    char *t = expo(w);
    char pre[128];
    snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%d\",loader=\"1\"", me);
    if (on == 1)
      CHECK_NEAR(metric(t, pre), 11);
    else
      CHECK(isnan(metric(t, pre)));
    snprintf(pre, sizeof pre, "stoker_loader_batches_total{pid=\"%d\",loader=\"2\"", me);
    CHECK(isnan(metric(t, pre))); /* never through the link */
    free(t);
    stk_watch_close(w);
  }
}
