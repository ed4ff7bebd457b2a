/* Loader pipeline tests on TFRecord shards written here byte by byte: every
 * sample arrives once per epoch with its own bytes, engines agree, errors
 * name file and offset, skip mode counts, resume continues exactly, and
 * DLIO's npz and cosmoflow layouts go through the whole pipeline. Large
 * samples, mmap and the memory cap are in test_loader_mem.c. Tests named
 * *concurrent* also run under ThreadSanitizer. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/base.h"
#include "stoker/stoker.h"
#include "test.h"
#include "test_loader.h"

/* Write nshards TFRecord shards of per records each into dir. */
static void write_tfrecords(const char *dir, int nshards, int per) {
  mkdir(dir, 0755);
  uint64_t id = 0;
  for (int s = 0; s < nshards; s++) {
    char path[512];
    snprintf(path, sizeof path, "%s/part-%05d.tfrecord", dir, s);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (int r = 0; r < per; r++, id++) {
      uint64_t n = payload_len(id);
      uint8_t *data = malloc(n);
      for (uint64_t i = 0; i < n; i++) data[i] = payload_byte(id, i);
      put_record(f, data, n);
      free(data);
    }
    fclose(f);
  }
}

/* Run the loader to the end; check every batch's bytes; record ids per
 * epoch into seen[epoch][id]. Returns batches. */
static uint64_t run_all(struct stk_dataset *ds, struct stk_loader_opts *o, uint8_t **seen,
                        uint64_t *order) {
  struct stk_loader *l;
  char err[STK_ERRMSG_MAX];
  int rc = stk_loader_open(&l, ds, o, err);
  CHECK_MSG(rc == 0, "loader_open: %s", err);
  struct stk_batch *b;
  uint64_t batches = 0, k = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    batches++;
    CHECK(b->n <= o->batch_size);
    for (uint32_t i = 0; i < b->n; i++) {
      uint64_t id = b->indices[i];
      CHECK_EQ(b->len[i], payload_len(id));
      const uint8_t *p = b->data + b->offsets[i];
      for (uint64_t q = 0; q < b->len[i]; q += 97) CHECK_EQ(p[q], payload_byte(id, q));
      CHECK_EQ(p[b->len[i] - 1], payload_byte(id, b->len[i] - 1));
      if (seen) {
        CHECK_MSG(!seen[b->epoch][id], "sample %llu twice in epoch %llu", (unsigned long long)id,
                  (unsigned long long)b->epoch);
        seen[b->epoch][id] = 1;
      }
      if (order) order[k++] = id;
    }
    stk_batch_release(l, b);
  }
  CHECK_MSG(rc == STK_EOF, "next: %d %s", rc, stk_loader_errmsg(l));
  stk_loader_close(l);
  return batches;
}

static void every_sample_once(const char *engine, enum stk_shuffle mode, uint32_t threads) {
  write_tfrecords("ds", 6, 50);
  struct stk_dataset *ds = open_ds("ds");
  CHECK_EQ(stk_dataset_num_samples(ds), 300);
  uint8_t *seen[3];
  for (int e = 0; e < 3; e++) seen[e] = calloc(300, 1);
  struct stk_loader_opts o = {.batch_size = 16, .threads = threads, .epochs = 3, .io_engine = engine};
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.shuffle = mode;
  so.seed = 3;
  uint64_t batches = run_all(ds, &o, seen, NULL);
  CHECK_EQ(batches, 3 * 19); /* 18 full + 1 of 12 per epoch */
  for (int e = 0; e < 3; e++) {
    for (int i = 0; i < 300; i++) CHECK_MSG(seen[e][i], "epoch %d lacks sample %d", e, i);
    free(seen[e]);
  }
  stk_dataset_close(ds);
}

TEST(loader_every_sample_once_pread) { every_sample_once("pread", STK_SHUFFLE_GLOBAL, 2); }
TEST(loader_every_sample_once_io_uring) {
  every_sample_once("io_uring", STK_SHUFFLE_BLOCK, 3);
}
TEST(loader_concurrent_many_workers) { every_sample_once("auto", STK_SHUFFLE_GLOBAL, 8); }
/* Small records through the mapping engine: many samples per mapped range,
 * checksums checked by the engine's threads on the mapped pages. */
