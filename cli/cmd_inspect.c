/* stoker inspect: what a dataset is (format, shards, samples, sizes) and
 * what its first sample holds, as text or JSON. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_tokens.h"

const char cmd_inspect_usage[] =
    "usage: stoker inspect PATH [OPTIONS]\n"
    "       stoker inspect --blend 'W1 P1 W2 P2 ...' --seq-len N --samples N [--json]\n"
    "\n"
    "Describe the dataset at PATH (a directory of shards, one shard, an MDS\n"
    "directory, a Megatron prefix such as data/corpus for corpus.bin + corpus.idx,\n"
    "a brace pattern such as 'train/shard-{000000..001023}.tar', or a\n"
    "shard-list file: *.txt, *.list, one path or URL per line): format, shards,\n"
    "samples, total bytes, sample sizes, what the format records of the whole\n"
    "dataset (Megatron: dtype, tokens, sequences, documents; npy token files:\n"
    "dtype, tokens, documents), and the fields of the first sample, with dtype\n"
    "and shape where the format records them. A folder holding shards of several\n"
    "formats needs --format, and so does a folder of npy token files (one 1-D\n"
    "integer array per document), which is otherwise read as npy.\n"
    "\n"
    "  --format F     tfrecord, wds, npy, npz, mds, megatron, npy-tokens, files\n"
    "                 (default: detect; npy-tokens only when named)\n"
    "  --json         print JSON on stdout\n"
    "  -v, --verbose  list every shard\n"
    "  --seq-len N    a Megatron dataset: also its token windows of N + 1 tokens\n"
    "                 (with --samples, --split, --split-index, --windows, --blend as\n"
    "                 for `stoker feed`; the index is built in memory, no file\n"
    "                 written): windows, documents, tokens, and each source's\n"
    "                 counts (with --json, under \"token_windows\")\n"
    "PATH may be a URL (http(s)://, s3://, file://), read through the shard cache:\n"
    CLI_CACHE_USAGE;

enum { O_FORMAT = 256, O_JSON };

static const struct option options[] = {{"format", 1, 0, O_FORMAT},
                                        {"json", 0, 0, O_JSON},
                                        {"verbose", 0, 0, 'v'},
                                        CLI_TOKENS_OPTIONS,
                                        CLI_CACHE_OPTIONS,
                                        {0, 0, 0, 0}};

struct summary {
  uint64_t bytes, min, max;
  struct stk_sample first;
  uint8_t *buf;
  size_t cap;
};

static const char *enc_name(int e) {
  return e == STK_ENC_DEFLATE ? "deflate" : e == STK_ENC_STRIDED ? "strided" : "none";
}

static int summarize(struct stk_dataset *ds, struct summary *s) {
  uint64_t n = stk_dataset_num_samples(ds);
  s->min = UINT64_MAX;
  for (uint64_t i = 0; i < n && !cli_stop_requested(); i++) {
    uint64_t b;
    if (stk_dataset_sample_bytes(ds, i, &b)) return -1;
    s->bytes += b;
    if (b < s->min) s->min = b;
    if (b > s->max) s->max = b;
  }
  if (cli_stop_requested()) return -1;
  return stk_dataset_read(ds, 0, 0, &s->buf, &s->cap, &s->first) ? -1 : 0;
}

static void caps_text(unsigned caps, char *out, size_t n) {
  snprintf(out, n, "%s%s%s", caps & STK_FMT_RANDOM_ACCESS ? "random access" : "sequential",
           caps & STK_FMT_CHECKSUM ? ", checksums" : "", caps & STK_FMT_WRITE ? ", writable" : "");
}

static void print_text(struct stk_dataset *ds, const char *path, const struct summary *s,
                       int verbose) {
  char b1[32], b2[32], b3[32], b4[32], caps[64];
  uint64_t n = stk_dataset_num_samples(ds);
  caps_text(stk_dataset_caps(ds), caps, sizeof caps);
  printf("path:     %s\nformat:   %s (%s)\nshards:   %zu\nsamples:  %llu\nbytes:    %s\n", path,
         stk_dataset_format(ds), caps, stk_dataset_num_shards(ds), (unsigned long long)n,
         stk_fmt_bytes(s->bytes, b1, sizeof b1));
  printf("sample:   min %s, mean %s, max %s\n", stk_fmt_bytes(s->min, b2, sizeof b2),
         stk_fmt_bytes(s->bytes / n, b3, sizeof b3), stk_fmt_bytes(s->max, b4, sizeof b4));
  char v[64], k[40];
  const char *name;
  for (int i = 0; stk_dataset_property(ds, i, &name, v, sizeof v) == 0; i++) {
    snprintf(k, sizeof k, "%s:", name);
    printf("%-9s %s\n", k, v);
  }
  const struct stk_sample *f = &s->first;
  printf("first:    key '%s', label %d, %d field%s\n", f->key, (int)f->label, f->nfields,
         f->nfields == 1 ? "" : "s");
  for (int i = 0; i < f->nfields; i++) {
    printf("  %-16s %s", f->fields[i].name, stk_fmt_bytes(f->fields[i].len, b1, sizeof b1));
    if (f->fields[i].encoding != STK_ENC_NONE)
      printf(" (%s, %s raw)", enc_name(f->fields[i].encoding),
             stk_fmt_bytes(f->fields[i].raw_len, b2, sizeof b2));
    if (f->fields[i].type) {
      printf("  %s[", stk_elem_type_name(f->fields[i].type));
      for (int d = 0; d < f->fields[i].ndim; d++)
        printf("%s%llu", d ? "," : "", (unsigned long long)f->fields[i].shape[d]);
      printf("]");
    }
    printf("\n");
  }
  for (size_t i = 0; verbose && i < stk_dataset_num_shards(ds); i++) {
    struct stk_shard_info si;
    stk_dataset_shard_info(ds, i, &si);
    printf("shard %zu: %s  first %llu  samples %llu  bytes %llu\n", i, si.path,
           (unsigned long long)si.first, (unsigned long long)si.count,
           (unsigned long long)si.bytes);
  }
}

/* With tk (--seq-len), the windows go under "token_windows". */
static void print_json(struct stk_dataset *ds, const char *path, const struct summary *s,
                       int verbose, const struct stk_tokens *tk, const struct cli_tokens *t) {
  struct stk_json j;
  unsigned caps = stk_dataset_caps(ds);
  uint64_t n = stk_dataset_num_samples(ds);
  stk_json_init(&j, stdout, 2);
  stk_json_obj_begin(&j);
  stk_json_kstr(&j, "path", path);
  stk_json_kstr(&j, "format", stk_dataset_format(ds));
  stk_json_key(&j, "random_access");
  stk_json_bool(&j, !!(caps & STK_FMT_RANDOM_ACCESS));
  stk_json_key(&j, "checksums");
  stk_json_bool(&j, !!(caps & STK_FMT_CHECKSUM));
  stk_json_ku64(&j, "shards", stk_dataset_num_shards(ds));
  stk_json_ku64(&j, "samples", n);
  stk_json_ku64(&j, "bytes", s->bytes);
  stk_json_key(&j, "sample_bytes");
  stk_json_obj_begin(&j);
  stk_json_ku64(&j, "min", s->min);
  stk_json_kdbl(&j, "mean", (double)s->bytes / (double)n);
  stk_json_ku64(&j, "max", s->max);
  stk_json_obj_end(&j);
  char v[64];
  const char *name;
  if (stk_dataset_property(ds, 0, &name, v, sizeof v) == 0) {
    stk_json_key(&j, "properties");
    stk_json_obj_begin(&j);
    for (int i = 0; stk_dataset_property(ds, i, &name, v, sizeof v) == 0; i++) {
      if (v[0] && strspn(v, "0123456789") == strlen(v)) stk_json_ku64(&j, name, strtoull(v, NULL, 10));
      else stk_json_kstr(&j, name, v);
    }
    stk_json_obj_end(&j);
  }
  stk_json_key(&j, "first_sample");
  stk_json_obj_begin(&j);
  stk_json_kstr(&j, "key", s->first.key);
  stk_json_key(&j, "label");
  stk_json_i64(&j, s->first.label);
  stk_json_key(&j, "fields");
  stk_json_arr_begin(&j);
  for (int i = 0; i < s->first.nfields; i++) {
    const struct stk_field *f = &s->first.fields[i];
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "name", f->name);
    stk_json_ku64(&j, "bytes", f->len);
    stk_json_ku64(&j, "raw_bytes", f->raw_len);
    stk_json_kstr(&j, "encoding", enc_name(f->encoding));
    if (f->type) {
      stk_json_kstr(&j, "dtype", stk_elem_type_name(f->type));
      stk_json_key(&j, "shape");
      stk_json_arr_begin(&j);
      for (int k = 0; k < f->ndim; k++) stk_json_u64(&j, f->shape[k]);
      stk_json_arr_end(&j);
    }
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_obj_end(&j);
  if (verbose) {
    stk_json_key(&j, "shard_list");
    stk_json_arr_begin(&j);
    for (size_t i = 0; i < stk_dataset_num_shards(ds); i++) {
      struct stk_shard_info si;
      stk_dataset_shard_info(ds, i, &si);
      stk_json_obj_begin(&j);
      stk_json_kstr(&j, "path", si.path);
      stk_json_ku64(&j, "first", si.first);
      stk_json_ku64(&j, "samples", si.count);
      stk_json_ku64(&j, "bytes", si.bytes);
      stk_json_obj_end(&j);
    }
    stk_json_arr_end(&j);
  }
  if (tk) {
    stk_json_key(&j, "token_windows");
    cli_tokens_json_describe(&j, tk, t);
  }
  stk_json_obj_end(&j);
  fputc('\n', stdout);
}

