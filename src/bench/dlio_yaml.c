/* DLIO workload configs, read with libyaml: every YAML form a user writes
 * (block or flow mappings and lists, anchors and aliases, merge keys,
 * quoted and multi-line scalars) reaches the same flattened
 * "section.key" paths. Known paths map onto struct stk_workload; paths
 * stoker knows but does not emulate are listed as ignored, anything else
 * as unknown, so that no setting is dropped silently. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "../base/base.h"
#include "bench_impl.h"
#include "stoker/bench.h"

enum kind { K_STR, K_U64, K_U32, K_DBL, K_BOOL, K_NOTBOOL, K_DTYPE, K_IGNORED };

struct key {
  const char *path; /* "section.key" */
  enum kind kind;
  size_t off, size;
};

#define W(field) offsetof(struct stk_workload, field), sizeof(((struct stk_workload *)0)->field)
static const struct key keys[] = {
    {"model.name", K_STR, W(name)},
    {"model", K_STR, W(name)}, /* older configs: `model: unet3d` */
    {"dataset.format", K_STR, W(format)},
    {"dataset.data_folder", K_STR, W(data_folder)},
    {"dataset.num_files_train", K_U64, W(files)},
    {"dataset.num_samples_per_file", K_U64, W(samples_per_file)},
    {"dataset.record_length_bytes", K_DBL, W(record_bytes)},
    {"dataset.record_length", K_DBL, W(record_bytes)},
    {"dataset.record_length_bytes_stdev", K_DBL, W(record_stdev)},
    {"dataset.record_length_stdev", K_DBL, W(record_stdev)},
    {"reader.batch_size", K_U32, W(batch)},
    {"reader.read_threads", K_U32, W(read_threads)},
    {"train.epochs", K_U32, W(epochs)},
    {"train.computation_time", K_DBL, W(compute_s)},
    {"train.computation_time.mean", K_DBL, W(compute_s)}, /* DLIO's dict form */
    {"train.computation_time.stdev", K_DBL, W(compute_stdev)},
    {"train.computation_time_stdev", K_DBL, W(compute_stdev)},
    {"metric.au", K_DBL, W(au_min)},
    /* The checkpoint section and the model shape DLIO sizes checkpoints
     * from. model.model_size is the shipped configs' spelling; DLIO itself
     * reads model_size_bytes (docs/bench.md: stoker reads both). */
    {"workflow.checkpoint", K_BOOL, W(ckpt.enabled)},
    {"workflow.train", K_NOTBOOL, W(ckpt.no_train)},
    {"checkpoint.checkpoint_folder", K_STR, W(ckpt.folder)},
    {"checkpoint.checkpoint_after_epoch", K_U32, W(ckpt.after_epoch)},
    {"checkpoint.epochs_between_checkpoints", K_U32, W(ckpt.epochs_between)},
    {"checkpoint.steps_between_checkpoints", K_U64, W(ckpt.steps_between)},
    {"checkpoint.time_between_checkpoints", K_DBL, W(ckpt.time_between_s)},
    {"checkpoint.num_checkpoints_write", K_U32, W(ckpt.num_write)},
    {"checkpoint.num_checkpoints_read", K_U32, W(ckpt.num_read)},
    {"checkpoint.fsync", K_BOOL, W(ckpt.fsync)},
    {"checkpoint.model_size", K_U64, W(ckpt.model_size)}, /* older configs */
    {"model.model_size", K_U64, W(ckpt.model_size)},
    {"model.model_size_bytes", K_U64, W(ckpt.model_size)},
    {"model.type", K_STR, W(ckpt.model_type)},
    {"model.num_layers", K_U32, W(ckpt.num_layers)},
    {"model.model_datatype", K_DTYPE, W(ckpt.model_dtype)},
    {"model.optimizer_datatype", K_DTYPE, W(ckpt.optimizer_dtype)},
    {"model.parallelism.tensor", K_U32, W(ckpt.tp)},
    {"model.parallelism.pipeline", K_U32, W(ckpt.pp)},
    {"model.parallelism.data", K_U32, W(ckpt.dp)},
    {"model.parallelism.zero_stage", K_U32, W(ckpt.zero_stage)},
    {"model.transformer.vocab_size", K_U64, W(ckpt.vocab)},
    {"model.transformer.hidden_size", K_U64, W(ckpt.hidden)},
    {"model.transformer.ffn_hidden_size", K_U64, W(ckpt.ffn)},
    {"model.transformer.num_attention_heads", K_U32, W(ckpt.heads)},
    {"model.transformer.num_kv_heads", K_U32, W(ckpt.kv_heads)},
    /* Understood, not emulated: stoker resizes no records, and reads with
     * its own loader whatever the framework. */
    {"framework", K_IGNORED, 0, 0},
    {"workflow.generate_data", K_IGNORED, 0, 0},
    {"workflow.evaluation", K_IGNORED, 0, 0},
    {"workflow.profiling", K_IGNORED, 0, 0},
    {"dataset.record_length_bytes_resize", K_IGNORED, 0, 0},
    {"dataset.record_length_resize", K_IGNORED, 0, 0},
    {"dataset.num_files_eval", K_IGNORED, 0, 0},
    {"dataset.num_subfolders_train", K_IGNORED, 0, 0},
    {"reader.data_loader", K_IGNORED, 0, 0},
    {"reader.computation_threads", K_IGNORED, 0, 0},
    {"reader.file_shuffle", K_IGNORED, 0, 0},
    {"reader.sample_shuffle", K_IGNORED, 0, 0},
    {"reader.shuffle_size", K_IGNORED, 0, 0},
    {"reader.prefetch_size", K_IGNORED, 0, 0},
    {"reader.dont_use_mmap", K_IGNORED, 0, 0},
    {"reader.transfer_size", K_IGNORED, 0, 0},
    {"reader.read_type", K_IGNORED, 0, 0},
    {"checkpoint.randomize_tensor", K_IGNORED, 0, 0},
    {"checkpoint.rank_sync", K_IGNORED, 0, 0},
};

