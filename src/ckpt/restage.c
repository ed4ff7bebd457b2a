/* The way back from the origin: the newest checkpoint the origin holds
 * whole (its manifest present), and re-staging one into the local
 * directory (parallel gets, each object's CRC32C checked against the
 * manifest, the local manifest written last), so that a node that lost its
 * disk restores without a person. Reads go through the cache's origins
 * (src/cache/origin.h), so every origin that can be read can be restored
 * from. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../cache/cache_impl.h"
#include "ckpt_impl.h"

struct latest_ctx {
  uint32_t rank;
  int have;
  uint64_t step;
};

static int latest_cb(void *arg, const char *name, const struct stk_obj_info *info) {
  struct latest_ctx *l = arg;
  (void)info;
  const char *slash = strchr(name, '/');
  if (!slash || strcmp(slash + 1, CKPT_MANIFEST)) return 0;
  char d[64];
  if ((size_t)(slash - name) >= sizeof d) return 0;
  memcpy(d, name, (size_t)(slash - name));
  d[slash - name] = 0;
  uint64_t step;
  uint32_t rank;
  if (stk__ckpt_parse_dirname(d, &step, &rank) || rank != l->rank) return 0;
  if (!l->have || step > l->step) l->step = step, l->have = 1;
  return 0;
}

int stk__ckpt_origin_latest(struct stk_ckpt *c, uint64_t *step, char *err) {
  if (!c->org) return stk__errf(err, STK_ENOENT, "no origin");
  struct latest_ctx l = {.rank = c->o.rank};
  int rc = stk__origin_list(c->org, latest_cb, &l, err);
  if (rc) return rc;
  if (!l.have)
    return stk__errf(err, STK_ENOENT, "%s: no complete checkpoint of rank %u",
                     stk__origin_url(c->org), c->o.rank);
  *step = l.step;
  return 0;
}

struct restage {
  struct stk_ckpt *c;
  const char *name, *path;
  const struct ckpt_manifest *m;
};

static int get_obj(void *arg, size_t i, char *err) {
  struct restage *r = arg;
  char f[16], on[128], p[4200];
  stk__ckpt_objfile(f, i);
  stk__ckpt_join(on, sizeof on, r->name, f);
  stk__ckpt_join(p, sizeof p, r->path, f);
  int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", p, strerror(errno));
  int rc = 0;
  if (r->m->obj[i].size) {
    struct stk_obj_info info = {0};
    rc = stk__origin_get(r->c->org, on, 0, r->m->obj[i].size, fd, 0, &info, NULL, err);
    /* The bytes are checked as written: the HTTP engine computes the CRC
     * as they arrive; a file origin's kernel copy is read back. */
    uint32_t crc = info.crc32c;
    static const size_t B = 4u << 20;
    int read_back = !rc && !info.has_crc;
    if (read_back) crc = 0;
    uint8_t *buf = read_back ? malloc(B) : NULL;
    if (read_back && !buf) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    for (uint64_t off = 0; read_back && !rc && off < r->m->obj[i].size; off += B) {
      size_t n = (size_t)STK__MIN(B, r->m->obj[i].size - off);
      if ((rc = stk__pread_full(fd, buf, n, off)))
        rc = stk__errf(err, rc, "%s: read back failed", p);
      else
        crc = stk_crc32c(crc, buf, n);
    }
    free(buf);
    if (!rc && crc != r->m->obj[i].crc)
      rc = stk__errf(err, STK_ECRC, "%s/%s: CRC32C %08x, its manifest says %08x (object '%s')",
                     stk__origin_url(r->c->org), on, crc, r->m->obj[i].crc, r->m->obj[i].name);
  }
  if (!rc && !r->c->o.no_fsync && fsync(fd) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: fsync failed: %s", p, strerror(errno));
  close(fd);
  return rc;
}

int stk__ckpt_restage(struct stk_ckpt *c, const char *name, char *err) {
  if (!c->org) return stk__errf(err, STK_ENOENT, "no origin");
  char mn[128], path[4096];
  stk__ckpt_join(mn, sizeof mn, name, CKPT_MANIFEST);
  stk__ckpt_join(path, sizeof path, c->dir, name);
  char *text = NULL;
  size_t len = 0;
  int rc = stk__origin_get_mem(c->org, mn, CKPT_MANIFEST_MAX, &text, &len, err);
  if (rc) return rc;
  struct ckpt_manifest m;
  char where[1200];
  stk__ckpt_join(where, sizeof where, stk__origin_url(c->org), mn);
  rc = stk__ckpt_manifest_parse(text, len, &m, where, err);
  free(text);
  if (rc) return rc;
  if (mkdir(path, 0755) != 0 && errno != EEXIST)
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", path, strerror(errno));
  int lk = rc ? rc : stk__ckpt_lock(path, 1, 1, err);
  if (lk < 0) {
    stk__ckpt_manifest_free(&m);
    return lk;
  }
  /* Whatever is there (a corrupt copy) stops being complete first. */
  char p[4200];
  stk__ckpt_join(p, sizeof p, path, CKPT_MANIFEST);
  unlink(p);
  struct restage r = {.c = c, .name = name, .path = path, .m = &m};
  rc = stk__ckpt_pfor(c->o.threads, m.n, get_obj, &r, err);
  if (!rc) rc = stk__ckpt_manifest_write(path, &m, c->o.no_fsync, err);
  if (!rc) {
    stk__ckpt_join(p, sizeof p, path, CKPT_DRAINED);
    FILE *f = fopen(p, "w"); /* the origin holds it: evictable */
    if (f) {
      char red[1024];
      stk__url_redact(c->origin, red, sizeof red);
      fprintf(f, "%s\n", red);
      fclose(f);
    }
    if (!c->o.no_fsync) stk__ckpt_fsync_path(c->dir);
  }
  stk__ckpt_manifest_free(&m);
  close(lk);
  return rc;
}
