/* Chunks: byte ranges of one large object (a Megatron .bin of terabytes)
 * served in fixed-size pieces, each fetched, checked, kept and evicted on
 * its own, instead of staging the whole object.
 *
 * Chunk k of shard i is bytes [k * chunk, (k + 1) * chunk) of its object
 * (the last one shorter). In the disk tier a chunk is an ordinary entry
 * (data/KEY and KEY.meta, the fill protocol of cache_disk.c: one download
 * per node, the CRC32C of what arrived recorded in the .meta and checked
 * again on first use after a restart or a change, LRU eviction of entries
 * no process holds). KEY hashes the origin, the object's name, its size
 * and ETag when opened, and the chunk size, so a changed object or another
 * chunk size never meets old chunks; every fetch of a chunk must answer
 * with the ETag the object had when this process first asked about it.
 *
 * In this process, chunks in use sit in a small table of slots, each a
 * read-only mapping of the chunk's file (disk tier, share-locked, so the
 * evictor skips it) or of a memfd (RAM only). A reader pins the slot while
 * it copies; an unpinned slot is reused least recently used first. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache_int.h"

enum { S_EMPTY = 0, S_BUSY, S_READY };

struct cslot {
  int state;
  size_t i;
  uint64_t k;
  int fd;         /* the disk entry (flock LOCK_SH) or a memfd */
  uint64_t ram;   /* bytes counted in the RAM tier (a memfd), else 0 */
  const uint8_t *map;
  uint64_t len;
  uint32_t pins;
  uint64_t lru;
};

struct cobj {
  int known;
  uint64_t size;
  char etag[STK_ETAG_MAX];
  /* The last fetch that failed for good (its retries spent): reads of the
   * object within FAIL_HOLD_NS of it report it at once, so the loader's
   * threads do not each spend a retry budget on a dead origin. */
  int fail_rc;
  uint64_t fail_ns;
  char fail_msg[STK_ERRMSG_MAX];
};

#define FAIL_HOLD_NS (10ull * 1000000000ull)

struct stk__chunks {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t bytes; /* chunk size */
  struct cobj *obj; /* per shard */
  struct cslot *slot;
  size_t nslot;
  uint64_t clock;
};

#define SLOTS_DISK 64
#define SLOTS_MAX 64

uint64_t stk__cache_chunk_bytes(const struct stk_cache *c) {
  return c->o.chunk_bytes ? c->o.chunk_bytes : STK_CACHE_CHUNK_DEFAULT;
}