static const char *const sections[] = {"model", "framework", "workflow", "dataset", "reader",
                                       "train", "checkpoint", "metric", "evaluation", "output",
                                       "profiling", NULL};

/* Aliases can make a small document a huge tree ("billion laughs"): the
 * walk stops at this many nodes and this depth. */
#define MAX_NODES 100000
#define MAX_DEPTH 8
#define MAX_FILE (4u << 20)

struct walk {
  yaml_document_t *doc;
  struct stk_workload *w;
  const char *name;
  char *unknown, *ignored;
  size_t unknown_cap, ignored_cap;
  char *err;
  unsigned nodes;
  int any;
};

static void append(char *list, size_t cap, const char *path, int line) {
  if (!list || !cap) return;
  size_t n = strlen(list);
  snprintf(list + n, cap - n, "%s (line %d)\n", path, line);
}

static int parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"true", "yes", "on", "1", "y"};
  static const char *const no[] = {"false", "no", "off", "0", "n"};
  for (size_t i = 0; i < STK__ARRAY_LEN(yes); i++) {
    if (!strcasecmp(s, yes[i])) return *out = 1, 0;
    if (!strcasecmp(s, no[i])) return *out = 0, 0;
  }
  return -1;
}

static int set_value(struct walk *wk, const struct key *k, const char *val, int line) {
  char *dst = (char *)wk->w + k->off;
  const char *path = wk->name;
  double d;
  uint64_t u;
  int b;
  switch (k->kind) {
    case K_DTYPE:
      if (stk__ckpt_dtype_size(val) == 0)
        return stk__errf(wk->err, STK_EFORMAT,
                         "%s:%d: %s: '%s' is not one of int8, uint8, fp16, bf16, fp32, fp64", path,
                         line, k->path, val);
      /* fall through */
    case K_STR:
      if (strlen(val) >= k->size)
        return stk__errf(wk->err, STK_ERANGE, "%s:%d: %s: value is too long", path, line, k->path);
      memcpy(dst, val, strlen(val) + 1);
      return 0;
    case K_U64:
    case K_U32:
      if (stk_parse_u64(val, &u) != 0 || (k->kind == K_U32 && u > UINT32_MAX))
        return stk__errf(wk->err, STK_EFORMAT, "%s:%d: %s: '%s' is not a whole number", path,
                         line, k->path, val);
      if (k->kind == K_U64)
        memcpy(dst, &u, sizeof u);
      else {
        uint32_t v = (uint32_t)u;
        memcpy(dst, &v, sizeof v);
      }
      return 0;
    case K_DBL:
      if (stk_parse_double(val, &d) != 0 || d < 0)
        return stk__errf(wk->err, STK_EFORMAT, "%s:%d: %s: '%s' is not a number of 0 or more",
                         path, line, k->path, val);
      memcpy(dst, &d, sizeof d);
      return 0;
    case K_BOOL:
    case K_NOTBOOL:
      if (parse_bool(val, &b))
        return stk__errf(wk->err, STK_EFORMAT, "%s:%d: %s: '%s' is not True or False", path, line,
                         k->path, val);
      if (k->kind == K_NOTBOOL) b = !b;
      memcpy(dst, &b, sizeof b);
      return 0;
    default:
      return 0;
  }
}

