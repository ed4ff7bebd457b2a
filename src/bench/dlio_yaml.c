/* DLIO workload configs: the YAML subset those files use (sections of
 * `key: value` pairs, nested by indentation, `#` comments, plain or quoted
 * scalars). Known keys map onto struct stk_workload; keys stoker knows but
 * does not emulate are listed as ignored, anything else as unknown, so that
 * no setting is dropped silently. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "stoker/bench.h"

enum kind { K_STR, K_U64, K_U32, K_DBL, K_IGNORED };

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
    {"train.computation_time_stdev", K_DBL, W(compute_stdev)},
    {"metric.au", K_DBL, W(au_min)},
    /* Understood, not emulated: stoker writes no checkpoints, resizes no
     * records, and reads with its own loader whatever the framework. */
    {"model.type", K_IGNORED, 0, 0},
    {"model.model_size", K_IGNORED, 0, 0},
    {"framework", K_IGNORED, 0, 0},
    {"workflow.generate_data", K_IGNORED, 0, 0},
    {"workflow.train", K_IGNORED, 0, 0},
    {"workflow.checkpoint", K_IGNORED, 0, 0},
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
    {"checkpoint.checkpoint_folder", K_IGNORED, 0, 0},
    {"checkpoint.checkpoint_after_epoch", K_IGNORED, 0, 0},
    {"checkpoint.epochs_between_checkpoints", K_IGNORED, 0, 0},
    {"checkpoint.model_size", K_IGNORED, 0, 0},
};

static const char *const sections[] = {"model", "framework", "workflow", "dataset", "reader",
                                       "train", "checkpoint", "metric", "evaluation", "output",
                                       "profiling", NULL};

static void append(char *list, size_t cap, const char *path, int line) {
  if (!list || !cap) return;
  size_t n = strlen(list);
  snprintf(list + n, cap - n, "%s (line %d)\n", path, line);
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

/* Strip a trailing comment (outside quotes) and surrounding quotes. */
static char *scalar(char *v) {
  char q = 0;
  for (char *p = v; *p; p++) {
    if (q) {
      if (*p == q) q = 0;
    } else if (*p == '"' || *p == '\'') {
      q = *p;
    } else if (*p == '#' && (p == v || isspace((unsigned char)p[-1]))) {
      *p = 0;
      break;
    }
  }
  v = trim(v);
  size_t n = strlen(v);
  if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
    v[n - 1] = 0;
    v++;
  }
  return v;
}

static int set_value(const struct key *k, const char *val, struct stk_workload *w, const char *path,
                     int line, char *err) {
  char *dst = (char *)w + k->off;
  double d;
  uint64_t u;
  switch (k->kind) {
    case K_STR:
      if (strlen(val) >= k->size)
        return stk__errf(err, STK_ERANGE, "%s:%d: %s: value is too long", path, line, k->path);
      memcpy(dst, val, strlen(val) + 1);
      return 0;
    case K_U64:
    case K_U32:
      if (stk_parse_u64(val, &u) != 0 || (k->kind == K_U32 && u > UINT32_MAX))
        return stk__errf(err, STK_EFORMAT, "%s:%d: %s: '%s' is not a whole number", path, line,
                         k->path, val);
      if (k->kind == K_U64)
        memcpy(dst, &u, sizeof u);
      else {
        uint32_t v = (uint32_t)u;
        memcpy(dst, &v, sizeof v);
      }
      return 0;
    case K_DBL:
      if (stk_parse_double(val, &d) != 0 || d < 0)
        return stk__errf(err, STK_EFORMAT, "%s:%d: %s: '%s' is not a number of 0 or more", path,
                         line, k->path, val);
      memcpy(dst, &d, sizeof d);
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

static int known_section(const char *s) {
  for (int i = 0; sections[i]; i++)
    if (strcmp(sections[i], s) == 0) return 1;
  return 0;
}

int stk_workload_load_yaml(const char *path, struct stk_workload *w, char *unknown,
                           size_t unknown_cap, char *ignored, size_t ignored_cap, char *err) {
  FILE *f = fopen(path, "r");
  if (!f) return stk__errf(err, stk__from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
  if (unknown && unknown_cap) unknown[0] = 0;
  if (ignored && ignored_cap) ignored[0] = 0;
  char line[4096], section[64] = "";
  int lineno = 0, section_indent = -1, rc = 0, any = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (!strchr(line, '\n') && !feof(f)) {
      rc = stk__errf(err, STK_EFORMAT, "%s:%d: line is too long", path, lineno);
      break;
    }
    char *s = line;
    int indent = 0;
    while (*s == ' ') s++, indent++;
    if (*s == '\t') {
      rc = stk__errf(err, STK_EFORMAT, "%s:%d: tab in indentation (YAML allows spaces only)", path, lineno);
      break;
    }
    char *t = trim(s);
    if (!*t || *t == '#' || strcmp(t, "---") == 0) continue;
    char *colon = strchr(t, ':');
    if (!colon || t[0] == '-') {
      rc = stk__errf(err, STK_EFORMAT, "%s:%d: expected 'key: value', got '%s'", path, lineno, t);
      break;
    }
    *colon = 0;
    char *key = trim(t), *val = scalar(colon + 1);
    if (!*key || strchr(key, ' ')) {
      rc = stk__errf(err, STK_EFORMAT, "%s:%d: '%s' is not a key", path, lineno, key);
      break;
    }
    any = 1;
    char full[192];
    if (indent == 0 || section_indent < 0 || indent <= section_indent) {
      /* A top-level key: a section (no value) or a scalar like framework. */
      section_indent = indent;
      snprintf(section, sizeof section, "%s", key);
      if (*val == 0) {
        if (!known_section(key)) append(unknown, unknown_cap, key, lineno);
        continue;
      }
      snprintf(full, sizeof full, "%s", key);
      section[0] = 0;
    } else {
      if (!section[0]) {
        rc = stk__errf(err, STK_EFORMAT, "%s:%d: '%s' is indented under a key that has a value",
                       path, lineno, key);
        break;
      }
      snprintf(full, sizeof full, "%s.%s", section, key);
      if (*val == 0) {
        rc = stk__errf(err, STK_EFORMAT, "%s:%d: %s: nested sections are not part of DLIO configs",
                       path, lineno, full);
        break;
      }
    }
    const struct key *k = find_key(full);
    if (!k) {
      append(unknown, unknown_cap, full, lineno);
      continue;
    }
    if (k->kind == K_IGNORED) {
      append(ignored, ignored_cap, full, lineno);
      continue;
    }
    rc = set_value(k, val, w, path, lineno, err);
    if (rc) break;
  }
  if (!rc && ferror(f)) rc = stk__errf(err, STK_EIO, "%s: read error", path);
  if (!rc && !any) rc = stk__errf(err, STK_EFORMAT, "%s: no settings in the file", path);
  fclose(f);
  if (!rc && w->au_min > 1.0) w->au_min /= 100.0; /* some configs give AU in percent */
  return rc;
}
