/* stoker bench: the AU definition, the verdict's classification (on
 * synthetic figures, so it does not depend on this machine's speed), DLIO
 * configs, presets and the all-reduce model. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/bench/bench_impl.h"
#include "stoker/stoker.h"
#include "test.h"

TEST(bench_presets_match_dlio) {
  struct stk_workload w;
  stk_workload_init(&w);
  CHECK_OK(stk_workload_preset("unet3d", "h100", &w));
  CHECK_STR(w.format, "npz");
  CHECK(w.record_bytes == 146600628 && w.record_stdev == 68341808);
  CHECK(w.files == 168 && w.samples_per_file == 1 && w.batch == 7 && w.read_threads == 4);
  CHECK(w.compute_s == 0.323 && w.au_min == 0.90);
  CHECK_OK(stk_workload_preset("unet3d", "b200", &w));
  CHECK(w.compute_s == 0.162);
  CHECK_OK(stk_workload_preset("resnet50", "a100", &w));
  CHECK(w.record_bytes == 114660.07 && w.samples_per_file == 1251 && w.files == 1024);
  CHECK(w.batch == 400 && w.read_threads == 8 && w.compute_s == 0.435);
  CHECK_OK(stk_workload_preset("cosmoflow", "h100", &w));
  CHECK(w.record_bytes == 2828486 && w.record_stdev == 71311 && w.files == 524288);
  CHECK(w.batch == 1 && w.compute_s == 0.00350 && w.au_min == 0.70);
  CHECK_EQ(stk_workload_preset("resnet50", "b200", &w), STK_ENOENT);
  CHECK_EQ(stk_workload_preset("bert", NULL, &w), STK_ENOENT);
}

TEST(bench_allreduce_model) {
  struct stk_network n;
  CHECK_OK(stk_network_preset("ib400", &n));
  double t = stk_allreduce_seconds(&n, 8, 1e9);
  CHECK(fabs(t - (2.0 * 7 / 8 * 1e9 / 50e9 + 14 * 5e-6)) < 1e-12);
  CHECK(stk_allreduce_seconds(&n, 1, 1e9) == 0);
  CHECK_EQ(stk_network_preset("carrier-pigeon", &n), STK_ENOENT);
}

/* Every shared DLIO config loads with exactly the preset's values, and
 * its non-emulated keys are listed, none unknown. */
