/* The way back from the origin: the newest checkpoint the origin holds
 * whole (its manifest present), and re-staging one into the local
 * directory (parallel ranged gets of 16 MiB, each object's CRC32C checked
 * against the manifest, the local manifest written last), so that a node
 * that lost its disk restores without a person. Reads go through the cache's origins
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

#define RANGE_BYTES (16u << 20) /* one ranged get: big objects arrive in parallel */

struct range {
  size_t obj;
  uint64_t off, len;
  uint32_t crc;
};

struct restage {
  struct stk_ckpt *c;
  const char *name, *path;
  const struct ckpt_manifest *m;
  int *fds;
  struct range *rg;
};

/* Fetch one range into its object's file, and its CRC32C: the HTTP
 * engine's, computed as the bytes arrived, or (a file origin's kernel
 * copy) read back from the file. */
static int get_range(void *arg, size_t i, char *err) {
  struct restage *r = arg;
  struct range *g = &r->rg[i];
  char f[16], on[128], p[4200];
  stk__ckpt_objfile(f, g->obj);
  stk__ckpt_join(on, sizeof on, r->name, f);
  stk__ckpt_join(p, sizeof p, r->path, f);
  int fd = r->fds[g->obj];
  struct stk_obj_info info = {0};
  int rc = stk__origin_get(r->c->org, on, g->off, g->len, fd, g->off, &info, NULL, err);
  if (rc || info.has_crc) {
    g->crc = info.crc32c;
    return rc;
  }
  static const size_t B = 4u << 20;
  uint8_t *buf = malloc(B);
  if (!buf) return stk__errf(err, STK_ENOMEM, "out of memory");
  uint32_t crc = 0;
  for (uint64_t off = 0; !rc && off < g->len; off += B) {
    size_t n = (size_t)STK__MIN(B, g->len - off);
    if ((rc = stk__pread_full(fd, buf, n, g->off + off)))
      rc = stk__errf(err, rc, "%s: read back failed", p);
    else
      crc = stk_crc32c(crc, buf, n);
  }
  free(buf);
  g->crc = crc;
  return rc;
}

static int sync_obj(void *arg, size_t i, char *err) {
  struct restage *r = arg;
  if (r->c->o.no_fsync || fsync(r->fds[i]) == 0) return 0;
  char f[16], p[4200];
  stk__ckpt_objfile(f, i);
  stk__ckpt_join(p, sizeof p, r->path, f);
  return stk__errf(err, stk__from_errno(errno), "%s: fsync failed: %s", p, strerror(errno));
}

/* Every object of m from the origin into path, CRCs checked. */
static int fetch_all(struct restage *r, char *err) {
  const struct ckpt_manifest *m = r->m;
  size_t nr = 0;
  for (size_t i = 0; i < m->n; i++) nr += (size_t)((m->obj[i].size + RANGE_BYTES - 1) / RANGE_BYTES);
  r->fds = calloc(m->n ? m->n : 1, sizeof *r->fds);
  r->rg = calloc(nr ? nr : 1, sizeof *r->rg);
  int rc = r->fds && r->rg ? 0 : stk__errf(err, STK_ENOMEM, "out of memory");
  for (size_t i = 0; r->fds && i < m->n; i++) r->fds[i] = -1;
  for (size_t i = 0, k = 0; !rc && i < m->n; i++) {
    char f[16], p[4200];
    stk__ckpt_objfile(f, i);
    stk__ckpt_join(p, sizeof p, r->path, f);
    r->fds[i] = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (r->fds[i] < 0) {
      rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", p, strerror(errno));
      break;
    }
    for (uint64_t off = 0; off < m->obj[i].size; off += RANGE_BYTES, k++)
      r->rg[k] = (struct range){i, off, STK__MIN(RANGE_BYTES, m->obj[i].size - off), 0};
  }
  if (!rc) rc = stk__ckpt_pfor(r->c->o.threads, nr, get_range, r, err);
  for (size_t i = 0, k = 0; !rc && i < m->n; i++) {
    uint32_t crc = 0;
    for (; k < nr && r->rg[k].obj == i; k++) crc = stk__crc32c_combine(crc, r->rg[k].crc, r->rg[k].len);
    if (crc != m->obj[i].crc) {
      char f[16];
      stk__ckpt_objfile(f, i);
      rc = stk__errf(err, STK_ECRC, "%s/%s/%s: CRC32C %08x, its manifest says %08x (object '%s')",
                     stk__origin_url(r->c->org), r->name, f, crc, m->obj[i].crc, m->obj[i].name);
    }
  }
  if (!rc) rc = stk__ckpt_pfor(r->c->o.threads, m->n, sync_obj, r, err);
  for (size_t i = 0; r->fds && i < m->n; i++)
    if (r->fds[i] >= 0) close(r->fds[i]);
  free(r->fds);
  free(r->rg);
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
  rc = fetch_all(&r, err);
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
