/* stoker bench across processes (MPI): on a small data-rich case the run
 * under `mpirun -np 2` agrees with the threaded run of 2 accelerators, and a
 * rank that fails (bad data mid-run, a bad option, a kill) ends the whole
 * job with an error within seconds instead of leaving its peers waiting.
 * Skipped where mpirun is missing or stoker was built without MPI. */
#include <math.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/stoker.h"
#include "test.h"

/* One host, as root, in a container (Debian 12's Open MPI 4.1): shared
 * memory only (the TCP transport is not needed, and ThreadSanitizer reports
 * a lock-order inversion inside it), without the single-copy mechanism some
 * containers forbid. `timeout` turns a hang into a failure. */
#define MPIRUN                                                                  \
  "timeout 60 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader " \
  "--mca btl_vader_single_copy_mechanism none"
/* 400 samples, 2 accelerators: 20 steps per epoch, data-rich on 2 cores. */
#define SMALL                                                                        \
  "--workload resnet50 --files 8 --samples-per-file 50 --batch 10 --compute-s 0.05 " \
  "--read-threads 2 --epochs 2 -q"

static void need_mpi(void) {
  if (!stk_bench_mpi_built())
    SKIP("stoker was built without MPI (`make test` installs libopenmpi-dev; rebuild)");
  if (test_sh(NULL, "command -v mpirun >/dev/null") != 0)
    SKIP("mpirun is missing (apt-get install openmpi-bin)");
  /* Open MPI does not free everything at MPI_Finalize: LeakSanitizer
   * (address builds) is kept to stoker's own leaks by the runner's
   * suppressions (tests/lsan.supp; these same lines when run by hand), which
   * name Open MPI's libraries: that takes full stacks, and components kept
   * loaded. */
  const char supp[] =
      "leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\n"
      "leak:libevent\nleak:mca_\n";
  test_write_file("lsan-openmpi.supp", supp, sizeof supp - 1);
  char lsan[4200], cwd[4096];
  snprintf(lsan, sizeof lsan, "suppressions=%s/lsan-openmpi.supp:print_suppressions=0",
           getcwd(cwd, sizeof cwd) ? cwd : ".");
  setenv("LSAN_OPTIONS", lsan, 0);
  char asan[1024];
  const char *old = getenv("ASAN_OPTIONS");
  snprintf(asan, sizeof asan, "%s%sfast_unwind_on_malloc=0", old ? old : "",
           old && *old ? ":" : "");
  setenv("ASAN_OPTIONS", asan, 1);
  setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
  setenv("PMIX_MCA_mca_base_component_disable_dlclose", "1", 1);
}

/* The 400-sample tfrecord dataset that SMALL asks for, in dir. */
static void gen_small(const char *dir) {
  char *out;
  int rc = test_sh(&out, "%s gen %s --format tfrecord --samples 400 --samples-per-shard 50 -q",
                   test_stoker_bin(), dir);
  CHECK_MSG(rc == 0, "gen failed:\n%s", out);
  free(out);
}

/* The number after "key": (its first occurrence: the top-level key in a
 * bench report). */
static double json_num(const char *js, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(js, pat);
  CHECK_MSG(p, "no %s in the report", key);
  p += strlen(pat);
  if (!strncmp(p, "true", 4)) return 1;
  if (!strncmp(p, "false", 5)) return 0;
  return strtod(p, NULL);
}