TEST(bench_dlio_configs_load) {
  const char *d = test_shared_data();
  if (!d) SKIP("../shared/data is absent: no DLIO configs to read");
  const char *names[][2] = {{"unet3d", "a100"}, {"unet3d", "h100"}, {"resnet50", "a100"},
                            {"resnet50", "h100"}, {"cosmoflow", "a100"}, {"cosmoflow", "h100"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[4096], unknown[2048], ignored[2048], err[STK_ERRMSG_MAX];
    snprintf(path, sizeof path, "%s/dlio-configs/%s_%s.yaml", d, names[i][0], names[i][1]);
    struct stk_workload w, p;
    memset(&w, 0, sizeof w);
    int rc = stk_workload_load_yaml(path, &w, unknown, sizeof unknown, ignored, sizeof ignored, err);
    CHECK_MSG(rc == 0, "%s: %s", path, err);
    CHECK_OK(stk_workload_preset(names[i][0], names[i][1], &p));
    CHECK_STR(w.name, p.name);
    CHECK_STR(w.format, p.format);
    CHECK_MSG(w.record_bytes == p.record_bytes && w.record_stdev == p.record_stdev, "%s", path);
    CHECK_MSG(w.files == p.files && w.samples_per_file == p.samples_per_file, "%s", path);
    CHECK_MSG(w.batch == p.batch && w.read_threads == p.read_threads && w.epochs == p.epochs, "%s", path);
    CHECK_MSG(w.compute_s == p.compute_s && w.au_min == p.au_min, "%s", path);
    CHECK_MSG(unknown[0] == 0, "%s: unknown keys: %s", path, unknown);
    CHECK_CONTAINS(ignored, "framework");
  }
}

TEST(bench_yaml_errors_and_unknown_keys) {
  const char *good = "model:\n  name: mine   # a comment\ndataset:\n  format: tfrecord\n"
                     "  num_files_train: 4\n  frobnication: 3\nreader:\n  batch_size: \"8\"\n"
                     "train:\n  computation_time: 0.5\nmetric:\n  au: 90\n";
  test_write_file("ok.yaml", good, strlen(good));
  struct stk_workload w;
  memset(&w, 0, sizeof w);
  char unknown[512], ignored[512], err[STK_ERRMSG_MAX];
  CHECK_OK(stk_workload_load_yaml("ok.yaml", &w, unknown, sizeof unknown, ignored, sizeof ignored, err));
  CHECK_STR(w.name, "mine");
  CHECK_EQ(w.files, 4);
  CHECK_EQ(w.batch, 8);
  CHECK(w.compute_s == 0.5);
  CHECK(fabs(w.au_min - 0.90) < 1e-12); /* percent accepted */
  CHECK_CONTAINS(unknown, "dataset.frobnication (line 6)");
  const char *bad[][2] = {
      {"reader:\n  batch_size: many\n", "bad.yaml:2: reader.batch_size: 'many' is not a whole number"},
      {"train:\n\tepochs: 3\n", "bad.yaml:2: not valid YAML"},
      {"train:\n  - 3\n", "bad.yaml:1: train: expected 'key: value' pairs under it, got a list"},
      {"reader:\n  batch_size: [1, 2]\n", "bad.yaml:2: reader.batch_size: expected one value, got a list"},
      {"workflow:\n  checkpoint: maybe\n", "workflow.checkpoint: 'maybe' is not True or False"},
      {"model:\n  model_datatype: fp12\n", "model.model_datatype: 'fp12' is not one of"},
      {"- 1\n- 2\n", "bad.yaml:1: expected sections of 'key: value', got a list"},
      {"train:\n  computation_time: -1\n", "bad.yaml:2: train.computation_time"},
      {"# nothing\n", "no settings"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    test_write_file("bad.yaml", bad[i][0], strlen(bad[i][0]));
    CHECK(stk_workload_load_yaml("bad.yaml", &w, NULL, 0, NULL, 0, err) != 0);
    CHECK_CONTAINS(err, bad[i][1]);
  }
  CHECK_EQ(stk_workload_load_yaml("missing.yaml", &w, NULL, 0, NULL, 0, err), STK_ENOENT);
  CHECK_CONTAINS(err, "missing.yaml");
}

/* The YAML forms users write reach the same settings: flow mappings,
 * anchors with merge keys, aliases, quoted and folded scalars, DLIO's
 * computation_time dict. */
TEST(bench_yaml_full_forms) {
  const char *y = "base: &b {batch_size: 6, read_threads: 3}\n"
                  "reader:\n  <<: *b\n  batch_size: 9\n"
                  "dataset: {format: npz, num_files_train: 12, data_folder: \"my data/\"}\n"
                  "model:\n  name: >-\n    folded\n    name\n"
                  "  parallelism: {tensor: 2, pipeline: 2}\n"
                  "train:\n  computation_time: {mean: 0.25, stdev: 0.01}\n"
                  "workflow: {train: False, checkpoint: yes}\n"
                  "checkpoint:\n  fsync: True\n  num_checkpoints_write: &n 3\n  num_checkpoints_read: *n\n";
  test_write_file("forms.yaml", y, strlen(y));
  struct stk_workload w;
  memset(&w, 0, sizeof w);
  char unknown[512], ignored[512], err[STK_ERRMSG_MAX];
  CHECK_OK(stk_workload_load_yaml("forms.yaml", &w, unknown, sizeof unknown, ignored, sizeof ignored, err));
  CHECK_EQ(w.batch, 9);
  CHECK_EQ(w.read_threads, 3);
  CHECK_STR(w.format, "npz");
  CHECK_EQ(w.files, 12);
  CHECK_STR(w.data_folder, "my data/");
  CHECK_STR(w.name, "folded name");
  CHECK(w.ckpt.tp == 2 && w.ckpt.pp == 2);
  CHECK(w.compute_s == 0.25 && w.compute_stdev == 0.01);
  CHECK(w.ckpt.no_train == 1 && w.ckpt.enabled == 1 && w.ckpt.fsync == 1);
  CHECK(w.ckpt.num_write == 3 && w.ckpt.num_read == 3);
  CHECK_CONTAINS(unknown, "base (line 1)");
}

/* DLIO's bytes and files per checkpoint for every shipped llama config at
 * data parallelism 1, as DLIO's HEAD writes them (issue 20), and the
 * per-rank split of one. */
TEST(bench_ckpt_sizes_match_dlio) {
  const char *d = test_shared_data();
  if (!d) SKIP("../shared/data is absent: no DLIO llama configs to size");
  static const struct {
    const char *name;
    uint32_t ranks;
    uint64_t bytes, files;
  } want[] = {
      {"llama_7b", 1, 94338064384ull, 2},          {"llama_7b_zero3", 1, 94338064384ull, 2},
      {"llama_8b_zero3", 1, 112423903232ull, 2},   {"llama_70b", 32, 978390843392ull, 696},
      {"llama_70b_zero3", 8, 978379046912ull, 16}, {"llama_405b", 256, 5682257133568ull, 1288},
      {"llama_1t", 512, 16563379306752ull, 1560},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char path[4096], err[STK_ERRMSG_MAX];
    snprintf(path, sizeof path, "%s/dlio-configs/%s.yaml", d, want[i].name);
    struct stk_workload w;
    memset(&w, 0, sizeof w);
    CHECK_MSG(stk_workload_load_yaml(path, &w, NULL, 0, NULL, 0, err) == 0, "%s", err);
    /* llama_1t's config trains (and so saves once, after its epoch). */
    CHECK_MSG(w.ckpt.enabled && w.ckpt.no_train == !!strcmp(want[i].name, "llama_1t"), "%s: workflow",
              want[i].name);
    CHECK_EQ(stk_ckpt_model_parallel(&w), want[i].ranks);
    uint64_t bytes, files;
    uint32_t writers;
    CHECK_MSG(stk_ckpt_size(&w, want[i].ranks, &bytes, &files, &writers, err) == 0, "%s", err);
    CHECK_MSG(bytes == want[i].bytes, "%s: %llu bytes, DLIO writes %llu", want[i].name,
              (unsigned long long)bytes, (unsigned long long)want[i].bytes);
    CHECK_MSG(files == want[i].files, "%s: %llu files, DLIO writes %llu", want[i].name,
              (unsigned long long)files, (unsigned long long)want[i].files);
    CHECK_EQ(writers, want[i].ranks);
    if (!strcmp(want[i].name, "llama_70b")) {
      /* Stage 0 holds the embedding and layers 1..20: 21 layer files and
       * the optimizer; a rank count that is not a multiple of 32 is refused. */
      struct stk_ckpt_file f[64];
      size_t n;
      CHECK_OK(stk_ckpt_rank_files(&w, 32, 0, f, 64, &n, err));
      CHECK_EQ(n, 22);
      CHECK_STR(f[0].name, "layer_0-model_0_model_states.pt");
      CHECK_EQ(f[0].bytes, 8192ull * 128256 / 8 * 2);
      CHECK_STR(f[21].name, "zero_pp_rank_0_mp_rank_0_optim_states.pt");
      CHECK_EQ(stk_ckpt_size(&w, 16, &bytes, &files, &writers, err), STK_EINVAL);
      CHECK_CONTAINS(err, "multiple of 32");
      /* Data parallelism 2 with ZeRO 1: layers from data-parallel rank 0
       * only, the optimizer split in two. */
      CHECK_OK(stk_ckpt_size(&w, 64, &bytes, &files, &writers, err));
      CHECK_EQ(files, 696 + 32);
    }
  }
  /* unet3d's config: one 499,153,191-byte state from rank 0 alone (stoker
   * reads model_size; DLIO reads model_size_bytes and writes 10,240). */
  char path[4096], err[STK_ERRMSG_MAX];
  snprintf(path, sizeof path, "%s/dlio-configs/unet3d_h100.yaml", d);
  struct stk_workload w;
  memset(&w, 0, sizeof w);
  CHECK_OK(stk_workload_load_yaml(path, &w, NULL, 0, NULL, 0, err));
  uint64_t bytes, files;
  uint32_t writers;
  CHECK_OK(stk_ckpt_size(&w, 8, &bytes, &files, &writers, err));
  CHECK(bytes == 499153191 && files == 1 && writers == 1);
  CHECK(w.ckpt.enabled && !w.ckpt.no_train && w.ckpt.after_epoch == 5 && w.ckpt.epochs_between == 2);
}

/* The verdict on synthetic figures (nothing here depends on this machine's
 * speed or load): a 2-core host, a 10 s run, the loader's stages and the
 * /proc figures given per case. */
struct vcase {
  double au, data, sync, jitter, wake;
  double read_util, dec_util, dec_idle; /* shares of the wall time */
  double own, others, steal;            /* shares of the 2 cores */
  int io_valid;
  uint64_t device_bytes;                /* of 20 GiB read */
};

static void verdict_of(const struct vcase *c, struct stk_bench_result *r) {
  memset(r, 0, sizeof *r);
  const double wall = 10, cores = 2;
  r->au = c->au;
  r->au_min = 0.9;
  r->pass = c->au >= 0.9;
  r->wall_s = wall;
  r->data_stall_frac = c->data;
  r->sync_stall_frac = c->sync;
  r->sync_jitter_frac = c->jitter;
  r->sync_wake_frac = c->wake;
  r->loader.wall_ns = (uint64_t)(wall * 1e9);
  r->loader.read_bytes = 20ull << 30;
  r->loader.stage[STK_STAGE_READ].threads = 1;
  r->loader.stage[STK_STAGE_READ].busy_ns = (uint64_t)(c->read_util * wall * 1e9);
  r->loader.stage[STK_STAGE_DECODE].threads = 2;
  r->loader.stage[STK_STAGE_DECODE].busy_ns = (uint64_t)(c->dec_util * 2 * wall * 1e9);
  r->loader.stage[STK_STAGE_DECODE].wait_in_ns = (uint64_t)(c->dec_idle * 2 * wall * 1e9);
  r->cpu_ns = (uint64_t)(c->own * cores * wall * 1e9);
  r->host.cores = 2;
  r->host.cpu_valid = 1;
  r->host.busy_cpu_s = (c->own + c->others) * cores * wall;
  r->host.steal_cpu_s = c->steal * cores * wall;
  r->host.io_valid = c->io_valid;
  r->host.device_read_bytes = c->device_bytes;
  stk__bench_verdict(r);
}

static void verdict_case(const struct vcase *c, const char *want, const char *says) {
  struct stk_bench_result r, again;
  verdict_of(c, &r);
  CHECK_MSG(strcmp(r.bottleneck, want) == 0, "want %s, got %s: %s", want, r.bottleneck, r.verdict);
  if (says) CHECK_CONTAINS(r.verdict, says);
  /* The same figures, the same verdict. */
  verdict_of(c, &again);
  CHECK_STR(again.verdict, r.verdict);
}

/* The warm-up waits only for batches that fit the memory cap: unet3d's
 * 2N+2 batches of about 1 GB under a cap of half the RAM hung bench. */
TEST(bench_warmup_fill_fits_the_cap) {
  const double GB = 1e9;
  CHECK_EQ(stk__bench_fill(8, 64ull << 30, 0.05 * GB), 10);    /* room: the ring and two */
  CHECK_EQ(stk__bench_fill(8, 12ull << 30, 2.46 * GB), 4);     /* unet3d, N=4, 24 GiB RAM */
  CHECK_EQ(stk__bench_fill(8, 1ull << 30, 3.0 * GB), 1);       /* not even one: one */
  CHECK_EQ(stk__bench_fill(2, 1ull << 30, 0.0), 4);            /* unknown size: the ring */
}

TEST(bench_verdict_classes) {
  const uint64_t GiB = 1ull << 30;
  /* au, data, sync, jitter, wake, read, dec, dec_idle, own, others, steal, io, device */
  verdict_case(&(struct vcase){0.97, 0.01, 0.02, 0.02, 0, 0.3, 0.2, 0.7, 0.3, 0, 0, 1, 0}, "none",
               "fed: AU 0.970");
  verdict_case(&(struct vcase){0.60, 0.05, 0.35, 0.35, 0, 0.3, 0.2, 0.7, 0.3, 0, 0, 1, 0}, "sync",
               "--compute-stdev");
  /* Reads busy, decoders idle, and the bytes came from the device: storage. */
  verdict_case(&(struct vcase){0.50, 0.45, 0.02, 0.02, 0, 0.99, 0.05, 0.9, 0.3, 0, 0, 1, 18 * GiB},
               "storage", "faster storage");
  /* The same figures with the data in the page cache: never storage. */
  verdict_case(&(struct vcase){0.50, 0.45, 0.02, 0.02, 0, 0.99, 0.05, 0.9, 0.3, 0, 0, 1, 0}, "read",
               "page cache");
  /* A fifth of the bytes from a device (a page cache cold at the start):
   * neither "page cache" nor plain storage; it says how much and what to
   * do. Seen on `stoker bench` defaults after the cache went cold. */
  verdict_case(&(struct vcase){0.88, 0.10, 0.02, 0.02, 0, 0.99, 0.05, 0.9, 0.3, 0, 0, 1, 4 * GiB},
               "storage", "partly on storage: reads saturated");
  verdict_case(&(struct vcase){0.88, 0.10, 0.02, 0.02, 0, 0.99, 0.05, 0.9, 0.3, 0, 0, 1, 4 * GiB},
               "storage", "4096 of their 20480 MiB came from a device");
  /* ... and where /proc/self/io could not be read, it says it cannot tell. */
  verdict_case(&(struct vcase){0.50, 0.45, 0.02, 0.02, 0, 0.99, 0.05, 0.9, 0.3, 0, 0, 0, 0}, "read",
               "unknown");
  /* Decoders busy: decode, naming the option to change. */
  verdict_case(&(struct vcase){0.50, 0.45, 0.02, 0.02, 0, 0.5, 0.95, 0.02, 0.97, 0, 0, 1, 0},
               "decode", "--read-threads");
  /* The process used every core by itself: cpu. */
  verdict_case(&(struct vcase){0.50, 0.45, 0.02, 0.02, 0, 0.5, 0.6, 0.1, 0.95, 0.02, 0, 1, 0}, "cpu",
               "fewer emulated accelerators");
  /* The same stall while other processes took half the machine: contention,
   * not the pipeline (decode looks busy because its threads were waiting
   * for a core). */
  verdict_case(&(struct vcase){0.50, 0.45, 0.02, 0.02, 0, 0.5, 0.95, 0.02, 0.45, 0.5, 0, 1, 0},
               "contention", "other processes used 50% of the 2 cores");
  /* Steal alone is contention too. */
  verdict_case(&(struct vcase){0.70, 0.25, 0.02, 0.02, 0, 0.99, 0.05, 0.9, 0.3, 0, 0.15, 1, 0},
               "contention", "hypervisor took 15%");
  /* Nothing saturated, but a fifth of the reads went to a device (the page
   * cache gone cold after a larger run): never "stoker's to fix". Seen on
   * `stoker bench` defaults right after bench D1 filled the page cache. */
  verdict_case(&(struct vcase){0.86, 0.15, 0.02, 0.02, 0, 0.3, 0.2, 0.75, 0.3, 0.02, 0, 1, 4 * GiB},
               "storage", "4096 of the 20480 MiB read came from a device");
  /* Nothing saturated, the machine idle: latency, saying what to do. */
  verdict_case(&(struct vcase){0.80, 0.15, 0.02, 0.02, 0, 0.3, 0.2, 0.75, 0.3, 0.02, 0, 1, 0},
               "latency", "--epochs");
  /* Fed on AU but with a large data stall is not "fed". */
  verdict_case(&(struct vcase){0.91, 0.08, 0.01, 0.01, 0, 0.3, 0.2, 0.75, 0.3, 0.02, 0, 1, 0},
               "latency", NULL);
  /* The driver woke late after compute: on an idle machine, scheduler
   * latency with the option that avoids it; on a busy one, contention. */
  verdict_case(&(struct vcase){0.85, 0.01, 0.12, 0.0, 0.11, 0.3, 0.2, 0.75, 0.3, 0.05, 0, 1, 0},
               "wakeup", "--busy-compute");
  verdict_case(&(struct vcase){0.85, 0.01, 0.12, 0.0, 0.11, 0.3, 0.2, 0.75, 0.4, 0.55, 0, 1, 0},
               "contention", "driver woke late");
  /* Barrier waits for a peer's late batch (no compute jitter, no late
   * wake-up) are data stall: here from a device, so storage, not sync. */
  {
    struct stk_bench_result r;
    verdict_of(&(struct vcase){0.5, 0.10, 0.35, 0.01, 0, 0.99, 0.05, 0.9, 0.3, 0, 0, 1, 20 * GiB},
               &r);
    CHECK_STR(r.bottleneck, "storage");
    CHECK_CONTAINS(r.verdict, "waited 44.0% for data");
  }
}

/* The /proc figures the verdict reads, from files written here: the
 * machine's busy and steal time, and this process's device reads. */
TEST(bench_host_figures_from_proc) {
  mkdir("p0", 0755);
  mkdir("p0/self", 0755);
  mkdir("p1", 0755);
  mkdir("p1/self", 0755);
  const char *s0 = "cpu  100 5 50 1000 7 3 2 10 0 0\ncpu0 1 2 3\n";
  const char *s1 = "cpu  300 5 150 1100 9 3 2 60 0 0\ncpu0 1 2 3\n";
  const char *io0 = "rchar: 5\nwchar: 0\nread_bytes: 4096\nwrite_bytes: 0\n";
  const char *io1 = "rchar: 9\nwchar: 0\nread_bytes: 1052672\nwrite_bytes: 0\n";
  test_write_file("p0/stat", s0, strlen(s0));
  test_write_file("p1/stat", s1, strlen(s1));
  test_write_file("p0/self/io", io0, strlen(io0));
  test_write_file("p1/self/io", io1, strlen(io1));
  struct stk__host_snap a, b;
  stk__bench_host_snap("p0", &a);
  stk__bench_host_snap("p1", &b);
  CHECK(a.cpu_ok && a.io_ok && b.cpu_ok && b.io_ok);
  struct stk_bench_host h;
  stk__bench_host_delta(&a, &b, 2, &h);
  double hz = (double)sysconf(_SC_CLK_TCK);
  CHECK(h.cpu_valid && h.io_valid && h.cores == 2);
  CHECK_MSG(fabs(h.busy_cpu_s - 300 / hz) < 1e-9, "busy %g", h.busy_cpu_s); /* user + system */
  CHECK(fabs(h.steal_cpu_s - 50 / hz) < 1e-9);
  CHECK_EQ(h.device_read_bytes, 1048576);
  /* A missing file is "unknown", never 0. */
  struct stk__host_snap none;
  stk__bench_host_snap("nowhere", &none);
  CHECK(!none.cpu_ok && !none.io_ok);
  stk__bench_host_delta(&a, &none, 2, &h);
  CHECK(!h.cpu_valid && !h.io_valid);
}

/* A small seeded TFRecord dataset in "d" (files x per_file samples of
 * size bytes, one shard per file) and resnet50/h100 options that read it
 * with the given batch and compute time; each test sets the rest. */
/* The workload small_run's options point at (one run at a time). */
static struct stk_workload bw;

static void small_run(struct stk_bench_opts *o, uint64_t files, uint64_t per_file, uint64_t size,
                      uint64_t seed, uint32_t batch, double compute_s) {
  struct stk_gen_opts g = {.dir = "d", .format = "tfrecord", .samples = files * per_file,
                           .size_mean = size, .samples_per_shard = per_file, .seed = seed};
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_gen(&g, NULL, NULL, err) == 0, "%s", err);
  memset(o, 0, sizeof *o);
  memset(&bw, 0, sizeof bw);
  CHECK_OK(stk_workload_preset("resnet50", "h100", &bw));
  o->w = &bw;
  bw.files = files;
  bw.samples_per_file = per_file;
  bw.batch = batch;
  bw.compute_s = compute_s;
  o->data = "d";
}

/* A short real run: the structure of the result and DLIO's AU formula. */
TEST(bench_run_au_definition) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  small_run(&o, 4, 50, 512, 3, 8, 0.004);
  bw.epochs = 2;
  bw.read_threads = 2;
  o.accelerators = 3;
  struct stk_bench_result r;
  int rc = stk_bench_run(&o, &r, err);
  CHECK_MSG(rc == 0, "%s", err);
  CHECK_EQ(r.accelerators, 3);
  CHECK_EQ(r.steps_per_epoch, 200 / 8 / 3);
  CHECK_EQ(r.loader.samples, 2 * 8 * 3 * 8); /* epochs x steps x accelerators x batch */
  double au = 0;
  for (uint32_t e = 0; e < 2; e++)
    for (uint32_t a = 0; a < 3; a++) {
      const struct stk_bench_epoch *p = &r.per[e * 3 + a];
      CHECK_EQ(p->steps, 8);
      CHECK(p->compute_s > 0 && p->compute_s <= p->compute_all_s);
      double want = p->compute_s / (p->wall_s - p->first_step_s);
      CHECK_MSG(fabs(p->au - want) < 1e-9, "au %g want %g", p->au, want);
      CHECK(p->au > 0 && p->au <= 1.0);
      au += p->au;
    }
  CHECK(fabs(r.au - au / 6) < 1e-9);
  CHECK_EQ(r.pass, r.au >= r.au_min);
  double split = r.compute_frac + r.data_stall_frac + r.sync_stall_frac + r.comm_frac;
  CHECK_MSG(split > 0.5 && split <= 1.0 + 1e-9, "split %g", split);
  CHECK(r.ntimeline == 2 * 8 * 3);
  /* MiB/s from the bytes delivered (512 per sample), not the preset's
   * 114,660-byte records. */
  CHECK_EQ(r.loader.bytes, r.loader.samples * 512);
  CHECK_MSG(fabs(r.mib_per_s - r.samples_per_s * 512 / 1048576.0) < 1e-6 * r.mib_per_s, "MiB/s %g for %g samples/s",
            r.mib_per_s, r.samples_per_s);
  CHECK(r.verdict[0] != 0);
  FILE *f = fopen("r.json", "w");
  stk_bench_json(&o, &r, f);
  fclose(f);
  f = fopen("r.svg", "w");
  stk_bench_svg(&o, &r, f);
  fclose(f);
  char *js = (char *)test_read_file("r.json", NULL), *svg = (char *)test_read_file("r.svg", NULL);
  CHECK_CONTAINS(js, "\"first_step_s\"");
  CHECK_CONTAINS(js, "\"verdict\"");
  CHECK_CONTAINS(svg, "<svg");
  CHECK_CONTAINS(svg, "</svg>");
  free(js);
  free(svg);
  stk_bench_result_free(&r);
}

