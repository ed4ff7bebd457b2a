/* One core's JPEG ceiling: the rate of a plain full-size turbojpeg decode
 * to RGB, against the rate of stoker's JPEG decoder (decode plus the
 * ResNet-50 transform to 224x224) on the same images. The loader benchmark
 * compares its pipeline against cores x the full-decode rate printed here.
 *
 *   jpeg_decode [-n images] [-r rounds] [-s seed] [-q quality] [-m mode,...]
 *               [FILE|DIR ...]
 *
 * With no paths it encodes ImageNet-sized synthetic images in memory;
 * directories are searched (class subfolders too) for .jpg files. Modes:
 * full_decode_rgb (the ceiling; always run), full_decode_yuv (planar, for
 * reference), and stoker's train_u8_chw, train_u8_hwc, train_f32_chw and
 * eval_u8_chw; -m picks some. The modes run interleaved, round after
 * round, and each reports its median round; rates are per second of this
 * thread's CPU time (so another process on the core does not lower them)
 * and per second of wall time. The last line of output is JSON. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>

#include "../src/gen/synth.h"
#include "../src/loader/decode.h"

#define MAX_IMAGES 4096
#define MAX_ROUNDS 64

struct image {
  uint8_t *data;
  size_t len;
  int w, h;
};

struct set {
  struct image img[MAX_IMAGES];
  int n;
  uint64_t bytes, pixels, wsum, hsum;
};

enum mode { M_FULL, M_YUV, M_TRAIN_U8, M_TRAIN_U8_HWC, M_TRAIN_F32, M_EVAL_U8, M_COUNT };
static const char *const mode_name[M_COUNT] = {"full_decode_rgb", "full_decode_yuv", "train_u8_chw",
                                               "train_u8_hwc",    "train_f32_chw",   "eval_u8_chw"};

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int add_file(struct set *s, const char *path) {
  if (s->n >= MAX_IMAGES) return 0;
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "jpeg_decode: cannot open %s\n", path), -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  struct image *im = &s->img[s->n];
  im->data = malloc(n > 0 ? (size_t)n : 1);
  im->len = n > 0 && fread(im->data, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
  fclose(f);
  if (!im->len) return free(im->data), fprintf(stderr, "jpeg_decode: cannot read %s\n", path), -1;
  s->n++;
  return 0;
}

static int ends_with_jpg(const char *name) {
  size_t n = strlen(name);
  return (n > 4 && strcasecmp(name + n - 4, ".jpg") == 0) ||
         (n > 5 && strcasecmp(name + n - 5, ".jpeg") == 0);
}

/* Add path, or the .jpg/.jpeg files under it (class subfolders too, in
 * name order so a run is repeatable), up to limit images. */
static int add_path(struct set *s, const char *path, int limit, int depth) {
  struct stat st;
  if (stat(path, &st) != 0) return fprintf(stderr, "jpeg_decode: no such path %s\n", path), -1;
  if (!S_ISDIR(st.st_mode)) return s->n < limit ? add_file(s, path) : 0;
  struct dirent **ents;
  int n = depth < 4 ? scandir(path, &ents, NULL, alphasort) : 0, rc = 0;
  for (int i = 0; i < n; i++) {
    char full[4096];
    const char *name = ents[i]->d_name;
    snprintf(full, sizeof full, "%s/%s", path, name);
    if (!rc && name[0] != '.' && s->n < limit &&
        (ends_with_jpg(name) || (stat(full, &st) == 0 && S_ISDIR(st.st_mode))))
      rc = add_path(s, full, limit, depth + 1);
    free(ents[i]);
  }
  if (n > 0) free(ents);
  return rc;
}

/* ImageNet-like sizes: mostly 500x375 / 500x333 landscape, a quarter
 * portrait, with some spread. */
static int synth_set(struct set *s, int n, uint64_t seed, int quality) {
  char err[STK_ERRMSG_MAX];
  for (int i = 0; i < n && i < MAX_IMAGES; i++) {
    struct stk_rng r;
    stk_rng_seed(&r, stk_mix64(seed, (uint64_t)i));
    int w = 400 + (int)stk_rng_below(&r, 101), h = 333 + (int)stk_rng_below(&r, 43);
    if (stk_rng_below(&r, 4) == 0) {
      int tmp = w;
      w = h, h = tmp;
    }
    struct image *im = &s->img[s->n];
    if (stk__jpeg_synth(&r, w, h, quality, &im->data, &im->len, err) != 0)
      return fprintf(stderr, "jpeg_decode: %s\n", err), -1;
    s->n++;
  }
  return 0;
}

static int read_headers(struct set *s) {
  tjhandle tj = tjInitDecompress();
  for (int i = 0; i < s->n; i++) {
    int ss, cs;
    struct image *im = &s->img[i];
    if (tjDecompressHeader3(tj, im->data, im->len, &im->w, &im->h, &ss, &cs) != 0) {
      fprintf(stderr, "jpeg_decode: image %d: %s\n", i, tjGetErrorStr2(tj));
      tjDestroy(tj);
      return -1;
    }
    s->bytes += im->len;
    s->pixels += (uint64_t)im->w * im->h;
    s->wsum += (uint64_t)im->w;
    s->hsum += (uint64_t)im->h;
  }
  tjDestroy(tj);
  return 0;
}

