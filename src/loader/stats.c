/* Loader statistics: what each stage did so far, and their JSON form. */
#include <string.h>

#include "pipeline_impl.h"

void stk_loader_stats_json(const struct stk_loader_stats *st, struct stk_json *j) {
  stk_json_obj_begin(j);
  stk_json_kdbl(j, "wall_s", (double)st->wall_ns / 1e9);
  stk_json_ku64(j, "batches", st->batches);
  stk_json_ku64(j, "samples", st->samples);
  stk_json_ku64(j, "bytes", st->bytes);
  stk_json_ku64(j, "skipped", st->skipped);
  double wall = (double)st->wall_ns / 1e9;
  stk_json_kdbl(j, "samples_per_s", wall > 0 ? (double)st->samples / wall : 0);
  stk_json_kdbl(j, "mib_per_s", wall > 0 ? (double)st->bytes / 1048576.0 / wall : 0);
  stk_json_kdbl(j, "consumer_wait_s", (double)st->consumer_wait_ns / 1e9);
  stk_json_kdbl(j, "consumer_wait_pct",
                st->wall_ns ? 100.0 * (double)st->consumer_wait_ns / (double)st->wall_ns : 0);
  stk_json_key(j, "wait_per_batch_us");
  stk_json_obj_begin(j);
  stk_json_kdbl(j, "p50", (double)st->wait_p50_ns / 1e3);
  stk_json_kdbl(j, "p99", (double)st->wait_p99_ns / 1e3);
  stk_json_kdbl(j, "max", (double)st->wait_max_ns / 1e3);
  stk_json_obj_end(j);
  stk_json_ku64(j, "ring_depth", st->ring_depth);
  stk_json_ku64(j, "ring_depth_max", st->ring_depth_max);
  stk_json_ku64(j, "mem_bytes", st->mem_bytes);
  stk_json_ku64(j, "mem_peak", st->mem_peak);
  stk_json_ku64(j, "mem_cap", st->mem_cap);
  stk_json_ku64(j, "mem_over_cap", st->mem_over_cap);
  stk_json_ku64(j, "read_ops", st->read_ops);
  stk_json_ku64(j, "read_bytes", st->read_bytes);
  stk_json_key(j, "stages");
  stk_json_arr_begin(j);
  for (int i = 0; i < STK_STAGE_COUNT; i++) {
    const struct stk_stage_stats *s = &st->stage[i];
    stk_json_obj_begin(j);
    stk_json_kstr(j, "name", s->name);
    stk_json_ku64(j, "threads", s->threads);
    stk_json_kdbl(j, "busy_s", (double)s->busy_ns / 1e9);
    stk_json_kdbl(j, "wait_in_s", (double)s->wait_in_ns / 1e9);
    stk_json_kdbl(j, "wait_out_s", (double)s->wait_out_ns / 1e9);
    stk_json_ku64(j, "items", s->items);
    stk_json_ku64(j, "bytes", s->bytes);
    stk_json_obj_end(j);
  }
  stk_json_arr_end(j);
  if (st->has_cache) {
    stk_json_key(j, "cache");
    stk_cache_stats_json(&st->cache, j);
  }
  stk_json_obj_end(j);
}

void stk_loader_stats(struct stk_loader *l, struct stk_loader_stats *st) {
  static const char *names[] = {"read", "decode", "batch", "ring"};
  memset(st, 0, sizeof *st);
  for (int i = 0; i < STK_STAGE_COUNT; i++) {
    struct stk_stage_stats *s = &st->stage[i];
    s->name = names[i];
    s->busy_ns = atomic_load(&l->st[i].busy_ns);
    s->wait_in_ns = atomic_load(&l->st[i].wait_in_ns);
    s->wait_out_ns = atomic_load(&l->st[i].wait_out_ns);
    s->items = atomic_load(&l->st[i].items);
    s->bytes = atomic_load(&l->st[i].bytes);
    s->threads = l->st[i].threads;
  }
  st->wall_ns = stk_now_ns() - l->t_open;
  st->batches = l->batches_out;
  st->samples = l->samples_out;
  st->bytes = l->bytes_out;
  st->skipped = l->skipped_out;
  st->consumer_wait_ns = l->consumer_wait_ns;
  st->wait_p50_ns = stk__hist_quantile(&l->wait_hist, 0.50);
  st->wait_p99_ns = stk__hist_quantile(&l->wait_hist, 0.99);
  st->wait_max_ns = l->wait_hist.max;
  pthread_mutex_lock(&l->mu);
  st->ring_depth = l->depth;
  pthread_mutex_unlock(&l->mu);
  st->ring_depth_max = l->depth_max_seen;
  st->mem_bytes = atomic_load(&l->mem_bytes);
  st->mem_peak = atomic_load(&l->mem_peak);
  st->mem_cap = l->o.mem_cap;
  st->mem_over_cap = atomic_load(&l->mem_over);
  st->read_ops = atomic_load(&l->read_ops);
  st->read_bytes = atomic_load(&l->read_bytes);
  st->has_cache = stk_dataset_cache_stats(l->ds, &st->cache) == 0;
}
