/* The shard cache over the file origin (no server needed): datasets read
 * through the disk and RAM tiers give the same bytes as the local copy;
 * manifests, listing, restaging of corrupt copies, sweeping of interrupted
 * fills, refusal of foreign directories, LRU eviction under a budget, one
 * download per shard across processes, and the loader's look-ahead. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/base.h"
#include "stoker/stoker.h"
#include "test.h"

/* A tfrecord dataset of n samples in shards of per, with a manifest. */
static void make_dataset(const char *dir, uint64_t n, uint64_t per, int manifest) {
  struct stk_gen_opts g = {0};
  g.dir = dir;
  g.format = "tfrecord";
  g.samples = n;
  g.size_mean = 3000;
  g.size_stdev = 500;
  g.samples_per_shard = per;
  g.classes = 10;
  g.seed = 7;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_gen(&g, NULL, NULL, err) == 0, "gen: %s", err);
  if (manifest) {
    uint64_t shards;
    CHECK_MSG(stk_manifest_write(dir, NULL, &shards, err) == 0, "manifest: %s", err);
    CHECK_EQ(shards, (n + per - 1) / per);
  }
}

static struct stk_dataset *open_cached(const char *src, struct stk_cache_opts *co) {
  struct stk_dataset *ds;
  struct stk_dataset_opts o = {.cache = co};
  char err[STK_ERRMSG_MAX];
  int rc = stk_dataset_open(&ds, src, &o, err);
  CHECK_MSG(rc == 0, "open %s through the cache: %s", src, err);
  return ds;
}

/* Every sample of a equals the same sample of b (bytes of every field). */
static void same_samples(struct stk_dataset *a, struct stk_dataset *b) {
  CHECK_EQ(stk_dataset_num_samples(a), stk_dataset_num_samples(b));
  uint8_t *ba = NULL, *bb = NULL;
  size_t ca = 0, cb = 0;
  for (uint64_t i = 0; i < stk_dataset_num_samples(a); i++) {
    struct stk_sample sa, sb;
    CHECK_MSG(stk_dataset_read(a, i, 1, &ba, &ca, &sa) == 0, "read %llu: %s",
              (unsigned long long)i, stk_dataset_errmsg(a));
    CHECK_MSG(stk_dataset_read(b, i, 1, &bb, &cb, &sb) == 0, "read %llu: %s",
              (unsigned long long)i, stk_dataset_errmsg(b));
    CHECK_EQ(sa.nfields, sb.nfields);
    CHECK_EQ(sa.label, sb.label);
    for (int f = 0; f < sa.nfields; f++) {
      CHECK_EQ(sa.fields[f].len, sb.fields[f].len);
      CHECK(memcmp(sa.fields[f].data, sb.fields[f].data, sa.fields[f].len) == 0);
    }
  }
  free(ba);
  free(bb);
}

static struct stk_cache_stats stats_of(struct stk_dataset *ds) {
  struct stk_cache_stats st = {0};
  CHECK_OK(stk_dataset_cache_stats(ds, &st));
  return st;
}

static struct stk_dataset *open_local(const char *dir) {
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_dataset_open(&ds, dir, NULL, err) == 0, "open %s: %s", dir, err);
  return ds;
}

TEST(cache_disk_tier_same_bytes_and_warm_hits) {
  make_dataset("src", 300, 40, 1);
  struct stk_cache_opts co = {.dir = "cache"};
  struct stk_dataset *local = open_local("src");
  struct stk_dataset *ds = open_cached("src", &co);
  CHECK_EQ(stk_dataset_num_shards(ds), 8);
  same_samples(ds, local);
  struct stk_cache_stats st = stats_of(ds);
  CHECK_EQ(st.fetches, 8);
  CHECK_EQ(st.disk.misses, 8);
  stk_dataset_close(ds);
  /* A second process-lifetime: every shard is a disk hit, nothing fetched. */
  ds = open_cached("src", &co);
  same_samples(ds, local);
  st = stats_of(ds);
  CHECK_EQ(st.fetches, 0);
  CHECK_EQ(st.disk.hits, 8);
  stk_dataset_close(ds);
  stk_dataset_close(local);
  /* The directory's counters sum both lifetimes. */
  struct stk_cache_stats t = {0};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_cache_dir_scan("cache", NULL, NULL, &t, err));
  CHECK_EQ(t.disk.entries, 8);
  CHECK_EQ(t.fetches, 8);
  CHECK_EQ(t.disk.hits, 8);
}

