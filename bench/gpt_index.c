/* T1 of issue 18: build Megatron-LM's GPT indices (and a blend's) with
 * stoker, from document lengths in a .npy file, and write them as .npy
 * files named as Megatron's cache names them, for bench/megatron_index.py
 * to time and compare with megatron-core's own.
 *
 * usage: gpt_index build LENGTHS.npy SEQ_LEN NUM_SAMPLES SEED OUT_PREFIX
 *        gpt_index blend SEQ_LEN TARGET SEED OUT_PREFIX W1:LENGTHS1.npy W2:LENGTHS2.npy ...
 * NUM_SAMPLES 0 means one epoch. Prints one JSON line with the build time
 * (the arrays in memory, not the writing) and the sizes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/loader/gpt_index.h"
#include "stoker/error.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *detail) {
  fprintf(stderr, "gpt_index: %s: %s\n", what, detail);
  exit(1);
}

/* A one-dimensional little-endian int32 .npy file (what NumPy writes for
 * np.save(path, a.astype(np.int32))). */
static int32_t *read_npy_i32(const char *path, uint64_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path, "cannot open");
  unsigned char pre[10];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) die(path, "not a .npy file");
  size_t hl = pre[8] | (size_t)pre[9] << 8;
  if (pre[6] >= 2) {
    unsigned char more[2];
    if (fread(more, 1, 2, f) != 2) die(path, "truncated header");
    hl |= (size_t)more[0] << 16 | (size_t)more[1] << 24;
  }
  char *h = calloc(1, hl + 1);
  if (!h || fread(h, 1, hl, f) != hl) die(path, "truncated header");
  if (!strstr(h, "'<i4'") || strstr(h, "True")) die(path, "expected a C-order <i4 array");
  const char *s = strstr(h, "'shape': (");
  if (!s) die(path, "no shape");
  *n = strtoull(s + 10, NULL, 10);
  free(h);
  int32_t *a = malloc(*n * 4 + 4);
  if (!a || fread(a, 4, *n, f) != *n) die(path, "truncated data");
  fclose(f);
  return a;
}

static void write_npy(const char *prefix, const char *name, const char *descr, const void *data,
                      uint64_t rows, int cols, size_t es) {
  char path[4096], hdr[256], shape[64];
  snprintf(path, sizeof path, "%s-%s.npy", prefix, name);
  if (cols)
    snprintf(shape, sizeof shape, "(%" PRIu64 ", %d)", rows, cols);
  else
    snprintf(shape, sizeof shape, "(%" PRIu64 ",)", rows);
  int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
  int total = 10 + len + 1, pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) die(path, "cannot create");
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  pre[8] = (unsigned char)((len + pad + 1) & 0xff);
  pre[9] = (unsigned char)((len + pad + 1) >> 8);
  fwrite(pre, 1, 10, f);
  fwrite(hdr, 1, (size_t)len, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  uint64_t n = rows * (uint64_t)(cols ? cols : 1);
  if (fwrite(data, es, n, f) != n || fclose(f) != 0) die(path, "write failed");
}

static void write_index(const char *prefix, const struct stk__gpt_index *ix) {
  write_npy(prefix, "document_index", "<i4", ix->doc_index, ix->n_doc, 0, 4);
  write_npy(prefix, "sample_index", ix->sample_i64 ? "<i8" : "<i4", ix->sample_index,
            ix->n_samples + 1, 2, ix->sample_i64 ? 8 : 4);
  write_npy(prefix, "shuffle_index", ix->shuffle_i64 ? "<i8" : "<u4", ix->shuffle_index,
            ix->n_samples, 0, ix->shuffle_i64 ? 8 : 4);
}