TEST(bench_mpi_agrees_with_threads) {
  need_mpi();
  const char *stk = test_stoker_bin();
  gen_small("d");
  char *out;
  int rc = test_sh(&out, "%s bench --data d " SMALL " --accelerators 2 --json t.json", stk);
  CHECK_MSG(rc == 0, "threaded run failed:\n%s", out);
  free(out);
  rc = test_sh(&out, MPIRUN " -np 2 %s bench --data d " SMALL " --json m.json", stk);
  CHECK_MSG(rc == 0, "mpirun failed (exit %d):\n%s", rc, out);
  CHECK_CONTAINS(out, "across 2 processes on 1 host(s)");
  CHECK_CONTAINS(out, "2 accelerators, 2 epochs x 20 steps");
  free(out);
  char *t = (char *)test_read_file("t.json", NULL), *m = (char *)test_read_file("m.json", NULL);
  CHECK_EQ(json_num(t, "accelerators"), 2);
  CHECK_EQ(json_num(m, "accelerators"), 2);
  CHECK_EQ(json_num(t, "processes"), 1);
  CHECK_EQ(json_num(m, "processes"), 2);
  CHECK_EQ(json_num(m, "accelerators_in_process"), 1);
  CHECK_EQ(json_num(t, "steps_per_epoch"), 20);
  CHECK_EQ(json_num(m, "steps_per_epoch"), 20);
  CHECK_EQ(json_num(t, "epochs"), 2); /* the workload's */
  CHECK_EQ(json_num(m, "epochs"), 2);
  /* Every sample the epochs ask for was read once, by one loader or two. */
  CHECK_EQ(json_num(t, "samples"), 2 * 20 * 2 * 10);
  CHECK_EQ(json_num(m, "samples"), 2 * 20 * 2 * 10);
  double au_t = json_num(t, "au"), au_m = json_num(m, "au");
  fprintf(stderr, "    AU threaded %.4f, MPI %.4f\n", au_t, au_m);
  /* AU is a timing figure: on a quiet machine the two agree within a few
   * thousandths (docs/bench.md), but two busy-polling MPI processes on a
   * loaded two-core CI machine can halve it, so the test checks only that
   * both runs measured one, and each pass verdict follows its AU. */
  CHECK(au_t > 0 && au_t <= 1 && au_m > 0 && au_m <= 1);
  CHECK_EQ(json_num(t, "pass"), au_t >= json_num(t, "au_threshold"));
  CHECK_EQ(json_num(m, "pass"), au_m >= json_num(m, "au_threshold"));
  /* Both accelerators of the MPI run appear in the gathered per-epoch list. */
  CHECK_CONTAINS(m, "\"rank\": 1");
  free(t);
  free(m);
}

/* Rank 1 reads a copy whose shard 0 has a corrupt last record: it fails
 * when a batch reaches it (mid-run with seed 0), and rank 0, waiting at the
 * barrier, stops too. */
TEST(bench_mpi_rank_failing_mid_run_stops_all) {
  need_mpi();
  const char *stk = test_stoker_bin();
  gen_small("d");
  CHECK_OK(test_sh(NULL, "cp -r d bad"));
  size_t n;
  uint8_t *b = test_read_file("bad/shard-00000.tfrecord", &n);
  b[n - 1000] ^= 0xff; /* inside the last record's payload */
  test_write_file("bad/shard-00000.tfrecord", b, n);
  free(b);
  char *out;
  int rc =
      test_sh(&out, MPIRUN " -np 1 %s bench --data d " SMALL " : -np 1 %s bench --data bad " SMALL,
              stk, stk);
  CHECK_MSG(rc != 0 && rc != 124, "exit %d (124: a hang), output:\n%s", rc, out);
  CHECK_CONTAINS(out, "rank 1 of 2: bad/shard-00000.tfrecord");
  CHECK_CONTAINS(out, "checksum mismatch");
  CHECK_CONTAINS(out, "rank 0 of 2: stopped: rank 1 of 2 failed");
  free(out);
}

/* Failures before the first step: a rank whose --data is not a folder, and
 * ranks given different workloads (they would run different steps). */