/* Checkpoints within training: each save stops every accelerator, shows
 * in the epoch's ckpt_s, the time split and AU's wall time; the files are
 * DLIO's (model_states-0.pt of model_size bytes, an unaligned size so the
 * tail takes the short path), removed after the run unless kept. */
TEST(bench_ckpt_in_training_shows_in_split) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  small_run(&o, 4, 50, 512, 3, 8, 0.002);
  bw.epochs = 3;
  o.accelerators = 2;
  bw.ckpt.enabled = 1;
  bw.ckpt.model_size = 3 * 65536 + 100;
  bw.ckpt.after_epoch = 2;
  bw.ckpt.fsync = 1;
  o.ckpt_dir = "ck/nested";
  struct stk_bench_result r;
  CHECK_MSG(stk_bench_run(&o, &r, err) == 0, "%s", err);
  CHECK_EQ(r.ckpt.saves, 2); /* after epochs 2 and 3 */
  CHECK_EQ(r.ckpt.bytes, 3 * 65536 + 100);
  CHECK(r.ckpt.dlio_bytes == r.ckpt.bytes && r.ckpt.files == 1 && r.ckpt.writers == 1);
  CHECK(r.ckpt.fsync && r.ckpt.save_s > 0);
  CHECK(r.per[0].ckpt_s == 0 && r.per[1].ckpt_s == 0); /* epoch 1 */
  for (uint32_t e = 1; e < 3; e++)
    for (uint32_t a = 0; a < 2; a++) {
      const struct stk_bench_epoch *p = &r.per[e * 2 + a];
      CHECK(p->ckpt_s > 0 && p->ckpt_s < p->wall_s);
      CHECK(fabs(p->au - p->compute_s / (p->wall_s - p->first_step_s)) < 1e-9);
    }
  CHECK(r.ckpt_frac > 0 && r.ckpt_frac < 1);
  FILE *f = fopen("r.json", "w");
  stk_bench_json(&o, &r, f);
  fclose(f);
  char *js = (char *)test_read_file("r.json", NULL);
  CHECK_CONTAINS(js, "\"checkpoint\": ");
  CHECK_CONTAINS(js, "\"saves\": 2");
  free(js);
  stk_bench_result_free(&r);
  struct stat st;
  CHECK(stat("ck", &st) != 0); /* everything the run made is gone */
  /* Kept, by step: every 3 steps of 8 (16 steps a step of batch 8 on 2
   * accelerators: 200 / 8 / 2 = 12 steps, so 4 saves an epoch). */
  o.keep_checkpoints = 1;
  bw.ckpt.steps_between = 3;
  bw.epochs = 1;
  CHECK_MSG(stk_bench_run(&o, &r, err) == 0, "%s", err);
  CHECK_EQ(r.ckpt.saves, 4);
  CHECK(stat("ck/nested/global_epoch1_step12/model_states-0.pt", &st) == 0);
  CHECK_EQ((uint64_t)st.st_size, 3 * 65536 + 100);
  stk_bench_result_free(&r);
}

