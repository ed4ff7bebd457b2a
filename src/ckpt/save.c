/* The checkpoint handle and save: a rank's objects written in parallel,
 * in chunks, into a fresh checkpoint directory, then committed by the
 * manifest (manifest.c). With O_DIRECT each chunk goes through an aligned
 * buffer (or straight from the caller's memory when it is aligned), the
 * last chunk padded to the block size and the file truncated back; a file
 * system that refuses O_DIRECT (tmpfs, some network file systems) gets
 * buffered writes, switched per file, with no error. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_impl.h"

void stk_ckpt_opts_init_sized(struct stk_ckpt_opts *o, size_t size) {
  if (!o) return;
  memset(o, 0, size < sizeof *o ? size : sizeof *o);
  o->struct_size = size;
}

int stk_ckpt_open(struct stk_ckpt **out, const struct stk_ckpt_opts *o, char *err) {
  *out = NULL;
  if (!o || !o->dir || !*o->dir)
    return stk__errf(err, STK_EINVAL, "checkpoint: no directory given (opts.dir)");
  struct stk_ckpt *c = calloc(1, sizeof *c);
  if (!c) return stk__errf(err, STK_ENOMEM, "out of memory");
  size_t n = o->struct_size && o->struct_size < sizeof c->o ? o->struct_size : sizeof c->o;
  memcpy(&c->o, o, n);
  c->o.struct_size = sizeof c->o;
  if (!c->o.world) c->o.world = 1;
  if (!c->o.threads) c->o.threads = 4;
  if (!c->o.chunk_bytes) c->o.chunk_bytes = 8u << 20;
  int rc = 0;
  if (c->o.rank >= c->o.world)
    rc = stk__errf(err, STK_EINVAL, "checkpoint: rank %u is not below world size %u", c->o.rank,
                   c->o.world);
  else if (c->o.chunk_bytes % CKPT_ALIGN)
    rc = stk__errf(err, STK_EINVAL, "checkpoint: chunk_bytes %u is not a multiple of %u",
                   c->o.chunk_bytes, CKPT_ALIGN);
  c->dir = strdup(o->dir);
  c->origin = o->origin && *o->origin ? strdup(o->origin) : NULL;
  c->o.dir = c->dir;
  c->o.origin = c->origin;
  c->o.s3_endpoint = c->o.s3_region = c->o.s3_profile = NULL; /* not kept: see drain.c */
  if (!rc && (!c->dir || (o->origin && *o->origin && !c->origin)))
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (!rc) rc = stk__ckpt_mkdirs(c->dir, err);
  if (!rc && c->origin) rc = stk__ckpt_origin_open(c, o, err);
  if (!rc) rc = stk__ckpt_drain_resume(c, err);
  if (rc) {
    stk_ckpt_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void stk_ckpt_close(struct stk_ckpt *c) {
  if (!c) return;
  stk__ckpt_async_stop(c);
  stk__ckpt_drain_stop(c);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->queue);
  free(c->dir);
  free(c->origin);
  free(c);
}

void stk_ckpt_stats_init_sized(struct stk_ckpt_stats *st, size_t size) {
  stk__opts_init(st, sizeof *st, size);
}

void stk_ckpt_stats(struct stk_ckpt *c, struct stk_ckpt_stats *st) {
  struct stk_ckpt_stats full; /* the caller's struct gets no more than its struct_size */
  pthread_mutex_lock(&c->mu);
  full = c->st;
  pthread_mutex_unlock(&c->mu);
  stk__result_give(st, &full, sizeof full);
}

/* ---- save ---------------------------------------------------------------- */

struct chunk {
  size_t obj;
  uint64_t off, len;
  uint32_t crc;
};

struct save {
  struct stk_ckpt *c;
  const char *path;
  const struct stk_ckpt_obj *objs;
  int *fds;
  int *direct; /* per file: O_DIRECT still on */
  struct chunk *ch;
  pthread_key_t buf_key;
  uint64_t direct_writes;
  int early_flush;              /* fsync on: flush every CKPT_FLUSH_EVERY bytes written */
  uint64_t written;             /* O_DIRECT bytes written so far */
};