TEST(loader_every_sample_once_mmap) { every_sample_once("mmap", STK_SHUFFLE_BLOCK, 2); }
/* Copies out of kept mappings, checksums checked in the copy's pass. */
TEST(loader_every_sample_once_mapcopy) { every_sample_once("mapcopy", STK_SHUFFLE_GLOBAL, 2); }

TEST(loader_engines_same_order) {
  write_tfrecords("ds", 3, 40);
  struct stk_dataset *ds = open_ds("ds");
  uint64_t a[120], b[120];
  struct stk_loader_opts o = {.batch_size = 7, .threads = 2, .io_engine = "pread"};
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.seed = 42;
  run_all(ds, &o, NULL, a);
  o.io_engine = "io_uring";
  run_all(ds, &o, NULL, b);
  CHECK(memcmp(a, b, sizeof a) == 0);
  o.io_engine = "mmap";
  run_all(ds, &o, NULL, b);
  CHECK(memcmp(a, b, sizeof a) == 0);
  o.io_engine = "mapcopy";
  run_all(ds, &o, NULL, b);
  CHECK(memcmp(a, b, sizeof a) == 0);
  stk_dataset_close(ds);
}

TEST(loader_drop_last) {
  write_tfrecords("ds", 2, 50);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 32, .threads = 2, .epochs = 2, .drop_last = 1};
  CHECK_EQ(run_all(ds, &o, NULL, NULL), 2 * 3);
  o.drop_last = 0;
  CHECK_EQ(run_all(ds, &o, NULL, NULL), 2 * 4);
  stk_dataset_close(ds);
}

TEST(loader_direct_io) {
  write_tfrecords("ds", 2, 30);
  int fd = open("ds/part-00000.tfrecord", O_RDONLY | O_DIRECT);
  if (fd < 0) SKIP("this file system does not support O_DIRECT");
  close(fd);
  struct stk_dataset *ds = open_ds("ds");
  uint8_t *seen[1] = {calloc(60, 1)};
  struct stk_loader_opts o = {.batch_size = 8, .threads = 2, .direct = 1};
  run_all(ds, &o, seen, NULL);
  for (int i = 0; i < 60; i++) CHECK(seen[0][i]);
  free(seen[0]);
  stk_dataset_close(ds);
}

/* Flip one payload byte of record r of shard 1; return its file offset. */
static uint64_t corrupt_record(int r) {
  const char *path = "ds/part-00001.tfrecord";
  uint64_t off = 0;
  for (int i = 0; i < r; i++) off += 16 + payload_len(20 + (uint64_t)i);
  int fd = open(path, O_RDWR);
  uint8_t c;
  CHECK(pread(fd, &c, 1, (off_t)off + 12 + 5) == 1);
  c ^= 0x40;
  CHECK(pwrite(fd, &c, 1, (off_t)off + 12 + 5) == 1);
  close(fd);
  return off;
}

static void crc_error_names_file_and_offset(const char *engine) {
  write_tfrecords("ds", 2, 20);
  uint64_t off = corrupt_record(7);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader *l;
  struct stk_loader_opts o = {
      .batch_size = 4, .threads = 2, .io_engine = engine, .on_error = STK_ON_ERROR_FAIL};
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK_EQ(rc, STK_ECRC);
  char want[64];
  snprintf(want, sizeof want, "offset %llu", (unsigned long long)off);
  CHECK_CONTAINS(stk_loader_errmsg(l), "part-00001.tfrecord");
  CHECK_CONTAINS(stk_loader_errmsg(l), want);
  /* After a failure next() keeps failing rather than hanging. */
  CHECK_EQ(stk_loader_next(l, &b), STK_ECRC);
  stk_loader_close(l);
  /* Without verification the bad byte passes through unnoticed. */
  o.skip_verify = 1;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  uint64_t n = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    n += b->n;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  CHECK_EQ(n, 40);
  stk_loader_close(l);
  stk_dataset_close(ds);
}
TEST(loader_crc_error_names_file_and_offset) { crc_error_names_file_and_offset("auto"); }
TEST(loader_crc_error_mmap) { crc_error_names_file_and_offset("mmap"); }
TEST(loader_crc_error_mapcopy) { crc_error_names_file_and_offset("mapcopy"); }