TEST(bench_mpi_rank_failing_before_run_stops_all) {
  need_mpi();
  const char *stk = test_stoker_bin();
  gen_small("d");
  test_write_file("afile", "x", 1);
  char *out;
  int rc = test_sh(&out,
                   MPIRUN " -np 1 %s bench --data d " SMALL " : -np 1 %s bench --data afile " SMALL,
                   stk, stk);
  CHECK_MSG(rc != 0 && rc != 124, "exit %d (124: a hang), output:\n%s", rc, out);
  CHECK_CONTAINS(out, "rank 1 of 2: --data afile is not a directory");
  free(out);
  rc = test_sh(&out,
               MPIRUN " -np 1 %s bench --data d " SMALL " : -np 1 %s bench --data d " SMALL
                      " --batch 5",
               stk, stk);
  CHECK_MSG(rc != 0 && rc != 124, "exit %d (124: a hang), output:\n%s", rc, out);
  CHECK_CONTAINS(out, "given different workloads");
  free(out);
  rc = test_sh(&out, MPIRUN " -np 2 %s bench --data d " SMALL " --find-max", stk);
  CHECK_MSG(rc != 0 && rc != 124, "exit %d (124: a hang), output:\n%s", rc, out);
  CHECK_CONTAINS(out, "--find-max cannot run across processes");
  free(out);
}

/* A rank killed mid-run (SIGKILL: no chance to say goodbye): mpirun ends
 * the job. */
TEST(bench_mpi_rank_killed_stops_all) {
  need_mpi();
  const char *stk = test_stoker_bin();
  gen_small("d");
  char *out;
  int rc = test_sh(&out,
                   MPIRUN " -np 1 %s bench --data d " SMALL
                          " --epochs 20 : -np 1 timeout -s KILL 1 %s "
                          "bench --data d " SMALL " --epochs 20",
                   stk, stk);
  CHECK_MSG(rc != 0 && rc != 124, "exit %d (124: a hang), output:\n%s", rc, out);
  CHECK_CONTAINS(out, "rank 1");
  free(out);
}

/* A build without MPI refuses clearly instead of running N unrelated jobs. */
TEST(bench_mpi_refused_without_mpi_build) {
  if (stk_bench_mpi_built()) SKIP("stoker was built with MPI");
  struct stk_bench_mpi *m;
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk_bench_mpi_init(&m, err), STK_ENOTSUP);
  CHECK_CONTAINS(err, "built without MPI (install libopenmpi-dev and rebuild)");
  char *out;
  int rc = test_sh(&out, "%s bench --mpi -q --data d " SMALL, test_stoker_bin());
  CHECK(rc == 1);
  CHECK_CONTAINS(out,
                 "stoker bench: stoker was built without MPI (install libopenmpi-dev and rebuild)");
  free(out);
  rc = test_sh(&out, "OMPI_COMM_WORLD_SIZE=2 %s bench -q --data d " SMALL, test_stoker_bin());
  CHECK(rc == 1);
  CHECK_CONTAINS(out, "built without MPI");
  free(out);
}

/* Attaching a job to the caller's options writes rank, world and the
 * barrier into them: a struct_size that cannot hold those fields, or one
 * larger than this library's struct, is refused before anything is written
 * (the check comes before the job handle is used, in both builds). */