TEST(cache_url_ram_tier_only) {
  make_dataset("src", 120, 30, 1);
  char url[4200], cwd[4000];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(url, sizeof url, "file://%s/src", cwd);
  /* A file:// URL with a RAM budget is staged into memory; 3 shards fit. */
  struct stk_cache_opts co = {.ram_bytes = 3 * 31 * 3100};
  struct stk_dataset *ds = open_cached(url, &co);
  struct stk_dataset *local = open_local("src");
  same_samples(ds, local);
  same_samples(ds, local);
  struct stk_cache_stats st = stats_of(ds);
  CHECK(st.ram.capacity == co.ram_bytes);
  CHECK(st.ram.evictions > 0);
  CHECK(st.ram.bytes <= co.ram_bytes);
  CHECK(st.fetches >= 8); /* 4 shards, twice, none kept across the scan */
  stk_dataset_close(ds);
  stk_dataset_close(local);
}

TEST(cache_without_manifest_lists_origin) {
  make_dataset("src", 100, 30, 0);
  struct stk_cache_opts co = {.dir = "cache"};
  struct stk_dataset *ds = open_cached("src", &co);
  struct stk_dataset *local = open_local("src");
  CHECK_STR(stk_dataset_format(ds), "tfrecord");
  CHECK_EQ(stk_dataset_num_shards(ds), 4);
  same_samples(ds, local);
  stk_dataset_close(ds);
  stk_dataset_close(local);
}

static void flip_byte(const char *path, off_t off) {
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  uint8_t b;
  CHECK(pread(fd, &b, 1, off) == 1);
  b ^= 0x40;
  CHECK(pwrite(fd, &b, 1, off) == 1);
  close(fd);
}

TEST(cache_corrupt_copy_is_restaged) {
  make_dataset("src", 80, 40, 1);
  struct stk_cache_opts co = {.dir = "cache"};
  struct stk_dataset *local = open_local("src");
  struct stk_dataset *ds = open_cached("src", &co);
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_warm(ds, NULL, NULL, NULL, err));
  stk_dataset_close(ds);
  /* Corrupt one cached shard (as a bad disk or a stray write would). */
  char *out = NULL;
  CHECK_EQ(test_sh(&out, "ls cache/data | grep -v meta | head -1"), 0);
  out[strcspn(out, "\n")] = 0;
  char path[600];
  snprintf(path, sizeof path, "cache/data/%s", out);
  free(out);
  flip_byte(path, 100);
  ds = open_cached("src", &co);
  same_samples(ds, local);
  struct stk_cache_stats st = stats_of(ds);
  CHECK_EQ(st.restages, 1);
  CHECK_EQ(st.fetches, 1);
  stk_dataset_close(ds);
  /* verify finds nothing wrong now; a second corruption is caught by it. */
  uint64_t checked, removed;
  CHECK_OK(stk_cache_dir_verify("cache", &checked, &removed, err));
  CHECK_EQ(checked, 2);
  CHECK_EQ(removed, 0);
  flip_byte(path, 7);
  CHECK_OK(stk_cache_dir_verify("cache", &checked, &removed, err));
  CHECK_EQ(removed, 1);
  stk_dataset_close(local);
}

TEST(cache_origin_changed_is_a_checksum_error) {
  make_dataset("src", 40, 40, 1);
  flip_byte("src/shard-00000.tfrecord", 50); /* after the manifest was written */
  struct stk_cache_opts co = {.dir = "cache"};
  struct stk_dataset *ds = open_cached("src", &co);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK(stk_dataset_read(ds, 0, 1, &buf, &cap, &s) == STK_ECRC);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "checksum mismatch after fetch");
  free(buf);
  stk_dataset_close(ds);
  /* Nothing half-made stays behind. */
  char *out = NULL;
  CHECK_EQ(test_sh(&out, "find cache/tmp cache/data -type f | wc -l"), 0);
  CHECK_STR(out, "0\n");
  free(out);
}

TEST(cache_interrupted_fill_is_swept) {
  make_dataset("src", 40, 20, 1);
  struct stk_cache_opts co = {.dir = "cache"};
  stk_dataset_close(open_cached("src", &co));
  /* What a killed filler leaves: a temporary nobody holds, a lone .meta. */
  CHECK_EQ(system("head -c 1000 /dev/urandom > cache/tmp/0123-shard.tfrecord.AbCdEf && "
                  "echo x > cache/data/feedface-x.meta"), 0);
  stk_dataset_close(open_cached("src", &co));
  char *out = NULL;
  CHECK_EQ(test_sh(&out, "ls cache/tmp; ls cache/data | grep -c feedface || true"), 0);
  CHECK_STR(out, "0\n");
  free(out);
}