static int build(int argc, char **argv) {
  if (argc != 7) die("usage", "gpt_index build LENGTHS.npy SEQ_LEN NUM_SAMPLES SEED OUT_PREFIX");
  uint64_t n;
  int32_t *len = read_npy_i32(argv[2], &n);
  struct stk__gpt_cfg cfg = {.lengths = len,
                             .n_lengths = n,
                             .seq_len = atoi(argv[3]),
                             .num_samples = strtoull(argv[4], NULL, 10),
                             .seed = (uint32_t)strtoul(argv[5], NULL, 10)};
  struct stk__gpt_index ix;
  char err[STK_ERRMSG_MAX];
  double t0 = now_s();
  if (stk__gpt_index_build(&cfg, &ix, err) != 0) die("build", err);
  double t = now_s() - t0;
  write_index(argv[6], &ix);
  printf("{\"build_s\": %.6f, \"documents\": %" PRIu64 ", \"tokens_per_epoch\": %" PRIu64
         ", \"epochs\": %u, \"samples\": %" PRIu64 "}\n",
         t, n, ix.tokens_per_epoch, ix.num_epochs, ix.n_samples);
  stk__gpt_index_free(&ix);
  free(len);
  return 0;
}

/* A weighted blend as BlendedMegatronDatasetBuilder builds it for one
 * split: each source's GPTDataset for its share plus the 0.5% surplus,
 * then the blend indices over the sum of the shares. */
static int blend(int argc, char **argv) {
  if (argc < 7) die("usage", "gpt_index blend SEQ_LEN TARGET SEED OUT_PREFIX W:LENGTHS.npy ...");
  int ns = argc - 6;
  double *w = calloc((size_t)ns, sizeof *w), *nw = calloc((size_t)ns, sizeof *nw);
  uint64_t *src = calloc((size_t)ns, sizeof *src), *counts = calloc((size_t)ns, sizeof *counts);
  int32_t **len = calloc((size_t)ns, sizeof *len);
  uint64_t *nlen = calloc((size_t)ns, sizeof *nlen), size;
  for (int s = 0; s < ns; s++) {
    char *colon = strchr(argv[6 + s], ':');
    if (!colon) die("usage", "a source is WEIGHT:LENGTHS.npy");
    w[s] = strtod(argv[6 + s], NULL);
    len[s] = read_npy_i32(colon + 1, &nlen[s]);
  }
  char err[STK_ERRMSG_MAX], prefix[4096];
  int32_t seq = atoi(argv[2]);
  uint32_t seed = (uint32_t)strtoul(argv[4], NULL, 10);
  double t0 = now_s(), t_sources = 0;
  if (stk__gpt_blend_plan(w, ns, strtoull(argv[3], NULL, 10), 0.005, nw, src, &size, err))
    die("blend", err);
  struct stk__gpt_index *ix = calloc((size_t)ns, sizeof *ix);
  for (int s = 0; s < ns; s++) {
    struct stk__gpt_cfg cfg = {.lengths = len[s],
                               .n_lengths = nlen[s],
                               .seq_len = seq,
                               .num_samples = src[s],
                               .seed = seed};
    if (stk__gpt_index_build(&cfg, &ix[s], err)) die("build", err);
  }
  t_sources = now_s() - t0;
  int16_t *di = malloc(size * 2 + 2);
  int64_t *dsi = malloc(size * 8 + 8);
  if (stk__gpt_blend_build(nw, ns, size, di, dsi, counts, err)) die("blend", err);
  double t = now_s() - t0;
  for (int s = 0; s < ns; s++) {
    if (counts[s] > ix[s].n_samples) die("blend", "a source is oversampled");
    snprintf(prefix, sizeof prefix, "%s-source%d", argv[5], s);
    write_index(prefix, &ix[s]);
  }
  write_npy(argv[5], "dataset_index", "<i2", di, size, 0, 2);
  write_npy(argv[5], "dataset_sample_index", "<i8", dsi, size, 0, 8);
  printf("{\"build_s\": %.6f, \"sources_s\": %.6f, \"size\": %" PRIu64 ", \"source_samples\": [", t,
         t_sources, size);
  for (int s = 0; s < ns; s++) printf("%s%" PRIu64, s ? ", " : "", src[s]);
  printf("], \"counts\": [");
  for (int s = 0; s < ns; s++) printf("%s%" PRIu64, s ? ", " : "", counts[s]);
  printf("]}\n");
  for (int s = 0; s < ns; s++) stk__gpt_index_free(&ix[s]), free(len[s]);
  free(ix), free(di), free(dsi), free(w), free(nw), free(src), free(counts), free(len), free(nlen);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "build")) return build(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "blend")) return blend(argc, argv);
  die("usage", "gpt_index build|blend ... (see bench/gpt_index.c)");
}
