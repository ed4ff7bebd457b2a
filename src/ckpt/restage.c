/* The way back from the origin: the newest checkpoint the origin holds
 * whole (its manifest present), and re-staging one into the local
 * directory (parallel gets, see piece_bytes, each object's CRC32C checked
 * against the manifest, the local manifest written last), so that a node
 * that lost its disk restores without a person. Reads go through the cache's origins
 * (src/cache/origin.h), so every origin that can be read can be restored
 * from. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

/* How the objects are cut into gets: into pieces of about total/threads
 * bytes, so that every thread has one, but no smaller than RANGE_MIN (the
 * cost of a request) and no larger than RANGE_MAX (what a failed get
 * fetches again). An object no bigger than a piece is one get of the whole
 * object, with no Range header: fewer requests, and a server that builds
 * each ranged reply from the whole object (moto does) reads it once. */
#define RANGE_MIN (16ull << 20)
#define RANGE_MAX (256ull << 20)

static uint64_t piece_bytes(const struct ckpt_manifest *m, uint32_t threads) {
  uint64_t total = 0;
  for (size_t i = 0; i < m->n; i++) total += m->obj[i].size;
  uint64_t p = total / (threads ? threads : 1) + 1;
  return p < RANGE_MIN ? RANGE_MIN : p > RANGE_MAX ? RANGE_MAX : p;
}

struct range {
  size_t obj;
  uint64_t off, len;
  uint32_t crc;
  int whole; /* the whole object: a plain get */
};

struct fetch {
  struct stk_origin *org;
  const char *name;
  const struct ckpt_manifest *m;
  const int *fds;
  struct range *rg;
};

/* Fetch one range into its object's fd, and its CRC32C: the HTTP engine's,
 * computed as the bytes arrived, or (a file origin's kernel copy) read
 * back from the fd. */
static int get_range(void *arg, size_t i, char *err) {
  struct fetch *r = arg;
  struct range *g = &r->rg[i];
  char f[16], on[128];
  stk__ckpt_objfile(f, g->obj);
  stk__ckpt_join(on, sizeof on, r->name, f);
  int fd = r->fds[g->obj];
  struct stk_obj_info info = {0};
  uint64_t want = g->whole ? UINT64_MAX : g->len;
  int rc = g->len ? stk__origin_get(r->org, on, g->off, want, fd, g->off, &info, NULL, err)
                  : stk__origin_stat(r->org, on, &info, err); /* an empty object: there? */
  if (!rc && g->whole && !info.has_crc) /* unchecked bytes past the manifest's size */
    rc = stk__errf(err, STK_EFORMAT, "%s/%s: whole get without a CRC", stk__origin_url(r->org), on);
  if (rc || info.has_crc || !g->len) {
    g->crc = info.has_crc ? info.crc32c : 0;
    return rc;
  }
  static const size_t B = 4u << 20;
  uint8_t *buf = malloc(B);
  if (!buf) return stk__errf(err, STK_ENOMEM, "out of memory");
  uint32_t crc = 0;
  for (uint64_t off = 0; !rc && off < g->len; off += B) {
    size_t n = (size_t)STK__MIN(B, g->len - off);
    if ((rc = stk__pread_full(fd, buf, n, g->off + off)))
      rc = stk__errf(err, rc, "%s/%s: read back failed", stk__origin_url(r->org), on);
    else
      crc = stk_crc32c(crc, buf, n);
  }
  free(buf);
  g->crc = crc;
  return rc;
}

