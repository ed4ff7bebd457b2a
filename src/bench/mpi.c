/* stoker bench across processes and hosts: one emulation per MPI rank,
 * joined by a barrier that carries every process's status (so a process that
 * fails stops the others instead of leaving them waiting), then one result
 * gathered on rank 0. Compiled against Open MPI when the build finds it
 * (STK_HAVE_MPI); without it, init says how to get it.
 *
 * Every collective here is one MPI_Allreduce(MPI_MAX) of three int64s,
 * {status, value, -value}: status 0 is fine, 1 a process was interrupted,
 * 2 + rank that rank failed; the value's max and min (the negated max of
 * -value) tell whether every process passed the same value. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "bench_impl.h"
#include "stoker/bench.h"

#ifdef STK_HAVE_MPI
#include <mpi.h>
#endif

struct stk_bench_mpi {
  uint32_t rank, size, hosts, host_procs;
  int host_leader;
  int failed_rank;
};

int stk_bench_mpi_launched(void) {
  const char *s = getenv("OMPI_COMM_WORLD_SIZE");
  return s && atol(s) > 1;
}

uint32_t stk_bench_mpi_rank(const struct stk_bench_mpi *m) { return m ? m->rank : 0; }
uint32_t stk_bench_mpi_size(const struct stk_bench_mpi *m) { return m ? m->size : 1; }
int stk_bench_mpi_host_leader(const struct stk_bench_mpi *m) { return m ? m->host_leader : 1; }
int stk_bench_mpi_failed_rank(const struct stk_bench_mpi *m) { return m ? m->failed_rank : -1; }

/* Whether o (read to its struct_size) holds the fields attach writes and is
 * no larger than this library's struct. */
static int attach_fits(const struct stk_bench_opts *o, char *err) {
  size_t need = offsetof(struct stk_bench_opts, global_ctx) + sizeof o->global_ctx;
  size_t have = o->struct_size ? o->struct_size : sizeof *o;
  if (have < need || have > sizeof *o)
    return stk__errf(err, STK_EINVAL,
                     "stk_bench_mpi_attach: stk_bench_opts struct_size %zu is %s (rank, world and "
                     "the barrier need %zu bytes; this library's struct has %zu)",
                     have, have < need ? "too small" : "larger than this library's", need,
                     sizeof *o);
  return 0;
}

#ifndef STK_HAVE_MPI

int stk_bench_mpi_built(void) { return 0; }

int stk_bench_mpi_init(struct stk_bench_mpi **out, char *err) {
  *out = NULL;
  return stk__errf(err, STK_ENOTSUP,
                   "stoker was built without MPI (install libopenmpi-dev and rebuild)");
}

void stk_bench_mpi_finalize(struct stk_bench_mpi *m) { (void)m; }

int stk_bench_mpi_attach(struct stk_bench_mpi *m, struct stk_bench_opts *o, char *err) {
  (void)m;
  int rc = attach_fits(o, err);
  if (rc) return rc;
  return stk__errf(err, STK_ENOTSUP,
                   "stoker was built without MPI (install libopenmpi-dev and rebuild)");
}

int stk_bench_mpi_agree(struct stk_bench_mpi *m, int status, uint64_t fingerprint, char *err) {
  (void)m;
  (void)fingerprint;
  (void)err;
  return status;
}

int stk_bench_mpi_gather(struct stk_bench_mpi *m, const struct stk_bench_opts *o,
                         struct stk_bench_result *r, char *err) {
  (void)m;
  (void)o;
  (void)r;
  (void)err;
  return 0;
}

#else /* STK_HAVE_MPI */

int stk_bench_mpi_built(void) { return 1; }