/* stoker's outputs rotate through BATCH_SLOTS slots, as the loader's go
 * to a batch buffer bigger than the caches; the full decode reuses one
 * buffer, the usual way to time a decoder alone. */
#define BATCH_SLOTS 64

struct runner {
  tjhandle tj;
  uint8_t *buf, *batch;
  size_t cap, slot;
  void *tls;
  struct stk_decode_cfg cfg[M_COUNT];
};

/* A plain full-size decode: packed RGB, or (yuv) planar YCbCr as it is
 * before upsampling and colour conversion, for reference. */
static int run_full(struct runner *r, const struct image *im, int yuv) {
  size_t need = (size_t)(im->w + 16) * (im->h + 16) * 3;
  if (need > r->cap) {
    free(r->buf);
    r->cap = need;
    if (!(r->buf = malloc(need))) return -1;
  }
  unsigned char *planes[3] = {r->buf, r->buf + need / 3, r->buf + 2 * need / 3};
  int rc = yuv ? tjDecompressToYUVPlanes(r->tj, im->data, im->len, planes, im->w, NULL, im->h, 0)
               : tjDecompress2(r->tj, im->data, im->len, r->buf, im->w, 0, im->h, TJPF_RGB, 0);
  if (rc != 0 && tjGetErrorCode(r->tj) != TJERR_WARNING) {
    fprintf(stderr, "jpeg_decode: %s\n", tjGetErrorStr2(r->tj));
    return -1;
  }
  return 0;
}

static int run_stoker(struct runner *r, enum mode m, const struct image *im, uint64_t sample) {
  char err[STK_ERRMSG_MAX];
  struct stk_field f = {.data = im->data, .len = im->len, .raw_len = im->len};
  struct stk_rng rng;
  stk_rng_seed(&rng, sample);
  uint64_t size, len;
  if (stk__dec_jpeg.out_size(&r->cfg[m], &f, &size, err) != 0) return -1;
  if (size > r->slot) {
    free(r->batch);
    r->slot = size;
    if (!(r->batch = aligned_alloc(4096, (size + 4095) / 4096 * 4096 * BATCH_SLOTS))) return -1;
  }
  uint8_t *out = r->batch + (sample % BATCH_SLOTS) * ((r->slot + 4095) / 4096 * 4096);
  if (stk__dec_jpeg.decode(&r->cfg[m], &r->tls, &f, out, size, &len, &rng, err) != 0) {
    fprintf(stderr, "jpeg_decode: %s\n", err);
    return -1;
  }
  return 0;
}

/* One pass of mode m over every image; returns -1 on a decode failure. */
static int pass(struct runner *r, const struct set *s, enum mode m, int round, uint64_t *cpu,
                uint64_t *wall) {
  uint64_t c0 = thread_cpu_ns(), w0 = stk_now_ns();
  for (int i = 0; i < s->n; i++) {
    int rc = m == M_FULL || m == M_YUV
                 ? run_full(r, &s->img[i], m == M_YUV)
                 : run_stoker(r, m, &s->img[i], (uint64_t)round * s->n + (uint64_t)i);
    if (rc) return -1;
  }
  *cpu = thread_cpu_ns() - c0;
  *wall = stk_now_ns() - w0;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double median_rate(uint64_t *ns, int rounds, int n) {
  qsort(ns, (size_t)rounds, sizeof *ns, cmp_u64);
  return (double)n * 1e9 / (double)ns[rounds / 2];
}

struct opts {
  int n, rounds, quality;
  uint64_t seed;
  const char *modes; /* comma-separated mode names, or NULL for all */
};

static void usage(void) {
  fprintf(stderr,
          "usage: jpeg_decode [-n images] [-r rounds] [-s seed] [-q quality] [-m mode,...] "
          "[FILE|DIR ...]\n");
  exit(2);
}

/* Options first; returns the index of the first path argument. */
static int parse_args(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.n = 64, .rounds = 15, .quality = 90, .seed = 1};
  int i;
  for (i = 1; i < argc && argv[i][0] == '-'; i++) {
    if (i + 1 >= argc) usage();
    if (!strcmp(argv[i], "-n"))
      o->n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-r"))
      o->rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-s"))
      o->seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-q"))
      o->quality = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-m"))
      o->modes = argv[++i];
    else
      usage();
  }
  if (o->n < 1 || o->n > MAX_IMAGES || o->rounds < 1 || o->rounds > MAX_ROUNDS) usage();
  return i;
}