static const struct key *find_key(const char *path) {
  for (size_t i = 0; i < STK__ARRAY_LEN(keys); i++)
    if (strcmp(keys[i].path, path) == 0) return &keys[i];
  return NULL;
}

/* Whether some known key lies under path ("model.parallelism"). */
static int known_prefix(const char *path) {
  size_t n = strlen(path);
  for (size_t i = 0; i < STK__ARRAY_LEN(keys); i++)
    if (strncmp(keys[i].path, path, n) == 0 && keys[i].path[n] == '.') return 1;
  for (int i = 0; sections[i]; i++)
    if (strcmp(sections[i], path) == 0) return 1;
  return 0;
}

static int is_null(const yaml_node_t *v) {
  if (v->type != YAML_SCALAR_NODE || v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *s = (const char *)v->data.scalar.value;
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int walk_map(struct walk *wk, yaml_node_t *map, const char *prefix, int depth);

/* One `key: value` under prefix. */
static int walk_pair(struct walk *wk, yaml_node_t *kn, yaml_node_t *v, const char *prefix,
                     int depth) {
  int line = (int)kn->start_mark.line + 1;
  if (kn->type != YAML_SCALAR_NODE)
    return stk__errf(wk->err, STK_EFORMAT, "%s:%d: a key must be a plain name, not a %s", wk->name,
                     line, kn->type == YAML_MAPPING_NODE ? "mapping" : "list");
  const char *key = (const char *)kn->data.scalar.value;
  if (!strcmp(key, "<<") && kn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
    /* A merge key: the aliased mapping's pairs, as if written here. */
    if (v->type == YAML_MAPPING_NODE) return walk_map(wk, v, prefix, depth + 1);
    if (v->type == YAML_SEQUENCE_NODE) {
      for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *m = yaml_document_get_node(wk->doc, *it);
        if (!m || m->type != YAML_MAPPING_NODE)
          return stk__errf(wk->err, STK_EFORMAT, "%s:%d: '<<' merges mappings only", wk->name, line);
        int rc = walk_map(wk, m, prefix, depth + 1);
        if (rc) return rc;
      }
      return 0;
    }
    return stk__errf(wk->err, STK_EFORMAT, "%s:%d: '<<' merges mappings only", wk->name, line);
  }
  char full[256];
  if (!*key || strlen(prefix) + strlen(key) + 2 > sizeof full)
    return stk__errf(wk->err, STK_EFORMAT, "%s:%d: '%.64s' is not a key", wk->name, line, key);
  size_t np = strlen(prefix);
  memcpy(full, prefix, np);
  if (np) full[np++] = '.';
  memcpy(full + np, key, strlen(key) + 1);
  wk->any = 1;
  const struct key *k = find_key(full);
  if (v->type == YAML_MAPPING_NODE) {
    if (k && k->kind != K_IGNORED && !known_prefix(full))
      return stk__errf(wk->err, STK_EFORMAT, "%s:%d: %s: expected one value, got a mapping",
                       wk->name, line, full);
    if (!known_prefix(full)) {
      append(k ? wk->ignored : wk->unknown, k ? wk->ignored_cap : wk->unknown_cap, full, line);
      return 0;
    }
    return walk_map(wk, v, full, depth + 1);
  }
  if (!k) {
    if (known_prefix(full)) {
      if (is_null(v)) return 0; /* a known section with nothing under it: no setting */
      return stk__errf(wk->err, STK_EFORMAT, "%s:%d: %s: expected 'key: value' pairs under it, "
                       "got a %s", wk->name, line, full,
                       v->type == YAML_SEQUENCE_NODE ? "list" : "single value");
    }
    append(wk->unknown, wk->unknown_cap, full, line);
    return 0;
  }
  if (k->kind == K_IGNORED) {
    append(wk->ignored, wk->ignored_cap, full, line);
    return 0;
  }
  if (v->type == YAML_SEQUENCE_NODE)
    return stk__errf(wk->err, STK_EFORMAT, "%s:%d: %s: expected one value, got a list", wk->name,
                     line, full);
  if (is_null(v))
    return stk__errf(wk->err, STK_EFORMAT, "%s:%d: %s: no value given", wk->name, line, full);
  return set_value(wk, k, (const char *)v->data.scalar.value, line);
}

static int walk_map(struct walk *wk, yaml_node_t *map, const char *prefix, int depth) {
  if (depth > MAX_DEPTH)
    return stk__errf(wk->err, STK_EFORMAT, "%s:%d: mappings nested more than %d deep", wk->name,
                     (int)map->start_mark.line + 1, MAX_DEPTH);
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    if (++wk->nodes > MAX_NODES)
      return stk__errf(wk->err, STK_EFORMAT, "%s: more than %d settings (aliases expanding?)",
                       wk->name, MAX_NODES);
    yaml_node_t *kn = yaml_document_get_node(wk->doc, p->key);
    yaml_node_t *v = yaml_document_get_node(wk->doc, p->value);
    if (!kn || !v) return stk__errf(wk->err, STK_EFORMAT, "%s: malformed mapping", wk->name);
    int rc = walk_pair(wk, kn, v, prefix, depth);
    if (rc) return rc;
  }
  return 0;
}