int stk__ckpt_fetch(struct stk_origin *org, const char *name, const struct ckpt_manifest *m,
                    const int *fds, uint32_t threads, char *err) {
  uint64_t piece = piece_bytes(m, threads);
  /* Whole gets over HTTP(S) and S3, whose engine computes the CRC32C of
   * every byte received (an object grown past its manifest's size fails
   * it); a directory origin copies in the kernel and is read by ranges. */
  const char *url = stk__origin_url(org);
  int plain = strstr(url, "://") && strncasecmp(url, "file://", 7);
  size_t nr = 0;
  for (size_t i = 0; i < m->n; i++)
    nr += m->obj[i].size ? (size_t)((m->obj[i].size + piece - 1) / piece) : 1;
  struct fetch r = {.org = org, .name = name, .m = m, .fds = fds};
  if (!(r.rg = calloc(nr ? nr : 1, sizeof *r.rg))) return stk__errf(err, STK_ENOMEM, "out of memory");
  for (size_t i = 0, k = 0; i < m->n; i++) {
    /* k pieces of near-equal size, each a multiple of 1 MiB but the last */
    uint64_t size = m->obj[i].size, n = size ? (size + piece - 1) / piece : 1;
    uint64_t len = ((size + n - 1) / n + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1), off = 0;
    do {
      r.rg[k++] = (struct range){i, off, STK__MIN(len, size - off), 0, plain && size && n == 1};
      off += len;
    } while (off < size);
  }
  int rc = stk__ckpt_pfor(threads, nr, get_range, &r, err);
  for (size_t i = 0, k = 0; !rc && i < m->n; i++) {
    uint32_t crc = 0;
    for (; k < nr && r.rg[k].obj == i; k++) crc = stk__crc32c_combine(crc, r.rg[k].crc, r.rg[k].len);
    if (crc != m->obj[i].crc) {
      char f[16];
      stk__ckpt_objfile(f, i);
      rc = stk__errf(err, STK_ECRC, "%s/%s/%s: CRC32C %08x, its manifest says %08x (object '%s')",
                     stk__origin_url(org), name, f, crc, m->obj[i].crc, m->obj[i].name);
    }
  }
  free(r.rg);
  return rc;
}

struct restage {
  struct stk_ckpt *c;
  const char *path;
  int *fds;
};

static int sync_obj(void *arg, size_t i, char *err) {
  struct restage *r = arg;
  if (r->c->o.no_fsync || fsync(r->fds[i]) == 0) return 0;
  char f[16], p[4200];
  stk__ckpt_objfile(f, i);
  stk__ckpt_join(p, sizeof p, r->path, f);
  return stk__errf(err, stk__from_errno(errno), "%s: fsync failed: %s", p, strerror(errno));
}

/* Every object of m from the origin into files under path, CRCs checked. */
static int fetch_all(struct stk_ckpt *c, const char *name, const char *path,
                     const struct ckpt_manifest *m, char *err) {
  struct restage r = {.c = c, .path = path, .fds = calloc(m->n ? m->n : 1, sizeof *r.fds)};
  int rc = r.fds ? 0 : stk__errf(err, STK_ENOMEM, "out of memory");
  for (size_t i = 0; r.fds && i < m->n; i++) r.fds[i] = -1;
  for (size_t i = 0; !rc && i < m->n; i++) {
    char f[16], p[4200];
    stk__ckpt_objfile(f, i);
    stk__ckpt_join(p, sizeof p, path, f);
    r.fds[i] = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (r.fds[i] < 0)
      rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", p, strerror(errno));
  }
  if (!rc) rc = stk__ckpt_fetch(c->org, name, m, r.fds, c->o.threads, err);
  if (!rc) rc = stk__ckpt_pfor(c->o.threads, m->n, sync_obj, &r, err);
  for (size_t i = 0; r.fds && i < m->n; i++)
    if (r.fds[i] >= 0) close(r.fds[i]);
  free(r.fds);
  return rc;
}

/* The manifest of checkpoint name at the origin, parsed. */
int stk__ckpt_origin_manifest(struct stk_origin *org, const char *name, struct ckpt_manifest *m,
                              char *err) {
  char mn[128], where[1200], *text = NULL;
  size_t len = 0;
  stk__ckpt_join(mn, sizeof mn, name, CKPT_MANIFEST);
  int rc = stk__origin_get_mem(org, mn, CKPT_MANIFEST_MAX, &text, &len, err);
  if (rc) return rc;
  stk__ckpt_join(where, sizeof where, stk__origin_url(org), mn);
  rc = stk__ckpt_manifest_parse(text, len, m, where, err);
  free(text);
  return rc;
}

int stk__ckpt_restage(struct stk_ckpt *c, const char *name, char *err) {
  if (!c->org) return stk__errf(err, STK_ENOENT, "no origin");
  char path[4096];
  stk__ckpt_join(path, sizeof path, c->dir, name);
  struct ckpt_manifest m;
  int rc = stk__ckpt_origin_manifest(c->org, name, &m, err);
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
  rc = fetch_all(c, name, path, &m, err);
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
