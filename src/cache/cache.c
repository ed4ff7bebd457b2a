/* The shard cache: staging, the fetchers and the interface; the directory
 * format is cache_dir.c, the disk tier's fills cache_disk.c, the RAM tier
 * cache_ram.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"

/* ---- staging ----------------------------------------------------------------- */

/* Bring shard i into a tier: RAM (when the RAM tier is on) or disk. Runs
 * without mu, with the entry E_BUSY (so only this thread stages it). */
static int stage(struct stk_cache *c, size_t i, int *disk_fd, int *ram_fd, const int *cancel,
                 char *err) {
  *disk_fd = *ram_fd = -1;
  int rc = 0;
  char key[KEY_MAX];
  stk__cache_key(c, i, key);
  struct unit u = {.i = i,
                   .key = key,
                   .want = c->tab[i].size,
                   .crc = c->tab[i].crc32c,
                   .has_crc = c->tab[i].has_crc};
  pthread_mutex_lock(&c->mu);
  u.verified = c->e[i].verified;
  pthread_mutex_unlock(&c->mu);
  rc = stk__stage_unit(c, &u, disk_fd, ram_fd, cancel, err);
  if (!rc) {
    pthread_mutex_lock(&c->mu);
    if (u.verified) c->e[i].verified = 1;
    c->e[i].size = u.size;
    pthread_mutex_unlock(&c->mu);
  }
  return rc;
}

/* Bring a unit (a shard, or a chunk of one) into a tier. A disk copy and
 * a RAM copy may both come back; u->size is set when it is staged. */