static struct stk__chunks *chunks(struct stk_cache *c, char *err) {
  pthread_mutex_lock(&c->mu);
  struct stk__chunks *ch = c->ch;
  if (!ch && (ch = calloc(1, sizeof *ch)) != NULL) {
    ch->bytes = stk__cache_chunk_bytes(c);
    /* With a disk tier the page cache holds the bytes: slots are only
     * mappings. RAM only: what the RAM budget holds, at least 2. */
    ch->nslot = c->dir && !c->ro ? SLOTS_DISK : STK__MAX(2u, STK__MIN(SLOTS_MAX, c->ram_budget / ch->bytes));
    ch->obj = calloc(c->n ? c->n : 1, sizeof *ch->obj);
    ch->slot = calloc(ch->nslot, sizeof *ch->slot);
    if (!ch->obj || !ch->slot) {
      free(ch->obj);
      free(ch->slot);
      free(ch);
      ch = NULL;
    } else {
      pthread_mutex_init(&ch->mu, NULL);
      pthread_cond_init(&ch->cv, NULL);
      for (size_t s = 0; s < ch->nslot; s++) ch->slot[s].fd = -1;
      c->ch = ch;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (!ch) stk__errf(err, STK_ENOMEM, "out of memory");
  return ch;
}

static void slot_drop(struct stk_cache *c, struct cslot *s) {
  if (s->map) munmap((void *)s->map, s->len);
  if (s->fd >= 0) close(s->fd);
  if (s->ram) {
    pthread_mutex_lock(&c->mu);
    c->ram_used -= s->ram;
    pthread_mutex_unlock(&c->mu);
  }
  s->map = NULL;
  s->fd = -1;
  s->ram = 0;
  s->len = 0;
  s->state = S_EMPTY;
}

void stk__chunks_free(struct stk_cache *c) {
  struct stk__chunks *ch = c->ch;
  if (!ch) return;
  for (size_t s = 0; s < ch->nslot; s++) slot_drop(c, &ch->slot[s]);
  pthread_cond_destroy(&ch->cv);
  pthread_mutex_destroy(&ch->mu);
  free(ch->slot);
  free(ch->obj);
  free(ch);
  c->ch = NULL;
}

/* The object's size and ETag, asked once (HEAD) and then fixed. */
static int object(struct stk_cache *c, struct stk__chunks *ch, size_t i, struct cobj *out,
                  char *err) {
  pthread_mutex_lock(&ch->mu);
  *out = ch->obj[i];
  pthread_mutex_unlock(&ch->mu);
  if (out->known) return 0;
  struct stk_obj_info info;
  int rc = stk__origin_stat(c->origin, c->tab[i].name, &info, err);
  if (rc) return rc;
  if (c->tab[i].size != UINT64_MAX && info.size != c->tab[i].size)
    return stk__errf(err, STK_EIO, "%s/%s: %" PRIu64 " bytes now, %" PRIu64 " when opened: reopen the dataset",
                     stk__origin_url(c->origin), c->tab[i].name, info.size, c->tab[i].size);
  pthread_mutex_lock(&ch->mu);
  if (!ch->obj[i].known) {
    ch->obj[i].known = 1;
    ch->obj[i].size = info.size;
    snprintf(ch->obj[i].etag, sizeof ch->obj[i].etag, "%s", info.etag);
  }
  *out = ch->obj[i];
  pthread_mutex_unlock(&ch->mu);
  return 0;
}

/* The directory name of chunk k: a hash of the shard's key, the object's
 * size and ETag and the chunk size, then the chunk number and the name. */
static void chunk_key(struct stk_cache *c, size_t i, const struct cobj *ob, uint64_t bytes,
                      uint64_t k, char *key) {
  char base[KEY_MAX];
  stk__cache_key(c, i, base); /* "HASH-name" */
  uint64_t h = strtoull(base, NULL, 16);
  h = stk_mix64(stk_mix64(h, ob->size), bytes);
  for (const char *p = ob->etag; *p; p++) h = stk_mix64(h, (uint8_t)*p);
  const char *name = strchr(base, '-');
  int n = snprintf(key, KEY_MAX, "%016" PRIx64 ".c%" PRIu64 "%s", h, k, name ? name : "");
  if (n >= KEY_MAX) key[KEY_MAX - 1] = 0;
}

/* Stage chunk k of shard i and map it (no lock held). */
static int load(struct stk_cache *c, struct stk__chunks *ch, size_t i, const struct cobj *ob,
                uint64_t k, struct cslot *s, const int *cancel, char *err) {
  char key[KEY_MAX];
  chunk_key(c, i, ob, ch->bytes, k, key);
  uint64_t off = k * ch->bytes;
  struct unit u = {.i = i, .key = key, .off = off, .want = STK__MIN(ch->bytes, ob->size - off),
                   .etag = ob->etag};
  int dfd = -1, rfd = -1;
  int rc = stk__stage_unit(c, &u, &dfd, &rfd, cancel, err);
  if (rc) return rc;
  int fd = rfd >= 0 ? rfd : dfd;
  if (rfd >= 0 && dfd >= 0) close(dfd);
  void *p = u.size ? mmap(NULL, (size_t)u.size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    if (rfd >= 0) {
      pthread_mutex_lock(&c->mu);
      c->ram_used -= u.size;
      pthread_mutex_unlock(&c->mu);
    }
    return stk__errf(err, stk__from_errno(e), "cache: cannot map chunk %" PRIu64 " of %s: %s", k,
                     c->tab[i].name, strerror(e));
  }
  s->fd = fd;
  s->map = p;
  s->len = u.size;
  s->ram = rfd >= 0 ? u.size : 0;
  return 0;
}

/* A READY slot holding chunk k of shard i, pinned; *loaded (may be NULL)
 * set when this call staged it. */
static int acquire(struct stk_cache *c, struct stk__chunks *ch, size_t i, const struct cobj *ob,
                   uint64_t k, const int *cancel, struct cslot **out, int *loaded, char *err) {
  pthread_mutex_lock(&ch->mu);
  for (;;) {
    if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
      pthread_mutex_unlock(&ch->mu);
      return stk__errf(err, STK_ECANCELED, "canceled");
    }
    struct cslot *hit = NULL, *victim = NULL;
    for (size_t j = 0; j < ch->nslot; j++) {
      struct cslot *s = &ch->slot[j];
      if (s->state != S_EMPTY && s->i == i && s->k == k) {
        hit = s;
        break;
      }
      if (s->pins) continue;
      if (!victim || (victim->state != S_EMPTY && (s->state == S_EMPTY || s->lru < victim->lru)))
        victim = s;
    }
    if (hit && hit->state == S_READY) {
      hit->pins++;
      hit->lru = ++ch->clock;
      pthread_mutex_unlock(&ch->mu);
      *out = hit;
      return 0;
    }
    if (hit || !victim) { /* being fetched, or every slot in use: wait */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&ch->cv, &ch->mu, &ts);
      continue;
    }
    if (victim->state == S_READY) slot_drop(c, victim);
    victim->state = S_BUSY;
    victim->i = i;
    victim->k = k;
    victim->pins = 1;
    pthread_mutex_unlock(&ch->mu);
    int rc = load(c, ch, i, ob, k, victim, cancel, err);
    if (loaded) *loaded = rc == 0;
    pthread_mutex_lock(&ch->mu);
    if (rc) {
      victim->state = S_EMPTY;
      victim->pins = 0;
    } else {
      victim->state = S_READY;
      victim->lru = ++ch->clock;
    }
    pthread_cond_broadcast(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
    *out = victim;
    return rc;
  }
}

static void unpin(struct stk__chunks *ch, struct cslot *s) {
  pthread_mutex_lock(&ch->mu);
  s->pins--;
  pthread_cond_broadcast(&ch->cv);
  pthread_mutex_unlock(&ch->mu);
}

int stk__cache_read(struct stk_cache *c, size_t i, uint64_t off, void *buf, uint64_t len,
                    const int *cancel, char *err) {
  if (i >= c->n) return stk__errf(err, STK_EINVAL, "cache: no shard %zu", i);
  struct stk__chunks *ch = chunks(c, err);
  if (!ch) return STK_ENOMEM;
  struct cobj ob;
  int rc = object(c, ch, i, &ob, err);
  if (rc) return rc;
  if (ob.fail_rc && stk_now_ns() - ob.fail_ns < FAIL_HOLD_NS)
    return stk__errf(err, ob.fail_rc, "%s", ob.fail_msg);
  if (off > ob.size || len > ob.size - off)
    return stk__errf(err, STK_ERANGE,
                     "%s/%s: bytes %" PRIu64 "..%" PRIu64 " lie past its end (%" PRIu64 " bytes)",
                     stk__origin_url(c->origin), c->tab[i].name, off, off + len, ob.size);
  uint8_t *b = buf;
  while (len) {
    uint64_t k = off / ch->bytes, in = off % ch->bytes;
    struct cslot *s = NULL;
    if ((rc = acquire(c, ch, i, &ob, k, cancel, &s, NULL, err)) != 0) {
      if (rc != STK_ECANCELED) {
        pthread_mutex_lock(&ch->mu);
        ch->obj[i].fail_rc = rc;
        ch->obj[i].fail_ns = stk_now_ns();
        snprintf(ch->obj[i].fail_msg, sizeof ch->obj[i].fail_msg, "%s", err);
        pthread_mutex_unlock(&ch->mu);
      }
      return rc;
    }
    uint64_t have = s->len, n = STK__MIN(len, have > in ? have - in : 0);
    if (n == 0) { /* the chunk is shorter than the object says */
      unpin(ch, s);
      return stk__errf(err, STK_ETRUNC, "%s/%s: chunk %" PRIu64 " ends at byte %" PRIu64,
                       stk__origin_url(c->origin), c->tab[i].name, k, k * ch->bytes + have);
    }
    memcpy(b, s->map + in, (size_t)n);
    unpin(ch, s);
    b += n;
    off += n;
    len -= n;
  }
  return 0;
}

int stk__cache_warm(struct stk_cache *c, size_t i, uint64_t off, uint64_t len, const int *cancel,
                    char *err) {
  if (i >= c->n) return stk__errf(err, STK_EINVAL, "cache: no shard %zu", i);
  struct stk__chunks *ch = chunks(c, err);
  if (!ch) return STK_ENOMEM;
  struct cobj ob;
  int rc = object(c, ch, i, &ob, err);
  if (rc) return rc;
  if (ob.fail_rc && stk_now_ns() - ob.fail_ns < FAIL_HOLD_NS)
    return stk__errf(err, ob.fail_rc, "%s", ob.fail_msg);
  if (!len || off >= ob.size) return 0;
  uint64_t last = (off + STK__MIN(len, ob.size - off) - 1) / ch->bytes;
  for (uint64_t k = off / ch->bytes; k <= last; k++) {
    struct cslot *s = NULL;
    int loaded = 0;
    if ((rc = acquire(c, ch, i, &ob, k, cancel, &s, &loaded, err)) != 0) return rc;
    unpin(ch, s);
    if (loaded) { /* staged here, ahead of its reader: counted as prefetched */
      pthread_mutex_lock(&c->mu);
      c->st.prefetched++;
      pthread_mutex_unlock(&c->mu);
    }
  }
  return 0;
}
