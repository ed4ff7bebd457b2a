/* The C side of the binding's equivalence tests, and the README's C example
 * built against an installed libstoker with `pkg-config --cflags --libs
 * stoker`: streams a dataset with the options given and prints one line per
 * batch: "epoch n crc32 | index:label ...", the CRC (zlib's) taken over the
 * samples' bytes in order.
 *
 *   c_ref SOURCE BATCH SHUFFLE(auto|none|global|block) SEED DECODE(raw|jpeg|npy)
 *         DTYPE(u8|f32) LAYOUT(hwc|chw) SIZE EVAL(0|1) EPOCHS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <stoker/stoker.h>

static int pick(const char *v, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(v, names[i])) return i;
  fprintf(stderr, "c_ref: bad value %s\n", v);
  exit(2);
}

int main(int argc, char **argv) {
  if (argc != 11) {
    fprintf(stderr, "usage: c_ref SOURCE BATCH SHUFFLE SEED DECODE DTYPE LAYOUT SIZE EVAL EPOCHS\n");
    return 2;
  }
  static const char *const shuffles[] = {"auto", "none", "global", "block"};
  static const char *const decodes[] = {"raw", "jpeg", "npy"};
  static const char *const dtypes[] = {"u8", "f32"};
  static const char *const layouts[] = {"hwc", "chw"};
  struct stk_dataset *ds;
  struct stk_loader *l;
  char err[STK_ERRMSG_MAX];
  if (stk_dataset_open(&ds, argv[1], NULL, err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  struct stk_loader_opts o;
  stk_loader_opts_init(&o); /* records this header's struct size */
  o.batch_size = (uint32_t)atoi(argv[2]);
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.shuffle = (enum stk_shuffle)pick(argv[3], shuffles, 4);
  so.seed = strtoull(argv[4], NULL, 10);
  struct stk_decode_cfg dc = {0};
  o.decode = &dc;
  dc.kind = pick(argv[5], decodes, 3);
  dc.dtype = pick(argv[6], dtypes, 2);
  dc.layout = pick(argv[7], layouts, 2);
  dc.out_h = dc.out_w = atoi(argv[8]);
  dc.train = !atoi(argv[9]);
  o.epochs = (uint32_t)atoi(argv[10]);
  if (stk_loader_open(&l, ds, &o, err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint32_t i = 0; i < b->n; i++) crc = crc32(crc, b->data + b->offsets[i], (uInt)b->len[i]);
    printf("%llu %u %08lx |", (unsigned long long)b->epoch, b->n, crc);
    for (uint32_t i = 0; i < b->n; i++)
      printf(" %llu:%d", (unsigned long long)b->indices[i], b->labels[i]);
    printf("\n");
    stk_batch_release(l, b);
  }
  if (rc != STK_EOF) fprintf(stderr, "%s\n", stk_loader_errmsg(l));
  stk_loader_close(l);
  stk_dataset_close(ds);
  return rc == STK_EOF ? 0 : 1;
}
