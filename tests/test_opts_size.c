/* Options structs that can grow (struct_size + an init function): each
 * init records its struct's size; a struct of an older, smaller size is
 * read only as far as it goes (the fields past it take their defaults,
 * whatever lies in the caller's memory there); a size larger than this
 * library's (a program built against a newer header) is refused with a
 * message naming the struct. Covers the writer, gen, dataset, cache,
 * watch and doctor options, the sampler and decode options the loader's
 * point at, the sim, infer, mig-online and bench options and the workload
 * (the loader's older struct, the tokens and checkpoint options have their
 * own tests). Results with a size the caller sets (cache, gen, checkpoint
 * stats, doctor's result, the workload) are written no further than it.
 * The rule: docs/internals/api.md. */
#include <stddef.h>
#include <sys/stat.h>

#include "stoker/bench.h"
#include "stoker/infer.h"
#include "stoker/mig_online.h"
#include "stoker/sim.h"
#include "stoker/stoker.h"
#include "test.h"

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

TEST(opts_size_init_records_the_size) {
  struct stk_writer_opts w;
  struct stk_gen_opts g;
  struct stk_dataset_opts d;
  struct stk_cache_opts c;
  struct stk_watch_opts a;
  struct stk_doctor_opts k;
  memset(&w, 0xab, sizeof w);
  stk_writer_opts_init(&w);
  CHECK_EQ(w.struct_size, sizeof w);
  CHECK(w.format == NULL && w.samples_per_shard == 0); /* every option its default */
  stk_gen_opts_init(&g);
  CHECK_EQ(g.struct_size, sizeof g);
  stk_dataset_opts_init(&d);
  CHECK_EQ(d.struct_size, sizeof d);
  stk_cache_opts_init(&c);
  CHECK_EQ(c.struct_size, sizeof c);
  stk_watch_opts_init(&a);
  CHECK_EQ(a.struct_size, sizeof a);
  stk_doctor_opts_init(&k);
  CHECK_EQ(k.struct_size, sizeof k);
}

/* A writer built before write_index existed: its struct ends before it,
 * so the bytes there (set here) are not read: no .idx files. */
