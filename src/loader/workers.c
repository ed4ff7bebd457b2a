/* The loader's decode workers: each takes a range of one job's samples
 * from the task queue, parses them (checking checksums unless the I/O
 * thread already did) and decodes them into the batch's buffer, or finds
 * their bytes in place; a batch that needs its samples copied out of the
 * read buffer gets a second, copy phase. The last task of a job hands it
 * to the ring (batch.c). A token loader's worker with no task makes the
 * next job itself (stk__reader_step): there is no reader thread to wake. */
#include <stdio.h>
#include <string.h>

#include "pipeline_impl.h"
#include "tokens_impl.h"

/* By kind; FIELDS packs whole samples (decode_fields.c) and copies like
 * raw where its own functions are not called. */
const struct stk_decode_ops *const stk__loader_decoders[NDECODERS] = {&stk__dec_raw, &stk__dec_jpeg,
                                                                   &stk__dec_npy, &stk__dec_raw};

void stk__push_tasks(struct stk_loader *l, struct job *j) {
  /* Two tasks per worker balance decodes of uneven cost; token windows
   * cost the same, and a task of more windows lets each worker plan
   * more of its next windows ahead (do_sample). */
  pthread_mutex_lock(&l->mu);
  uint32_t chunks = STK__MIN(j->n, l->nworkers * (l->tok ? 1 : 2));
  /* A token loader's workers each make their own jobs: a job is split only
   * where the ring holds fewer jobs than there are workers, so that a
   * batch is made on one core and handed over once. */
  if (l->self_fill)
    chunks = STK__MIN(j->n, (l->nworkers + l->depth - 1) / l->depth);
  if (chunks == 0) chunks = 1;
  atomic_store(&j->tasks_pending, chunks);
  for (uint32_t c = 0; c < chunks; c++) {
    uint32_t b = (uint32_t)((uint64_t)j->n * c / chunks), e = (uint32_t)((uint64_t)j->n * (c + 1) / chunks);
    l->tasks[(l->task_head + l->task_len) % l->tasks_cap] = (struct task){j, b, e};
    l->task_len++;
  }
  pthread_mutex_unlock(&l->mu);
  pthread_cond_broadcast(&l->cv_task);
}

static const struct stk_field *pick_field(const struct stk_loader *l, const struct stk_sample *smp) {
  if (smp->nfields == 0) return NULL;
  if (!l->decode.field) return &smp->fields[0];
  for (int i = 0; i < smp->nfields; i++)
    if (strcmp(smp->fields[i].name, l->decode.field) == 0) return &smp->fields[i];
  return NULL;
}

/* Phase 1 for one sample: parse (checksums) and decode, or find the bytes
 * in place. */
static void do_sample(struct stk_loader *l, struct job *j, uint32_t i, uint32_t end,
                      const struct task *after, void **tls, char *err) {
  struct slot *s = &j->slots[i];
  if (s->err) return;
  if (l->tok) {
    /* The next window's pieces are asked for while this one is copied
     * (issue 18, T3): the next of this task, or after its last the first
     * of the task this thread has already claimed; this thread copies it
     * (its plan and TLB entries are this thread's). */
    if (i + 1 < end) {
      if (!j->slots[i + 1].err) stk__tokens_prefetch(l->tok, j->slots[i + 1].id);
    } else if (after && !after->job->slots[after->begin].err) {
      stk__tokens_prefetch(l->tok, after->job->slots[after->begin].id);
    }
    int rc = stk__tokens_fill(l->tok, s->id, j->out, l->o.batch_size, i, err);
    if (rc) return stk__slot_fail(l, j, s, rc, err);
    s->out_off = (uint64_t)i * l->fixed_out;
    s->out_len = l->fixed_out;
    return;
  }
  struct stk_sample smp;
  memset(&smp, 0, sizeof smp);
  smp.label = -1;
  smp.index = s->id; /* files of several samples (DLIO's npz) pick theirs by it */
  int verify = !l->o.skip_verify && !s->verified;
  int rc =
      stk__sample_parse(l->ds, s->shard, j->raw + s->raw_pos, s->len, s->off, verify, &smp, err);
  if (rc) return stk__slot_fail(l, j, s, rc, err);
  if (smp.label >= 0) s->label = smp.label;
  if (l->decode.kind == STK_DECODE_FIELDS) { /* packed in the copy phase */
    struct stk__fields_ctx x = {&l->decode, l->o.image_fields, &tls[STK_DECODE_JPEG], NULL};
    rc = stk__fields_size(&x, &smp, &s->out_len, err);
    if (rc) {
      char msg[STK_ERRMSG_MAX + 64];
      snprintf(msg, sizeof msg, "%s: offset %llu: sample %llu: %s",
               stk__shard_path(l->ds, s->shard), (unsigned long long)s->off,
               (unsigned long long)s->id, err);
      return stk__slot_fail(l, j, s, rc, msg);
    }
    atomic_store_explicit(&j->copy, 1, memory_order_relaxed);
    return;
  }
  const struct stk_field *f = pick_field(l, &smp);
  if (!f) {
    stk__errf(err, STK_EFORMAT, "%s: offset %llu: sample %llu has no field '%s'",
              stk__shard_path(l->ds, s->shard), (unsigned long long)s->off,
              (unsigned long long)s->id, l->decode.field ? l->decode.field : "(any)");
    return stk__slot_fail(l, j, s, STK_EFORMAT, err);
  }
  s->field = *f;
  if (l->fixed_out) { /* decode straight into the batch */
    uint8_t *dst = j->out + (uint64_t)i * l->fixed_out;
    struct stk_rng rng;
    stk_rng_seed(&rng, stk_mix64(stk_mix64(l->sampler.seed, j->epoch), s->id));
    rc = l->dec->decode(&l->decode, &tls[l->decode.kind], f, dst, l->fixed_out, &s->out_len, &rng, err);
    if (rc) {
      char msg[STK_ERRMSG_MAX + 64];
      snprintf(msg, sizeof msg, "%s: offset %llu: %s", stk__shard_path(l->ds, s->shard),
               (unsigned long long)s->off, err);
      return stk__slot_fail(l, j, s, rc, msg);
    }
    s->out_off = (uint64_t)i * l->fixed_out;
    return;
  }
  uint64_t size;
  rc = l->dec->out_size(&l->decode, f, &size, err);
  if (rc == 0 && size > (f->encoding == STK_ENC_NONE ? f->len : f->raw_len))
    rc = stk__errf(err, STK_EFORMAT, "decoded size larger than the field");
  if (rc) {
    char msg[STK_ERRMSG_MAX + 64];
    snprintf(msg, sizeof msg, "%s: offset %llu: %s", stk__shard_path(l->ds, s->shard),
             (unsigned long long)s->off, err);
    return stk__slot_fail(l, j, s, rc, msg);
  }
  s->out_len = size;
  if (f->encoding == STK_ENC_NONE) /* in place: the payload is the field's tail */
    s->out_off = (uint64_t)(f->data + f->len - size - j->raw);
  else
    atomic_store_explicit(&j->copy, 1, memory_order_relaxed);
}