TEST(loader_skip_mode_counts) {
  write_tfrecords("ds", 2, 20);
  corrupt_record(3);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader *l;
  struct stk_loader_opts o = {.batch_size = 6, .threads = 2, .epochs = 2, .on_error = STK_ON_ERROR_SKIP};
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  uint64_t n = 0, skipped = 0;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    for (uint32_t i = 0; i < b->n; i++) CHECK(b->indices[i] != 23);
    n += b->n;
    skipped += b->skipped;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  CHECK_EQ(n, 2 * 39);
  CHECK_EQ(skipped, 2);
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  CHECK_EQ(st.skipped, 2);
  CHECK_EQ(st.samples, 78);
  stk_loader_close(l);
  stk_dataset_close(ds);
}

/* The default policy skips and counts a bad sample like skip, but 64
 * failures in a row stop the run, naming the latest. */
TEST(loader_default_skips_until_all_fail) {
  write_tfrecords("ds", 2, 20);
  corrupt_record(3);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader *l;
  struct stk_loader_opts o = {.batch_size = 6, .threads = 2};
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  uint64_t n = 0;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    n += b->n;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  CHECK_EQ(n, 39);
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  CHECK_EQ(st.skipped, 1);
  stk_loader_close(l);
  stk_dataset_close(ds);
  /* Every sample bad: a field no sample has. */
  write_tfrecords("ds2", 4, 30);
  ds = open_ds("ds2");
  struct stk_decode_cfg dc = {0};
  o.decode = &dc;
  dc.field = "nope";
  o.epochs = 3;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK_EQ(rc, STK_EFORMAT);
  CHECK_CONTAINS(stk_loader_errmsg(l), "samples in a row failed");
  CHECK_CONTAINS(stk_loader_errmsg(l), "has no field 'nope'");
  stk_loader_close(l);
  /* Fewer bad samples than a streak, all of the run: it fails at the end
   * (and stays failed) rather than ending as an empty run. */
  o.epochs = 1;
  o.epoch_samples = 20;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK_EQ(rc, STK_EFORMAT);
  CHECK_CONTAINS(stk_loader_errmsg(l), "all 20 samples of the run failed");
  CHECK_CONTAINS(stk_loader_errmsg(l), "has no field 'nope'");
  CHECK_EQ(stk_loader_next(l, &b), STK_EFORMAT);
  stk_loader_close(l);
  o.epoch_samples = 0;
  o.epochs = 3;
  /* skip asked for goes on regardless. */
  o.on_error = STK_ON_ERROR_SKIP;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  n = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    n += b->n;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  CHECK_EQ(n, 0);
  stk_loader_close(l);
  o.on_error = 3;
  CHECK_EQ(stk_loader_open(&l, ds, &o, NULL), STK_EINVAL);
  stk_dataset_close(ds);
}

TEST(loader_resume_continues_exactly) {
  write_tfrecords("ds", 4, 25);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 8, .threads = 2, .epochs = 2};
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.seed = 5;
  uint64_t full[200];
  run_all(ds, &o, NULL, full);
  /* Stop after 15 batches (one epoch is 13), save, resume. */
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  uint64_t got[200], k = 0;
  for (int i = 0; i < 15; i++) {
    CHECK_OK(stk_loader_next(l, &b));
    for (uint32_t q = 0; q < b->n; q++) got[k++] = b->indices[q];
    stk_batch_release(l, b);
  }
  struct stk_sampler_state st;
  stk_loader_state(l, &st);
  stk_loader_close(l);
  CHECK_EQ(st.epoch, 1);
  CHECK_EQ(st.position, 16);
  o.resume = &st;
  uint64_t rest[200];
  memset(rest, 0xff, sizeof rest);
  struct stk_loader *l2;
  CHECK_OK(stk_loader_open(&l2, ds, &o, NULL));
  int rc;
  while ((rc = stk_loader_next(l2, &b)) == 0) {
    for (uint32_t q = 0; q < b->n; q++) got[k++] = b->indices[q];
    stk_batch_release(l2, b);
  }
  CHECK_EQ(rc, STK_EOF);
  stk_loader_close(l2);
  CHECK_EQ(k, 200);
  CHECK(memcmp(got, full, sizeof full) == 0);
  stk_dataset_close(ds);
}