/* The full decode always runs: every other rate is reported against it. */
static int wanted(const struct opts *o, enum mode m) {
  if (m == M_FULL || !o->modes) return 1;
  size_t n = strlen(mode_name[m]);
  for (const char *p = o->modes; (p = strstr(p, mode_name[m])); p += n)
    if ((p == o->modes || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

/* Interleaved rounds of every wanted mode after one warm-up pass each;
 * rates of modes not run are NaN (null in the JSON). */
static int measure(struct runner *r, const struct set *s, const struct opts *o,
                   double rate_cpu[M_COUNT], double rate_wall[M_COUNT]) {
  static uint64_t cpu[M_COUNT][MAX_ROUNDS], wall[M_COUNT][MAX_ROUNDS];
  for (int m = 0; m < M_COUNT; m++)
    if (wanted(o, (enum mode)m) && pass(r, s, (enum mode)m, 0, &cpu[m][0], &wall[m][0]) != 0)
      return -1;
  for (int k = 0; k < o->rounds; k++)
    for (int m = 0; m < M_COUNT; m++)
      if (wanted(o, (enum mode)m) && pass(r, s, (enum mode)m, k, &cpu[m][k], &wall[m][k]) != 0)
        return -1;
  for (int m = 0; m < M_COUNT; m++) {
    int on = wanted(o, (enum mode)m);
    rate_cpu[m] = on ? median_rate(cpu[m], o->rounds, s->n) : NAN;
    rate_wall[m] = on ? median_rate(wall[m], o->rounds, s->n) : NAN;
  }
  return 0;
}

static void report(const struct set *s, const struct opts *o, int synthetic,
                   const double rate_cpu[M_COUNT], const double rate_wall[M_COUNT]) {
  printf("jpeg_decode: %d %s images, mean %.0fx%.0f, %.2f bits/px, %d rounds, one core\n", s->n,
         synthetic ? "synthetic" : "file", (double)s->wsum / s->n, (double)s->hsum / s->n,
         8.0 * (double)s->bytes / (double)s->pixels, o->rounds);
  printf("  %-18s %12s %12s %10s\n", "mode", "img/s (cpu)", "img/s (wall)", "vs full");
  for (int m = 0; m < M_COUNT; m++)
    if (!isnan(rate_cpu[m]))
      printf("  %-18s %12.1f %12.1f %9.3fx\n", mode_name[m], rate_cpu[m], rate_wall[m],
             rate_cpu[m] / rate_cpu[M_FULL]);
  struct stk_json j;
  stk_json_init(&j, stdout, 0);
  stk_json_obj_begin(&j);
  stk_json_kstr(&j, "bench", "jpeg_decode");
  stk_json_kstr(&j, "images", synthetic ? "synthetic" : "files");
  stk_json_ku64(&j, "count", (uint64_t)s->n);
  stk_json_kdbl(&j, "mean_width", (double)s->wsum / s->n);
  stk_json_kdbl(&j, "mean_height", (double)s->hsum / s->n);
  stk_json_kdbl(&j, "bits_per_pixel", 8.0 * (double)s->bytes / (double)s->pixels);
  stk_json_ku64(&j, "rounds", (uint64_t)o->rounds);
  for (int m = 0; m < M_COUNT; m++) {
    stk_json_key(&j, mode_name[m]);
    stk_json_obj_begin(&j);
    stk_json_kdbl(&j, "per_core_img_s_cpu", rate_cpu[m]);
    stk_json_kdbl(&j, "per_core_img_s_wall", rate_wall[m]);
    stk_json_kdbl(&j, "vs_full", rate_cpu[m] / rate_cpu[M_FULL]);
    stk_json_obj_end(&j);
  }
  stk_json_obj_end(&j);
  printf("\n");
}

int main(int argc, char **argv) {
  static struct set s;
  struct opts o;
  int i = parse_args(argc, argv, &o), synthetic = i == argc;
  for (; i < argc; i++)
    if (add_path(&s, argv[i], o.n, 0) != 0) return 1;
  if (!synthetic && s.n == 0) return fprintf(stderr, "jpeg_decode: no .jpg files found\n"), 1;
  if (synthetic && synth_set(&s, o.n, o.seed, o.quality) != 0) return 1;
  if (s.n == 0 || read_headers(&s) != 0) return 1;

  struct runner r = {.tj = tjInitDecompress()};
  for (int m = 0; m < M_COUNT; m++)
    r.cfg[m] =
        (struct stk_decode_cfg){.kind = STK_DECODE_JPEG,
                                .train = m != M_EVAL_U8,
                                .dtype = m == M_TRAIN_F32 ? STK_DTYPE_F32 : STK_DTYPE_U8,
                                .layout = m == M_TRAIN_U8_HWC ? STK_LAYOUT_HWC : STK_LAYOUT_CHW};
  double rate_cpu[M_COUNT], rate_wall[M_COUNT];
  int rc = measure(&r, &s, &o, rate_cpu, rate_wall);
  if (rc == 0) report(&s, &o, synthetic, rate_cpu, rate_wall);
  stk__dec_jpeg.thread_free(r.tls);
  tjDestroy(r.tj);
  free(r.buf);
  free(r.batch);
  for (int k = 0; k < s.n; k++) free(s.img[k].data);
  return rc ? 1 : 0;
}