/* inspect --blend '...' --seq-len N (no PATH): the blend's windows only. */
static int blend_only(struct cli_tokens *tk, const struct stk_dataset_opts *o, int json) {
  struct stk_tokens *t;
  int rc = cli_tokens_open("inspect", NULL, tk, o, &t);
  if (!rc) {
    if (json) {
      struct stk_json j;
      stk_json_init(&j, stdout, 2);
      stk_json_obj_begin(&j);
      stk_json_key(&j, "token_windows");
      cli_tokens_json_describe(&j, t, tk);
      stk_json_obj_end(&j);
      fputc('\n', stdout);
    } else {
      cli_tokens_describe(stdout, t, tk);
    }
    stk_tokens_close(t);
  }
  cli_tokens_free(tk);
  return rc;
}

int cmd_inspect_run(int argc, char **argv) {
  struct stk_cache_opts co = {0};
  struct stk_dataset_opts o = {.cache = &co};
  int json = 0, verbose = 0, c;
  struct cli_tokens tk;
  cli_tokens_init(&tk);
  tk.o.no_index_file = 1;
  optind = 1;
  while ((c = getopt_long(argc, argv, "v", options, NULL)) != -1) {
    int k = cli_cache_option("inspect", c, optarg, &co);
    if (k < 0) return CLI_USAGE;
    if (k == 0) continue;
    if ((k = cli_tokens_option("inspect", c, optarg, &tk)) < 0) return CLI_USAGE;
    if (k == 0) continue;
    if (c == O_FORMAT) o.format = optarg;
    else if (c == O_JSON) json = 1;
    else if (c == 'v') verbose = 1;
    else return CLI_USAGE;
  }
  if (optind == argc && tk.blend) return blend_only(&tk, &o, json);
  if (optind != argc - 1) {
    cli_error("inspect", optind >= argc ? "missing PATH; see `stoker help inspect`" : "one PATH only");
    return CLI_USAGE;
  }
  const char *path = argv[optind];
  cli_catch_signals();
  struct stk_tokens *t = NULL; /* the windows (--seq-len), opened first for --json */
  int rc = 0;
  if (json && cli_tokens_wanted(&tk) && (rc = cli_tokens_open("inspect", path, &tk, &o, &t))) {
    cli_tokens_free(&tk);
    return rc;
  }
  struct stk_dataset *ds;
  if ((rc = cli_open_whole("inspect", path, &o, &ds)) != 0) {
    stk_tokens_close(t);
    cli_tokens_free(&tk);
    return rc;
  }
  struct summary s;
  memset(&s, 0, sizeof s);
  rc = summarize(ds, &s);
  if (rc) {
    if (cli_stop_requested()) cli_error("inspect", "interrupted");
    else cli_error("inspect", "%s", stk_dataset_errmsg(ds));
  } else if (json) {
    print_json(ds, stk_dataset_location(ds), &s, verbose, t, &tk);
  } else {
    print_text(ds, stk_dataset_location(ds), &s, verbose);
  }
  free(s.buf);
  stk_dataset_close(ds);
  if (!rc && !json && cli_tokens_wanted(&tk)) { /* the windows, after what the files hold */
    rc = cli_tokens_open("inspect", path, &tk, &o, &t);
    if (!rc) cli_tokens_describe(stdout, t, &tk);
    stk_tokens_close(t);
    cli_tokens_free(&tk);
    return rc;
  }
  stk_tokens_close(t);
  cli_tokens_free(&tk);
  return rc ? (cli_stop_requested() ? CLI_INTERRUPTED : CLI_FAIL) : CLI_OK;
}