/* Phase 2 for one sample: copy or inflate into the output buffer. */
static void copy_sample(struct stk_loader *l, struct job *j, uint32_t i, void **tls, char *err) {
  struct slot *s = &j->slots[i];
  if (s->err) return;
  uint64_t got = 0;
  int rc;
  if (l->decode.kind == STK_DECODE_FIELDS) { /* parse again: the fields point into raw */
    struct stk_sample smp;
    memset(&smp, 0, sizeof smp);
    smp.label = -1;
    smp.index = s->id;
    struct stk_rng rng;
    stk_rng_seed(&rng, stk_mix64(stk_mix64(l->sampler.seed, j->epoch), s->id));
    struct stk__fields_ctx x = {&l->decode, l->o.image_fields, &tls[STK_DECODE_JPEG], &rng};
    rc = stk__sample_parse(l->ds, s->shard, j->raw + s->raw_pos, s->len, s->off, 0, &smp, err);
    if (!rc) rc = stk__fields_pack(&x, &smp, j->out + s->out_off, s->out_len, &got, err);
    if (rc) {
      char msg[STK_ERRMSG_MAX + 64];
      snprintf(msg, sizeof msg, "%s: offset %llu: sample %llu: %s",
               stk__shard_path(l->ds, s->shard), (unsigned long long)s->off,
               (unsigned long long)s->id, err);
      return stk__slot_fail(l, j, s, rc, msg);
    }
    s->out_len = got;
    return;
  }
  if (s->field.encoding == STK_ENC_NONE) {
    memcpy(j->out + s->out_off, s->field.data + s->field.len - s->out_len, s->out_len);
    return;
  }
  rc = l->dec->decode(&l->decode, &tls[l->decode.kind], &s->field, j->out + s->out_off, s->out_len,
                      &got, NULL, err);
  if (rc) return stk__slot_fail(l, j, s, rc, err);
  s->out_len = got;
}

/* Lay out a batch after phase 1; start the copy phase if one is needed
 * (not once the loader is closing). */
static void finish_phase1(struct stk_loader *l, struct job *j) {
  uint64_t t0 = stk_now_ns();
  if (!j->copy || j->err || atomic_load(&l->cancel)) {
    ctr_add(&l->st[STK_STAGE_BATCH].busy_ns, stk_now_ns() - t0);
    stk__ring_put(l, j);
    return;
  }
  uint64_t total = 0;
  for (uint32_t i = 0; i < j->n; i++)
    if (!j->slots[i].err) {
      j->slots[i].out_off = total;
      total += (j->slots[i].out_len + 63) & ~63ull;
    }
  if (stk__buf_reserve(l, &j->out, &j->out_cap, total ? total : 1) != 0) {
    stk__job_fail(j, STK_ENOMEM, "out of memory for a batch's output buffer");
    stk__ring_put(l, j);
    return;
  }
  j->phase = 2;
  ctr_add(&l->st[STK_STAGE_BATCH].busy_ns, stk_now_ns() - t0);
  stk__push_tasks(l, j);
}