/* An O_DIRECT write completes once it is in the device's volatile write
 * cache (a virtio disk in write-back mode, a drive's DRAM); fsync then
 * flushes it all. Left to the end, that flush runs after the writes instead
 * of beside them. So the thread whose write crosses a multiple of
 * CKPT_FLUSH_EVERY bytes written flushes (fdatasync: any file's flush
 * empties the whole device cache) while the other threads keep writing,
 * and the final fsync has only the tail and the metadata left. Durability
 * is unchanged: the final fsync of every file still runs. A failed early
 * flush fails the chunk, so the save stops at once with that error (the
 * kernel reports a write-back error to a file once, so the final fsync
 * might not see it again). Returns 0 or the error, with err set. */
static int early_flush(struct save *s, int fd, uint64_t len, const char *f, char *err) {
  if (!s->early_flush) return 0;
  uint64_t w = __atomic_add_fetch(&s->written, len, __ATOMIC_RELAXED);
  if ((w - len) / CKPT_FLUSH_EVERY == w / CKPT_FLUSH_EVERY) return 0;
  if (fdatasync(fd) == 0) return 0;
  return stk__errf(err, stk__from_errno(errno), "%s/%s: flushing written objects failed: %s",
                   s->path, f, strerror(errno));
}

static void buf_free(void *p) { free(p); }

