/* Asynchronous save: the caller blocks only while its objects are copied
 * into a staging buffer the handle owns (several threads copy at once);
 * a saver thread then runs the ordinary save (write, fsync, commit, drain
 * queued) from that buffer. One save in flight: the next either waits for
 * it (and for its drain) or is skipped, the caller's choice, counted. */
#include <stdlib.h>
#include <string.h>

#include "ckpt_impl.h"

static void *saver_thread(void *arg) {
  struct stk_ckpt *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->job_pending && !c->saver_stop) pthread_cond_wait(&c->cv, &c->mu);
    if (!c->job_pending) break;
    c->job_pending = 0;
    c->job_running = 1;
    pthread_mutex_unlock(&c->mu);
    char err[STK_ERRMSG_MAX] = "";
    int rc = stk_ckpt_save(c, c->job_step, c->job_objs, c->job_n, err);
    pthread_mutex_lock(&c->mu);
    if (rc && !c->async_rc) {
      c->async_rc = rc;
      memcpy(c->async_err, err, sizeof err);
    }
    c->job_running = 0;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* Busy: a job staged or being written, or (with an origin) a drain queued
 * or running. Called with mu held. */
static int busy(const struct stk_ckpt *c) {
  return c->job_pending || c->job_running || c->qlen || c->draining;
}

struct copy {
  const struct stk_ckpt_obj *src;
  uint8_t *stage;
  const size_t *off;
  size_t n;
};

#define COPY_CHUNK (16u << 20)

/* Piece i: object and range found by walking (few objects, cheap). */
static int copy_piece(void *arg, size_t i, char *err) {
  struct copy *cp = arg;
  (void)err;
  for (size_t k = 0; k < cp->n; k++) {
    size_t pieces = (size_t)((cp->src[k].size + COPY_CHUNK - 1) / COPY_CHUNK);
    if (i >= pieces) {
      i -= pieces;
      continue;
    }
    uint64_t off = (uint64_t)i * COPY_CHUNK, len = STK__MIN(COPY_CHUNK, cp->src[k].size - off);
    memcpy(cp->stage + cp->off[k] + off, (const uint8_t *)cp->src[k].data + off, len);
    return 0;
  }
  return 0;
}

int stk_ckpt_save_async(struct stk_ckpt *c, uint64_t step, const struct stk_ckpt_obj *objs,
                        size_t n, int policy, char *err) {
  if (!c || (n && !objs)) return stk__errf(err, STK_EINVAL, "checkpoint save: no objects");
  uint64_t t0 = stk_now_ns();
  pthread_mutex_lock(&c->mu);
  if (c->async_rc) { /* the last background save failed: say so now */
    int rc = c->async_rc;
    if (err) memcpy(err, c->async_err, STK_ERRMSG_MAX);
    c->async_rc = 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
  }
  if (busy(c)) {
    if (policy == STK_CKPT_SKIP) {
      c->st.busy_skips++;
      pthread_mutex_unlock(&c->mu);
      return stk__errf(err, STK_EBUSY,
                       "checkpoint step %llu skipped: the save before it is still being %s",
                       (unsigned long long)step, c->job_pending || c->job_running ? "written" : "drained");
    }
    while (busy(c)) pthread_cond_wait(&c->cv, &c->mu);
    c->st.busy_waits++;
    c->st.busy_wait_ns += stk_now_ns() - t0;
    if (c->async_rc) {
      int rc = c->async_rc;
      if (err) memcpy(err, c->async_err, STK_ERRMSG_MAX);
      c->async_rc = 0;
      pthread_mutex_unlock(&c->mu);
      return rc;
    }
  }
  pthread_mutex_unlock(&c->mu);

  /* The saver is idle: the staging buffer and job are ours to fill. */
  size_t *off = calloc(n ? n : 1, sizeof *off), names = 0, total = 0;
  for (size_t i = 0; off && i < n; i++) {
    off[i] = total;
    total += (size_t)((objs[i].size + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN);
    names += objs[i].name ? strlen(objs[i].name) + 1 : 0;
  }
  int rc = off ? 0 : STK_ENOMEM;
  if (!rc && total + names > c->stage_cap) {
    free(c->stage);
    c->stage_cap = 0;
    if (posix_memalign((void **)&c->stage, CKPT_ALIGN, total + names ? total + names : 1))
      c->stage = NULL, rc = STK_ENOMEM;
    else
      c->stage_cap = total + names;
  }
  struct stk_ckpt_obj *jobs = NULL;
  if (!rc && !(jobs = calloc(n ? n : 1, sizeof *jobs))) rc = STK_ENOMEM;
  if (rc) {
    free(off);
    return stk__errf(err, STK_ENOMEM, "checkpoint step %llu: out of memory staging %zu bytes",
                     (unsigned long long)step, total);
  }
  size_t pieces = 0;
  char *np = (char *)c->stage + total;
  for (size_t i = 0; i < n; i++) {
    pieces += (size_t)((objs[i].size + COPY_CHUNK - 1) / COPY_CHUNK);
    const char *name = objs[i].name ? objs[i].name : "";
    size_t l = strlen(name) + 1;
    memcpy(np, name, l);
    jobs[i] = (struct stk_ckpt_obj){objs[i].name ? np : NULL, c->stage + off[i], objs[i].size};
    np += l;
  }
  struct copy cp = {.src = objs, .stage = c->stage, .off = off, .n = n};
  stk__ckpt_pfor(c->o.threads, pieces, copy_piece, &cp, NULL);
  free(off);

  pthread_mutex_lock(&c->mu);
  free(c->job_objs);
  c->job_objs = jobs;
  c->job_n = n;
  c->job_step = step;
  c->job_pending = 1;
  if (!c->have_saver && pthread_create(&c->saver, NULL, saver_thread, c) == 0) c->have_saver = 1;
  if (!c->have_saver) {
    c->job_pending = 0;
    pthread_mutex_unlock(&c->mu);
    return stk__errf(err, STK_ESYS, "checkpoint: cannot start the saver thread");
  }
  c->st.async_saves++;
  c->st.async_block_ns += stk_now_ns() - t0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return 0;
}

int stk_ckpt_save_wait(struct stk_ckpt *c, char *err) {
  pthread_mutex_lock(&c->mu);
  while (c->job_pending || c->job_running) pthread_cond_wait(&c->cv, &c->mu);
  int rc = c->async_rc;
  if (rc && err) memcpy(err, c->async_err, STK_ERRMSG_MAX);
  c->async_rc = 0;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void stk__ckpt_async_stop(struct stk_ckpt *c) {
  pthread_mutex_lock(&c->mu);
  c->saver_stop = 1;
  pthread_cond_broadcast(&c->cv);
  int t = c->have_saver;
  pthread_mutex_unlock(&c->mu);
  if (t) pthread_join(c->saver, NULL);
  c->have_saver = 0;
  free(c->job_objs);
  c->job_objs = NULL;
  free(c->stage);
  c->stage = NULL;
}