/* Under l->mu: make the next job as the reader (stk__reader_step, which
 * counts its time as the read stage's). Returns the ns it took, for the
 * caller to leave out of the decode stage's own timers. */
static uint64_t run_step(struct stk_loader *l) {
  l->rd_busy = 1;
  pthread_mutex_unlock(&l->mu);
  uint64_t ns = stk__reader_step(l);
  pthread_mutex_lock(&l->mu);
  l->rd_busy = 0;
  return ns;
}

/* Takes the queued task at the head when it is a token job's first
 * phase (the same kind as the one being run), making the next job first
 * where the workers make them; 1 when it did. */
static int claim_next(struct stk_loader *l, struct task *out, uint64_t *stepped) {
  int got = 0;
  pthread_mutex_lock(&l->mu);
  if (l->self_fill && !l->task_len && stk__reader_can_step(l)) *stepped += run_step(l);
  if (l->task_len && l->tasks[l->task_head].job->phase != 2) {
    *out = l->tasks[l->task_head];
    l->task_head = (l->task_head + 1) % l->tasks_cap;
    l->task_len--;
    got = 1;
  }
  pthread_mutex_unlock(&l->mu);
  return got;
}

void *stk__worker_main(void *arg) {
  struct stk_loader *l = arg;
  void *tls[NDECODERS] = {NULL};
  char err[STK_ERRMSG_MAX];
  struct task next; /* a task claimed early, before the current one's last window */
  int have_next = 0;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    struct task t;
    if (have_next) {
      t = next;
      have_next = 0;
    } else {
      uint64_t t0 = stk_now_ns(), stepped = 0;
      while (!l->task_len && !l->stop_workers) {
        if (l->self_fill && stk__reader_can_step(l)) {
          stepped += run_step(l);
          continue;
        }
        /* A full ring idles the reader's part: what maybe_grow weighs. */
        int room = l->self_fill && !l->room_waiter && !l->reader_done && !l->mem_wait_on &&
                   l->outstanding >= (uint64_t)l->depth + 2;
        uint64_t w0 = room ? stk_now_ns() : 0;
        l->room_waiter |= room;
        pthread_cond_wait(&l->cv_task, &l->mu);
        if (room) { /* the reader thread's "blocked on a full ring" */
          uint64_t w = stk_now_ns() - w0;
          l->room_waiter = 0;
          atomic_fetch_add(&l->reader_idle_ns, w);
          ctr_add(&l->st[STK_STAGE_READ].wait_out_ns, w);
          ctr_add(&l->st[STK_STAGE_RING].wait_out_ns, w);
        }
      }
      ctr_add(&l->st[STK_STAGE_DECODE].wait_in_ns, stk_now_ns() - t0 - stepped);
      if (!l->task_len) break;
      t = l->tasks[l->task_head];
      l->task_head = (l->task_head + 1) % l->tasks_cap;
      l->task_len--;
    }
    pthread_mutex_unlock(&l->mu);

    uint64_t t1 = stk_now_ns(), bytes = 0, stepped = 0;
    struct job *j = t.job;
    int phase = j->phase; /* fixed until this job's last task of the phase */
    for (uint32_t i = t.begin; i < t.end; i++) {
      /* Closing: the batches being made will never be handed out, so the
       * rest of their samples are left undone (a decode of a whole
       * prefetched epoch boundary's worth of images used to run first). */
      if (atomic_load_explicit(&l->cancel, memory_order_relaxed)) break;
      if (phase == 2) {
        copy_sample(l, j, i, tls, err);
      } else {
        /* Token windows: before a task's last window, claim the next task
         * when one is queued, so that its first window is planned during
         * this copy as the others are (issue 18, T3). */
        if (l->tok && i + 1 == t.end && !have_next) have_next = claim_next(l, &next, &stepped);
        do_sample(l, j, i, t.end, have_next ? &next : NULL, tls, err);
      }
      bytes += j->slots[i].out_len;
    }
    /* The fields decoder's image fields are decoded in the copy phase:
     * decode time, not batching. */
    int fields_images = l->decode.kind == STK_DECODE_FIELDS && l->o.image_fields &&
                        *l->o.image_fields;
    int stage = phase == 2 && !fields_images ? STK_STAGE_BATCH : STK_STAGE_DECODE;
    ctr_add(&l->st[stage].busy_ns, stk_now_ns() - t1 - stepped);
    if (phase != 2) {
      ctr_add(&l->st[STK_STAGE_DECODE].items, t.end - t.begin);
      ctr_add(&l->st[STK_STAGE_DECODE].bytes, bytes);
    }
    if (atomic_fetch_sub(&j->tasks_pending, 1) == 1) {
      if (phase == 2)
        stk__ring_put(l, j);
      else
        finish_phase1(l, j);
    }
    pthread_mutex_lock(&l->mu);
  }
  pthread_mutex_unlock(&l->mu);
  for (size_t k = 0; k < NDECODERS; k++)
    if (tls[k] && stk__loader_decoders[k]->thread_free) stk__loader_decoders[k]->thread_free(tls[k]);
  return NULL;
}
