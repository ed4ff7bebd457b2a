/* Draining complete checkpoints to the origin, in a background thread, and
 * the way back (re-staging a checkpoint from the origin), and eviction.
 *
 * A drain copies the objects first, each made durable at the origin before
 * its index is appended to the local .drain-progress, then the manifest
 * (atomically: a temporary and a rename on a file origin, one PUT on S3
 * or HTTP),
 * then marks the local copy DRAINED. A drain cut short (kill -9, an error)
 * is queued again when the directory is next opened and skips the objects
 * the progress file lists; until the manifest lands the origin's copy is
 * partial, and readers of the origin ignore it as they do a local one. */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../cache/cache_impl.h"
#include "ckpt_impl.h"

/* ---- the origin ---------------------------------------------------------- */

static int is_s3(const char *url) { return !strncasecmp(url, "s3://", 5); }

int stk__ckpt_url_open(struct stk_origin **org, const char *url, const struct stk_ckpt_opts *o,
                       char *err) {
  /* o's S3 fields only where the caller's struct has them. */
  size_t have = o && o->struct_size ? o->struct_size : sizeof *o;
  if (o && is_s3(url) && have >= offsetof(struct stk_ckpt_opts, s3_profile) + sizeof o->s3_profile) {
    struct stk_origin_opts oo = {.s3_endpoint = o->s3_endpoint,
                                 .s3_region = o->s3_region,
                                 .s3_profile = o->s3_profile};
    return stk__origin_open(org, url, &oo, err);
  }
  return stk__origin_open(org, url, NULL, err);
}

int stk__ckpt_origin_open(struct stk_ckpt *c, const struct stk_ckpt_opts *o, char *err) {
  if (is_s3(c->origin) || !strncasecmp(c->origin, "http://", 7) ||
      !strncasecmp(c->origin, "https://", 8))
    return stk__ckpt_url_open(&c->org, c->origin, o, err);
  if (stk__origin_is_url(c->origin) && strncasecmp(c->origin, "file://", 7))
    return stk__errf(err, STK_ENOTSUP,
                     "%s: checkpoints drain to a directory, http(s):// (PUT) or "
                     "s3://bucket/prefix only",
                     c->origin);
  char *p = NULL;
  if (!strncasecmp(c->origin, "file://", 7)) {
    int rc = stk__file_url_path(c->origin, &p, err);
    if (rc) return rc;
  } else if (!(p = strdup(c->origin))) {
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  int rc = stk__ckpt_mkdirs(p, err);
  if (!rc) rc = stk__origin_open(&c->org, p, NULL, err);
  c->origin_path = p;
  return rc;
}

void stk__ckpt_origin_close(struct stk_ckpt *c) {
  if (c->org) stk__origin_close(c->org);
  c->org = NULL;
  free(c->origin_path);
  c->origin_path = NULL;
}

#define BUF_BYTES (1u << 20)

/* Put a local file (src, size bytes) at the origin as name, durably;
 * record: where an S3 multipart upload of it is recorded. */
static int put_file(struct stk_ckpt *c, const char *name, int src, uint64_t size,
                    const char *record, char *err) {
  if (!c->origin_path)
    return is_s3(c->origin)
               ? stk__ckpt_s3_put_file(c->org, name, src, size, record, c->o.no_fsync, err)
               : stk__http_put(c->org, name, NULL, src, size, err);
  char p[4096];
  stk__ckpt_join(p, sizeof p, c->origin_path, name);
  char *slash = strrchr(p, '/');
  *slash = 0;
  int rc = stk__ckpt_mkdirs(p, err);
  *slash = '/';
  if (rc) return rc;
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", p, strerror(errno));
  uint64_t done = 0;
  char *buf = NULL; /* the read/write fallback's */
  while (!rc && done < size) {
    loff_t in = (loff_t)done, out = (loff_t)done;
    ssize_t n = copy_file_range(src, &in, fd, &out, STK__MIN(size - done, 64u << 20), 0);
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
      if (!buf && !(buf = malloc(BUF_BYTES))) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
        break;
      }
      n = pread(src, buf, STK__MIN(size - done, BUF_BYTES), (off_t)done);
      if (n > 0 && (rc = stk__write_full(fd, buf, (size_t)n)))
        rc = stk__errf(err, rc, "%s: write failed: %s", p, strerror(errno));
    }
    if (!rc && n <= 0)
      rc = stk__errf(err, n < 0 ? stk__from_errno(errno) : STK_ETRUNC, "%s: copy failed: %s", p,
                     n < 0 ? strerror(errno) : "the local copy ended early");
    if (n > 0) done += (uint64_t)n;
  }
  free(buf);
  if (!rc && !c->o.no_fsync && fsync(fd) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: fsync failed: %s", p, strerror(errno));
  close(fd);
  return rc;
}

