/* Finding and reading checkpoints: the newest complete one of a rank,
 * objects read back in parallel chunks with every CRC32C checked, listing
 * and verifying a directory, and the garbage collection of partial ones
 * (left by a crash mid-save). A checkpoint is complete only when its
 * manifest reads and parses and every object file has its size
 * (stk__ckpt_manifest_read); anything else is partial and never loaded. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_impl.h"

struct stk_ckpt_data {
  uint64_t step;
  size_t n;
  char **names;
  uint8_t **bufs; /* malloc'ed; mapped: mmaps of memfds (NULL when empty) */
  uint64_t *sizes;
  int mapped;
};

void stk_ckpt_data_free(struct stk_ckpt_data *d) {
  if (!d) return;
  for (size_t i = 0; i < d->n; i++) {
    free(d->names[i]);
    if (!d->mapped)
      free(d->bufs[i]);
    else if (d->bufs[i])
      munmap(d->bufs[i], (size_t)d->sizes[i]);
  }
  free(d->names);
  free(d->bufs);
  free(d->sizes);
  free(d);
}

uint64_t stk_ckpt_data_step(const struct stk_ckpt_data *d) { return d->step; }
size_t stk_ckpt_data_count(const struct stk_ckpt_data *d) { return d->n; }
const char *stk_ckpt_data_name(const struct stk_ckpt_data *d, size_t i) {
  return i < d->n ? d->names[i] : NULL;
}
const void *stk_ckpt_data_bytes(const struct stk_ckpt_data *d, size_t i, uint64_t *size) {
  if (i >= d->n) return NULL;
  if (size) *size = d->sizes[i];
  return d->bufs[i] ? (const void *)d->bufs[i] : (const void *)"";
}
long stk_ckpt_data_find(const struct stk_ckpt_data *d, const char *name) {
  for (size_t i = 0; i < d->n; i++)
    if (!strcmp(d->names[i], name)) return (long)i;
  return -1;
}

/* ---- reading objects ----------------------------------------------------- */

struct rchunk {
  size_t obj;
  uint64_t off, len;
  uint32_t crc;
};

struct reader {
  const char *path;
  const struct ckpt_manifest *m;
  int *fds;
  uint8_t **bufs; /* NULL: verify only, into a scratch buffer */
  struct rchunk *ch;
  uint32_t chunk;
};

static int read_chunk(void *arg, size_t i, char *err) {
  struct reader *r = arg;
  struct rchunk *ch = &r->ch[i];
  uint8_t *dst = r->bufs ? r->bufs[ch->obj] + ch->off : malloc(ch->len);
  if (!dst) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = stk__pread_full(r->fds[ch->obj], dst, ch->len, ch->off);
  if (rc) {
    char f[16];
    stk__ckpt_objfile(f, ch->obj);
    rc = stk__errf(err, rc, "%s/%s: read of %llu bytes at %llu failed (object '%s')", r->path, f,
                   (unsigned long long)ch->len, (unsigned long long)ch->off,
                   r->m->obj[ch->obj].name);
  } else {
    ch->crc = stk_crc32c(0, dst, ch->len);
  }
  if (!r->bufs) free(dst);
  return rc;
}

/* Read (bufs given) or only check (bufs NULL) every object of the
 * checkpoint at path with manifest m. */
