/* Shared driver of the format fuzz targets: write the input as a shard
 * file (plus side files some formats need) in a private temporary
 * directory, open it as a dataset, and read every sample with and without
 * checksum verification. Any crash, leak or read past a buffer is a bug. */
#ifndef STOKER_FUZZ_COMMON_H
#define STOKER_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/stoker.h"

#define FUZZ_MAX_SAMPLES 256

static char fuzz_dir_path[64];

/* Remove the directory and the few files the targets write. */
static void fuzz_cleanup(void) {
  static const char *names[] = {"a.tfrecord", "a.tfrecord.idx", "a.tar", "a.npy", "a.npz",
                                "index.json", "shard.00000.mds", "a.idx", "a.bin", "b.npy"};
  char path[256];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, names[i]);
    unlink(path);
  }
  rmdir(fuzz_dir_path);
}

static const char *fuzz_dir(void) {
  if (!fuzz_dir_path[0]) {
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "/tmp/stoker-fuzz.XXXXXX");
    if (!mkdtemp(fuzz_dir_path)) abort();
    atexit(fuzz_cleanup);
  }
  return fuzz_dir_path;
}

static void fuzz_write(const char *name, const uint8_t *p, size_t n) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (n && fwrite(p, 1, n, f) != n) abort();
  fclose(f);
}

static void fuzz_unlink(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
  unlink(path);
}

/* Open path (relative to the fuzz directory) as fmt and read it all. */
static void fuzz_read_all(const char *name, const char *fmt) {
  char path[256], err[STK_ERRMSG_MAX];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
  struct stk_dataset_opts o = {.format = fmt, .index_threads = 1};
  struct stk_dataset *ds;
  if (stk_dataset_open(&ds, path, &o, err) != 0) return;
  uint8_t *buf = NULL;
  size_t cap = 0;
  uint64_t n = stk_dataset_num_samples(ds);
  for (uint64_t i = 0; i < n && i < FUZZ_MAX_SAMPLES; i++) {
    struct stk_sample s;
    uint64_t b;
    stk_dataset_sample_bytes(ds, i, &b);
    if (stk_dataset_read(ds, i, 1, &buf, &cap, &s) == 0) {
      for (int k = 0; k < s.nfields; k++) /* touch every field byte */
        if (s.fields[k].len && s.fields[k].data[s.fields[k].len - 1] == 0x42) cap += 0;
    }
    stk_dataset_read(ds, i, 0, &buf, &cap, &s);
  }
  free(buf);
  stk_dataset_close(ds);
}

#endif