int stk__stage_unit(struct stk_cache *c, struct unit *u, int *disk_fd, int *ram_fd,
                    const int *cancel, char *err) {
  *disk_fd = *ram_fd = -1;
  int rc = 0;
  if (c->dir) {
    rc = stk__disk_lookup(c, u, disk_fd);
    if (rc == 0) {
      pthread_mutex_lock(&c->mu);
      c->st.disk.hits++;
      pthread_mutex_unlock(&c->mu);
    } else if (c->ro) {
      /* Nothing can be added: fetched into memory below. */
      pthread_mutex_lock(&c->mu);
      c->st.disk.misses++;
      pthread_mutex_unlock(&c->mu);
      rc = 0;
    } else {
      rc = stk__disk_fill(c, u, disk_fd, cancel, err);
      if (rc == STK_ENOSPC) {
        /* Disk full: serve this shard from memory rather than stop. */
        pthread_mutex_lock(&c->mu);
        int warn = !c->disk_full_warned;
        c->disk_full_warned = 1;
        c->st.disk_full++;
        pthread_mutex_unlock(&c->mu);
        if (warn) stk_log(STK_LOG_WARN, "%s; serving shards from memory until space frees", err);
        rc = 0;
      } else if (rc) {
        return rc;
      }
    }
    if (*disk_fd >= 0 && c->ram_budget == 0) return 0;
  }
  uint64_t size = u->size;
  if (*disk_fd >= 0) {
    pthread_mutex_lock(&c->mu);
    if (size <= c->ram_budget) stk__ram_make_room(c, size);
    int fits = size <= c->ram_budget && c->ram_used + size <= c->ram_budget;
    if (fits) c->ram_used += size; /* reserved */
    pthread_mutex_unlock(&c->mu);
    if (!fits) return 0; /* too big for RAM now: served from disk */
    if (stk__ram_copy(*disk_fd, size, ram_fd, err) != 0) { /* served from disk then */
      stk_log(STK_LOG_WARN, "cache: %s", err);
      pthread_mutex_lock(&c->mu);
      c->ram_used -= size;
      pthread_mutex_unlock(&c->mu);
    }
    return 0;
  }
  /* No disk copy: fetch straight into memory. */
  int fd = stk__new_memfd(UINT64_MAX, err); /* sized by the bytes that arrive */
  if (fd < 0) return fd;
  uint64_t got = 0;
  uint32_t crc;
  if ((rc = stk__fetch_into(c, u, fd, &got, &crc, cancel, err)) != 0) {
    close(fd);
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  if (got <= c->ram_budget) stk__ram_make_room(c, got);
  c->ram_used += got; /* may pass the budget when everything is pinned */
  pthread_mutex_unlock(&c->mu);
  u->size = got;
  *ram_fd = fd;
  return 0;
}

/* Stage entry i, which the caller marked E_BUSY (mu not held). On success
 * the entry is E_READY; on failure E_NONE. Wakes waiters either way. */
static int stage_entry(struct stk_cache *c, size_t i, const int *cancel, char *err) {
  int dfd, rfd;
  int rc = stage(c, i, &dfd, &rfd, cancel, err);
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  if (rc) {
    if (dfd >= 0) close(dfd);
    if (rfd >= 0) close(rfd);
    x->state = E_NONE;
    if (rc != STK_ECANCELED) { /* kept for those who waited on it */
      free(x->fail_msg);
      x->fail_msg = strdup(err);
      x->fail_rc = rc;
      x->fail_ns = stk_now_ns();
    }
  } else {
    x->state = E_READY;
    x->disk_fd = dfd;
    x->ram_fd = rfd;
    x->lru = ++c->ram_clock;
    if (x->pins == 0) {
      /* Nobody wants it now (a prefetch released early): keep only RAM. */
      if (x->disk_fd >= 0) close(x->disk_fd);
      x->disk_fd = -1;
      if (x->ram_fd < 0) x->state = E_NONE;
    }
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static void *fetcher_main(void *arg) {
  struct stk_cache *c = arg;
  char err[STK_ERRMSG_MAX];
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->stop && c->q_len == 0) pthread_cond_wait(&c->cv, &c->mu);
    if (c->stop) break;
    size_t i = c->queue[c->q_head];
    c->q_head = (c->q_head + 1) % c->n;
    c->q_len--;
    struct entry *x = &c->e[i];
    x->in_queue = 0;
    if (x->state != E_QUEUED) continue; /* taken by an acquire, or no longer wanted */
    x->state = E_BUSY;
    pthread_mutex_unlock(&c->mu);
    int rc = stage_entry(c, i, &c->stop, err);
    pthread_mutex_lock(&c->mu);
    if (rc == 0) {
      c->st.prefetched++;
    } else if (rc != STK_ECANCELED) {
      /* The acquire that needs it will try again and report. */
      stk_log(STK_LOG_INFO, "cache: prefetch of %s failed: %s", c->tab[i].name, err);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ---- the interface ------------------------------------------------------------ */

int stk__cache_acquire(struct stk_cache *c, size_t i, int *fd, const int *cancel, char *err) {
  if (i >= c->n) return stk__errf(err, STK_ERANGE, "cache: no shard %zu", i);
  uint64_t t0 = stk_now_ns();
  uint64_t retry_ns = (uint64_t)((c->o.retry_max_s > 0 ? c->o.retry_max_s : 120) * 1e9);
  int stalled = 0, rc = 0;
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  x->pins++;
  if (c->ram_budget) {
    if (x->state == E_READY && x->ram_fd >= 0) c->st.ram.hits++;
    else c->st.ram.misses++;
  }
  for (;;) {
    if (x->state == E_READY) break;
    if ((cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) ||
        (c->o.cancel && __atomic_load_n(c->o.cancel, __ATOMIC_RELAXED))) {
      rc = stk__errf(err, STK_ECANCELED, "canceled");
      break;
    }
    if (x->state == E_NONE && x->fail_msg && (x->fail_ns >= t0 || t0 - x->fail_ns < retry_ns)) {
      /* A staging of this shard (a prefetch, or another reader's acquire)
       * failed after spending its retry budget while this acquire waited,
       * or less than a budget ago: that is the answer, not a reason to
       * spend another (--retry-max-s bounds the wait, and the message's
       * "over N s" is the time it took). A later acquire tries afresh. */
      rc = stk__errf(err, x->fail_rc, "%s", x->fail_msg);
      break;
    }
    if (x->state == E_BUSY) {
      stalled = 1; /* another thread is staging it: wait for that */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50000000;
      if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&c->cv, &c->mu, &ts);
      continue;
    }
    x->state = E_BUSY; /* from E_NONE, or taken from the prefetch queue */
    pthread_mutex_unlock(&c->mu);
    stk__fetched_here = 0;
    rc = stage_entry(c, i, cancel, err);
    stalled |= stk__fetched_here; /* a disk-tier hit is not a stall */
    pthread_mutex_lock(&c->mu);
    if (rc) break;
  }
  if (!rc) {
    x->lru = ++c->ram_clock;
    *fd = fcntl(x->ram_fd >= 0 ? x->ram_fd : x->disk_fd, F_DUPFD_CLOEXEC, 0);
    if (*fd < 0) rc = stk__errf(err, stk__from_errno(errno), "cache: dup failed: %s", strerror(errno));
  }
  if (stalled) {
    c->st.stalls++;
    c->st.stall_ns += stk_now_ns() - t0;
  }
  pthread_mutex_unlock(&c->mu);
  if (rc) stk__cache_release(c, i);
  return rc;
}

void stk__cache_prefetch(struct stk_cache *c, size_t i) {
  if (i >= c->n) return;
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  x->pins++;
  if (x->state == E_NONE && c->nfetchers) {
    x->state = E_QUEUED;
    if (!x->in_queue) {
      x->in_queue = 1;
      c->queue[(c->q_head + c->q_len) % c->n] = i;
      c->q_len++;
    }
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
}

void stk__cache_release(struct stk_cache *c, size_t i) {
  if (i >= c->n) return;
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  if (x->pins > 0 && --x->pins == 0) {
    if (x->state == E_QUEUED) x->state = E_NONE; /* no longer wanted */
    if (x->state == E_READY && x->disk_fd >= 0) {
      close(x->disk_fd); /* drops the shared lock: evictable again */
      x->disk_fd = -1;
      if (x->ram_fd < 0) x->state = E_NONE;
    }
  }
  pthread_mutex_unlock(&c->mu);
}

uint64_t stk__cache_shard_size(struct stk_cache *c, size_t i) {
  pthread_mutex_lock(&c->mu);
  uint64_t s = c->e[i].size != UINT64_MAX ? c->e[i].size : c->tab[i].size;
  pthread_mutex_unlock(&c->mu);
  return s;
}

int stk__cache_shard_stat(struct stk_cache *c, size_t i, uint64_t *size, char *err) {
  uint64_t s = stk__cache_shard_size(c, i);
  if (s == UINT64_MAX) {
    struct stk_obj_info info;
    int rc = stk__origin_stat(c->origin, c->tab[i].name, &info, err);
    if (rc) return rc;
    s = info.size;
    pthread_mutex_lock(&c->mu);
    if (c->e[i].size == UINT64_MAX) c->e[i].size = s;
    pthread_mutex_unlock(&c->mu);
  }
  *size = s;
  return 0;
}

const char *stk__cache_read_only_dir(const struct stk_cache *c) { return c->ro ? c->dir : NULL; }

uint64_t stk__cache_prefetch_budget(const struct stk_cache *c) {
  return c->o.prefetch_bytes < 0 ? 0 : (uint64_t)c->o.prefetch_bytes;
}

const char *stk__cache_origin_url(const struct stk_cache *c) { return stk__origin_url(c->origin); }

void stk__cache_recheck(struct stk_cache *c) { __atomic_store_n(&c->recheck, 1, __ATOMIC_RELAXED); }

void stk__cache_stats(struct stk_cache *c, struct stk_cache_stats *st) {
  struct stk_origin_stats os;
  stk__origin_stats(c->origin, &os);
  pthread_mutex_lock(&c->mu);
  *st = c->st;
  st->fetch_p50_ns = stk__hist_quantile(&c->fetch_hist, 0.50);
  st->fetch_p99_ns = stk__hist_quantile(&c->fetch_hist, 0.99);
  st->ram.bytes = c->ram_used;
  st->ram.capacity = c->ram_budget;

  st->disk.capacity = c->dir ? c->disk_budget : 0;
  uint64_t ram_entries = 0;
  for (size_t i = 0; i < c->n; i++) ram_entries += c->e[i].ram_fd >= 0;
  st->ram.entries = ram_entries;
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_lock(&c->disk_mu);
  st->disk.bytes = c->disk_used;
  pthread_mutex_unlock(&c->disk_mu);
  st->requests = os.requests;
  st->retries += os.retries;
  st->errors = os.errors;
  st->missing = os.missing;
  st->fetch_bytes = os.bytes;
}

static uint64_t mem_total(void) {
  struct sysinfo si;
  return sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : (8ull << 30);
}

void stk_cache_opts_init_sized(struct stk_cache_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

int stk__cache_open(struct stk_cache **out, struct stk_origin *origin,
                    const struct stk_cache_shard *tab, size_t n,
                    const struct stk_cache_opts *opts, char *err) {
  struct stk_cache *c = calloc(1, sizeof *c);
  struct stk_cache_opts o = opts ? *opts : (struct stk_cache_opts){0};
  size_t names = 0;
  for (size_t i = 0; i < n; i++) names += strlen(tab[i].name) + 1;
  char *nb = NULL;
  if (!c || !(c->tab = malloc((n ? n : 1) * sizeof *c->tab + names)) ||
      !(c->e = calloc(n ? n : 1, sizeof *c->e)) || !(c->queue = malloc((n ? n : 1) * sizeof(size_t)))) {
    if (c) {
      free(c->tab);
      free(c->e);
    }
    free(c);
    stk__origin_close(origin);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  nb = (char *)(c->tab + (n ? n : 1));
  for (size_t i = 0; i < n; i++) {
    c->tab[i] = tab[i];
    size_t l = strlen(tab[i].name) + 1;
    memcpy(nb, tab[i].name, l);
    c->tab[i].name = nb;
    nb += l;
    c->e[i].disk_fd = c->e[i].ram_fd = -1;
    c->e[i].size = tab[i].size;
  }
  c->n = n;
  c->origin = origin;
  c->o = o;
  c->o.dir = NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->disk_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  stk__boot_id(c->boot_id, sizeof c->boot_id);
  int rc = 0;
  if (o.dir) {
    if (!(c->dir = strdup(o.dir))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    else rc = stk__dir_prepare(c->dir, 1, &c->ro, err);
    if (!rc && !(c->tmpdir = stk__cache_path(c->dir, "", "tmp", ""))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    if (!rc && c->ro)
      stk_log(STK_LOG_INFO, "cache: %s is read-only here: serving the shards it holds, the "
              "others from memory", c->dir);
    if (!rc) {
      c->dir_ok = 1;
      uint64_t swept = c->ro ? 0 : stk__dir_sweep(c->dir);
      if (swept) stk_log(STK_LOG_INFO, "cache: %s: removed %llu files that interrupted fills left",
                         c->dir, (unsigned long long)swept);
      struct statvfs v;
      uint64_t fs_size = statvfs(c->dir, &v) == 0 ? (uint64_t)v.f_blocks * v.f_frsize : 0;
      c->disk_budget = o.disk_bytes ? o.disk_bytes : fs_size / 10 * 8;
      c->min_free = o.min_free ? o.min_free : STK__MIN(1ull << 30, fs_size / 20);
      struct dent *ents;
      size_t ne;
      if (stk__dir_entries(c->dir, &ents, &ne, &c->disk_used) == 0) {
        c->st.disk.entries = ne;
        free(ents);
      }
    }
  }
  c->ram_budget = o.ram_bytes           ? o.ram_bytes
                  : c->dir && !c->ro    ? 0
                                        : STK__MIN(mem_total() / 4, 8ull << 30);
  if (!c->o.prefetch_bytes) {
    uint64_t cap = c->dir && !c->ro ? c->disk_budget / 2 : c->ram_budget / 2;
    c->o.prefetch_bytes = (int64_t)STK__MIN(1ull << 30, cap);
  }
  uint32_t want = c->o.prefetch_bytes < 0 ? 0 : (o.fetchers ? o.fetchers : 8);
  if (!rc && want && (c->fetchers = calloc(want, sizeof *c->fetchers)) != NULL)
    while (c->nfetchers < want &&
           pthread_create(&c->fetchers[c->nfetchers], NULL, fetcher_main, c) == 0)
      c->nfetchers++;
  if (rc) {
    stk__cache_close(c);
    return rc;
  }
  *out = c;
  return 0;
}


void stk__cache_close(struct stk_cache *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  for (uint32_t t = 0; t < c->nfetchers; t++) pthread_join(c->fetchers[t], NULL);
  free(c->fetchers);
  stk__chunks_free(c);
  if (c->dir_ok && !c->ro) {
    struct stk_cache_stats st;
    stk__cache_stats(c, &st);
    stk__dir_add_stats(c->dir, &st);
  }
  for (size_t i = 0; i < c->n; i++) {
    if (c->e[i].disk_fd >= 0) close(c->e[i].disk_fd);
    if (c->e[i].ram_fd >= 0) close(c->e[i].ram_fd);
    free(c->e[i].fail_msg);
  }
  stk__origin_close(c->origin);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->disk_mu);
  free(c->queue);
  free(c->e);
  free(c->tab);
  free(c->dir);
  free(c->tmpdir);
  free(c);
}

void stk_cache_stats_init_sized(struct stk_cache_stats *st, size_t size) {
  stk__opts_init(st, sizeof *st, size);
}

void stk_cache_stats_json(const struct stk_cache_stats *sin, struct stk_json *j) {
  struct stk_cache_stats own; /* the caller's, read to its struct_size */
  stk__result_take(&own, sizeof own, sin);
  const struct stk_cache_stats *st = &own;
  stk_json_obj_begin(j);
  const struct stk_cache_tier_stats *t[2] = {&st->ram, &st->disk};
  const char *names[2] = {"ram", "disk"};
  for (int i = 0; i < 2; i++) {
    stk_json_key(j, names[i]);
    stk_json_obj_begin(j);
    stk_json_ku64(j, "hits", t[i]->hits);
    stk_json_ku64(j, "misses", t[i]->misses);
    stk_json_ku64(j, "bytes", t[i]->bytes);
    stk_json_ku64(j, "capacity", t[i]->capacity);
    stk_json_ku64(j, "entries", t[i]->entries);
    stk_json_ku64(j, "evictions", t[i]->evictions);
    stk_json_obj_end(j);
  }
  stk_json_ku64(j, "fetches", st->fetches);
  stk_json_ku64(j, "fetch_bytes", st->fetch_bytes);
  stk_json_key(j, "fetch_ms");
  stk_json_obj_begin(j);
  stk_json_kdbl(j, "p50", (double)st->fetch_p50_ns / 1e6);
  stk_json_kdbl(j, "p99", (double)st->fetch_p99_ns / 1e6);
  stk_json_obj_end(j);
  stk_json_ku64(j, "requests", st->requests);
  stk_json_ku64(j, "retries", st->retries);
  stk_json_ku64(j, "errors", st->errors);
  stk_json_ku64(j, "missing", st->missing);
  stk_json_ku64(j, "restages", st->restages);
  stk_json_ku64(j, "origin_checked", st->origin_checked);
  stk_json_ku64(j, "disk_full", st->disk_full);
  stk_json_ku64(j, "shared_waits", st->shared_waits);
  stk_json_ku64(j, "prefetched", st->prefetched);
  stk_json_ku64(j, "stalls", st->stalls);
  stk_json_kdbl(j, "stall_s", (double)st->stall_ns / 1e9);
  stk_json_obj_end(j);
}