int stk__workload_parse_yaml(const char *buf, size_t len, const char *name, struct stk_workload *w,
                             char *unknown, size_t unknown_cap, char *ignored, size_t ignored_cap,
                             char *err) {
  if (unknown && unknown_cap) unknown[0] = 0;
  if (ignored && ignored_cap) ignored[0] = 0;
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return stk__errf(err, STK_ENOMEM, "%s: out of memory", name);
  yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
  if (!yaml_parser_load(&parser, &doc)) {
    int rc = stk__errf(err, parser.error == YAML_MEMORY_ERROR ? STK_ENOMEM : STK_EFORMAT,
                       "%s:%d: not valid YAML: %s%s%s", name, (int)parser.problem_mark.line + 1,
                       parser.problem ? parser.problem : "parse error",
                       parser.context ? " " : "", parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    return rc;
  }
  yaml_parser_delete(&parser);
  struct walk wk = {&doc, w, name, unknown, ignored, unknown_cap, ignored_cap, err, 0, 0};
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  int rc = 0;
  if (root && root->type != YAML_MAPPING_NODE && !is_null(root))
    rc = stk__errf(err, STK_EFORMAT, "%s:%d: expected sections of 'key: value', got a %s", name,
                   (int)root->start_mark.line + 1,
                   root->type == YAML_SEQUENCE_NODE ? "list" : "single value");
  else if (root && root->type == YAML_MAPPING_NODE)
    rc = walk_map(&wk, root, "", 0);
  yaml_document_delete(&doc);
  if (!rc && !wk.any) rc = stk__errf(err, STK_EFORMAT, "%s: no settings in the file", name);
  if (!rc && w->au_min > 1.0) w->au_min /= 100.0; /* some configs give AU in percent */
  return rc;
}

int stk_workload_load_yaml(const char *path, struct stk_workload *w, char *unknown,
                           size_t unknown_cap, char *ignored, size_t ignored_cap, char *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return stk__errf(err, stk__from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
  char *buf = malloc(MAX_FILE + 1);
  if (!buf) {
    fclose(f);
    return stk__errf(err, STK_ENOMEM, "%s: out of memory", path);
  }
  size_t n = fread(buf, 1, MAX_FILE + 1, f);
  int rc = 0;
  if (ferror(f))
    rc = stk__errf(err, STK_EIO, "%s: read error", path);
  else if (n > MAX_FILE)
    rc = stk__errf(err, STK_ERANGE, "%s: larger than %u MiB: not a workload config", path, MAX_FILE >> 20);
  fclose(f);
  /* Settings the file does not give keep the caller's values: parse over
   * a full copy of its struct, then give back what its struct holds. */
  struct stk_workload full;
  if (!rc) rc = stk__workload_take(&full, w, err);
  if (!rc)
    rc = stk__workload_parse_yaml(buf, n, path, &full, unknown, unknown_cap, ignored, ignored_cap,
                                  err);
  if (!rc) stk__result_give(w, &full, sizeof full);
  free(buf);
  return rc;
}
