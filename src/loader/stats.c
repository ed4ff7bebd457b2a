/* Loader statistics: the wait histogram and the JSON form of the stats. */
#include <string.h>

#include "loader_impl.h"

/* Bucket of ns: group g holds [2^(g+9), 2^(g+10)) ns split into SUB parts;
 * group 0 also takes everything below 1 µs. */
static size_t bucket(uint64_t ns) {
  if (ns < 1024) return 0;
  int lg = 63 - __builtin_clzll(ns); /* >= 10 */
  int g = lg - 9;
  if (g >= STK_HIST_GROUPS) return STK_HIST_GROUPS * STK_HIST_SUB - 1;
  uint64_t sub = (ns >> (lg - 5)) & (STK_HIST_SUB - 1);
  return (size_t)g * STK_HIST_SUB + sub;
}

static uint64_t bucket_mid(size_t i) {
  if (i == 0) return 512;
  size_t g = i / STK_HIST_SUB, sub = i % STK_HIST_SUB;
  int lg = (int)g + 9;
  uint64_t lo = (1ull << lg) + ((uint64_t)sub << (lg - 5));
  return lo + (1ull << (lg - 6));
}

void stk__hist_add(struct stk_hist *h, uint64_t ns) {
  h->b[bucket(ns)]++;
  h->count++;
  if (ns > h->max) h->max = ns;
}

uint64_t stk__hist_quantile(const struct stk_hist *h, double q) {
  if (!h->count) return 0;
  uint64_t rank = (uint64_t)(q * (double)(h->count - 1)) + 1, seen = 0;
  for (size_t i = 0; i < STK_HIST_GROUPS * STK_HIST_SUB; i++) {
    seen += h->b[i];
    if (seen >= rank) return STK__MIN(bucket_mid(i), h->max);
  }
  return h->max;
}

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
  stk_json_obj_end(j);
}