/* Batch buffers come from the allocator hook only while the pool grows:
 * allocations are bounded by jobs x growth steps, not by batches, and the
 * memory by the ring's depth x the largest batch (B4's property). When the
 * ring deepens depends on timing, so the bounds are what is checked. */
TEST(loader_concurrent_pool_stops_allocating) {
  write_tfrecords("ds", 4, 64);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_allocator a = {count_alloc, count_free, NULL};
  struct stk_loader_opts o = {.batch_size = 16, .threads = 2, .epochs = 14, .alloc = &a, .prefetch = 2,
                              .prefetch_max = 4};
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  int rc;
  uint64_t batches = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    batches++;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  stk_loader_close(l);
  CHECK_EQ(batches, 14 * 16);
  /* 6 jobs at most (prefetch_max + 2); a buffer grows by 25% over the
   * largest batch seen, so a handful of times per job at most. */
  CHECK_MSG(allocs <= 6 * 8 && allocs < (int)batches / 4, "%d allocations for %llu batches", allocs,
            (unsigned long long)batches);
  uint64_t largest = 16 * (5100 + 16); /* 16 records of at most 5099 bytes plus framing */
  CHECK_MSG(st.mem_bytes <= 6 * (largest + largest / 4 + 8192), "%llu bytes of buffers",
            (unsigned long long)st.mem_bytes);
  CHECK_EQ(allocs, frees);
  stk_dataset_close(ds);
}

TEST(loader_bad_options) {
  write_tfrecords("ds", 1, 5);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader *l;
  char err[STK_ERRMSG_MAX];
  struct stk_loader_opts o = {.batch_size = 4, .io_engine = "floppy"};
  CHECK_EQ(stk_loader_open(&l, ds, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "floppy");
  o.io_engine = NULL;
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.rank = 3;
  so.world = 2;
  CHECK(stk_loader_open(&l, ds, &o, err) != 0);
  stk_dataset_close(ds);
}

TEST(loader_stats_account_stages) {
  write_tfrecords("ds", 2, 40);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader *l;
  struct stk_loader_opts o = {.batch_size = 10, .threads = 2};
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  uint64_t bytes = 0;
  while (stk_loader_next(l, &b) == 0) {
    bytes += b->bytes;
    stk_batch_release(l, b);
  }
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  CHECK_EQ(st.batches, 8);
  CHECK_EQ(st.samples, 80);
  CHECK_EQ(st.bytes, bytes);
  CHECK_EQ(st.stage[STK_STAGE_READ].items, 80);
  CHECK_EQ(st.stage[STK_STAGE_DECODE].items, 80);
  CHECK_EQ(st.stage[STK_STAGE_RING].items, 8);
  CHECK(st.stage[STK_STAGE_READ].bytes > bytes); /* headers and CRCs too */
  CHECK(st.read_ops >= 2 && st.read_ops <= 80);
  CHECK(st.wait_max_ns >= st.wait_p99_ns && st.wait_p99_ns >= st.wait_p50_ns);
  FILE *f = tmpfile();
  struct stk_json j;
  stk_json_init(&j, f, 0);
  stk_loader_stats_json(&st, &j);
  fflush(f);
  rewind(f);
  char buf[4096] = {0};
  CHECK(fread(buf, 1, sizeof buf - 1, f) > 0);
  CHECK_CONTAINS(buf, "\"samples\":80");
  CHECK_CONTAINS(buf, "\"name\":\"decode\"");
  fclose(f);
  stk_loader_close(l);
  stk_dataset_close(ds);
}

/* A shard that vanishes after the dataset was opened: fail mode names it,
 * skip mode drops its samples and counts them. */
TEST(loader_shard_removed_mid_run) {
  write_tfrecords("ds", 3, 10);
  struct stk_dataset *ds = open_ds("ds");
  CHECK(unlink("ds/part-00001.tfrecord") == 0);
  struct stk_loader *l;
  struct stk_loader_opts o = {.batch_size = 4, .threads = 2, .on_error = STK_ON_ERROR_FAIL};
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK(rc != STK_EOF);
  CHECK_CONTAINS(stk_loader_errmsg(l), "part-00001.tfrecord");
  stk_loader_close(l);
  o.on_error = STK_ON_ERROR_SKIP;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  uint64_t n = 0, skipped = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    for (uint32_t i = 0; i < b->n; i++) CHECK(b->indices[i] < 10 || b->indices[i] >= 20);
    n += b->n;
    skipped += b->skipped;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  CHECK_EQ(n, 20);
  CHECK_EQ(skipped, 10);
  stk_loader_close(l);
  stk_dataset_close(ds);
}

/* epoch_samples: each epoch uses the first N samples of its own order. */
TEST(loader_epoch_samples_limit) {
  write_tfrecords("ds", 2, 50);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 8, .threads = 2, .epochs = 3, .epoch_samples = 32};
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.seed = 4;
  uint8_t *seen[3];
  for (int e = 0; e < 3; e++) seen[e] = calloc(100, 1);
  CHECK_EQ(run_all(ds, &o, seen, NULL), 12);
  for (int e = 0; e < 3; e++) {
    int n = 0;
    for (int i = 0; i < 100; i++) n += seen[e][i];
    CHECK_EQ(n, 32);
  }
  CHECK(memcmp(seen[0], seen[1], 100) != 0); /* a new order each epoch */
  for (int e = 0; e < 3; e++) free(seen[e]);
  stk_dataset_close(ds);
}