/* A checkpoint-only transformer (tensor 2 x pipeline 2: 4 ranks): every
 * rank's files are written with DLIO's names and sizes (scaled), then read
 * back; AU is compute over wall time; time between checkpoints is compute. */
TEST(bench_ckpt_only_ranks_write_their_share) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  memset(&o, 0, sizeof o);
  memset(&bw, 0, sizeof bw);
  o.w = &bw;
  struct stk_ckpt_spec *c = &bw.ckpt;
  snprintf(bw.name, sizeof bw.name, "tiny");
  snprintf(c->model_type, sizeof c->model_type, "transformer");
  c->enabled = c->no_train = 1;
  c->num_layers = 5;
  c->hidden = 64;
  c->vocab = 1000;
  c->ffn = 256;
  c->heads = 4;
  c->kv_heads = 2;
  c->tp = c->pp = 2;
  c->zero_stage = 1;
  c->num_write = 3;
  c->num_read = 2;
  c->time_between_s = 0.01;
  o.accelerators = stk_ckpt_model_parallel(&bw);
  CHECK_EQ(o.accelerators, 4);
  o.ckpt_dir = "ck";
  o.ckpt_scale = 0.5;
  o.keep_checkpoints = 1;
  struct stk_bench_result r;
  CHECK_MSG(stk_bench_ckpt_run(&o, &r, err) == 0, "%s", err);
  CHECK(r.ckpt_only && r.ckpt.saves == 3 && r.ckpt.loads == 2 && r.ckpt.writers == 4);
  uint64_t want = 0;
  for (uint32_t rank = 0; rank < 4; rank++) {
    struct stk_ckpt_file f[16];
    size_t n;
    CHECK_OK(stk_ckpt_rank_files(&bw, 4, rank, f, 16, &n, err));
    CHECK(n >= 2);
    for (size_t i = 0; i < n; i++) {
      char path[2048];
      struct stat st;
      snprintf(path, sizeof path, "ck/global_epoch1_step3/%s", f[i].name);
      CHECK_MSG(stat(path, &st) == 0, "%s missing", path);
      CHECK_EQ((uint64_t)st.st_size, (f[i].bytes + 1) / 2); /* half, rounded up */
      want += (uint64_t)st.st_size;
    }
  }
  CHECK_EQ(r.ckpt.bytes, want);
  CHECK(r.per[0].compute_s >= 5 * 0.01 - 1e-3);
  CHECK(fabs(r.au - r.per[0].compute_s / r.wall_s) < 1e-9);
  CHECK(r.ckpt_frac > 0);
  CHECK_CONTAINS(r.verdict, "checkpoint-only: 3 save(s)");
  stk_bench_result_free(&r);
  /* A rank count the model's parallelism does not divide, and more loads
   * than saves, are refused. */
  o.accelerators = 6;
  CHECK_EQ(stk_bench_ckpt_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "multiple of 4");
  o.accelerators = 4;
  c->num_read = 4;
  CHECK_EQ(stk_bench_ckpt_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "4 checkpoints to read but only 3 written");
  /* O_DIRECT where the file system takes it (tmpfs does not: then a clear
   * message). */
  c->num_read = 1;
  o.direct = 1;
  o.keep_checkpoints = 0;
  int rc = stk_bench_ckpt_run(&o, &r, err);
  if (rc) {
    CHECK_CONTAINS(err, "does not take O_DIRECT");
  } else {
    CHECK(r.ckpt.direct && r.ckpt.loads == 1);
    stk_bench_result_free(&r);
  }
}