static int read_objects(const char *path, const struct ckpt_manifest *m, uint8_t **bufs,
                        uint32_t threads, char *err) {
  const uint64_t cb = 8u << 20;
  struct reader r = {.path = path, .m = m, .bufs = bufs};
  size_t nch = 0;
  for (size_t i = 0; i < m->n; i++) nch += (size_t)((m->obj[i].size + cb - 1) / cb);
  r.fds = calloc(m->n ? m->n : 1, sizeof *r.fds);
  r.ch = calloc(nch ? nch : 1, sizeof *r.ch);
  int rc = r.fds && r.ch ? 0 : stk__errf(err, STK_ENOMEM, "out of memory");
  for (size_t i = 0; i < m->n; i++) r.fds[i] = -1;
  for (size_t i = 0, k = 0; !rc && i < m->n; i++) {
    char f[16], p[4096];
    stk__ckpt_objfile(f, i);
    stk__ckpt_join(p, sizeof p, path, f);
    if ((r.fds[i] = open(p, O_RDONLY | O_CLOEXEC)) < 0)
      rc = stk__errf(err, stk__from_errno(errno), "%s: %s (object '%s')", p, strerror(errno),
                     m->obj[i].name);
    for (uint64_t off = 0; off < m->obj[i].size; off += cb, k++)
      r.ch[k] = (struct rchunk){.obj = i, .off = off, .len = STK__MIN(cb, m->obj[i].size - off)};
  }
  if (!rc) rc = stk__ckpt_pfor(threads, nch, read_chunk, &r, err);
  for (size_t i = 0, k = 0; !rc && i < m->n; i++) {
    uint32_t crc = 0;
    for (; k < nch && r.ch[k].obj == i; k++) crc = stk__crc32c_combine(crc, r.ch[k].crc, r.ch[k].len);
    if (crc != m->obj[i].crc) {
      char f[16];
      stk__ckpt_objfile(f, i);
      rc = stk__errf(err, STK_ECRC, "%s/%s: CRC32C %08x, the manifest says %08x (object '%s')",
                     path, f, crc, m->obj[i].crc, m->obj[i].name);
    }
  }
  for (size_t i = 0; r.fds && i < m->n; i++)
    if (r.fds[i] >= 0) close(r.fds[i]);
  free(r.fds);
  free(r.ch);
  return rc;
}

/* The data of manifest m, names and sizes filled, no buffers yet. */
static int data_new(const struct ckpt_manifest *m, int mapped, struct stk_ckpt_data **out,
                    char *err) {
  struct stk_ckpt_data *d = calloc(1, sizeof *d);
  int rc = d ? 0 : STK_ENOMEM;
  if (d) {
    d->step = m->step;
    d->mapped = mapped;
    d->names = calloc(m->n ? m->n : 1, sizeof *d->names);
    d->bufs = calloc(m->n ? m->n : 1, sizeof *d->bufs);
    d->sizes = calloc(m->n ? m->n : 1, sizeof *d->sizes);
    if (!d->names || !d->bufs || !d->sizes) rc = STK_ENOMEM;
    else d->n = m->n;
  }
  for (size_t i = 0; !rc && i < m->n; i++) {
    d->sizes[i] = m->obj[i].size;
    if (!(d->names[i] = strdup(m->obj[i].name))) rc = STK_ENOMEM;
  }
  if (rc) {
    stk_ckpt_data_free(d);
    return stk__errf(err, rc, "out of memory");
  }
  *out = d;
  return 0;
}

/* Load checkpoint dirname from the origin straight into memory: each
 * object's ranges fetched into a memfd of its size, CRCs checked, the
 * memfds mapped as the returned buffers; nothing written locally. */