static int write_chunk(void *arg, size_t i, char *err) {
  struct save *s = arg;
  struct chunk *ch = &s->ch[i];
  const struct stk_ckpt_obj *ob = &s->objs[ch->obj];
  const uint8_t *src = (const uint8_t *)ob->data + ch->off;
  int fd = s->fds[ch->obj];
  ch->crc = stk_crc32c(0, src, ch->len);
  char f[16];
  stk__ckpt_objfile(f, ch->obj);
  int direct = __atomic_load_n(&s->direct[ch->obj], __ATOMIC_RELAXED);
  if (direct) {
    const void *wp = src;
    uint64_t wl = (ch->len + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN;
    if (((uintptr_t)src % CKPT_ALIGN) || wl != ch->len) {
      uint8_t *b = pthread_getspecific(s->buf_key);
      if (!b) {
        if (posix_memalign((void **)&b, CKPT_ALIGN, s->c->o.chunk_bytes))
          return stk__errf(err, STK_ENOMEM, "out of memory");
        pthread_setspecific(s->buf_key, b);
      }
      memcpy(b, src, ch->len);
      memset(b + ch->len, 0, wl - ch->len);
      wp = b;
    }
    ssize_t w = pwrite(fd, wp, wl, (off_t)ch->off);
    if (w == (ssize_t)wl) {
      __atomic_fetch_add(&s->direct_writes, 1, __ATOMIC_RELAXED);
      return early_flush(s, fd, wl, f, err);
    }
    if (w >= 0 || errno != EINVAL)
      return stk__errf(err, w < 0 ? stk__from_errno(errno) : STK_EIO,
                       "%s/%s: write of %llu bytes at %llu failed: %s", s->path, f,
                       (unsigned long long)wl, (unsigned long long)ch->off,
                       w < 0 ? strerror(errno) : "short write");
    /* The file system took the open but not the write: buffered from now. */
    __atomic_store_n(&s->direct[ch->obj], 0, __ATOMIC_RELAXED);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_DIRECT);
  }
  uint64_t done = 0;
  while (done < ch->len) {
    ssize_t w = pwrite(fd, src + done, ch->len - done, (off_t)(ch->off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return stk__errf(err, w < 0 ? stk__from_errno(errno) : STK_EIO,
                       "%s/%s: write of %llu bytes at %llu failed: %s", s->path, f,
                       (unsigned long long)(ch->len - done), (unsigned long long)(ch->off + done),
                       w < 0 ? strerror(errno) : "no progress");
    done += (uint64_t)w;
  }
  return 0;
}

static int sync_file(void *arg, size_t i, char *err) {
  struct save *s = arg;
  char f[16];
  stk__ckpt_objfile(f, i);
  /* The padding of a last O_DIRECT chunk goes; then data and size to disk. */
  if (ftruncate(s->fds[i], (off_t)s->objs[i].size) != 0)
    return stk__errf(err, stk__from_errno(errno), "%s/%s: truncate failed: %s", s->path, f,
                     strerror(errno));
  if (!s->c->o.no_fsync && fsync(s->fds[i]) != 0)
    return stk__errf(err, stk__from_errno(errno), "%s/%s: fsync failed: %s", s->path, f,
                     strerror(errno));
  return 0;
}

static int check_objs(const struct stk_ckpt_obj *objs, size_t n, char *err) {
  for (size_t i = 0; i < n; i++) {
    if (!objs[i].name || !*objs[i].name || strlen(objs[i].name) > CKPT_NAME_MAX)
      return stk__errf(err, STK_EINVAL, "checkpoint object %zu: name empty or over %d bytes", i,
                       CKPT_NAME_MAX);
    if (objs[i].size && !objs[i].data)
      return stk__errf(err, STK_EINVAL, "checkpoint object '%s': no data", objs[i].name);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(objs[k].name, objs[i].name))
        return stk__errf(err, STK_EINVAL, "checkpoint object name '%s' given twice",
                         objs[i].name);
  }
  return 0;
}

/* Create path fresh and lock it; a partial leftover of the same step is
 * replaced, a complete one refused. Returns the lock fd. */
static int make_dir(const char *path, char *err) {
  for (int attempt = 0; attempt < 100; attempt++) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
      return stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", path,
                       strerror(errno));
    int lk = stk__ckpt_lock(path, 1, 0, err);
    /* A gc of another process may hold the new directory for a moment
     * (and then remove it): try again. */
    if (lk == STK_ENOENT) continue;
    if (lk == STK_EBUSY && attempt < 99) {
      stk_sleep_ns(10000000);
      continue;
    }
    if (lk < 0) return lk;
    char mp[4096];
    stk__ckpt_join(mp, sizeof mp, path, CKPT_MANIFEST);
    struct ckpt_manifest m;
    if (access(mp, F_OK) == 0) {
      if (stk__ckpt_manifest_read(path, &m, NULL) == 0) {
        stk__ckpt_manifest_free(&m);
        close(lk);
        return stk__errf(err, STK_EEXIST, "%s: this step is already saved", path);
      }
    }
    /* Partial: clear what is there, keeping the lock file. */
    for (size_t i = 0;; i++) { /* objects, manifests, drain state */
      char f[16], p[4096];
      stk__ckpt_objfile(f, i);
      stk__ckpt_join(p, sizeof p, path, f);
      if (unlink(p) != 0) break;
    }
    const char *extra[] = {CKPT_MANIFEST, CKPT_MANIFEST_TMP, CKPT_DRAINED, CKPT_PROGRESS};
    for (size_t i = 0; i < STK__ARRAY_LEN(extra); i++) {
      char p[4096];
      stk__ckpt_join(p, sizeof p, path, extra[i]);
      unlink(p);
    }
    return lk;
  }
  return stk__errf(err, STK_EBUSY, "%s: removed by another process while being created", path);
}