TEST(bench_bad_values) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  small_run(&o, 1, 40, 100, 1, 4, 0.001);
  struct stk_bench_result r;
  o.accelerators = 6; /* 40 / 4 / 6 = 1 step: AU needs 2 */
  CHECK_EQ(stk_bench_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "at least 2 are needed");
  o.accelerators = 1;
  bw.files = 2; /* asks for 80 samples, the data has 40 */
  CHECK_EQ(stk_bench_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "has 40 samples but the workload asks for 80");
  bw.files = 1;
  snprintf(bw.format, sizeof bw.format, "npz");
  CHECK_EQ(stk_bench_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "holds tfrecord data but the workload's dataset.format is npz");
  snprintf(bw.format, sizeof bw.format, "tfrecord");
  bw.batch = 0;
  CHECK_EQ(stk_bench_run(&o, &r, err), STK_EINVAL);
  bw.batch = 4;
  bw.compute_s = -1;
  CHECK_EQ(stk_bench_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "compute time");
}

/* A loader failure mid-run ends the run with the error (no accelerator is
 * left waiting at the barrier). */
TEST(bench_concurrent_failed_peer_no_hang) {
  struct stk_gen_opts g = {.dir = "d", .format = "tfrecord", .samples = 400, .size_mean = 1000,
                           .samples_per_shard = 100, .seed = 2, .no_index = 1};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  /* Corrupt a record in the middle of the third shard. */
  FILE *f = fopen("d/shard-00002.tfrecord", "r+b");
  CHECK(f != NULL);
  fseek(f, 50 * 1016 + 100, SEEK_SET);
  fputc('X', f);
  fclose(f);
  struct stk_bench_opts o;
  memset(&o, 0, sizeof o);
  memset(&bw, 0, sizeof bw);
  CHECK_OK(stk_workload_preset("resnet50", "h100", &bw));
  o.w = &bw;
  bw.files = 4;
  bw.samples_per_file = 100;
  bw.batch = 5;
  bw.epochs = 1;
  bw.compute_s = 0.001;
  bw.read_threads = 2;
  o.data = "d";
  o.accelerators = 4;
  struct stk_bench_result r;
  CHECK_EQ(stk_bench_run(&o, &r, err), STK_ECRC);
  CHECK_CONTAINS(err, "shard-00002.tfrecord");
}