TEST(cache_refuses_foreign_and_newer_dirs) {
  make_dataset("src", 20, 20, 1);
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(system("mkdir other && echo precious > other/notes.txt"), 0);
  struct stk_cache_opts co = {.dir = "other"};
  struct stk_dataset_opts o = {.cache = &co};
  CHECK_EQ(stk_dataset_open(&ds, "src", &o, err), STK_ENOTSUP);
  CHECK_CONTAINS(err, "not a stoker cache directory");
  CHECK_EQ(system("test -f other/notes.txt"), 0);
  CHECK_EQ(system("mkdir newer && echo 'stoker-cache 9' > newer/STOKER-CACHE"), 0);
  co.dir = "newer";
  CHECK_EQ(stk_dataset_open(&ds, "src", &o, err), STK_ENOTSUP);
  CHECK_CONTAINS(err, "newer stoker (format 9");
  CHECK_EQ(system("mkdir foreign && echo 'squid 3' > foreign/STOKER-CACHE"), 0);
  co.dir = "foreign";
  CHECK_EQ(stk_dataset_open(&ds, "src", &o, err), STK_ENOTSUP);
  CHECK_CONTAINS(err, "not a stoker cache directory");
}

TEST(cache_lru_eviction_keeps_budget) {
  make_dataset("src", 400, 40, 1); /* 10 shards of about 120 KiB */
  struct stk_cache_opts co = {.dir = "cache", .disk_bytes = 4 * 130000, .min_free = 1};
  struct stk_dataset *ds = open_cached("src", &co);
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_warm(ds, NULL, NULL, NULL, err));
  struct stk_cache_stats st = stats_of(ds);
  CHECK(st.disk.evictions >= 6);
  stk_dataset_close(ds);
  struct stk_cache_stats t = {0};
  CHECK_OK(stk_cache_dir_scan("cache", NULL, NULL, &t, err));
  CHECK(t.disk.bytes <= co.disk_bytes);
  CHECK(t.disk.entries >= 3);
  /* The survivors are the most recently used: the last shards warmed. */
  char *out = NULL;
  CHECK_EQ(test_sh(&out, "ls cache/data | grep -c 'shard-00009.tfrecord$'"), 0);
  CHECK_STR(out, "1\n");
  free(out);
  uint64_t ev;
  CHECK_OK(stk_cache_dir_evict("cache", 0, &ev, err));
  CHECK_EQ(ev, t.disk.entries);
}

TEST(cache_processes_share_one_download) {
  make_dataset("src", 400, 25, 1); /* 16 shards */
  enum { PROCS = 8 };
  pid_t kids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    kids[p] = fork();
    CHECK(kids[p] >= 0);
    if (kids[p] == 0) {
      struct stk_cache_opts co = {.dir = "cache"};
      struct stk_dataset_opts o = {.cache = &co};
      struct stk_dataset *ds;
      char err[STK_ERRMSG_MAX];
      if (stk_dataset_open(&ds, "src", &o, err) != 0) _exit(2);
      int rc = stk_dataset_warm(ds, NULL, NULL, NULL, err);
      stk_dataset_close(ds);
      _exit(rc ? 3 : 0);
    }
  }
  for (int p = 0; p < PROCS; p++) {
    int status;
    CHECK(waitpid(kids[p], &status, 0) == kids[p]);
    CHECK_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : 99, 0);
  }
  struct stk_cache_stats t = {0};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_cache_dir_scan("cache", NULL, NULL, &t, err));
  CHECK_EQ(t.fetches, 16);          /* one download per shard */
  CHECK_EQ(t.disk.entries, 16);     /* and one copy */
  CHECK_EQ(t.disk.hits + t.disk.misses, 16 * PROCS);
}

TEST(cache_loader_lookahead_delivers_every_sample) {
  make_dataset("src", 600, 50, 1);
  struct stk_cache_opts co = {.dir = "cache", .prefetch_bytes = 400000};
  struct stk_dataset *ds = open_cached("src", &co);
  struct stk_loader_opts lo = {.batch_size = 16, .threads = 2, .epochs = 2};
  struct stk_loader *l;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_loader_open(&l, ds, &lo, err) == 0, "loader: %s", err);
  uint8_t *seen = calloc(2 * 600, 1);
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    for (uint32_t i = 0; i < b->n; i++) seen[b->epoch * 600 + b->indices[i]]++;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  for (int i = 0; i < 1200; i++) CHECK_EQ(seen[i], 1);
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  CHECK(st.has_cache);
  CHECK_EQ(st.cache.fetches, 12);
  CHECK(st.cache.prefetched > 0);
  stk_loader_close(l);
  stk_dataset_close(ds);
  free(seen);
}