TEST(bench_mpi_attach_checks_struct_size) {
  struct stk_bench_opts o;
  stk_bench_opts_init(&o);
  char err[STK_ERRMSG_MAX];
  o.struct_size = offsetof(struct stk_bench_opts, rank);
  o.rank = 7;
  CHECK_EQ(stk_bench_mpi_attach(NULL, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_bench_opts struct_size");
  CHECK_CONTAINS(err, "is too small");
  CHECK_EQ(o.rank, 7u);
  CHECK(o.global_barrier == NULL);
  o.struct_size = sizeof o + 8;
  CHECK_EQ(stk_bench_mpi_attach(NULL, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "larger than this library's");
  CHECK_EQ(o.rank, 7u);
}

/* A checkpoint-only transformer (tensor 2: 2 ranks) under `mpirun -np 2`:
 * each process writes its own rank's files (DLIO's names and sizes, kept),
 * and rank 0 reports the job's bytes per checkpoint, writing ranks, saves and
 * loads, the same as the threaded run of 2 accelerators. */
TEST(bench_mpi_ckpt_only_gathers_every_rank) {
  need_mpi();
  const char *stk = test_stoker_bin();
  const char cfg[] =
      "model:\n  name: tiny\n  type: transformer\n  num_layers: 4\n"
      "  parallelism: {tensor: 2, pipeline: 1, zero_stage: 1}\n"
      "  transformer: {vocab_size: 1000, hidden_size: 64, ffn_hidden_size: 128, "
      "num_attention_heads: 4, num_kv_heads: 2}\n"
      "workflow: {train: False, checkpoint: True}\n"
      "checkpoint:\n  checkpoint_folder: ck\n  time_between_checkpoints: 0.01\n"
      "  num_checkpoints_write: 2\n  num_checkpoints_read: 1\n";
  test_write_file("c.yaml", cfg, sizeof cfg - 1);
  char *out;
  int rc = test_sh(&out, "%s bench --config c.yaml -q --accelerators 2 --json t.json", stk);
  CHECK_MSG(rc == 0, "threaded run failed:\n%s", out);
  free(out);
  rc = test_sh(&out, MPIRUN " -np 2 %s bench --config c.yaml --keep-checkpoints --json m.json",
               stk);
  CHECK_MSG(rc == 0, "mpirun failed (exit %d):\n%s", rc, out);
  CHECK_CONTAINS(out, "across 2 processes on 1 host(s)");
  CHECK_CONTAINS(out, "the job's 2 writing ranks");
  free(out);
  /* Every rank's files, as DLIO names and sizes them. */
  struct stk_workload w;
  char err[STK_ERRMSG_MAX], unknown[512], ignored[512];
  memset(&w, 0, sizeof w);
  CHECK_MSG(stk_workload_load_yaml("c.yaml", &w, unknown, sizeof unknown, ignored, sizeof ignored,
                                   err) == 0,
            "%s", err);
  uint64_t want = 0;
  for (uint32_t rank = 0; rank < 2; rank++) {
    struct stk_ckpt_file f[16];
    size_t n;
    CHECK_OK(stk_ckpt_rank_files(&w, 2, rank, f, 16, &n, err));
    CHECK(n >= 1);
    for (size_t i = 0; i < n; i++) {
      char path[2048];
      struct stat st;
      snprintf(path, sizeof path, "ck/global_epoch1_step2/%s", f[i].name);
      CHECK_MSG(stat(path, &st) == 0, "%s missing", path);
      CHECK_EQ((uint64_t)st.st_size, f[i].bytes);
      want += f[i].bytes;
    }
  }
  char *t = (char *)test_read_file("t.json", NULL), *m = (char *)test_read_file("m.json", NULL);
  CHECK_EQ(json_num(m, "processes"), 2);
  CHECK_EQ(json_num(m, "ranks"), 2);
  CHECK_EQ(json_num(m, "writers"), 2);
  CHECK_EQ(json_num(t, "writers"), 2);
  CHECK_EQ(json_num(m, "bytes"), (double)want);
  CHECK_EQ(json_num(t, "bytes"), (double)want);
  CHECK_EQ(json_num(m, "dlio_bytes"), json_num(t, "dlio_bytes"));
  CHECK_EQ(json_num(m, "saves"), 2);
  CHECK_EQ(json_num(m, "loads"), 1);
  /* Bandwidth is the job's bytes over the job's time. */
  double save_s = json_num(m, "save_s"), gib = json_num(m, "save_gib_s");
  CHECK(save_s > 0 && save_s >= json_num(m, "save_max_s"));
  CHECK(fabs(gib - (double)want * 2 / save_s / 1073741824.0) <= 1e-6 * gib);
  free(t);
  free(m);
}