/* The pipeline fill happens before the first epoch's clock starts and is
 * reported apart: the loader prepares 2N + 2 batches before any is taken
 * (ring depth 2N and the two beyond it); they are counted as warm-up, and
 * the loader figures the verdict reads cover the timed epochs only. */
TEST(bench_run_warmup_outside_au) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  small_run(&o, 4, 60, 512, 4, 10, 0.002);
  bw.epochs = 2;
  bw.read_threads = 2;
  o.accelerators = 3; /* 240 / 10 / 3 = 8 steps; 48 batches in all */
  struct stk_bench_result r;
  int rc = stk_bench_run(&o, &r, err);
  CHECK_MSG(rc == 0, "%s", err);
  CHECK_EQ(r.warmup_batches, 2 * 3 + 2);
  CHECK(r.warmup_s >= 0 && isfinite(r.warmup_s));
  CHECK_EQ(r.loader.batches, 48);
  CHECK_EQ(r.loader.stage[STK_STAGE_BATCH].items, 48 - (2 * 3 + 2));
  /* Samples read: all 480, less the 80 of the warm-up (no other batch can
   * be in flight then: the 8 outstanding are all in the ring). */
  CHECK_EQ(r.loader.stage[STK_STAGE_READ].items, 480 - 80);
  CHECK(r.loader.wall_ns > 0);
  FILE *f = fopen("r.json", "w");
  stk_bench_json(&o, &r, f);
  fclose(f);
  char *js = (char *)test_read_file("r.json", NULL);
  CHECK_CONTAINS(js, "\"warmup_s\"");
  CHECK_CONTAINS(js, "\"warmup_batches\": 8");
  free(js);
  stk_bench_result_free(&r);
}

