/* The checkpoint manifest: the commit record of one rank's checkpoint.
 * JSON, written last (temporary name, fsync, rename, directory fsync), so
 * that its presence, whole and valid, with every object file of its size,
 * is what makes a checkpoint complete. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/json_parse.h"
#include "ckpt_impl.h"

#define FORMAT_NAME "stoker-checkpoint"
#define FORMAT_VERSION 1

void stk__ckpt_manifest_free(struct ckpt_manifest *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n; i++) free(m->obj[i].name);
  free(m->obj);
  memset(m, 0, sizeof *m);
}

int stk__ckpt_manifest_text(const struct ckpt_manifest *m, char **text, size_t *len) {
  FILE *f = open_memstream(text, len);
  if (!f) return STK_ENOMEM;
  struct stk_json j;
  stk_json_init(&j, f, 1);
  stk_json_obj_begin(&j);
  stk_json_kstr(&j, "format", FORMAT_NAME);
  stk_json_ku64(&j, "version", FORMAT_VERSION);
  stk_json_ku64(&j, "step", m->step);
  stk_json_ku64(&j, "rank", m->rank);
  stk_json_ku64(&j, "world", m->world);
  uint64_t total = 0;
  for (size_t i = 0; i < m->n; i++) total += m->obj[i].size;
  stk_json_ku64(&j, "bytes", total);
  stk_json_key(&j, "objects");
  stk_json_arr_begin(&j);
  for (size_t i = 0; i < m->n; i++) {
    char file[16];
    stk__ckpt_objfile(file, i);
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "name", m->obj[i].name);
    stk_json_kstr(&j, "file", file);
    stk_json_ku64(&j, "bytes", m->obj[i].size);
    stk_json_ku64(&j, "crc32c", m->obj[i].crc);
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_obj_end(&j);
  fputc('\n', f);
  return fclose(f) == 0 ? 0 : STK_ENOMEM;
}

int stk__ckpt_manifest_write(const char *path, const struct ckpt_manifest *m, int no_fsync,
                             char *err) {
  char *text = NULL;
  size_t len = 0;
  if (stk__ckpt_manifest_text(m, &text, &len)) {
    free(text);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  char tmp[4096], fin[4096];
  stk__ckpt_join(tmp, sizeof tmp, path, CKPT_MANIFEST_TMP);
  stk__ckpt_join(fin, sizeof fin, path, CKPT_MANIFEST);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int rc = 0;
  if (fd < 0) {
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", tmp, strerror(errno));
  } else {
    rc = stk__write_full(fd, text, len);
    if (rc) rc = stk__errf(err, rc, "%s: write failed: %s", tmp, strerror(errno));
    if (!rc && !no_fsync && fsync(fd) != 0)
      rc = stk__errf(err, stk__from_errno(errno), "%s: fsync failed: %s", tmp, strerror(errno));
    close(fd);
  }
  free(text);
  if (!rc && rename(tmp, fin) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot rename to %s: %s", tmp, CKPT_MANIFEST,
                   strerror(errno));
  if (rc) unlink(tmp);
  if (!rc && !no_fsync && (rc = stk__ckpt_fsync_path(path)))
    rc = stk__errf(err, rc, "%s: directory fsync failed", path);
  return rc;
}

static int bad(char *err, const char *where, const char *what) {
  return stk__errf(err, STK_EFORMAT, "%s: not a valid checkpoint manifest: %s", where, what);
}

int stk__ckpt_manifest_parse(const char *text, size_t len, struct ckpt_manifest *m,
                             const char *where, char *err) {
  memset(m, 0, sizeof *m);
  struct stk__jdoc *doc = NULL;
  char perr[STK_ERRMSG_MAX];
  if (stk__json_parse(&doc, text, len, perr)) return bad(err, where, perr);
  const struct stk__jnode *r = stk__json_root(doc), *objs = stk__json_get(r, "objects");
  const char *fmt = stk__json_str(r, "format");
  uint64_t ver = 0, rank = 0, world = 0, total = 0, sum = 0;
  int rc = 0;
  if (!fmt || strcmp(fmt, FORMAT_NAME))
    rc = bad(err, where, "no \"format\": \"" FORMAT_NAME "\"");
  else if (stk__json_u64(r, "version", &ver) || ver != FORMAT_VERSION)
    rc = stk__errf(err, STK_ENOTSUP, "%s: checkpoint manifest version %llu; this stoker reads %d",
                   where, (unsigned long long)ver, FORMAT_VERSION);
  else if (stk__json_u64(r, "step", &m->step) || stk__json_u64(r, "rank", &rank) ||
           stk__json_u64(r, "world", &world) || stk__json_u64(r, "bytes", &total) ||
           rank > UINT32_MAX || world == 0 || world > UINT32_MAX || rank >= world)
    rc = bad(err, where, "step, rank, world or bytes missing or out of range");
  else if (!objs || objs->type != STK_JARR)
    rc = bad(err, where, "no \"objects\" list");
  m->rank = (uint32_t)rank;
  m->world = (uint32_t)world;
  if (!rc && objs->len && !(m->obj = calloc(objs->len, sizeof *m->obj)))
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  size_t i = 0;
  for (const struct stk__jnode *o = objs && !rc ? objs->child : NULL; o && !rc; o = o->next, i++) {
    const char *name = stk__json_str(o, "name"), *file = stk__json_str(o, "file");
    uint64_t crc = 0;
    char want[16];
    stk__ckpt_objfile(want, i);
    if (!name || !*name || strlen(name) > CKPT_NAME_MAX || !file || strcmp(file, want) ||
        stk__json_u64(o, "bytes", &m->obj[i].size) || stk__json_u64(o, "crc32c", &crc) ||
        crc > UINT32_MAX) {
      rc = stk__errf(err, STK_EFORMAT, "%s: not a valid checkpoint manifest: object %zu", where, i);
      break;
    }
    m->obj[i].crc = (uint32_t)crc;
    sum += m->obj[i].size;
    if (!(m->obj[i].name = strdup(name))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    m->n = i + 1;
  }
  if (!rc && sum != total) rc = bad(err, where, "object sizes do not add up to \"bytes\"");
  stk__json_free(doc);
  if (rc) stk__ckpt_manifest_free(m);
  return rc;
}

int stk__ckpt_manifest_read(const char *path, struct ckpt_manifest *m, char *err) {
  char p[4096];
  stk__ckpt_join(p, sizeof p, path, CKPT_MANIFEST);
  memset(m, 0, sizeof *m);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return stk__errf(err, stk__from_errno(errno), "%s: %s", p, strerror(errno));
  struct stat st;
  int rc = 0;
  char *text = NULL;
  if (fstat(fd, &st) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: %s", p, strerror(errno));
  else if ((uint64_t)st.st_size > CKPT_MANIFEST_MAX)
    rc = stk__errf(err, STK_EFORMAT, "%s: %lld bytes is too large for a manifest", p,
                   (long long)st.st_size);
  else if (!(text = malloc((size_t)st.st_size + 1)))
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  else if ((rc = stk__pread_full(fd, text, (size_t)st.st_size, 0)))
    rc = stk__errf(err, rc == STK_ETRUNC ? STK_EFORMAT : rc, "%s: cannot read", p);
  close(fd);
  if (!rc) rc = stk__ckpt_manifest_parse(text, (size_t)st.st_size, m, p, err);
  free(text);
  for (size_t i = 0; !rc && i < m->n; i++) {
    char f[16];
    stk__ckpt_objfile(f, i);
    stk__ckpt_join(p, sizeof p, path, f);
    if (stat(p, &st) != 0)
      rc = stk__errf(err, STK_EFORMAT, "%s: missing (object '%s' of the manifest)", p,
                     m->obj[i].name);
    else if ((uint64_t)st.st_size != m->obj[i].size)
      rc = stk__errf(err, STK_EFORMAT, "%s: %lld bytes, the manifest says %llu (object '%s')", p,
                     (long long)st.st_size, (unsigned long long)m->obj[i].size, m->obj[i].name);
  }
  if (rc) stk__ckpt_manifest_free(m);
  return rc;
}