TEST(cache_mds_from_index_json_and_empty_dir) {
  struct stk_gen_opts g = {0};
  g.dir = "src";
  g.format = "mds";
  g.samples = 90;
  g.size_mean = 2000;
  g.samples_per_shard = 30;
  g.seed = 3;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_gen(&g, NULL, NULL, err) == 0, "gen: %s", err);
  /* An existing empty directory (made by an admin, say) is used in place. */
  CHECK_EQ(system("mkdir cache && chmod 0750 cache"), 0);
  struct stk_cache_opts co = {.dir = "cache", .prefetch_bytes = 100000};
  struct stk_dataset *ds = open_cached("src", &co), *local = open_local("src");
  CHECK_STR(stk_dataset_format(ds), "mds");
  CHECK_EQ(stk_dataset_num_shards(ds), 3);
  /* Shard sizes come from index.json, before anything is fetched. */
  struct stk_shard_info si;
  CHECK_OK(stk_dataset_shard_info(ds, 0, &si));
  CHECK(si.bytes > 30 * 2000);
  same_samples(ds, local);
  CHECK_EQ(stats_of(ds).fetches, 3);
  stk_dataset_close(ds);
  stk_dataset_close(local);
  struct stat st;
  CHECK_EQ(stat("cache", &st), 0);
  CHECK_EQ(st.st_mode & 0777, 0750);
}

/* ---- a dataset without a manifest, counted as its shards arrive -------- */

/* Read a loader to its end: ids per epoch in delivery order into ids[e]
 * (n[e] of them), each sample's bytes checked against the local copy. */
static int drain_ids(struct stk_loader *l, uint64_t **ids, uint64_t *n, uint64_t limit) {
  struct stk_batch *b;
  int rc;
  uint64_t batches = 0;
  while ((!limit || batches < limit) && (rc = stk_loader_next(l, &b)) == 0) {
    for (uint32_t i = 0; i < b->n; i++) ids[b->epoch][n[b->epoch]++] = b->indices[i];
    stk_batch_release(l, b);
    batches++;
  }
  return limit && batches == limit ? 0 : rc;
}

/* Opening lists the origin and fetches nothing; the first batch needs the
 * first shards only; the first epoch visits shards in listed order (each
 * window of samples is a permutation of the same sample numbers), the
 * second in a shuffled order; every sample arrives once per epoch, and the
 * count is complete once the first epoch is through. */
TEST(cache_streamed_counts_as_shards_arrive) {
  make_dataset("src", 600, 50, 0); /* 12 shards, no manifest */
  struct stk_cache_opts co = {.dir = "cache", .prefetch_bytes = 2 * 50 * 3600};
  struct stk_dataset *ds = open_cached("src", &co);
  int complete = 1;
  CHECK_EQ(stk_dataset_samples_counted(ds, &complete), 0);
  CHECK(!complete);
  CHECK_EQ(stats_of(ds).fetches, 0);
  struct stk_loader_opts lo = {.batch_size = 16, .threads = 2, .epochs = 2};
  struct stk_sampler_opts so = {0};
  lo.sampler = &so;
  so.seed = 5;
  so.shuffle_window = 64;
  struct stk_loader *l;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_loader_open(&l, ds, &lo, err) == 0, "loader: %s", err);
  uint64_t *ids[2] = {calloc(600, 8), calloc(600, 8)}, n[2] = {0, 0};
  CHECK_OK(drain_ids(l, ids, n, 1));
  uint64_t early = stats_of(ds).fetches;
  CHECK_MSG(early < 12, "%llu of 12 shards fetched for the first batch", (unsigned long long)early);
  CHECK_EQ(drain_ids(l, ids, n, 0), STK_EOF);
  stk_loader_close(l);
  CHECK_EQ(n[0], 600);
  CHECK_EQ(n[1], 600);
  int moved = 0;
  for (int e = 0; e < 2; e++) {
    uint8_t seen[600] = {0};
    for (uint64_t k = 0; k < 600; k++) {
      CHECK_MSG(!seen[ids[e][k]], "sample %llu twice in epoch %d", (unsigned long long)ids[e][k], e);
      seen[ids[e][k]] = 1;
      if (e == 0)
        CHECK_MSG(ids[0][k] / 64 == k / 64, "epoch 0 position %llu: sample %llu", (unsigned long long)k,
                  (unsigned long long)ids[0][k]);
      else
        moved += ids[1][k] / 50 != k / 50; /* another shard than listed order gives */
    }
  }
  CHECK_MSG(moved > 0, "epoch 1 visited the shards in listed order");
  CHECK_EQ(stk_dataset_samples_counted(ds, &complete), 600);
  CHECK(complete);
  CHECK_EQ(stats_of(ds).fetches, 12);
  free(ids[0]);
  free(ids[1]);
  stk_dataset_close(ds);
  /* The same shards read in place: the same bytes. */
  struct stk_dataset *local = open_local("src");
  ds = open_cached("src", &co);
  same_samples(ds, local); /* num_samples counts the rest first */
  stk_dataset_close(ds);
  stk_dataset_close(local);
}

