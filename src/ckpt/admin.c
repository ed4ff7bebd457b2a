/* Looking after the checkpoints an origin holds (stoker ckpt verify|gc on
 * a URL).
 *
 *   verify  every object of a drained checkpoint is read back from the
 *           origin in parallel 16 MiB ranged gets (the bytes go nowhere:
 *           the HTTP engine computes each range's CRC32C as it arrives)
 *           and checked against the manifest's size and CRC32C.
 *   gc      the complete checkpoints of each rank beyond its newest
 *           keep_last are removed, and the partial ones (a drain cut
 *           short) older than the newest complete one of their rank. A
 *           checkpoint is removed manifest first: from that moment every
 *           reader takes it for partial, so a gc cut short never leaves
 *           one that looks complete with objects missing; the next gc
 *           removes the rest.
 *
 * A file:// URL is the directory it names (verify reads it as a local
 * directory; gc removes with unlink). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../cache/cache_impl.h"
#include "ckpt_impl.h"

#define ADMIN_THREADS 8

static int is_file_url(const char *url) { return !strncasecmp(url, "file://", 7); }

int stk__ckpt_verify_origin(const char *url, const char *name, const struct stk_ckpt_opts *opts,
                            char *err) {
  if (is_file_url(url)) {
    char *path = NULL;
    int rc = stk__file_url_path(url, &path, err);
    if (!rc) rc = stk_ckpt_verify(path, name, err);
    free(path);
    return rc;
  }
  struct stk_origin *o = NULL;
  int rc = stk__ckpt_url_open(&o, url, opts, err);
  if (rc) return rc;
  struct ckpt_manifest m;
  rc = stk__ckpt_origin_manifest(o, name, &m, err);
  if (rc == STK_ENOENT)
    rc = stk__errf(err, STK_EFORMAT, "%s/%s: partial checkpoint (no manifest)", stk__origin_url(o),
                   name);
  if (rc) {
    stk__origin_close(o);
    return rc;
  }
  int sink = open("/dev/null", O_WRONLY | O_CLOEXEC);
  int *fds = calloc(m.n ? m.n : 1, sizeof *fds);
  if (sink < 0 || !fds) {
    rc = stk__errf(err, sink < 0 ? stk__from_errno(errno) : STK_ENOMEM, "/dev/null: %s",
                   sink < 0 ? strerror(errno) : "out of memory");
  } else {
    for (size_t i = 0; i < m.n; i++) fds[i] = sink;
    rc = stk__ckpt_fetch(o, name, &m, fds, ADMIN_THREADS, err);
  }
  if (sink >= 0) close(sink);
  free(fds);
  stk__ckpt_manifest_free(&m);
  stk__origin_close(o);
  return rc;
}

/* ---- gc ------------------------------------------------------------------ */

struct infos {
  struct stk_ckpt_info *v;
  size_t n, cap;
};

static int add_info(void *arg, const struct stk_ckpt_info *in) {
  struct infos *I = arg;
  if (I->n == I->cap) {
    size_t cap = I->cap ? 2 * I->cap : 16;
    struct stk_ckpt_info *t = realloc(I->v, cap * sizeof *t);
    if (!t) return STK_ENOMEM;
    I->v = t;
    I->cap = cap;
  }
  I->v[I->n++] = *in;
  return 0;
}

/* Whether checkpoint i (the list oldest first) goes: complete ones beyond
 * the newest keep of their rank, partial ones older than the newest
 * complete one of their rank (a drain into them would have finished
 * before the newer one began: the drain thread works oldest first). */
static int doomed(const struct infos *I, size_t i, uint32_t keep) {
  uint32_t newer = 0;
  for (size_t k = i + 1; k < I->n; k++)
    if (I->v[k].rank == I->v[i].rank && I->v[k].complete) newer++;
  return I->v[i].complete ? keep && newer >= keep : newer > 0;
}

/* Every object name the origin lists, once for the whole gc. */
struct names {
  char **v;
  size_t n, cap;
};