/* Put a small object (the manifest) atomically. */
static int put_mem(struct stk_ckpt *c, const char *name, const char *text, size_t len, char *err) {
  if (!c->origin_path)
    return is_s3(c->origin) ? stk__ckpt_s3_put_mem(c->org, name, text, len, err)
                            : stk__http_put(c->org, name, text, -1, len, err);
  char p[4096], t[4200];
  stk__ckpt_join(p, sizeof p, c->origin_path, name);
  snprintf(t, sizeof t, "%s.tmp", p);
  int fd = open(t, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", t, strerror(errno));
  int rc = stk__write_full(fd, text, len);
  if (rc) rc = stk__errf(err, rc, "%s: write failed: %s", t, strerror(errno));
  if (!rc && !c->o.no_fsync && fsync(fd) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: fsync failed: %s", t, strerror(errno));
  close(fd);
  if (!rc && rename(t, p) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot rename: %s", t, strerror(errno));
  if (rc) {
    unlink(t);
    return rc;
  }
  *strrchr(p, '/') = 0;
  if (!c->o.no_fsync) stk__ckpt_fsync_path(p);
  return 0;
}

/* ---- one drain ------------------------------------------------------------ */

static int mark_drained(struct stk_ckpt *c, const char *path, char *err) {
  char t[4096], p[4096], red[1024];
  stk__ckpt_join(t, sizeof t, path, CKPT_DRAINED ".tmp");
  stk__ckpt_join(p, sizeof p, path, CKPT_DRAINED);
  stk__url_redact(c->origin, red, sizeof red);
  FILE *f = fopen(t, "w");
  if (!f) return stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", t, strerror(errno));
  fprintf(f, "%s\n", red);
  int bad = fflush(f) != 0 || (!c->o.no_fsync && fsync(fileno(f)) != 0);
  bad |= fclose(f) != 0;
  if (bad || rename(t, p) != 0) {
    unlink(t);
    return stk__errf(err, stk__from_errno(errno), "%s: cannot write: %s", p, strerror(errno));
  }
  stk__ckpt_join(t, sizeof t, path, CKPT_PROGRESS);
  unlink(t);
  if (!c->o.no_fsync) stk__ckpt_fsync_path(path);
  return 0;
}

int stk__ckpt_drain_one(struct stk_ckpt *c, const char *name, uint64_t *bytes, char *err) {
  char path[4096], p[4200];
  stk__ckpt_join(path, sizeof path, c->dir, name);
  *bytes = 0;
  int lk = stk__ckpt_lock(path, 1, 1, err);
  if (lk < 0) return lk;
  struct ckpt_manifest m;
  int rc = stk__ckpt_manifest_read(path, &m, err);
  if (rc) {
    close(lk);
    return rc;
  }
  stk__ckpt_join(p, sizeof p, path, CKPT_DRAINED);
  if (access(p, F_OK) == 0) {
    stk__ckpt_manifest_free(&m);
    close(lk);
    return 0;
  }
  /* Objects an earlier drain already put. */
  uint8_t *done = calloc(m.n ? m.n : 1, 1);
  if (!done) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  stk__ckpt_join(p, sizeof p, path, CKPT_PROGRESS);
  FILE *pf = rc ? NULL : fopen(p, "a+");
  if (!rc && !pf) rc = stk__errf(err, stk__from_errno(errno), "%s: %s", p, strerror(errno));
  if (pf) {
    unsigned long long i;
    rewind(pf);
    while (fscanf(pf, "%llu\n", &i) == 1)
      if (i < m.n) done[i] = 1;
  }
  for (size_t i = 0; !rc && i < m.n; i++) {
    if (done[i]) continue;
    char f[16], obj[4200], on[128];
    stk__ckpt_objfile(f, i);
    stk__ckpt_join(obj, sizeof obj, path, f);
    stk__ckpt_join(on, sizeof on, name, f);
    int fd = open(obj, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      rc = stk__errf(err, stk__from_errno(errno), "%s: %s", obj, strerror(errno));
      break;
    }
    char rec[4200];
    snprintf(rec, sizeof rec, "%s/" CKPT_UPLOAD "%s", path, f);
    rc = put_file(c, on, fd, m.obj[i].size, rec, err);
    close(fd);
    if (!rc) {
      *bytes += m.obj[i].size;
      fprintf(pf, "%zu\n", i);
      if (fflush(pf) != 0 || (!c->o.no_fsync && fsync(fileno(pf)) != 0))
        rc = stk__errf(err, stk__from_errno(errno), "%s: cannot record progress: %s", p,
                       strerror(errno));
    }
  }
  if (pf) fclose(pf);
  free(done);
  char *text = NULL;
  size_t len = 0;
  if (!rc && stk__ckpt_manifest_text(&m, &text, &len)) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  if (!rc) {
    char mn[128];
    stk__ckpt_join(mn, sizeof mn, name, CKPT_MANIFEST);
    rc = put_mem(c, mn, text, len, err);
  }
  free(text);
  if (!rc) rc = mark_drained(c, path, err);
  stk__ckpt_manifest_free(&m);
  close(lk);
  return rc;
}

/* ---- the drain thread ------------------------------------------------------ */

static void *drain_thread(void *arg) {
  struct stk_ckpt *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (c->qlen == 0 && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    if (c->qlen == 0) break; /* stopping, and nothing left */
    uint64_t step = c->queue[0];
    memmove(c->queue, c->queue + 1, (c->qlen - 1) * sizeof *c->queue);
    c->qlen--;
    c->draining = 1;
    pthread_mutex_unlock(&c->mu);
    char name[64], err[STK_ERRMSG_MAX] = "";
    stk__ckpt_dirname(name, step, c->o.rank);
    uint64_t t0 = stk_now_ns(), bytes = 0;
    int rc = stk__ckpt_drain_one(c, name, &bytes, err);
    if (rc) stk_log(STK_LOG_WARN, "checkpoint drain to %s: %s", c->origin, err);
    pthread_mutex_lock(&c->mu);
    if (rc) {
      c->st.drain_errors++;
      if (!c->drain_rc) {
        c->drain_rc = rc;
        memcpy(c->drain_err, err, sizeof err);
      }
    } else {
      c->st.drains++;
      c->st.drain_bytes += bytes;
      c->st.drain_ns += stk_now_ns() - t0;
    }
    pthread_mutex_unlock(&c->mu);
    if (!rc) stk__ckpt_evict(c);
    pthread_mutex_lock(&c->mu);
    c->draining = 0;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

void stk__ckpt_drain_enqueue(struct stk_ckpt *c, uint64_t step) {
  pthread_mutex_lock(&c->mu);
  if (c->qlen == c->qcap) {
    size_t cap = c->qcap ? 2 * c->qcap : 8;
    uint64_t *q = realloc(c->queue, cap * sizeof *q);
    if (!q) { /* left for the next open to resume */
      pthread_mutex_unlock(&c->mu);
      stk_log(STK_LOG_WARN, "checkpoint step %llu: out of memory queueing its drain",
              (unsigned long long)step);
      return;
    }
    c->queue = q;
    c->qcap = cap;
  }
  c->queue[c->qlen++] = step;
  if (!c->have_thread && pthread_create(&c->thread, NULL, drain_thread, c) == 0)
    c->have_thread = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

int stk_ckpt_drain_wait(struct stk_ckpt *c, char *err) {
  pthread_mutex_lock(&c->mu);
  while (c->have_thread && (c->qlen || c->draining)) pthread_cond_wait(&c->cv, &c->mu);
  int rc = c->drain_rc;
  if (rc && err) memcpy(err, c->drain_err, STK_ERRMSG_MAX);
  c->drain_rc = 0;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void stk__ckpt_drain_stop(struct stk_ckpt *c) {
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  int t = c->have_thread;
  pthread_mutex_unlock(&c->mu);
  if (t) pthread_join(c->thread, NULL);
  c->have_thread = 0;
  stk__ckpt_origin_close(c);
}

int stk__ckpt_drain_resume(struct stk_ckpt *c, char *err) {
  uint32_t removed = 0;
  int rc = stk_ckpt_gc(c->dir, &removed, err);
  if (rc) return rc;
  if (removed) stk_log(STK_LOG_INFO, "%s: removed %u partial checkpoints", c->dir, removed);
  if (!c->origin) return 0;
  uint64_t *steps;
  size_t n;
  if ((rc = stk__ckpt_local_steps(c, &steps, &n, err))) return rc;
  for (size_t i = n; i-- > 0;) { /* oldest first */
    char name[64], p[4200];
    stk__ckpt_dirname(name, steps[i], c->o.rank);
    snprintf(p, sizeof p, "%s/%s/" CKPT_DRAINED, c->dir, name);
    if (access(p, F_OK) != 0) stk__ckpt_drain_enqueue(c, steps[i]);
  }
  free(steps);
  return 0;
}

/* ---- eviction ---------------------------------------------------------------- */

struct evict_ctx {
  uint32_t rank;
  struct stk_ckpt_info *v;
  size_t n, cap;
};

static int collect(void *arg, const struct stk_ckpt_info *in) {
  struct evict_ctx *e = arg;
  if (in->rank != e->rank || !in->complete) return 0;
  if (e->n == e->cap) {
    size_t cap = e->cap ? 2 * e->cap : 16;
    struct stk_ckpt_info *t = realloc(e->v, cap * sizeof *t);
    if (!t) return STK_ENOMEM;
    e->v = t;
    e->cap = cap;
  }
  e->v[e->n++] = *in;
  return 0;
}

void stk__ckpt_evict(struct stk_ckpt *c) {
  if (!c->o.keep_last && !c->o.max_bytes) return;
  struct evict_ctx e = {.rank = c->o.rank};
  if (stk_ckpt_list(c->dir, collect, &e, NULL)) {
    free(e.v);
    return;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < e.n; i++) bytes += e.v[i].bytes;
  size_t count = e.n;
  /* Oldest first; the newest is never evicted, nor one not yet drained
   * when there is an origin to drain to. */
  for (size_t i = 0; i + 1 < e.n; i++) {
    int over = (c->o.keep_last && count > c->o.keep_last) ||
               (c->o.max_bytes && bytes > c->o.max_bytes);
    if (!over) break;
    if (c->origin && !e.v[i].drained) continue;
    char path[4096];
    stk__ckpt_join(path, sizeof path, c->dir, e.v[i].name);
    int lk = stk__ckpt_lock(path, 1, 0, NULL);
    if (lk < 0) continue;
    char err[STK_ERRMSG_MAX];
    int rc = stk__ckpt_remove_dir(path, err);
    close(lk);
    if (rc) {
      stk_log(STK_LOG_WARN, "checkpoint eviction: %s", err);
      continue;
    }
    bytes -= e.v[i].bytes;
    count--;
    pthread_mutex_lock(&c->mu);
    c->st.evicted++;
    pthread_mutex_unlock(&c->mu);
  }
  free(e.v);
}