/* A state saved in the middle of a streamed first epoch resumes it exactly,
 * in a new process's worth of dataset and cache. */
TEST(cache_streamed_resume_mid_first_epoch) {
  make_dataset("src", 500, 40, 0);
  struct stk_cache_opts co = {.dir = "cache", .prefetch_bytes = 200000};
  struct stk_loader_opts lo = {.batch_size = 10, .threads = 2, .epochs = 2};
  struct stk_sampler_opts so = {0};
  lo.sampler = &so;
  so.seed = 11;
  so.shuffle_window = 32;
  struct stk_loader *l;
  uint64_t *all[2] = {calloc(500, 8), calloc(500, 8)}, na[2] = {0, 0};
  struct stk_dataset *ds = open_cached("src", &co);
  CHECK_OK(stk_loader_open(&l, ds, &lo, NULL));
  CHECK_EQ(drain_ids(l, all, na, 0), STK_EOF);
  stk_loader_close(l);
  stk_dataset_close(ds);
  /* 17 batches in, save; a fresh dataset and cache resume. */
  uint64_t *part[2] = {calloc(500, 8), calloc(500, 8)}, np[2] = {0, 0};
  struct stk_cache_opts co2 = {.dir = "cache2", .prefetch_bytes = 200000};
  ds = open_cached("src", &co2);
  CHECK_OK(stk_loader_open(&l, ds, &lo, NULL));
  CHECK_OK(drain_ids(l, part, np, 17));
  struct stk_sampler_state st;
  stk_loader_state(l, &st);
  stk_loader_close(l);
  stk_dataset_close(ds);
  CHECK_EQ(st.epoch, 0);
  CHECK_EQ(st.position, 170);
  ds = open_cached("src", &co2);
  lo.resume = &st;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_loader_open(&l, ds, &lo, err) == 0, "resume: %s", err);
  CHECK_EQ(drain_ids(l, part, np, 0), STK_EOF);
  stk_loader_close(l);
  stk_dataset_close(ds);
  CHECK_EQ(np[0], 500);
  CHECK_EQ(np[1], 500);
  CHECK(memcmp(all[0], part[0], 500 * 8) == 0);
  CHECK(memcmp(all[1], part[1], 500 * 8) == 0);
  for (int e = 0; e < 2; e++) free(all[e]), free(part[e]);
}

/* A shard that is gone when its turn to be counted comes ends the run with
 * an error naming it; a global shuffle counts every shard before the first
 * batch, so there it is the open that fails. */
TEST(cache_streamed_missing_shard_is_an_error) {
  make_dataset("src", 300, 50, 0);
  struct stk_cache_opts co = {.dir = "cache", .prefetch_bytes = 100000};
  struct stk_dataset *ds = open_cached("src", &co);
  CHECK_OK(unlink("src/shard-00004.tfrecord"));
  struct stk_loader_opts lo = {.batch_size = 10, .threads = 2};
  struct stk_sampler_opts so = {0};
  lo.sampler = &so;
  so.shuffle_window = 16;
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &lo, NULL));
  struct stk_batch *b;
  int rc;
  uint64_t got = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    got += b->n;
    stk_batch_release(l, b);
  }
  CHECK_MSG(rc != STK_EOF, "the run ended normally after %llu samples", (unsigned long long)got);
  CHECK_CONTAINS(stk_loader_errmsg(l), "shard-00004.tfrecord");
  CHECK(got <= 200);
  stk_loader_close(l);
  stk_dataset_close(ds);
  make_dataset("src2", 300, 50, 0);
  struct stk_cache_opts co2 = {.dir = "cache2", .prefetch_bytes = 100000};
  ds = open_cached("src2", &co2);
  CHECK_OK(unlink("src2/shard-00004.tfrecord"));
  so.shuffle = STK_SHUFFLE_GLOBAL;
  char err[STK_ERRMSG_MAX];
  CHECK(stk_loader_open(&l, ds, &lo, err) != 0);
  CHECK_CONTAINS(err, "shard-00004.tfrecord");
  stk_dataset_close(ds);
}
