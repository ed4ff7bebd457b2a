/* Online MIG-aware scheduling: requests for MIG instances arrive over time
 * on a cluster of MIG GPUs (geometry from stoker/mig.h) and are placed by
 * one of three policies; the run reports how much of the GPUs' compute the
 * running requests held (docs/sim.md, "Online MIG scheduling").
 *
 * Traces: an openb pod list (num_gpu, gpu_milli, creation_time,
 * deletion_time) or a duration trace such as Philly's (timestamp or
 * submit_time, num_gpus, duration), mapped to profiles by
 * stk_mig_profile_for() and stk_mig_trace_load().
 * Every call that can fail returns 0 or a negative STK_E* code with one
 * sentence in errmsg (STK_ERRMSG_MAX bytes, may be NULL). */
#ifndef STOKER_MIG_ONLINE_H
#define STOKER_MIG_ONLINE_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/mig.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One request: count instances of one profile, started together (count > 1
 * only for whole GPUs, each instance on its own GPU). */
struct stk_mig_req {
  double arrival, duration; /* seconds */
  double demand;            /* GPU fraction asked for per instance, (0, 1] */
  uint16_t count;
  uint8_t profile;          /* index into the geometry's profiles */
};

/* Arrival times and durations are at most this many seconds (32,000 years). */
#define STK_MIG_MAX_TIME_S 1e12

struct stk_mig_trace {
  size_t n;
  struct stk_mig_req *req; /* by arrival; equal arrivals keep file order */
  size_t cpu_only;         /* rows asking for no GPU, skipped */
  size_t by_profile[16];   /* requests by profile index */
  int openb;               /* 1: fractions from gpu_milli; 0: whole-GPU jobs */
};

/* The profile a request for a fraction milli/1000 of one GPU maps to: the
 * smallest profile (fewest compute slices, then fewest memory slices,
 * without +me) with compute slices >= 7 x fraction and memory slices >=
 * 8 x fraction; 1000 maps to the whole GPU. -1 for milli outside 1..1000. */
STK_EXPORT int stk_mig_profile_for(const struct stk_mig_geometry *g, int milli);

/* Load a trace for geometry g. openb rows: num_gpu 1 and gpu_milli m ->
 * one instance of stk_mig_profile_for(m); num_gpu k > 1 -> k whole GPUs;
 * the lifetime is deletion - creation (an empty deletion time: the trace's
 * last time). Duration traces (no gpu_milli): a one-GPU job -> one instance
 * of one_gpu_profile (its GPU's compute as a fraction of an A100's, stated
 * by the caller), a k-GPU job -> k whole GPUs (MIG instances have no
 * peer-to-peer or NVLink between them). Arrival times are divided by
 * compress (>= 1; lifetimes kept) and start at 0. */
STK_EXPORT int stk_mig_trace_load(struct stk_mig_trace **out, const struct stk_mig_geometry *g,
                                  const char *path, int one_gpu_profile, double compress,
                                  char *errmsg);
STK_EXPORT void stk_mig_trace_free(struct stk_mig_trace *t);

enum stk_mig_policy {
  /* First fit in arrival order (head of line blocks): an idle instance of
   * the profile or free space on the first GPU that has either; an instance
   * once created is never removed (no reconfiguration). A request no GPU
   * can ever host again (every one partitioned otherwise) is rejected. */
  STK_MIG_FIFO,
  /* The same first fit, arrival order, but idle instances may be destroyed
   * to make room (reconfiguration) where no GPU fits without: separates
   * what reconfiguration brings from what placement brings. */
  STK_MIG_FIFO_RECONF,
  /* Arrival order (head of line blocks), placed where it adds least
   * fragmentation (below); idle instances may be destroyed to make room
   * (reconfiguration; busy instances never change). */
  STK_MIG_AWARE,
  /* Dynamic multi-objective: each pass picks, among the first `window`
   * waiting requests, the request and placement of lowest
   *   w_frag x fragmentation added / 7 + w_reconf x (idle instances
   *   destroyed ? 1 : 0) - w_wait x hours waited,
   * so requests may start ahead of a blocked head (backfilling). */
  STK_MIG_MULTI
};

/* Fragmentation of a GPU: for each profile p of the trace (weight: its
 * share of the requests), the free compute slices that instances of p
 * could not use if as many as fit were created; summed. Idle instances
 * count as free under AWARE and MULTI, which may remove them. */

/* Where and when a request started: its first instance's GPU and start
 * slot; at < 0 when it never started. */
struct stk_mig_start {
  double at;
  int32_t gpu;
  int16_t slot;
};

/* Set with stk_mig_online_opts_init(): the library reads only struct_size bytes
 * (later fields take their defaults) and refuses a larger struct, naming
 * it (docs/internals/api.md). */
struct stk_mig_online_opts {
  size_t struct_size; /* set by stk_mig_online_opts_init(); 0 = this header's */
  const struct stk_mig_geometry *g;
  unsigned gpus;
  enum stk_mig_policy policy;
  double delay_s;        /* instance creation; < 0: STK_MIG_RECONFIG_DELAY_S */
  double w_frag, w_wait, w_reconf; /* MULTI; all 0: 1, 1, 0.5 */
  unsigned window;       /* MULTI: 0 = 32 */
  struct stk_mig_start *starts; /* NULL, or one per request, filled by the run */
};
#define stk_mig_online_opts_init(o) stk_mig_online_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_mig_online_opts_init_sized(struct stk_mig_online_opts *o, size_t size);

struct stk_mig_online_result {
  size_t requests, started, rejected, waiting; /* waiting: never started */
  double first, last, end;    /* first and last arrival, time the last request ended */
  /* time-mean share of the cluster's compute slices held by requests
   * (allocated), and of its GPUs asked for (demand), over [first, last]
   * (while requests arrive) and over [first, end] */
  double alloc_arriving, demand_arriving, alloc_all, demand_all;
  /* the same share while some request waits (the queue is not empty), and
   * that time as a share of [first, end] */
  double alloc_backlog, backlog_time;
  double mean_wait, max_wait; /* seconds from arrival to placement, started requests */
  size_t created, reconfigs;  /* instances created; GPU changes that destroyed idle instances */
};

STK_EXPORT int stk_mig_online_run(const struct stk_mig_trace *t,
                                  const struct stk_mig_online_opts *o,
                                  struct stk_mig_online_result *r, char *errmsg);
STK_EXPORT const char *stk_mig_policy_name(enum stk_mig_policy p);
/* "fifo", "fifo-reconf", "mig-aware", "multi": 0 and *out, or STK_EINVAL. */
STK_EXPORT int stk_mig_policy_parse(const char *name, enum stk_mig_policy *out);

#ifdef __cplusplus
}
#endif
#endif