int stk_bench_mpi_init(struct stk_bench_mpi **out, char *err) {
  *out = NULL;
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (inited) return stk__errf(err, STK_EBUSY, "MPI is already initialized in this process");
  /* The barrier runs on whichever accelerator thread arrives last, never
   * two at once: SERIALIZED is enough. */
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return stk__errf(err, STK_EIO, "MPI_Init failed");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return stk__errf(
        err, STK_ENOTSUP,
        "this MPI library does not allow calls from several threads (MPI_THREAD_SERIALIZED)");
  }
  struct stk_bench_mpi *m = calloc(1, sizeof *m);
  if (!m) {
    MPI_Finalize();
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  int rank = 0, size = 1, local_rank = 0, local_size = 1, leader, hosts = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  leader = local_rank == 0;
  MPI_Allreduce(&leader, &hosts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  m->rank = (uint32_t)rank;
  m->size = (uint32_t)size;
  m->hosts = (uint32_t)hosts;
  m->host_procs = (uint32_t)local_size;
  m->host_leader = leader;
  m->failed_rank = -1;
  *out = m;
  return 0;
}

void stk_bench_mpi_finalize(struct stk_bench_mpi *m) {
  if (!m) return;
  MPI_Finalize();
  free(m);
}

/* The one collective: every process's status and value in, the job's out.
 * Returns 0, STK_ECANCELED, STK_EIO (failed_rank set) or, when values
 * differ, STK_ERANGE. */
static int exchange(struct stk_bench_mpi *m, int status, int64_t value) {
  int64_t code = status == 0 ? 0 : status == STK_ECANCELED ? 1 : 2 + (int64_t)m->rank;
  int64_t in[3] = {code, value, -value};
  int64_t out[3];
  MPI_Allreduce(in, out, 3, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (out[0] >= 2) {
    if (m->failed_rank < 0) m->failed_rank = in[0] >= 2 ? (int)m->rank : (int)(out[0] - 2);
    return STK_EIO;
  }
  if (out[0] == 1) return STK_ECANCELED;
  return out[1] != -out[2] ? STK_ERANGE : 0;
}

static int barrier_hook(void *ctx, int status) { return exchange(ctx, status, 0); }

int stk_bench_mpi_attach(struct stk_bench_mpi *m, struct stk_bench_opts *o, char *err) {
  int rc = attach_fits(o, err);
  if (rc) return rc;
  o->rank = m->rank;
  o->world = m->size;
  o->global_barrier = barrier_hook;
  o->global_ctx = m;
  /* a caller's struct from before host_procs ends where it begins */
  size_t have = o->struct_size ? o->struct_size : sizeof *o;
  if (have >= offsetof(struct stk_bench_opts, host_procs) + sizeof o->host_procs)
    o->host_procs = m->host_procs;
  return 0;
}

int stk_bench_mpi_agree(struct stk_bench_mpi *m, int status, uint64_t fingerprint, char *err) {
  int rc = exchange(m, status, (int64_t)(fingerprint >> 1));
  if (rc == STK_EIO) return stk__errf(err, rc, "rank %d of %u failed", m->failed_rank, m->size);
  if (rc == STK_ECANCELED) return stk__errf(err, rc, "a process of the job was interrupted");
  if (rc)
    return stk__errf(err, STK_EINVAL,
                     "the %u processes were given different workloads (batch, files, samples per "
                     "file, epochs or accelerators); every rank must run the same command",
                     m->size);
  return 0;
}

/* What each process sends besides its per-epoch figures and timeline. */
struct summary {
  struct stk_loader_stats loader;
  struct stk_bench_ckpt ckpt;
  uint64_t cpu_ns, ntimeline;
  double wall_s;
  int interrupted;
};

/* Counters add up; maxima, percentiles and the wall clock take the largest. */
static void add_loader(struct stk_loader_stats *a, const struct stk_loader_stats *b) {
  for (int i = 0; i < STK_STAGE_COUNT; i++) {
    struct stk_stage_stats *s = &a->stage[i];
    const struct stk_stage_stats *t = &b->stage[i];
    s->busy_ns += t->busy_ns;
    s->wait_in_ns += t->wait_in_ns;
    s->wait_out_ns += t->wait_out_ns;
    s->items += t->items;
    s->bytes += t->bytes;
    s->threads += t->threads;
  }
  a->wall_ns = STK__MAX(a->wall_ns, b->wall_ns);
  a->batches += b->batches;
  a->samples += b->samples;
  a->bytes += b->bytes;
  a->skipped += b->skipped;
  a->consumer_wait_ns += b->consumer_wait_ns;
  a->wait_p50_ns = STK__MAX(a->wait_p50_ns, b->wait_p50_ns);
  a->wait_p99_ns = STK__MAX(a->wait_p99_ns, b->wait_p99_ns);
  a->wait_max_ns = STK__MAX(a->wait_max_ns, b->wait_max_ns);
  a->ring_depth = STK__MAX(a->ring_depth, b->ring_depth);
  a->ring_depth_max = STK__MAX(a->ring_depth_max, b->ring_depth_max);
  a->mem_bytes += b->mem_bytes;
  a->read_ops += b->read_ops;
  a->read_bytes += b->read_bytes;
}

/* Checkpoints: each process wrote its ranks' shares, so bytes and writers
 * add up; every process made the same saves and loads, each over when the
 * slowest rank's share was (a checkpoint-only run waits for the job after
 * each; within training the next step's barrier does), so times take the
 * largest. */
static void add_ckpt(struct stk_bench_ckpt *a, const struct stk_bench_ckpt *b) {
  a->writers += b->writers;
  a->bytes += b->bytes;
  a->saves = STK__MIN(a->saves, b->saves);
  a->loads = STK__MIN(a->loads, b->loads);
  a->save_s = STK__MAX(a->save_s, b->save_s);
  a->load_s = STK__MAX(a->load_s, b->load_s);
  a->save_max_s = STK__MAX(a->save_max_s, b->save_max_s);
  a->load_max_s = STK__MAX(a->load_max_s, b->load_max_s);
}

/* Rank 0's buffers for everyone's figures. */
struct gathered {
  struct stk_bench_epoch *per, *per_all; /* by rank, then regrouped by epoch */
  struct summary *sum;
  struct stk_bench_step *timeline;
  int *counts, *displs;
};

static void gathered_free(struct gathered *g) {
  free(g->per);
  free(g->per_all);
  free(g->sum);
  free(g->timeline);
  free(g->counts);
  free(g->displs);
}

#define TIMELINE_CAP (1u << 20) /* steps kept for the chart, all ranks together */

/* On rank 0: regroup, combine and recompute r from what was gathered. */
static void combine(struct stk_bench_mpi *m, const struct stk_bench_opts *o,
                    struct stk_bench_result *r, struct gathered *g, uint64_t total_steps) {
  uint32_t n = r->accelerators, E = r->epochs, all = n * m->size;
  for (uint32_t k = 0; k < m->size; k++)
    for (uint32_t e = 0; e < E; e++)
      memcpy(&g->per_all[(size_t)e * all + (size_t)k * n], &g->per[((size_t)k * E + e) * n],
             n * sizeof *g->per);
  struct stk_loader_stats loader = g->sum[0].loader;
  struct stk_bench_ckpt ckpt = g->sum[0].ckpt;
  uint64_t cpu = g->sum[0].cpu_ns;
  double wall = g->sum[0].wall_s;
  int interrupted = g->sum[0].interrupted;
  for (uint32_t k = 1; k < m->size; k++) {
    add_loader(&loader, &g->sum[k].loader);
    add_ckpt(&ckpt, &g->sum[k].ckpt);
    cpu += g->sum[k].cpu_ns;
    wall = STK__MAX(wall, g->sum[k].wall_s);
    interrupted |= g->sum[k].interrupted;
  }
  /* Accelerator numbers in the timeline become the job's. */
  for (uint32_t k = 0; k < m->size; k++)
    for (int i = 0; i < g->counts[k] / (int)sizeof *g->timeline; i++) {
      struct stk_bench_step *s = &g->timeline[g->displs[k] / (int)sizeof *g->timeline + i];
      s->acc = (uint16_t)(k * n + s->acc);
    }
  free(r->per);
  free(r->timeline);
  r->per = g->per_all;
  r->timeline = g->timeline;
  r->ntimeline = total_steps;
  g->per_all = NULL;
  g->timeline = NULL;
  r->accelerators = all;
  r->processes = m->size;
  r->hosts = m->hosts;
  r->loader = loader;
  r->ckpt = ckpt;
  r->cpu_ns = cpu;
  r->wall_s = wall;
  r->interrupted = interrupted;
  stk__bench_aggregate(o, r);
  stk__bench_verdict(r);
}

int stk_bench_mpi_gather(struct stk_bench_mpi *m, const struct stk_bench_opts *o,
                         struct stk_bench_result *r, char *err) {
  uint32_t n = r->accelerators, E = r->epochs;
  uint64_t per_bytes = (uint64_t)n * E * sizeof *r->per;
  uint64_t shape = ((uint64_t)n << 40) ^ ((uint64_t)E << 20) ^ r->steps_per_epoch;
  uint64_t my_steps = STK__MIN(r->ntimeline, TIMELINE_CAP / m->size);
  struct gathered g;
  memset(&g, 0, sizeof g);
  struct stk_bench_opts own; /* the caller's, read no further than its struct_size */
  int take = stk__opts_take(&own, sizeof own, o, "stk_bench_opts", err);
  int status = take ? take : per_bytes * m->size > INT32_MAX ? STK_ERANGE : 0;
  if (!status && m->rank == 0) {
    g.per = malloc(per_bytes * m->size);
    g.per_all = malloc(per_bytes * m->size);
    g.sum = calloc(m->size, sizeof *g.sum);
    g.timeline = calloc(TIMELINE_CAP, sizeof *g.timeline);
    g.counts = calloc(m->size, sizeof *g.counts);
    g.displs = calloc(m->size, sizeof *g.displs);
    if (!g.per || !g.per_all || !g.sum || !g.timeline || !g.counts || !g.displs)
      status = STK_ENOMEM;
  }
  int rc = exchange(m, status, (int64_t)(shape >> 1));
  if (rc) {
    gathered_free(&g);
    if (rc == STK_EIO && take) return take; /* err says which struct_size */
    if (rc == STK_EIO && status == STK_ENOMEM)
      return stk__errf(err, rc, "out of memory gathering results");
    if (rc == STK_EIO)
      return stk__errf(err, rc, "rank %d of %u cannot gather the results", m->failed_rank, m->size);
    return stk__errf(err, STK_EINVAL,
                     "the processes ran different shapes (accelerators, epochs, steps)");
  }
  struct summary mine;
  memset(&mine, 0, sizeof mine); /* padding too: it travels as bytes */
  mine.loader = r->loader;
  mine.ckpt = r->ckpt;
  mine.cpu_ns = r->cpu_ns;
  mine.ntimeline = my_steps;
  mine.wall_s = r->wall_s;
  mine.interrupted = r->interrupted;
  MPI_Gather(r->per, (int)per_bytes, MPI_BYTE, g.per, (int)per_bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
  MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, g.sum, (int)sizeof mine, MPI_BYTE, 0,
             MPI_COMM_WORLD);
  uint64_t total = 0;
  if (m->rank == 0)
    for (uint32_t k = 0; k < m->size; k++) {
      g.counts[k] = (int)(g.sum[k].ntimeline * sizeof *g.timeline);
      g.displs[k] = (int)(total * sizeof *g.timeline);
      total += g.sum[k].ntimeline;
    }
  MPI_Gatherv(r->timeline, (int)(my_steps * sizeof *r->timeline), MPI_BYTE, g.timeline, g.counts,
              g.displs, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (m->rank == 0) {
    /* The stage names are pointers into each process's own loader. */
    for (uint32_t k = 1; k < m->size; k++)
      for (int i = 0; i < STK_STAGE_COUNT; i++)
        g.sum[k].loader.stage[i].name = r->loader.stage[i].name;
    combine(m, &own, r, &g, total);
  }
  gathered_free(&g);
  return 0;
}

#endif /* STK_HAVE_MPI */