/* ---- DLIO's npz layout ------------------------------------------------- */

/* DLIO's npz layout written by NumPy (np.savez(path, x=records, y=labels),
 * samples along the last axis) through the whole pipeline: every sample
 * arrives once as the bytes of x[..., i], with label y[i], whether the
 * samples of one file share a batch or not. */
TEST(loader_npz_dlio_layout_numpy) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0)
    SKIP("no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test installs python3-numpy)");
  char *out;
  int rc = test_sh(&out, "mkdir -p d b && /usr/bin/python3 -c \"import numpy as np\n"
                         "r=np.random.default_rng(3)\n"
                         "k=0\n"
                         "for f in range(5):\n"
                         "  x=r.integers(0,255,size=(33,17,4),dtype=np.uint8)\n"
                         "  np.savez('d/img_%%d_of_5.npz'%%f, x=x, y=[10*f+i for i in range(4)])\n"
                         "  for i in range(4):\n"
                         "    open('b/%%d.bin'%%k,'wb').write(x[...,i].tobytes()); k+=1\"");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  struct stk_dataset *ds = open_ds("d");
  CHECK_EQ(stk_dataset_num_samples(ds), 20);
  for (uint32_t batch = 1; batch <= 8; batch += 7) {
    struct stk_loader_opts o = {.batch_size = batch, .threads = 2};
    struct stk_sampler_opts so = {0};
    o.sampler = &so;
    so.shuffle = STK_SHUFFLE_GLOBAL;
    so.seed = 5;
    struct stk_loader *l;
    CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
    struct stk_batch *b;
    int seen[20] = {0};
    while ((rc = stk_loader_next(l, &b)) == 0) {
      for (uint32_t i = 0; i < b->n; i++) {
        uint64_t id = b->indices[i];
        char path[64];
        snprintf(path, sizeof path, "b/%llu.bin", (unsigned long long)id);
        size_t wl;
        uint8_t *w = test_read_file(path, &wl);
        CHECK_EQ(b->len[i], wl);
        CHECK_MSG(!memcmp(b->data + b->offsets[i], w, wl), "sample %llu differs", (unsigned long long)id);
        CHECK_EQ(b->labels[i], (int32_t)(10 * (id / 4) + id % 4));
        free(w);
        seen[id]++;
      }
      stk_batch_release(l, b);
    }
    CHECK_MSG(rc == STK_EOF, "next: %d %s", rc, stk_loader_errmsg(l));
    for (int i = 0; i < 20; i++) CHECK_EQ(seen[i], 1);
    stk_loader_close(l);
  }
  stk_dataset_close(ds);
}

/* ---- DLIO's cosmoflow layout --------------------------------------------- */

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

/* tf.train.Example {image: bytes, size: int64}, as DLIO's TFRecord
 * generator writes each cosmoflow record; returns its length. */
