/* The token-window options that `stoker feed` and `stoker inspect` share
 * (--seq-len, --samples, --split, --blend, --windows, ...), opening the
 * windows they describe, and the lines they add to a report. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_tokens.h"

void cli_tokens_init(struct cli_tokens *t) {
  memset(t, 0, sizeof *t);
  stk_tokens_opts_init(&t->o);
}

static int pick(const char *cmd, const char *opt, const char *v, const char *const *names,
                const char *list) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(v, names[i])) return i;
  cli_error(cmd, "%s: '%s' is not one of %s", opt, v, list);
  return -1;
}

int cli_tokens_option(const char *cmd, int c, const char *v, struct cli_tokens *t) {
  static const char *const windows[] = {"megatron", "document", "pack", NULL};
  static const char *const types[] = {"int32", "int64", NULL};
  uint64_t x;
  int k;
  switch (c) {
    case CLI_O_SEQ_LEN:
      if (cli_u64(cmd, "--seq-len", v, 1, 1u << 30, &x)) return -1;
      t->o.seq_len = (uint32_t)x;
      return 0;
    case CLI_O_SAMPLES:
      return cli_u64(cmd, "--samples", v, 1, UINT64_MAX >> 20, &t->o.samples);
    case CLI_O_SPLIT:
      t->o.split = v;
      return 0;
    case CLI_O_SPLIT_INDEX:
      if (cli_u64(cmd, "--split-index", v, 0, 2, &x)) return -1;
      t->o.split_index = (uint32_t)x;
      return 0;
    case CLI_O_BLEND:
      t->blend = v;
      return 0;
    case CLI_O_WINDOWS:
      if ((k = pick(cmd, "--windows", v, windows, "megatron, document, pack")) < 0) return -1;
      t->o.windows = k;
      return 0;
    case CLI_O_TOKENS:
      if ((k = pick(cmd, "--tokens", v, types, "int32, int64")) < 0) return -1;
      t->o.token_type = k;
      return 0;
    case CLI_O_INDEX_DIR:
      t->o.index_dir = v;
      return 0;
    default:
      return 1;
  }
}

int cli_tokens_wanted(const struct cli_tokens *t) {
  return t->o.seq_len || t->blend || t->o.samples || t->o.split;
}

/* "w1 path1 w2 path2 ...": weights and paths (strdup'ed, owned by t). */
static int parse_blend(const char *cmd, struct cli_tokens *t) {
  char *s = strdup(t->blend), *save = NULL;
  if (!s) return -1;
  t->blend_buf = s;
  for (char *w = strtok_r(s, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
    char *p = strtok_r(NULL, " \t\n", &save);
    double wt;
    if (!p) {
      cli_error(cmd,
                "--blend: '%s' has a weight without a dataset after it (give 'W1 PATH1 W2 "
                "PATH2 ...')",
                t->blend);
      return -1;
    }
    if (cli_double(cmd, "--blend", w, -1e300, 1e300, &wt)) return -1;
    if (t->n == CLI_TOKENS_MAX) {
      cli_error(cmd, "--blend: more than %d datasets", CLI_TOKENS_MAX);
      return -1;
    }
    t->weights[t->n] = wt;
    t->paths[t->n++] = p;
  }
  if (t->n == 0) {
    cli_error(cmd, "--blend: no datasets in '%s' (give 'W1 PATH1 W2 PATH2 ...')", t->blend);
    return -1;
  }
  return 0;
}

int cli_tokens_open(const char *cmd, const char *path, struct cli_tokens *t,
                    const struct stk_dataset_opts *dopts, struct stk_tokens **out) {
  if (!t->o.seq_len) {
    cli_error(cmd, "token windows need --seq-len N");
    return CLI_USAGE;
  }
  t->o.dataset = dopts;
  if (t->blend) {
    if (path) {
      cli_error(cmd, "give the datasets either as DATASET or in --blend, not both");
      return CLI_USAGE;
    }
    if (parse_blend(cmd, t)) return CLI_USAGE;
  } else if (!path) {
    cli_error(cmd, "token windows need a Megatron dataset (PREFIX for PREFIX.bin + PREFIX.idx)");
    return CLI_USAGE;
  } else {
    t->paths[0] = path;
    t->weights[0] = 1;
    t->n = 1;
  }
  char err[STK_ERRMSG_MAX];
  int rc = stk_tokens_open(out, t->n, t->paths, t->weights, &t->o, err);
  if (rc) {
    cli_error(cmd, "%s", err);
    return rc == STK_EINVAL ? CLI_USAGE : CLI_FAIL;
  }
  return 0;
}

void cli_tokens_free(struct cli_tokens *t) { free(t->blend_buf); }

static const char *windows_name(int w) {
  return w == STK_WINDOWS_DOCUMENT ? "document" : w == STK_WINDOWS_PACK ? "pack" : "megatron";
}

void cli_tokens_describe(FILE *f, const struct stk_tokens *tk, const struct cli_tokens *t) {
  fprintf(f, "  windows        %" PRIu64 " of %u tokens (seq_len %u, %s windows, %s)\n",
          stk_tokens_num_windows(tk), stk_tokens_row_len(tk), t->o.seq_len,
          windows_name(t->o.windows), t->o.token_type == STK_TOKENS_INT64 ? "int64" : "int32");
  for (int i = 0; i < stk_tokens_num_sources(tk); i++) {
    struct stk_tokens_source s;
    if (stk_tokens_source(tk, i, &s)) break;
    fprintf(f,
            "  source         %s: weight %.4f, %" PRIu64 " documents, %" PRIu64 " tokens, %" PRIu64
            " windows in the order, %" PRIu64 " served; index %s%s\n",
            s.path, s.weight, s.documents, s.tokens, s.blend_windows, s.served,
            s.built ? "built" : "mapped", s.index_path ? "" : " in memory");
  }
  int built;
  const char *path;
  if (stk_tokens_blend_index(tk, &built, &path) == 0)
    fprintf(f, "  blend index    %s%s\n", built ? "built" : "mapped", path ? "" : " in memory");
}

void cli_tokens_rate(FILE *f, const struct stk_tokens *tk, const struct stk_loader_stats *st) {
  double wall = (double)st->wall_ns / 1e9;
  double tok = (double)st->samples * (double)stk_tokens_row_len(tk);
  fprintf(f, "  tokens         %.0f tokens/s (%.0f windows/s of %u)\n", wall > 0 ? tok / wall : 0,
          wall > 0 ? (double)st->samples / wall : 0, stk_tokens_row_len(tk));
}

/* The "sources" array (with what the loader served when served is set)
 * and, for a blend, whether its index was built or mapped. */
static void sources_json(struct stk_json *j, const struct stk_tokens *tk, int served) {
  stk_json_key(j, "sources");
  stk_json_arr_begin(j);
  for (int i = 0; i < stk_tokens_num_sources(tk); i++) {
    struct stk_tokens_source s;
    if (stk_tokens_source(tk, i, &s)) break;
    stk_json_obj_begin(j);
    stk_json_kstr(j, "path", s.path);
    stk_json_kdbl(j, "weight", s.weight);
    stk_json_ku64(j, "documents", s.documents);
    stk_json_ku64(j, "tokens", s.tokens);
    if (!served) stk_json_ku64(j, "windows", s.windows);
    stk_json_ku64(j, "blend_windows", s.blend_windows);
    if (served) stk_json_ku64(j, "served", s.served);
    stk_json_key(j, "index_built");
    stk_json_bool(j, s.built);
    stk_json_obj_end(j);
  }
  stk_json_arr_end(j);
  int built;
  if (stk_tokens_blend_index(tk, &built, NULL) == 0) {
    stk_json_key(j, "blend_index_built");
    stk_json_bool(j, built);
  }
}

void cli_tokens_json(struct stk_json *j, const struct stk_tokens *tk,
                     const struct stk_loader_stats *st) {
  double wall = (double)st->wall_ns / 1e9;
  stk_json_ku64(j, "windows", stk_tokens_num_windows(tk));
  stk_json_ku64(j, "row_tokens", stk_tokens_row_len(tk));
  stk_json_kdbl(j, "tokens_per_s",
                wall > 0 ? (double)st->samples * stk_tokens_row_len(tk) / wall : 0);
  sources_json(j, tk, 1);
}

void cli_tokens_json_describe(struct stk_json *j, const struct stk_tokens *tk,
                              const struct cli_tokens *t) {
  uint64_t docs = 0, toks = 0;
  for (int i = 0; i < stk_tokens_num_sources(tk); i++) {
    struct stk_tokens_source s;
    if (stk_tokens_source(tk, i, &s)) break;
    docs += s.documents;
    toks += s.tokens;
  }
  stk_json_obj_begin(j);
  stk_json_ku64(j, "seq_len", t->o.seq_len);
  stk_json_kstr(j, "mode", windows_name(t->o.windows));
  stk_json_kstr(j, "token_type", t->o.token_type == STK_TOKENS_INT64 ? "int64" : "int32");
  stk_json_ku64(j, "windows", stk_tokens_num_windows(tk));
  stk_json_ku64(j, "row_tokens", stk_tokens_row_len(tk));
  stk_json_ku64(j, "documents", docs);
  stk_json_ku64(j, "tokens", toks);
  sources_json(j, tk, 0);
  stk_json_obj_end(j);
}
