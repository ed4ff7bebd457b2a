/* The loader's batches on their way out: a job's failures (a sample
 * skipped and counted, or the job failed), the batch view a finished job
 * is published under in the ring, its release back to the free jobs, and
 * access to a batch's token windows or dict samples. */
#include <stdio.h>
#include <string.h>

#include "pipeline_impl.h"
#include "tokens_impl.h"

/* Record a job's first failure; in skip mode the sample is dropped instead
 * (the caller decides which). */
void stk__job_fail(struct job *j, int code, const char *msg) {
  pthread_mutex_lock(&j->err_mu);
  if (!j->err) {
    j->err = code;
    snprintf(j->errmsg, sizeof j->errmsg, "%s", msg);
  }
  pthread_mutex_unlock(&j->err_mu);
}

/* A sample left out under on_error skip (or the default): the first is
 * logged as a warning, the rest at info level; the latest is kept for
 * all_failed_check's message. */
void stk__note_skip(struct stk_loader *l, uint64_t id, int code, const char *msg) {
  pthread_mutex_lock(&l->skip_mu); /* callers may hold l->mu: its own lock */
  l->last_skip_code = code;
  snprintf(l->last_skip, sizeof l->last_skip, "sample %llu: %s", (unsigned long long)id, msg);
  pthread_mutex_unlock(&l->skip_mu);
  if (atomic_fetch_add(&l->skips_seen, 1) == 0) {
    stk_log(STK_LOG_WARN, "skipping sample %llu: %s (later ones are counted in the stats' "
            "skipped and logged at info level)", (unsigned long long)id, msg);
    return;
  }
  stk_log(STK_LOG_INFO, "skipping sample %llu: %s", (unsigned long long)id, msg);
}

/* Whether a failure leaves only its sample out. skip: every one. The
 * default: a bad sample (malformed, corrupt, truncated, undecodable, a
 * file gone or unreadable), not a failing source (an I/O error, an origin
 * down past its retries, memory or space exhausted), which no later sample
 * would escape: the run stops at once, naming it. */
int stk__skips(const struct stk_loader *l, int code) {
  if (l->o.on_error == STK_ON_ERROR_SKIP) return 1;
  if (l->o.on_error == STK_ON_ERROR_FAIL) return 0;
  switch (code) {
  case STK_EIO: case STK_ENET: case STK_ETIMEDOUT: case STK_ENOMEM: case STK_ENOSPC:
  case STK_ECANCELED: case STK_ESYS: case STK_EBUSY: case STK_EAGAIN: return 0;
  default: return 1;
  }
}

void stk__slot_fail(struct stk_loader *l, struct job *j, struct slot *s, int code,
                      const char *msg) {
  s->err = code;
  if (stk__skips(l, code)) return stk__note_skip(l, s->id, code, msg);
  stk__job_fail(j, code, msg);
}

/* Under the default policy, ALL_FAILED_LIMIT samples in a row that fail
 * (counted by batch: one kept sample ends a streak) stop the run with the
 * latest failure: a wrong dataset, field or decoder, or a dataset gone
 * from under the run, not a few bad files. kept: samples of j that made
 * it. */
static void all_failed_check(struct stk_loader *l, struct job *j, uint32_t kept) {
  if (kept) {
    atomic_store(&l->fail_streak, 0);
    return;
  }
  uint64_t streak = atomic_fetch_add(&l->fail_streak, j->skipped) + j->skipped;
  if (l->o.on_error != STK_ON_ERROR_DEFAULT || j->err || streak < ALL_FAILED_LIMIT) return;
  pthread_mutex_lock(&l->skip_mu);
  j->err = l->last_skip_code ? l->last_skip_code : STK_EDECODE;
  snprintf(j->errmsg, sizeof j->errmsg,
           "%llu samples in a row failed (is the dataset, field or decoder right? "
           "on_error=skip goes on regardless); the latest: %.300s",
           (unsigned long long)streak, l->last_skip);
  pthread_mutex_unlock(&l->skip_mu);
}

/* A run that ends under the default policy with no sample delivered (all
 * of them failed, fewer than ALL_FAILED_LIMIT, so no streak stopped it)
 * fails as a streak would, instead of ending as if it were empty. The
 * consumer's, under l->mu; returns the loader's failure, or 0. */
int stk__all_skipped_check(struct stk_loader *l) {
  uint64_t skips = atomic_load(&l->skips_seen);
  if (l->o.on_error != STK_ON_ERROR_DEFAULT || l->samples_out || !skips) return 0;
  pthread_mutex_lock(&l->skip_mu);
  l->failed = l->last_skip_code ? l->last_skip_code : STK_EDECODE;
  snprintf(l->err, sizeof l->err,
           "all %llu samples of the run failed (is the dataset, field or decoder right? "
           "on_error=skip goes on regardless); the latest: %.300s",
           (unsigned long long)skips, l->last_skip);
  pthread_mutex_unlock(&l->skip_mu);
  return l->failed;
}

/* Make the batch view and publish the job for the consumer. */
void stk__ring_put(struct stk_loader *l, struct job *j) {
  uint32_t k = 0;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < j->n; i++) {
    struct slot *s = &j->slots[i];
    if (s->err) {
      j->skipped++;
      continue;
    }
    j->offsets[k] = s->out_off;
    j->lens[k] = s->out_len;
    j->ids[k] = s->id;
    j->labels[k] = s->label;
    bytes += s->out_len;
    k++;
  }
  all_failed_check(l, j, k);
  struct stk_batch *b = &j->batch;
  b->n = k;
  b->epoch = j->epoch;
  b->seq = j->seq;
  b->data = (j->copy || l->fixed_out) ? j->out : j->raw;
  b->bytes = bytes;
  b->offsets = j->offsets;
  b->len = j->lens;
  b->indices = j->ids;
  b->labels = j->labels;
  b->skipped = j->skipped;
  ctr_add(&l->st[STK_STAGE_BATCH].items, 1);
  ctr_add(&l->st[STK_STAGE_BATCH].bytes, bytes);
  pthread_mutex_lock(&l->mu);
  l->ready[j->seq % l->maxjobs] = j;
  /* The consumer waits only for the next batch in order; woken after the
   * unlock, so that it does not wake only to wait for the mutex. */
  int wake = l->ready_waiters && j->seq == l->next_seq;
  pthread_mutex_unlock(&l->mu);
  if (wake) pthread_cond_broadcast(&l->cv_ready);
}

void stk_batch_release(struct stk_loader *l, struct stk_batch *b) {
  if (!b) return;
  struct job *j = (struct job *)((char *)b - offsetof(struct job, batch));
  pthread_mutex_lock(&l->mu);
  j->next = l->free_jobs;
  l->free_jobs = j;
  l->outstanding--;
  l->releases++;
  pthread_mutex_unlock(&l->mu);
  /* The reader, or for a token loader a worker, may wait for this place. */
  pthread_cond_signal(l->self_fill ? &l->cv_task : &l->cv_free);
}

int stk_batch_tokens(const struct stk_loader *l, const struct stk_batch *b,
                     struct stk_token_batch *out) {
  if (!l->tok) return STK_EINVAL;
  stk__tokens_view(l->tok, b->data, l->o.batch_size, b->n, b->indices, out);
  return 0;
}

int stk_batch_sample(const struct stk_loader *l, const struct stk_batch *b, uint32_t i,
                     struct stk_sample *out) {
  if (!l || l->tok || l->decode.kind != STK_DECODE_FIELDS) return STK_EINVAL;
  return stk__fields_unpack(b, i, out);
}