/* Compute time 0: AU (compute over wall time) would be 0 whatever the data
 * path did; the run reports throughput only and blames nothing. */
TEST(bench_run_compute_zero) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  small_run(&o, 3, 40, 256, 5, 10, 0);
  bw.epochs = 1;
  o.accelerators = 2;
  struct stk_bench_result r;
  int rc = stk_bench_run(&o, &r, err);
  CHECK_MSG(rc == 0, "%s", err);
  CHECK(r.throughput_only);
  CHECK(isnan(r.au));
  CHECK(!r.pass);
  CHECK_STR(r.bottleneck, "none");
  CHECK_CONTAINS(r.verdict, "throughput only");
  CHECK(r.samples_per_s > 0);
  FILE *f = fopen("r.svg", "w");
  stk_bench_svg(&o, &r, f);
  fclose(f);
  char *svg = (char *)test_read_file("r.svg", NULL);
  CHECK_CONTAINS(svg, "throughput only");
  free(svg);
  stk_bench_result_free(&r);
}

/* The LLM preset: token windows of a generated Megatron corpus, in
 * Megatron's order, one step's batch per accelerator; the steps follow
 * from the windows, the loader delivers exactly the windows the steps
 * take, and AU is computed as for any workload. */
TEST(bench_gpt_windows_feed_accelerators) {
  struct stk_workload w;
  stk_workload_init(&w);
  CHECK_OK(stk_workload_preset("gpt8b", "h100", &w));
  CHECK_STR(w.format, "megatron");
  CHECK(w.seq_len == 8192 && w.batch == 1 && w.compute_s == 8192.0 / 12273.0);
  struct stk_gen_opts g = {.dir = "g", .format = "megatron", .samples = 300, .doc_len_mean = 200,
                           .samples_per_shard = 300, .seed = 5};
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_gen(&g, NULL, NULL, err) == 0, "%s", err);
  struct stk_tokens_opts to;
  stk_tokens_opts_init(&to);
  to.seq_len = 64;
  to.no_index_file = 1;
  struct stk_tokens *t;
  const char *path = "g";
  CHECK_OK(stk_tokens_open(&t, 1, &path, NULL, &to, err));
  uint64_t windows = stk_tokens_num_windows(t);
  stk_tokens_close(t);
  struct stk_bench_opts o;
  memset(&o, 0, sizeof o);
  bw = w;
  o.w = &bw;
  bw.seq_len = 64;
  bw.batch = 2;
  bw.compute_s = 0.002;
  o.accelerators = 2;
  o.data = "g";
  struct stk_bench_result r;
  CHECK_MSG(stk_bench_run(&o, &r, err) == 0, "%s", err);
  CHECK_EQ(r.steps_per_epoch, windows / 2 / 2);
  CHECK_EQ(r.loader.samples, r.steps_per_epoch * 2 * 2);
  CHECK(r.au > 0 && r.au <= 1.0);
  stk_bench_result_free(&r);
}
