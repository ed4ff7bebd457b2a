/* The mapped-copy engine: a pool of threads that read by copying out of a
 * read-only mapping of the whole file, kept across requests, instead of by
 * pread. The batch is ordinary memory (the caller's allocator's: pinned
 * buffers work), as with pread; what changes is who copies. pread's copy
 * runs in the kernel, so a checksum has to be a second pass over the bytes
 * (on_read); here the request's on_copy hook copies in user space and can
 * check the bytes as it copies them (stk__crc32c_copy), the CRC riding in
 * the shadow of the loads. A mapping is made once per file: after the
 * first touch of a page a read costs one fstat (to see a file that grew
 * or shrank) and no page-cache lookup (bench B1: 128 KiB TFRecords from
 * the page cache, docs/internals/loader.md).
 *
 * Mappings are kept for up to MAX_MAPS files (the least recently used idle
 * one is unmapped for a new file), keyed by device and inode, so a
 * descriptor closed and reopened by the reader finds its mapping again. A
 * file that grew is mapped again; one shorter than the request's need is
 * STK_ETRUNC, as for pread. Files that cannot be mapped (not regular, some
 * FUSE and network file systems), and requests while every mapping is in
 * use, are read with pread.
 *
 * A file truncated after it was mapped makes the copy of its missing
 * pages raise SIGBUS; each copy runs under a guard (guard.c) that turns
 * that into STK_ETRUNC for the request, as a short pread would be (and a
 * page the device fails into STK_EIO), while the guard's handler is the
 * process's SIGBUS handler; a request finding another handler installed
 * over it is read with pread. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "io.h"

#define MAX_MAPS STK_IO_MAPCOPY_FILES

struct map {
  dev_t dev;
  ino_t ino;
  uint8_t *base; /* NULL: a free entry */
  uint64_t size; /* bytes mapped: the file's size when mapped */
  uint32_t users;
  uint64_t last_use;
};

struct maps {
  pthread_mutex_t mu;
  uint64_t clock;
  struct map m[MAX_MAPS];
};

/* The entry mapping [0, end) of the file st describes, with a user taken;
 * NULL when it cannot be had (the caller reads with pread). */
static struct map *map_get(struct maps *c, int fd, const struct stat *st, uint64_t end) {
  struct map *hit = NULL, *victim = NULL;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < MAX_MAPS; i++) {
    struct map *e = &c->m[i];
    if (e->base && e->dev == st->st_dev && e->ino == st->st_ino) {
      hit = e;
      break;
    }
    if (e->users || (victim && !victim->base)) continue;
    if (!victim || !e->base || e->last_use < victim->last_use) victim = e;
  }
  if (hit && hit->size < end) { /* the file grew: map it again when idle */
    victim = hit->users ? NULL : hit;
    hit = NULL;
  }
  if (!hit && victim) {
    if (victim->base) munmap(victim->base, victim->size);
    victim->base = NULL;
    void *m = mmap(NULL, (size_t)st->st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
      victim->base = m;
      victim->size = (uint64_t)st->st_size;
      victim->dev = st->st_dev;
      victim->ino = st->st_ino;
      hit = victim;
    }
  }
  if (hit) {
    hit->users++;
    hit->last_use = ++c->clock;
  }
  pthread_mutex_unlock(&c->mu);
  return hit;
}

static void map_put(struct maps *c, struct map *e) {
  pthread_mutex_lock(&c->mu);
  e->users--;
  pthread_mutex_unlock(&c->mu);
}

/* The pool runs on_read itself only for requests without on_copy. */
static int pread_fallback(struct stk_io_req *r) {
  int rc = stk__io_read_req(r);
  if (rc == 0 && r->on_copy && r->on_read) r->on_read(r);
  return rc;
}

static int copy_req(void *ctx, struct stk_io_req *r) {
  struct maps *c = ctx;
  struct stat st;
  /* Unguarded (a handler put over the guard's since), a truncated file
   * would end the process: read with pread instead. */
  if (!stk__io_guard_ready()) return pread_fallback(r);
  if (fstat(r->fd, &st) != 0) return stk__from_errno(errno);
  if (!S_ISREG(st.st_mode) || st.st_size <= 0) return pread_fallback(r);
  uint64_t need = r->need ? r->need : r->len, size = (uint64_t)st.st_size;
  if (size < r->off + need) return STK_ETRUNC;
  uint64_t n = STK__MIN(r->len, size - r->off);
  struct map *e = map_get(c, r->fd, &st, r->off + n);
  if (!e) return pread_fallback(r);
  int rc = stk__io_guarded_copy(r, e->base + r->off, n);
  map_put(c, e);
  if (rc == STK_ETRUNC && fstat(r->fd, &st) == 0 && (uint64_t)st.st_size >= r->off + n)
    rc = STK_EIO; /* not shorter: the device failed a page */
  return rc;
}

static int mapcopy_open(struct stk_io **out, const struct stk_io_opts *o, char *err) {
  struct maps *c = calloc(1, sizeof *c);
  if (!c) return stk__errf(err, STK_ENOMEM, "out of memory for the mapcopy engine");
  pthread_mutex_init(&c->mu, NULL);
  int rc = stk__io_pool_open(out, o, copy_req, c, 1, "mapcopy", err);
  if (rc) {
    pthread_mutex_destroy(&c->mu);
    free(c);
  }
  return rc;
}

static void mapcopy_close(struct stk_io *io) {
  struct maps *c = stk__io_pool_ctx(io);
  stk__io_pool_close(io);
  for (int i = 0; i < MAX_MAPS; i++)
    if (c->m[i].base) munmap(c->m[i].base, c->m[i].size);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const struct stk_io_ops stk__io_mapcopy = {
    .name = "mapcopy",
    .inline_hook = 1,
    .open = mapcopy_open,
    .submit = stk__io_pool_submit,
    .reap = stk__io_pool_reap,
    .close = mapcopy_close,
};