static int load_origin(struct stk_ckpt *c, const char *dirname, struct stk_ckpt_data **out,
                       char *err) {
  struct ckpt_manifest m;
  int rc = stk__ckpt_origin_manifest(c->org, dirname, &m, err);
  if (rc) return rc;
  struct stk_ckpt_data *d = NULL;
  int *fds = calloc(m.n ? m.n : 1, sizeof *fds);
  rc = fds ? data_new(&m, 1, &d, err) : stk__errf(err, STK_ENOMEM, "out of memory");
  for (size_t i = 0; fds && i < m.n; i++) fds[i] = -1;
  for (size_t i = 0; !rc && i < m.n; i++) {
    fds[i] = memfd_create("stoker-ckpt", MFD_CLOEXEC);
    if (fds[i] < 0 || ftruncate(fds[i], (off_t)m.obj[i].size) != 0)
      rc = stk__errf(err, stk__from_errno(errno), "%s: memory for object '%s' (%llu bytes): %s",
                     dirname, m.obj[i].name, (unsigned long long)m.obj[i].size, strerror(errno));
  }
  if (!rc) rc = stk__ckpt_fetch(c->org, dirname, &m, fds, c->o.threads, err);
  for (size_t i = 0; !rc && i < m.n; i++) {
    if (!m.obj[i].size) continue;
    void *p = mmap(NULL, (size_t)m.obj[i].size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
    if (p == MAP_FAILED)
      rc = stk__errf(err, stk__from_errno(errno), "%s: cannot map object '%s': %s", dirname,
                     m.obj[i].name, strerror(errno));
    else
      d->bufs[i] = p;
  }
  for (size_t i = 0; fds && i < m.n; i++)
    if (fds[i] >= 0) close(fds[i]);
  free(fds);
  stk__ckpt_manifest_free(&m);
  if (rc) {
    stk_ckpt_data_free(d);
    return rc;
  }
  *out = d;
  return 0;
}

/* Load the local copy of dirname into *out. */
static int load_local(struct stk_ckpt *c, const char *dirname, struct stk_ckpt_data **out,
                      char *err) {
  char path[4096];
  stk__ckpt_join(path, sizeof path, c->dir, dirname);
  struct stat st;
  if (stat(path, &st) != 0) return stk__errf(err, STK_ENOENT, "%s: no such checkpoint", path);
  int lk = stk__ckpt_lock(path, 0, 1, err);
  if (lk < 0) return lk;
  struct ckpt_manifest m;
  int rc = stk__ckpt_manifest_read(path, &m, err);
  if (rc == STK_ENOENT) rc = stk__errf(err, STK_EFORMAT, "%s: partial checkpoint (no manifest)", path);
  struct stk_ckpt_data *d = NULL;
  if (!rc) rc = data_new(&m, 0, &d, err);
  for (size_t i = 0; !rc && i < m.n; i++)
    if (!(d->bufs[i] = malloc(m.obj[i].size ? m.obj[i].size : 1)))
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
  if (!rc) rc = read_objects(path, &m, d->bufs, c->o.threads, err);
  stk__ckpt_manifest_free(&m);
  close(lk);
  if (rc) {
    stk_ckpt_data_free(d);
    return rc;
  }
  *out = d;
  return 0;
}

/* Steps of this rank's complete local checkpoints, newest first. */
static int local_steps(struct stk_ckpt *c, uint64_t **steps, size_t *n, char *err) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(c->dir);
  if (!d) return stk__errf(err, stk__from_errno(errno), "%s: %s", c->dir, strerror(errno));
  size_t cap = 0;
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d))) {
    uint64_t step;
    uint32_t rank;
    if (stk__ckpt_parse_dirname(e->d_name, &step, &rank) || rank != c->o.rank) continue;
    char path[4096];
    stk__ckpt_join(path, sizeof path, c->dir, e->d_name);
    struct ckpt_manifest m;
    if (stk__ckpt_manifest_read(path, &m, NULL)) continue;
    stk__ckpt_manifest_free(&m);
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      uint64_t *s = realloc(*steps, cap * sizeof *s);
      if (!s) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
        break;
      }
      *steps = s;
    }
    size_t k = (*n)++;
    while (k > 0 && (*steps)[k - 1] < step) (*steps)[k] = (*steps)[k - 1], k--;
    (*steps)[k] = step;
  }
  closedir(d);
  return rc;
}

int stk__ckpt_local_steps(struct stk_ckpt *c, uint64_t **steps, size_t *n, char *err) {
  return local_steps(c, steps, n, err);
}

int stk_ckpt_latest(struct stk_ckpt *c, uint64_t *step, char *err) {
  uint64_t *s;
  size_t n;
  int rc = local_steps(c, &s, &n, err);
  if (rc) return rc;
  int have = n > 0;
  uint64_t best = have ? s[0] : 0, o;
  free(s);
  if (c->origin && stk__ckpt_origin_latest(c, &o, NULL) == 0 && (!have || o > best))
    best = o, have = 1;
  if (!have)
    return stk__errf(err, STK_ENOENT, "%s: no complete checkpoint of rank %u", c->dir, c->o.rank);
  *step = best;
  return 0;
}