int stk_ckpt_save(struct stk_ckpt *c, uint64_t step, const struct stk_ckpt_obj *objs, size_t n,
                  char *err) {
  if (!c || (n && !objs)) return stk__errf(err, STK_EINVAL, "checkpoint save: no objects");
  int rc = check_objs(objs, n, err);
  if (rc) return rc;
  uint64_t t0 = stk_now_ns();
  char name[64], path[4096];
  stk__ckpt_dirname(name, step, c->o.rank);
  stk__ckpt_join(path, sizeof path, c->dir, name);
  int lk = make_dir(path, err);
  if (lk < 0) return lk;

  struct save s = {.c = c, .path = path, .objs = objs};
  s.early_flush = !c->o.no_fsync;
  s.fds = calloc(n ? n : 1, sizeof *s.fds);
  s.direct = calloc(n ? n : 1, sizeof *s.direct);
  size_t nch = 0;
  uint64_t cb = c->o.chunk_bytes, total = 0;
  for (size_t i = 0; i < n; i++) nch += (size_t)((objs[i].size + cb - 1) / cb), total += objs[i].size;
  s.ch = calloc(nch ? nch : 1, sizeof *s.ch);
  if (!s.fds || !s.direct || !s.ch) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  for (size_t i = 0; s.fds && i < n; i++) s.fds[i] = -1;
  for (size_t i = 0, k = 0; !rc && i < n; i++) {
    char f[16], p[4096];
    stk__ckpt_objfile(f, i);
    stk__ckpt_join(p, sizeof p, path, f);
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    int fd = -1;
    if (c->o.direct >= 0 && objs[i].size >= CKPT_ALIGN) {
      fd = open(p, flags | O_DIRECT, 0644);
      s.direct[i] = fd >= 0;
    }
    if (fd < 0) fd = open(p, flags, 0644);
    if (fd < 0) {
      rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", p, strerror(errno));
      break;
    }
    s.fds[i] = fd;
    /* Reserve the space first: a full disk fails here, before any write. */
    if (objs[i].size) {
      int e = posix_fallocate(fd, 0, (off_t)objs[i].size);
      if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        rc = stk__errf(err, stk__from_errno(e), "%s: cannot reserve %llu bytes: %s", p,
                       (unsigned long long)objs[i].size, strerror(e));
    }
    for (uint64_t off = 0; off < objs[i].size; off += cb, k++)
      s.ch[k] = (struct chunk){.obj = i, .off = off, .len = STK__MIN(cb, objs[i].size - off)};
  }
  if (!rc) {
    pthread_key_create(&s.buf_key, buf_free);
    rc = stk__ckpt_pfor(c->o.threads, nch, write_chunk, &s, err);
    void *b = pthread_getspecific(s.buf_key); /* the caller's own buffer */
    free(b);
    pthread_setspecific(s.buf_key, NULL);
    pthread_key_delete(s.buf_key);
  }
  if (!rc) rc = stk__ckpt_pfor(c->o.threads, n, sync_file, &s, err);
  struct ckpt_manifest m = {.step = step, .rank = c->o.rank, .world = c->o.world, .n = n};
  m.obj = calloc(n ? n : 1, sizeof *m.obj);
  if (!rc && !m.obj) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  for (size_t i = 0, k = 0; !rc && i < n; i++) {
    uint32_t crc = 0;
    for (; k < nch && s.ch[k].obj == i; k++) crc = stk__crc32c_combine(crc, s.ch[k].crc, s.ch[k].len);
    m.obj[i] = (struct ckpt_obj_meta){.name = (char *)objs[i].name, .size = objs[i].size, .crc = crc};
  }
  for (size_t i = 0; s.fds && i < n; i++)
    if (s.fds[i] >= 0) close(s.fds[i]);
  if (!rc) rc = stk__ckpt_manifest_write(path, &m, c->o.no_fsync, err);
  free(m.obj);
  free(s.fds);
  free(s.direct);
  free(s.ch);
  if (!rc && !c->o.no_fsync) stk__ckpt_fsync_path(c->dir); /* the new directory's entry */
  if (rc) {
    stk__ckpt_remove_dir(path, NULL); /* nothing half-committed stays */
    close(lk);
    return rc;
  }
  close(lk);
  pthread_mutex_lock(&c->mu);
  c->st.saves++;
  c->st.save_bytes += total;
  c->st.save_ns += stk_now_ns() - t0;
  c->st.direct_writes += s.direct_writes;
  pthread_mutex_unlock(&c->mu);
  if (c->origin)
    stk__ckpt_drain_enqueue(c, step);
  else
    stk__ckpt_evict(c);
  return 0;
}