static size_t dlio_example(uint8_t *p, const uint8_t *img, size_t len) {
  uint8_t f1[64], f2[64], e1[128], e2[128], sz[16];
  size_t o = 0, n1 = 0, n2 = 0, m1 = 0, m2 = 0, sl = put_varint(sz, len);
  /* Feature{bytes_list = 1 {value = 1}}: headers; the image bytes follow. */
  uint8_t blh[16];
  size_t blhl = 0;
  blh[blhl++] = 0x0a;
  blhl += put_varint(blh + blhl, len); /* BytesList.value header */
  n1 = 0;
  f1[n1++] = 0x0a;
  n1 += put_varint(f1 + n1, blhl + len); /* Feature.bytes_list header */
  /* Feature{int64_list = 3 {value = 1 [packed]}} */
  uint8_t il[16];
  size_t ill = 0;
  il[ill++] = 0x0a;
  il[ill++] = (uint8_t)sl;
  memcpy(il + ill, sz, sl);
  ill += sl;
  f2[n2++] = 0x1a;
  n2 += put_varint(f2 + n2, ill);
  memcpy(f2 + n2, il, ill);
  n2 += ill;
  /* map entries {key = 1, value = 2} */
  e1[m1++] = 0x0a, e1[m1++] = 5, memcpy(e1 + m1, "image", 5), m1 += 5;
  e1[m1++] = 0x12;
  m1 += put_varint(e1 + m1, n1 + blhl + len);
  e2[m2++] = 0x0a, e2[m2++] = 4, memcpy(e2 + m2, "size", 4), m2 += 4;
  e2[m2++] = 0x12;
  m2 += put_varint(e2 + m2, n2);
  size_t ent1 = m1 + n1 + blhl + len, ent2 = m2 + n2;
  size_t feats = 1 + (size_t)put_varint(sz, ent1) + ent1 + 1 + (size_t)put_varint(sz, ent2) + ent2;
  p[o++] = 0x0a; /* Example.features */
  o += put_varint(p + o, feats);
  p[o++] = 0x0a; /* Features.feature (map entry) */
  o += put_varint(p + o, ent1);
  memcpy(p + o, e1, m1), o += m1;
  memcpy(p + o, f1, n1), o += n1;
  memcpy(p + o, blh, blhl), o += blhl;
  memcpy(p + o, img, len), o += len;
  p[o++] = 0x0a;
  o += put_varint(p + o, ent2);
  memcpy(p + o, e2, m2), o += m2;
  memcpy(p + o, f2, n2), o += n2;
  return o;
}

/* DLIO's cosmoflow files (one TFRecord per sample holding an Example with
 * the record's bytes in "image" and its size in "size") give the image
 * bytes as the sample through the loader. */
TEST(loader_dlio_cosmoflow_layout) {
  mkdir("ds", 0755);
  size_t n = 6;
  for (size_t id = 0; id < n; id++) {
    size_t len = 100000 + id * 777;
    uint8_t *img = malloc(len), *rec = malloc(len + 256);
    for (size_t i = 0; i < len; i++) img[i] = payload_byte(id, i);
    size_t rl = dlio_example(rec, img, len);
    uint8_t hdr[12], crc[4];
    stk__st64(hdr, rl);
    stk__st32(hdr + 8, stk_crc32c_mask(stk_crc32c(0, hdr, 8)));
    stk__st32(crc, stk_crc32c_mask(stk_crc32c(0, rec, rl)));
    char path[64];
    snprintf(path, sizeof path, "ds/img_%zu_of_%zu.tfrecord", id, n);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fwrite(hdr, 1, 12, f);
    fwrite(rec, 1, rl, f);
    fwrite(crc, 1, 4, f);
    fclose(f);
    free(img);
    free(rec);
  }
  struct stk_dataset *ds = open_ds("ds");
  CHECK_EQ(stk_dataset_num_samples(ds), n);
  struct stk_loader_opts o = {.batch_size = 1, .threads = 2};
  struct stk_decode_cfg dc = {0};
  o.decode = &dc;
  dc.field = "image";
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  int rc;
  size_t got = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    uint64_t id = b->indices[0];
    CHECK_EQ(b->len[0], 100000 + id * 777);
    const uint8_t *p = b->data + b->offsets[0];
    for (uint64_t i = 0; i < b->len[0]; i += 101) CHECK_EQ(p[i], payload_byte(id, i));
    got++;
    stk_batch_release(l, b);
  }
  CHECK_MSG(rc == STK_EOF, "next: %d %s", rc, stk_loader_errmsg(l));
  CHECK_EQ(got, n);
  stk_loader_close(l);
  stk_dataset_close(ds);
}