TEST(opts_size_writer_older_struct_and_newer_refused) {
  struct stk_writer_opts o;
  stk_writer_opts_init(&o);
  o.format = "tfrecord";
  o.dir = "old";
  o.write_index = 1;
  o.struct_size = offsetof(struct stk_writer_opts, write_index);
  struct stk_writer *w;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_writer_open(&w, &o, err));
  struct stk_sample s = {.nfields = 1, .label = -1};
  snprintf(s.fields[0].name, sizeof s.fields[0].name, "data");
  s.fields[0].data = (const uint8_t *)"abc";
  s.fields[0].len = s.fields[0].raw_len = 3;
  CHECK_OK(stk_writer_add(w, &s));
  CHECK_OK(stk_writer_close(w));
  CHECK(exists("old/shard-00000.tfrecord"));
  CHECK(!exists("old/shard-00000.tfrecord.idx"));
  o.struct_size = sizeof o; /* this header's: the index is written */
  o.dir = "new";
  CHECK_OK(stk_writer_open(&w, &o, err));
  CHECK_OK(stk_writer_add(w, &s));
  CHECK_OK(stk_writer_close(w));
  CHECK(exists("new/shard-00000.tfrecord.idx"));
  o.struct_size = sizeof o + 8;
  CHECK_EQ(stk_writer_open(&w, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_writer_opts: struct_size");
  CHECK_CONTAINS(err, "larger than this libstoker's");
  o.struct_size = 3;
  CHECK_EQ(stk_writer_open(&w, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_writer_opts: struct_size 3 is smaller");
}

/* gen from before image_format: JPEGs, whatever image_format's bytes hold. */
TEST(opts_size_gen_older_struct_and_newer_refused) {
  struct stk_gen_opts o;
  stk_gen_opts_init(&o);
  o.dir = "g";
  o.format = "files";
  o.samples = 2;
  o.jpeg_min_w = o.jpeg_max_w = 16;
  o.jpeg_min_h = o.jpeg_max_h = 8;
  o.image_format = "png";
  o.struct_size = offsetof(struct stk_gen_opts, image_format);
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&o, NULL, NULL, err));
  struct stk_dataset *ds;
  CHECK_OK(stk_dataset_open(&ds, "g", NULL, err));
  CHECK_EQ(stk_dataset_num_samples(ds), 2);
  struct stk_shard_info si;
  CHECK_OK(stk_dataset_shard_info(ds, 0, &si));
  CHECK_CONTAINS(si.path, ".jpg");
  stk_dataset_close(ds);
  o.struct_size = sizeof o + 1;
  o.dir = "g2";
  CHECK_EQ(stk_gen(&o, NULL, NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_gen_opts: struct_size");
  CHECK(!exists("g2"));
}

/* A dataset's options from before cache existed: the cache pointer's
 * place is not read (it points at an unusable cache here). The cache
 * options are checked too, naming their own struct. */
TEST(opts_size_dataset_and_cache_older_struct_and_newer_refused) {
  struct stk_gen_opts g;
  stk_gen_opts_init(&g);
  g.dir = "d";
  g.format = "wds";
  g.samples = 3;
  g.size_mean = 100;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  struct stk_cache_opts c;
  stk_cache_opts_init(&c);
  c.struct_size = sizeof c + 16;
  struct stk_dataset_opts o;
  stk_dataset_opts_init(&o);
  o.format = "wds";
  o.cache = &c;
  o.struct_size = offsetof(struct stk_dataset_opts, cache);
  struct stk_dataset *ds;
  CHECK_OK(stk_dataset_open(&ds, "d", &o, err));
  CHECK_EQ(stk_dataset_num_samples(ds), 3);
  stk_dataset_close(ds);
  o.struct_size = sizeof o; /* now the cache options are read: refused */
  CHECK_EQ(stk_dataset_open(&ds, "d", &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_cache_opts: struct_size");
  o.struct_size = sizeof o + 8;
  CHECK_EQ(stk_dataset_open(&ds, "d", &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_dataset_opts: struct_size");
}

TEST(opts_size_watch_and_doctor_newer_refused) {
  char err[STK_ERRMSG_MAX];
  struct stk_watch_opts a;
  stk_watch_opts_init(&a);
  a.struct_size = sizeof a + 8;
  struct stk_watch *w;
  CHECK_EQ(stk_watch_open(&w, &a, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_watch_opts: struct_size");
  /* An older watch struct: interval_s is its first option, so a struct
   * that ends before it leaves the default, not the 1e9 set here (which
   * would be refused as out of range). */
  stk_watch_opts_init(&a);
  a.interval_s = 1e9;
  a.struct_size = offsetof(struct stk_watch_opts, interval_s);
  a.struct_size = a.struct_size; /* only struct_size itself */
  struct stk_doctor_opts k;
  stk_doctor_opts_init(&k);
  k.struct_size = sizeof k + 8;
  struct stk_doctor_result r;
  CHECK_EQ(stk_doctor_run(&k, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_doctor_opts: struct_size");
}

/* Batches a loader over `dir` delivers to the end (-1 when it cannot open). */
static int64_t batches_of(const char *dir, const struct stk_loader_opts *o, char *err) {
  struct stk_dataset *ds;
  CHECK_OK(stk_dataset_open(&ds, dir, NULL, err));
  struct stk_loader *l;
  if (stk_loader_open(&l, ds, o, err)) {
    stk_dataset_close(ds);
    return -1;
  }
  struct stk_batch *b;
  int64_t n = 0;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    n++;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  stk_loader_close(l);
  stk_dataset_close(ds);
  return n;
}

static void gen_tfrecords(const char *dir, uint64_t samples) {
  struct stk_gen_opts g;
  stk_gen_opts_init(&g);
  g.dir = dir;
  g.format = "tfrecord";
  g.samples = samples;
  g.size_mean = 64;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
}

/* The sampler's options are their own sized struct, which the loader's
 * options point at: one from before rank and world existed leaves them
 * their defaults (rank 3 of 2 past its end would be refused), and one
 * larger than this library's is refused, by the loader and by
 * stk_sampler_open alike. */
TEST(opts_size_sampler_older_struct_and_newer_refused) {
  gen_tfrecords("s", 10);
  struct stk_sampler_opts so;
  memset(&so, 0xab, sizeof so);
  stk_sampler_opts_init(&so);
  CHECK_EQ(so.struct_size, sizeof so);
  CHECK(so.seed == 0 && so.world == 0);
  so.rank = 3;
  so.world = 2;
  so.struct_size = offsetof(struct stk_sampler_opts, rank);
  struct stk_loader_opts o;
  stk_loader_opts_init(&o);
  o.batch_size = 5;
  o.sampler = &so;
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(batches_of("s", &o, err), 2); /* all 10 samples: rank 0 of 1 */
  so.struct_size = sizeof so; /* now rank 3 of 2 is read */
  CHECK_EQ(batches_of("s", &o, err), -1);
  so.struct_size = sizeof so + 8;
  CHECK_EQ(batches_of("s", &o, err), -1);
  CHECK_CONTAINS(err, "stk_sampler_opts: struct_size");
  CHECK_CONTAINS(err, "larger than this libstoker's");
  struct stk_dataset *ds;
  CHECK_OK(stk_dataset_open(&ds, "s", NULL, err));
  struct stk_sampler *s;
  CHECK_EQ(stk_sampler_open(&s, ds, &so), STK_EINVAL);
  so.struct_size = offsetof(struct stk_sampler_opts, rank);
  CHECK_OK(stk_sampler_open(&s, ds, &so));
  CHECK_EQ(stk_sampler_epoch_len(s), 10);
  stk_sampler_close(s);
  stk_dataset_close(ds);
}

/* The decode options likewise: one that ends before `field` decodes the
 * first field (not the "nope" past its end, which no sample has: every
 * sample would fail); a larger one is refused naming it. */
TEST(opts_size_decode_older_struct_and_newer_refused) {
  gen_tfrecords("d", 10);
  struct stk_decode_cfg dc;
  memset(&dc, 0xab, sizeof dc);
  stk_decode_cfg_init(&dc);
  CHECK_EQ(dc.struct_size, sizeof dc);
  CHECK(dc.kind == STK_DECODE_RAW && dc.field == NULL && dc.out_h == 0);
  dc.field = "nope";
  dc.struct_size = offsetof(struct stk_decode_cfg, field);
  struct stk_loader_opts o;
  stk_loader_opts_init(&o);
  o.batch_size = 5;
  o.on_error = STK_ON_ERROR_FAIL;
  o.decode = &dc;
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(batches_of("d", &o, err), 2);
  dc.struct_size = sizeof dc + 4;
  CHECK_EQ(batches_of("d", &o, err), -1);
  CHECK_CONTAINS(err, "stk_decode_cfg: struct_size");
  CHECK_CONTAINS(err, "larger than this libstoker's");
  dc.struct_size = 2;
  CHECK_EQ(batches_of("d", &o, err), -1);
  CHECK_CONTAINS(err, "stk_decode_cfg: struct_size 2 is smaller");
  /* No decode options at all: raw, as a zeroed struct gives. */
  o.decode = NULL;
  o.sampler = NULL;
  CHECK_EQ(batches_of("d", &o, err), 2);
  /* The loader's own options, larger than this library's: refused. */
  o.struct_size = sizeof o + 8;
  CHECK_EQ(batches_of("d", &o, err), -1);
  CHECK_CONTAINS(err, "stk_loader_opts: struct_size");
}

/* The simulators' and the benchmark's options: each init records its size,
 * and a struct larger than this library's is refused naming it before any
 * input is looked at (so none is given here). */
TEST(opts_size_sim_and_bench_newer_refused) {
  char err[STK_ERRMSG_MAX];
  struct stk_sim_run_opts ro;
  stk_sim_run_opts_init(&ro);
  CHECK_EQ(ro.struct_size, sizeof ro);
  ro.struct_size += 8;
  struct stk_sim_result sr;
  CHECK_EQ(stk_sim_run(NULL, NULL, &ro, &sr, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_sim_run_opts: struct_size");
  struct stk_sim_experiment_opts eo;
  stk_sim_experiment_opts_init(&eo);
  CHECK_EQ(eo.struct_size, sizeof eo);
  eo.struct_size += 8;
  struct stk_sim_result *res;
  size_t nres;
  CHECK_EQ(stk_sim_experiment(NULL, NULL, &eo, &res, &nres, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_sim_experiment_opts: struct_size");
  struct stk_sim_replay_opts po;
  stk_sim_replay_opts_init(&po);
  CHECK_EQ(po.struct_size, sizeof po);
  po.struct_size += 8;
  struct stk_sim_replay_result pr;
  CHECK_EQ(stk_sim_replay(NULL, "none.csv", &po, &pr, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_sim_replay_opts: struct_size");
  struct stk_sim_jobs_opts jo;
  stk_sim_jobs_opts_init(&jo);
  CHECK_EQ(jo.struct_size, sizeof jo);
  jo.struct_size += 8;
  struct stk_sim_jobs_result jr;
  CHECK_EQ(stk_sim_jobs_run(NULL, &jo, &jr, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_sim_jobs_opts: struct_size");
  struct stk_infer_opts io;
  stk_infer_opts_init(&io);
  CHECK_EQ(io.struct_size, sizeof io);
  io.struct_size += 8;
  struct stk_infer_result ir;
  CHECK_EQ(stk_infer_run(NULL, NULL, &io, &ir, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_infer_opts: struct_size");
  struct stk_mig_online_opts mo;
  stk_mig_online_opts_init(&mo);
  CHECK_EQ(mo.struct_size, sizeof mo);
  mo.struct_size += 8;
  struct stk_mig_online_result mr;
  CHECK_EQ(stk_mig_online_run(NULL, &mo, &mr, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_mig_online_opts: struct_size");
  struct stk_bench_opts bo;
  stk_bench_opts_init(&bo);
  CHECK_EQ(bo.struct_size, sizeof bo);
  bo.struct_size += 8;
  struct stk_bench_result br;
  CHECK_EQ(stk_bench_run(&bo, &br, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_bench_opts: struct_size");
  CHECK_EQ(stk_bench_ckpt_run(&bo, &br, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_bench_opts: struct_size");
}

/* A simulation run's options from before inflate existed: the 500 past
 * the struct's end (out of range, refused when read) is not read. */
TEST(opts_size_sim_run_older_struct) {
  FILE *f = fopen("nodes.csv", "w");
  fprintf(f, "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,4,V100\nn1,32000,131072,2,T4\n");
  fclose(f);
  f = fopen("pods.csv", "w");
  fprintf(f, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n");
  for (int i = 0; i < 20; i++) fprintf(f, "p%d,1000,1024,1,500,,%d,%d\n", i, i, i + 100);
  fclose(f);
  char err[STK_ERRMSG_MAX];
  struct stk_sim_cluster *c;
  struct stk_sim_workload *w;
  CHECK_OK(stk_sim_cluster_load(&c, "nodes.csv", err));
  CHECK_OK(stk_sim_workload_load(&w, c, "pods.csv", err));
  struct stk_sim_run_opts o;
  stk_sim_run_opts_init(&o);
  o.inflate = 500;
  struct stk_sim_result r;
  CHECK_EQ(stk_sim_run(c, w, &o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "inflate 500");
  o.struct_size = offsetof(struct stk_sim_run_opts, inflate);
  CHECK_OK(stk_sim_run(c, w, &o, &r, err));
  CHECK(r.inflate > 1.29 && r.inflate < 1.31); /* the default */
  stk_sim_result_free(&r);
  stk_sim_workload_free(w);
  stk_sim_cluster_free(c);
}

/* A workload is filled by the library (presets, DLIO configs) and read by
 * it: filled no further than the caller's struct_size, whose bytes past
 * it stay as they were; read no further; refused where read when larger. */
TEST(opts_size_workload_written_and_read_to_its_size) {
  union {
    struct stk_workload w;
    unsigned char bytes[sizeof(struct stk_workload)];
  } u;
  memset(u.bytes, 0xab, sizeof u.bytes);
  stk_workload_init_sized(&u.w, offsetof(struct stk_workload, seq_len));
  CHECK_OK(stk_workload_preset("gpt8b", "h100", &u.w));
  CHECK_STR(u.w.name, "gpt8b");
  CHECK_EQ(u.w.struct_size, offsetof(struct stk_workload, seq_len)); /* as the caller set it */
  CHECK_EQ(u.w.seq_len, 0xababababu); /* past the caller's struct: not written */
  struct stk_workload full;
  stk_workload_init(&full);
  CHECK_OK(stk_workload_preset("gpt8b", "h100", &full));
  CHECK_EQ(full.seq_len, 8192);
  /* Read: checkpoint sizes of an older struct, and of a larger one. */
  char err[STK_ERRMSG_MAX];
  uint64_t bytes, files;
  uint32_t writers;
  CHECK_OK(stk_workload_preset("unet3d", "h100", &full));
  CHECK_OK(stk_ckpt_size(&full, 8, &bytes, &files, &writers, err));
  CHECK(bytes > 0 && writers > 0);
  full.struct_size = sizeof full + 8;
  CHECK_EQ(stk_ckpt_size(&full, 8, &bytes, &files, &writers, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_workload: struct_size");
  /* The benchmark's options point at a workload: a larger one refused,
   * none at all named. */
  struct stk_bench_opts bo;
  stk_bench_opts_init(&bo);
  bo.w = &full;
  struct stk_bench_result br;
  CHECK_EQ(stk_bench_run(&bo, &br, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_workload: struct_size");
  bo.w = NULL;
  CHECK_EQ(stk_bench_run(&bo, &br, err), STK_EINVAL);
  CHECK_CONTAINS(err, "stk_bench_opts: no workload");
}

/* Results the library fills stop at the caller's struct_size: a cache's
 * stats and a scan's totals from before origin_checked, and doctor's result from
 * before its curve, keep the bytes past their ends; the print and JSON
 * functions read no further either. */
TEST(opts_size_results_written_to_their_size) {
  char err[STK_ERRMSG_MAX];
  gen_tfrecords("src", 10);
  struct stk_cache_opts co;
  stk_cache_opts_init(&co);
  co.dir = "cache";
  struct stk_dataset_opts dso;
  stk_dataset_opts_init(&dso);
  dso.cache = &co;
  union {
    struct stk_cache_stats st;
    unsigned char bytes[sizeof(struct stk_cache_stats)];
  } u;
  memset(u.bytes, 0xab, sizeof u.bytes);
  stk_cache_stats_init_sized(&u.st, offsetof(struct stk_cache_stats, origin_checked));
  CHECK_EQ(u.st.fetches, 0); /* init cleared what the caller's struct has */
  struct stk_dataset *ds;
  CHECK_OK(stk_dataset_open(&ds, "src", &dso, err));
  u.st.fetches = 12345;
  CHECK_OK(stk_dataset_cache_stats(ds, &u.st));
  stk_dataset_close(ds);
  CHECK_EQ(u.st.struct_size, offsetof(struct stk_cache_stats, origin_checked));
  CHECK(u.st.fetches != 12345); /* written */
  CHECK_EQ(u.st.origin_checked, 0xababababababababull); /* past its end: not written */
  memset(u.bytes, 0xab, sizeof u.bytes);
  stk_cache_stats_init_sized(&u.st, offsetof(struct stk_cache_stats, origin_checked));
  CHECK_OK(stk_cache_dir_scan("cache", NULL, NULL, &u.st, err));
  CHECK_EQ(u.st.origin_checked, 0xababababababababull);
  struct stk_doctor_opts k;
  stk_doctor_opts_init(&k);
  k.dir = ".";
  k.quick = 1;
  k.size = 8u << 20;
  k.only = STK_DOCTOR_BIT(STK_DOCTOR_MEMCPY);
  struct stk_doctor_result *r = malloc(sizeof *r);
  memset(r, 0xab, sizeof *r);
  stk_doctor_result_init_sized(r, offsetof(struct stk_doctor_result, curve));
  CHECK_OK(stk_doctor_run(&k, r, err));
  CHECK(r->cores >= 1 && r->nfeed > 0);
  CHECK_EQ(r->ncurve, (int)0xabababab); /* past its end: not written */
  FILE *f = fopen("doctor.json", "w");
  CHECK_OK(stk_doctor_write_json(r, f)); /* the curve is not read: none */
  fclose(f);
  memset(r, 0xab, sizeof *r);
  stk_doctor_result_init(r);
  CHECK_OK(stk_doctor_run(&k, r, err));
  CHECK_EQ(r->ncurve, 0); /* written: no curve without the O_DIRECT figures */
  free(r);
}

/* gen's stats and a checkpoint store's stats from before their last
 * fields: written no further than the caller's struct_size. */
TEST(opts_size_gen_and_ckpt_stats_written_to_their_size) {
  union {
    struct stk_gen_stats st;
    unsigned char bytes[sizeof(struct stk_gen_stats)];
  } g;
  memset(g.bytes, 0xab, sizeof g.bytes);
  stk_gen_stats_init_sized(&g.st, offsetof(struct stk_gen_stats, wall_ns));
  struct stk_gen_opts o;
  stk_gen_opts_init(&o);
  o.dir = "s";
  o.format = "tfrecord";
  o.samples = 3;
  o.size_mean = 16;
  o.stats = &g.st;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&o, NULL, NULL, err));
  CHECK_EQ(g.st.samples, 3);
  CHECK_EQ(g.st.wall_ns, 0xababababababababull); /* past its end: not written */
  union {
    struct stk_ckpt_stats st;
    unsigned char bytes[sizeof(struct stk_ckpt_stats)];
  } k;
  memset(k.bytes, 0xab, sizeof k.bytes);
  stk_ckpt_stats_init_sized(&k.st, offsetof(struct stk_ckpt_stats, busy_skips));
  struct stk_ckpt_opts co;
  stk_ckpt_opts_init(&co);
  co.dir = "ck";
  struct stk_ckpt *c;
  CHECK_OK(stk_ckpt_open(&c, &co, err));
  k.st.saves = 7;
  stk_ckpt_stats(c, &k.st);
  CHECK_EQ(k.st.saves, 0); /* written */
  CHECK_EQ(k.st.busy_skips, 0xababababababababull); /* past its end: not written */
  stk_ckpt_close(c);
}
