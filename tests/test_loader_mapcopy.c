/* The mapcopy engine on records large enough for the fused copy's lane
 * blocks (tens of KiB): every byte as pread delivers it, and each kind of
 * damage (the data, the length's checksum, the data's checksum) reported
 * with the very message pread's path gives. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_loader.h"

#define NREC 24

static uint64_t big_len(uint64_t id) { return 20000 + (stk_mix64(id, 11) % 120000); }

/* One shard of NREC records with its DALI .idx (so a damaged header is
 * the loader's to find, not the dataset scan's); record r's offset into
 * offs[r]. */
static void write_big(uint64_t *offs) {
  mkdir("ds", 0755);
  FILE *f = fopen("ds/part-00000.tfrecord", "wb"), *x = fopen("ds/part-00000.tfrecord.idx", "w");
  CHECK(f != NULL && x != NULL);
  uint64_t off = 0;
  for (uint64_t id = 0; id < NREC; id++) {
    uint64_t n = big_len(id);
    uint8_t *data = malloc(n);
    for (uint64_t i = 0; i < n; i++) data[i] = payload_byte(id, i);
    put_record(f, data, n);
    free(data);
    offs[id] = off;
    fprintf(x, "%llu %llu\n", (unsigned long long)off, (unsigned long long)(n + 16));
    off += n + 16;
  }
  fclose(f);
  fclose(x);
}

static void flip(uint64_t at) {
  int fd = open("ds/part-00000.tfrecord", O_RDWR);
  uint8_t c;
  CHECK(pread(fd, &c, 1, (off_t)at) == 1);
  c ^= 0x10;
  CHECK(pwrite(fd, &c, 1, (off_t)at) == 1);
  close(fd);
}

/* Run to the end with engine; check every byte; the failure's message (or
 * "" at a clean end) into msg. */
static int run(const char *engine, char *msg, size_t n) {
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader *l;
  struct stk_loader_opts o = {
      .batch_size = 5, .threads = 2, .io_engine = engine, .on_error = STK_ON_ERROR_FAIL};
  struct stk_sampler_opts so = {0};
  so.seed = 9;
  o.sampler = &so;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  CHECK_STR(stk_loader_engine(l), engine);
  struct stk_batch *b;
  int rc;
  uint64_t samples = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    for (uint32_t i = 0; i < b->n; i++) {
      uint64_t id = b->indices[i];
      CHECK_EQ(b->len[i], big_len(id));
      const uint8_t *p = b->data + b->offsets[i];
      for (uint64_t q = 0; q < b->len[i]; q++)
        if (p[q] != payload_byte(id, q))
          CHECK_MSG(0, "sample %llu byte %llu", (unsigned long long)id, (unsigned long long)q);
    }
    samples += b->n;
    stk_batch_release(l, b);
  }
  snprintf(msg, n, "%s", rc == STK_EOF ? "" : stk_loader_errmsg(l));
  if (rc == STK_EOF) CHECK_EQ(samples, NREC);
  stk_loader_close(l);
  stk_dataset_close(ds);
  return rc;
}

TEST(loader_mapcopy_same_bytes_and_errors_as_pread) {
  uint64_t offs[NREC];
  write_big(offs);
  char a[STK_ERRMSG_MAX], b[STK_ERRMSG_MAX];
  CHECK_EQ(run("mapcopy", a, sizeof a), STK_EOF);
  CHECK_EQ(run("pread", b, sizeof b), STK_EOF);
  /* Deep in record 5's data (past its first lane block), its length's
   * checksum in record 11, its data's checksum in record 17. */
  uint64_t at[3] = {offs[5] + 12 + 3 * 8192 + 4000, offs[11] + 9, offs[17] + 12 + big_len(17) + 2};
  const char *what[3] = {"record data checksum mismatch", "record length checksum mismatch",
                         "record data checksum mismatch"};
  for (int k = 0; k < 3; k++) {
    flip(at[k]);
    CHECK_EQ(run("mapcopy", a, sizeof a), STK_ECRC);
    CHECK_EQ(run("pread", b, sizeof b), STK_ECRC);
    CHECK_STR(a, b);
    CHECK_CONTAINS(a, what[k]);
    flip(at[k]); /* repaired for the next */
  }
}

/* A file shorter than its index says is a short read, as with pread. */
TEST(loader_mapcopy_truncated_file) {
  uint64_t offs[NREC];
  write_big(offs);
  struct stk_dataset *ds = open_ds("ds");
  CHECK(truncate("ds/part-00000.tfrecord", (off_t)offs[NREC - 1] + 100) == 0);
  struct stk_loader *l;
  struct stk_loader_opts o = {
      .batch_size = 4, .threads = 2, .io_engine = "mapcopy", .on_error = STK_ON_ERROR_FAIL};
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK_EQ(rc, STK_ETRUNC);
  CHECK_CONTAINS(stk_loader_errmsg(l), "shorter than its index");
  stk_loader_close(l);
  stk_dataset_close(ds);
}

/* Left to choose, the loader copies these records out of mappings (their
 * mean is over 64 KiB); the file cut short after the first batch is an
 * error naming it, as with pread, and the process goes on. */
TEST(loader_auto_mapcopy_file_truncated_mid_run) {
  uint64_t offs[NREC];
  write_big(offs);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader *l;
  struct stk_loader_opts o = {.batch_size = 4, .threads = 2, .on_error = STK_ON_ERROR_FAIL};
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  CHECK_STR(stk_loader_engine(l), "mapcopy");
  struct stk_batch *b;
  CHECK_OK(stk_loader_next(l, &b));
  stk_batch_release(l, b);
  CHECK(truncate("ds/part-00000.tfrecord", (off_t)offs[1]) == 0);
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK_EQ(rc, STK_ETRUNC);
  CHECK_CONTAINS(stk_loader_errmsg(l), "part-00000.tfrecord");
  stk_loader_close(l);
  stk_dataset_close(ds);
}