/* Load one step: the local copy, else (or when it is corrupt) re-staged
 * from the origin. */
static int load_step(struct stk_ckpt *c, uint64_t step, struct stk_ckpt_data **out, char *err) {
  char name[64];
  stk__ckpt_dirname(name, step, c->o.rank);
  int rc = load_local(c, name, out, err);
  if (rc == 0 || !c->origin || rc == STK_ENOMEM) return rc;
  char lerr[STK_ERRMSG_MAX];
  memcpy(lerr, err ? err : "", err ? STK_ERRMSG_MAX : 1);
  if (rc != STK_ENOENT)
    stk_log(STK_LOG_WARN, "%s; %s it from %s", lerr, c->o.no_stage ? "reading" : "re-staging",
            c->origin);
  int rrc = c->o.no_stage ? load_origin(c, name, out, err) : stk__ckpt_restage(c, name, err);
  if (rrc) return rrc == STK_ENOENT && rc != STK_ENOENT ? rc : rrc;
  rc = c->o.no_stage ? 0 : load_local(c, name, out, err);
  if (rc == 0) {
    pthread_mutex_lock(&c->mu);
    c->st.restaged++;
    pthread_mutex_unlock(&c->mu);
  }
  return rc;
}

int stk_ckpt_load(struct stk_ckpt *c, uint64_t step, struct stk_ckpt_data **out, char *err) {
  *out = NULL;
  int rc;
  if (step != UINT64_MAX) {
    rc = load_step(c, step, out, err);
  } else {
    /* The newest complete checkpoint; one that fails its checks (and
     * cannot be re-staged) gives way to the one before, with a warning. */
    uint64_t *s, o;
    size_t n;
    if ((rc = local_steps(c, &s, &n, err))) return rc;
    if (c->origin && stk__ckpt_origin_latest(c, &o, NULL) == 0 && (n == 0 || o > s[0])) {
      uint64_t *t = realloc(s, (n + 1) * sizeof *t);
      if (!t) {
        free(s);
        return stk__errf(err, STK_ENOMEM, "out of memory");
      }
      s = t;
      memmove(s + 1, s, n * sizeof *s);
      s[0] = o;
      n++;
    }
    rc = stk__errf(err, STK_ENOENT, "%s: no complete checkpoint of rank %u%s%s", c->dir,
                   c->o.rank, c->origin ? " here or at " : "", c->origin ? c->origin : "");
    for (size_t i = 0; i < n; i++) {
      if ((rc = load_step(c, s[i], out, err)) == 0) break;
      if (rc == STK_ENOMEM) break;
      if (i + 1 < n)
        stk_log(STK_LOG_WARN, "checkpoint step %llu unusable (%s); trying step %llu",
                (unsigned long long)s[i], err ? err : stk_strerror(rc),
                (unsigned long long)s[i + 1]);
    }
    free(s);
  }
  if (rc == 0) {
    uint64_t b = 0;
    for (size_t i = 0; i < (*out)->n; i++) b += (*out)->sizes[i];
    pthread_mutex_lock(&c->mu);
    c->st.restores++;
    c->st.restore_bytes += b;
    pthread_mutex_unlock(&c->mu);
  }
  return rc;
}

/* ---- a directory, whoever wrote it ---------------------------------------- */