static int add_name(void *arg, const char *name, const struct stk_obj_info *info) {
  struct names *N = arg;
  (void)info;
  if (N->n == N->cap) {
    size_t cap = N->cap ? 2 * N->cap : 64;
    char **t = realloc(N->v, cap * sizeof *t);
    if (!t) return STK_ENOMEM;
    N->v = t;
    N->cap = cap;
  }
  if (!(N->v[N->n] = strdup(name))) return STK_ENOMEM;
  N->n++;
  return 0;
}

static int delete_one(struct stk_origin *o, int s3, const char *name, char *err) {
  int rc = s3 ? stk__s3_delete(o, name, err) : stk__http_delete(o, name, err);
  return rc == STK_ENOENT ? 0 : rc;
}

/* Remove checkpoint name at an S3 or HTTP origin: its manifest, then what
 * the listing N shows under it (and, over WebDAV, the folder). */
static int remove_remote(struct stk_origin *o, int s3, const struct names *N, const char *name,
                         char *err) {
  char mn[128], dir[80];
  stk__ckpt_join(mn, sizeof mn, name, CKPT_MANIFEST);
  int rc = delete_one(o, s3, mn, err);
  snprintf(dir, sizeof dir, "%s/", name);
  size_t dl = strlen(dir);
  for (size_t i = 0; !rc && i < N->n; i++)
    if (!strncmp(N->v[i], dir, dl) && strcmp(N->v[i], mn)) rc = delete_one(o, s3, N->v[i], err);
  if (!rc && !s3) rc = delete_one(o, s3, dir, err);
  return rc;
}

/* Remove checkpoint name under a directory origin: its manifest unlinked
 * and the directory synced first, then the rest. */
static int remove_local(const char *root, const char *name, char *err) {
  char path[4096], p[4200];
  stk__ckpt_join(path, sizeof path, root, name);
  stk__ckpt_join(p, sizeof p, path, CKPT_MANIFEST);
  if (unlink(p) != 0 && errno != ENOENT)
    return stk__errf(err, stk__from_errno(errno), "%s: cannot remove: %s", p, strerror(errno));
  stk__ckpt_fsync_path(path);
  int rc = stk__ckpt_remove_dir(path, err);
  if (!rc) stk__ckpt_fsync_path(root);
  return rc;
}

int stk_ckpt_gc_origin(const char *url, uint32_t keep_last, uint32_t *removed, char *err) {
  return stk_ckpt_gc_origin_opts(url, NULL, keep_last, removed, err);
}

int stk_ckpt_gc_origin_opts(const char *url, const struct stk_ckpt_opts *opts, uint32_t keep_last,
                            uint32_t *removed, char *err) {
  if (removed) *removed = 0;
  if (!strstr(url, "://"))
    return stk__errf(err, STK_EINVAL, "%s: not an origin's URL (s3://, http(s)://, file://)", url);
  struct infos I = {0};
  int rc = stk_ckpt_list_opts(url, opts, add_info, &I, err);
  if (rc == STK_ENOMEM) rc = stk__errf(err, rc, "out of memory");
  char *path = NULL;
  struct stk_origin *o = NULL;
  int s3 = !strncasecmp(url, "s3://", 5);
  if (!rc) {
    rc = is_file_url(url) ? stk__file_url_path(url, &path, err)
                          : stk__ckpt_url_open(&o, url, opts, err);
  }
  struct names N = {0};
  if (!rc && o) {
    rc = stk__origin_list(o, add_name, &N, err);
    if (rc == STK_ENOMEM) rc = stk__errf(err, rc, "out of memory");
  }
  for (size_t i = 0; !rc && i < I.n; i++) {
    if (!doomed(&I, i, keep_last)) continue;
    rc = path ? remove_local(path, I.v[i].name, err) : remove_remote(o, s3, &N, I.v[i].name, err);
    if (!rc && removed) (*removed)++;
  }
  for (size_t i = 0; i < N.n; i++) free(N.v[i]);
  free(N.v);
  if (o) stk__origin_close(o);
  free(path);
  free(I.v);
  return rc;
}
