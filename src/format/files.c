/* Plain files in a directory tree, one sample per file, labelled by their
 * first-level subfolder as torchvision's ImageFolder does. Listing never
 * stats a file (dataset.c's walk uses d_type), so sizes stay unknown until a
 * file is read: shards here have no index. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format_impl.h"

/* The file's path relative to the dataset root (its basename when the
 * dataset is the file itself). */
static const char *rel_path(const struct stk_dataset *ds, const struct stk_shard *sh) {
  size_t rl = strlen(stk__ds_root(ds));
  if (!strncmp(sh->path, stk__ds_root(ds), rl) && sh->path[rl] == '/') return sh->path + rl + 1;
  const char *b = strrchr(sh->path, '/');
  return b ? b + 1 : sh->path;
}

static int files_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                       const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                       struct stk_sample *out, char *err) {
  (void)k;
  (void)off;
  (void)verify;
  (void)err;
  stk__sample_reset(out, sh);
  const char *rel = rel_path(ds, sh);
  const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
  const char *dot = strrchr(base, '.');
  if (dot && dot > base && dot[1]) {
    stk__sample_key(out, rel, (size_t)(dot - rel));
    stk__sample_add(out, dot + 1, strlen(dot + 1), buf, len);
  } else {
    stk__sample_key(out, rel, strlen(rel));
    stk__sample_add(out, "data", 4, buf, len);
  }
  return 0;
}

/* ---- writing ----------------------------------------------------------- */

/* The field a plain file holds: the first that is not a label. */
static const struct stk_field *payload(const struct stk_sample *s) {
  for (int i = 0; i < s->nfields; i++)
    if (strcmp(s->fields[i].name, "cls") && strcmp(s->fields[i].name, "label"))
      return &s->fields[i];
  return s->nfields ? &s->fields[0] : NULL;
}

/* A key's last component if it is a usable file name, else NULL. */
static const char *key_name(const char *key) {
  const char *b = strrchr(key, '/') ? strrchr(key, '/') + 1 : key;
  if (!*b || *b == '.') return NULL;
  return b;
}

static int class_dir(struct stk_writer *w, int32_t label, char *out, size_t n) {
  if (label < 0) {
    snprintf(out, n, "%s", w->dir);
    return 0;
  }
  snprintf(out, n, "%s/%05d", w->dir, (int)label);
  if (mkdir(out, 0777) == 0) return stk__wr_track_dir(w, out) ? STK_ENOMEM : 0;
  if (errno == EEXIST) return 0;
  int e = errno;
  return stk__errf(w->err, stk__from_errno(e), "%s: cannot create directory: %s", out,
                   strerror(e));
}

/* Each sample is its own shard, named DIR/[LABEL/]KEY.FIELD. */
static int files_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  const struct stk_field *f = payload(s);
  if (!f) return stk__errf(w->err, STK_EINVAL, "sample %llu has no fields",
                           (unsigned long long)w->samples);
  char dir[4096], name[256];
  int rc = class_dir(w, s->label, dir, sizeof dir);
  if (rc) return rc;
  const char *k = key_name(s->key);
  if (k) snprintf(name, sizeof name, "%s", k);
  else snprintf(name, sizeof name, "%08llu", (unsigned long long)w->samples);
  size_t n = strlen(dir) + strlen(name) + strlen(f->name) + 3;
  free(w->path);
  if (!(w->path = malloc(n))) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  if (!strcmp(f->name, "data")) snprintf(w->path, n, "%s/%s", dir, name);
  else snprintf(w->path, n, "%s/%s.%s", dir, name, f->name);
  return stk__wr_write(w, f->data, (size_t)f->len);
}

const struct stk_format_ops stk__fmt_files = {
    .name = "files",
    .desc = "plain files in a directory tree, labelled by first-level subfolder (ImageFolder)",
    .exts = "",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_WRITE | STK_FMT_LABELS | STK_FMT_TREE |
            STK_FMT_WRITE_PER_FILE,
    .parse = files_parse,
    .wr_sample = files_wr_sample,
};