static int info_cmp(const void *a, const void *b) {
  const struct stk_ckpt_info *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int stk_ckpt_list(const char *dir, int (*cb)(void *arg, const struct stk_ckpt_info *info),
                  void *arg, char *err) {
  return stk_ckpt_list_opts(dir, NULL, cb, arg, err);
}

int stk_ckpt_list_opts(const char *dir, const struct stk_ckpt_opts *o,
                       int (*cb)(void *arg, const struct stk_ckpt_info *info), void *arg,
                       char *err) {
  if (strstr(dir, "://")) return stk__ckpt_list_origin(dir, o, cb, arg, err);
  DIR *d = opendir(dir);
  if (!d) return stk__errf(err, stk__from_errno(errno), "%s: %s", dir, strerror(errno));
  struct stk_ckpt_info *v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d))) {
    struct stk_ckpt_info in = {0};
    if (stk__ckpt_parse_dirname(e->d_name, &in.step, &in.rank)) continue;
    memcpy(in.name, e->d_name, strlen(e->d_name) + 1); /* 28 bytes */
    char path[4096], p[4200];
    stk__ckpt_join(path, sizeof path, dir, e->d_name);
    struct ckpt_manifest m;
    if (stk__ckpt_manifest_read(path, &m, NULL) == 0) {
      in.complete = 1;
      in.world = m.world;
      in.objects = (uint32_t)m.n;
      for (size_t i = 0; i < m.n; i++) in.bytes += m.obj[i].size;
      stk__ckpt_manifest_free(&m);
    }
    stk__ckpt_join(p, sizeof p, path, CKPT_DRAINED);
    in.drained = access(p, F_OK) == 0;
    stk__ckpt_join(p, sizeof p, path, CKPT_LOCK);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      in.busy = flock(fd, LOCK_SH | LOCK_NB) != 0;
      close(fd);
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      struct stk_ckpt_info *t = realloc(v, cap * sizeof *t);
      if (!t) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
        break;
      }
      v = t;
    }
    v[n++] = in;
  }
  closedir(d);
  if (!rc && n) qsort(v, n, sizeof *v, info_cmp);
  for (size_t i = 0; !rc && i < n; i++) rc = cb(arg, &v[i]);
  free(v);
  return rc;
}

int stk_ckpt_verify(const char *dir, const char *name, char *err) {
  return stk_ckpt_verify_opts(dir, name, NULL, err);
}

int stk_ckpt_verify_opts(const char *dir, const char *name, const struct stk_ckpt_opts *o,
                         char *err) {
  if (strstr(dir, "://")) return stk__ckpt_verify_origin(dir, name, o, err);
  char path[4096];
  stk__ckpt_join(path, sizeof path, dir, name);
  struct ckpt_manifest m;
  int rc = stk__ckpt_manifest_read(path, &m, err);
  if (rc == STK_ENOENT)
    return stk__errf(err, STK_EFORMAT, "%s: partial checkpoint (no manifest)", path);
  if (rc) return rc;
  rc = read_objects(path, &m, NULL, 4, err);
  stk__ckpt_manifest_free(&m);
  return rc;
}

int stk_ckpt_gc(const char *dir, uint32_t *removed, char *err) {
  if (strstr(dir, "://")) return stk_ckpt_gc_origin(dir, 0, removed, err);
  if (removed) *removed = 0;
  DIR *d = opendir(dir);
  if (!d) return stk__errf(err, stk__from_errno(errno), "%s: %s", dir, strerror(errno));
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d))) {
    uint64_t step;
    uint32_t rank;
    if (stk__ckpt_parse_dirname(e->d_name, &step, &rank)) continue;
    char path[4096];
    stk__ckpt_join(path, sizeof path, dir, e->d_name);
    struct ckpt_manifest m;
    if (stk__ckpt_manifest_read(path, &m, NULL) == 0) {
      stk__ckpt_manifest_free(&m);
      continue;
    }
    int lk = stk__ckpt_lock(path, 1, 0, NULL);
    if (lk < 0) continue; /* being written now, or gone */
    /* Re-check under the lock: a save may have committed meanwhile. */
    if (stk__ckpt_manifest_read(path, &m, NULL) == 0) {
      stk__ckpt_manifest_free(&m);
    } else {
      rc = stk__ckpt_remove_dir(path, err);
      if (!rc && removed) (*removed)++;
    }
    close(lk);
  }
  closedir(d);
  return rc;
}
