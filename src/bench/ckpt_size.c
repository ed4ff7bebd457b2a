/* DLIO's checkpoint sizes: what each rank writes per checkpoint, by the
 * arithmetic of dlio_benchmark's checkpointing/base_checkpointing.py
 * (checked against DLIO's HEAD on the shipped llama configs: the bytes and
 * file counts in tests/test_bench.c). Reimplemented from its description,
 * not copied:
 *
 * - Ranks are laid out tensor-fastest: tensor rank = r % tp, pipeline rank
 *   = (r / tp) % pp, data-parallel rank = r / (tp x pp).
 * - A transformer of L layers has layer 0 (embedding, vocab x hidden),
 *   layers 1..L (input norm, QKV with grouped KV heads, the output
 *   projection, a second norm, a gated MLP of 2 x ffn x hidden and
 *   ffn x hidden), L+1 (the LM head, vocab x hidden) and L+2 (the final
 *   norm, hidden). Pipeline stage p holds a contiguous run of 1..L (the
 *   first L % pp stages one more), stage 0 also layer 0, the last stage
 *   also L+1 and L+2. Matrices are divided by tp, and with ZeRO 3 every
 *   tensor by the data parallelism too, each division rounding down.
 * - The optimizer state of each rank is three pairs of (params, 5 x hidden)
 *   elements of the optimizer type, params = the model's parameters over
 *   (dp x tp x pp) with ZeRO, over (tp x pp) without.
 * - Without ZeRO only the first tp x pp ranks write. With ZeRO 1 or 2 the
 *   layers are written by data-parallel rank 0 only (one file per layer
 *   with pipeline parallelism, else one file), the optimizer by every
 *   rank. ZeRO 0 and 3 write one model file and one optimizer file.
 * - A model that is not a transformer writes model_size bytes (one int8
 *   tensor) per writing rank: rank 0 without ZeRO. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "bench_impl.h"
#include "stoker/bench.h"

unsigned stk__ckpt_dtype_size(const char *name) {
  static const struct {
    const char *name;
    unsigned size;
  } t[] = {{"int8", 1}, {"uint8", 1}, {"fp16", 2}, {"bf16", 2}, {"fp32", 4}, {"fp64", 8}};
  for (size_t i = 0; i < STK__ARRAY_LEN(t); i++)
    if (!strcmp(t[i].name, name)) return t[i].size;
  return 0;
}

/* The spec with DLIO's defaults where a field is 0. */
struct shape {
  uint64_t L, v, h, ffn, heads, kv, tp, pp, dp, zero, model_size;
  unsigned msz, osz;
  int transformer;
};

static int shape_of(const struct stk_workload *w, uint32_t ranks, struct shape *s, char *err) {
  const struct stk_ckpt_spec *c = &w->ckpt;
  memset(s, 0, sizeof *s);
  s->L = c->num_layers;
  s->v = c->vocab ? c->vocab : 32000;
  s->h = c->hidden ? c->hidden : 2048;
  s->ffn = c->ffn ? c->ffn : 8192;
  s->heads = c->heads ? c->heads : 32;
  s->kv = c->kv_heads ? c->kv_heads : 8;
  s->tp = c->tp ? c->tp : 1;
  s->pp = c->pp ? c->pp : 1;
  s->zero = c->zero_stage;
  s->model_size = c->model_size ? c->model_size : 10240;
  s->transformer = !strcmp(c->model_type, "transformer");
  s->msz = stk__ckpt_dtype_size(c->model_dtype[0] ? c->model_dtype : "fp16");
  s->osz = stk__ckpt_dtype_size(c->optimizer_dtype[0] ? c->optimizer_dtype : "fp32");
  if (!s->msz || !s->osz)
    return stk__errf(err, STK_EINVAL, "model.model_datatype '%s' or optimizer_datatype '%s' is not "
                     "one of int8, uint8, fp16, bf16, fp32, fp64", c->model_dtype, c->optimizer_dtype);
  uint64_t mp = s->tp * s->pp;
  if (ranks == 0 || ranks % mp)
    return stk__errf(err, STK_EINVAL, "%u ranks are not a multiple of tensor x pipeline "
                     "parallelism (%llu x %llu): give a multiple of %llu accelerators", ranks,
                     (unsigned long long)s->tp, (unsigned long long)s->pp, (unsigned long long)mp);
  s->dp = c->dp ? c->dp : ranks / mp;
  if (c->dp && (uint64_t)c->dp * mp < ranks)
    return stk__errf(err, STK_EINVAL, "%u ranks are more than model.parallelism.data x tensor x "
                     "pipeline (%llu)", ranks, (unsigned long long)((uint64_t)c->dp * mp));
  if (s->L && s->L < s->pp)
    return stk__errf(err, STK_EINVAL, "model.num_layers %llu is fewer than the pipeline stages %llu",
                     (unsigned long long)s->L, (unsigned long long)s->pp);
  if (s->zero == 3 && s->pp > 1)
    return stk__errf(err, STK_EINVAL, "ZeRO stage 3 does not combine with pipeline parallelism "
                     "(DLIO refuses it too)");
  if (s->zero > 3) return stk__errf(err, STK_EINVAL, "ZeRO stage %llu is not 0..3", (unsigned long long)s->zero);
  return 0;
}

/* a x b, flagging overflow. */
static uint64_t mul(uint64_t a, uint64_t b, int *ovf) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) *ovf = 1;
  return r;
}

static uint64_t add(uint64_t a, uint64_t b, int *ovf) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) *ovf = 1;
  return r;
}

/* The tensors of layer i (0..L+2) on one rank, elements each, in DLIO's
 * order (get_layer_parameters); sf: the ZeRO-3 sharding. Returns the
 * count (at most 6). */
static size_t layer_tensors(const struct shape *s, uint64_t i, uint64_t sf, uint64_t t[6], int *ovf) {
  uint64_t h = s->h, dkv = mul(h / s->heads, s->kv, ovf);
  if (i == 0 || i == s->L + 1) {
    t[0] = mul(h, s->v, ovf) / s->tp / sf;
    return 1;
  }
  if (i == s->L + 2) {
    t[0] = h / sf;
    return 1;
  }
  t[0] = h / sf;
  t[1] = mul(h, add(h, 2 * dkv, ovf), ovf) / s->tp / sf;
  t[2] = mul(h, h, ovf) / s->tp / sf;
  t[3] = h / sf;
  t[4] = mul(mul(h, 2, ovf), s->ffn, ovf) / s->tp / sf;
  t[5] = mul(h, s->ffn, ovf) / s->tp / sf;
  return 6;
}

/* Elements of layer i on one rank. */
static uint64_t layer_elems(const struct shape *s, uint64_t i, uint64_t sf, int *ovf) {
  uint64_t t[6], n = 0;
  for (size_t k = 0, nt = layer_tensors(s, i, sf, t, ovf); k < nt; k++) n = add(n, t[k], ovf);
  return n;
}

/* The model's parameter count (DLIO's get_num_parameters). */
static uint64_t num_params(const struct shape *s, int *ovf) {
  uint64_t h = s->h, dkv = mul(h / s->heads, s->kv, ovf), emb = mul(s->v, h, ovf);
  uint64_t per = add(add(add(h, mul(h, add(h, 2 * dkv, ovf), ovf), ovf), mul(h, h, ovf), ovf), h, ovf);
  per = add(per, mul(mul(s->ffn, 2, ovf), h, ovf), ovf);
  per = add(per, mul(s->ffn, h, ovf), ovf);
  return add(add(add(emb, mul(per, s->L, ovf), ovf), h, ovf), emb, ovf);
}

static void put(struct stk_ckpt_file *out, size_t cap, size_t *n, uint64_t bytes, const char *fmt,
                unsigned long long a, unsigned long long b) {
  if (out && *n < cap) {
    snprintf(out[*n].name, sizeof out[*n].name, fmt, a, b);
    out[*n].bytes = bytes;
  }
  (*n)++;
}

/* Where the tensors of one file go: file `want` of the rank's files (or
 * none when want is SIZE_MAX); up to cap byte sizes to t, *nt counted. */
struct tensors {
  size_t want;
  uint64_t *t;
  size_t cap, nt;
};

/* The tensor of `bytes` in the file being listed (*n: the files so far),
 * when that file is the wanted one; DLIO makes no tensor of 0 elements. */
static void tensor(struct tensors *ts, size_t n, uint64_t bytes) {
  if (!ts || n != ts->want || !bytes) return;
  if (ts->nt < ts->cap) ts->t[ts->nt] = bytes;
  ts->nt++;
}

/* The tensors of layers start..end, bytes each, into the file numbered n. */
static void layer_run(struct tensors *ts, size_t n, const struct shape *s, uint64_t start,
                      uint64_t end, uint64_t sf, int *ovf) {
  for (uint64_t i = start; ts && i <= end; i++) {
    uint64_t t[6];
    for (size_t k = 0, nt = layer_tensors(s, i, sf, t, ovf); k < nt; k++)
      tensor(ts, n, mul(t[k], s->msz, ovf));
  }
}

static int rank_walk(const struct stk_workload *win, uint32_t ranks, uint32_t rank,
                     struct stk_ckpt_file *out, size_t cap, size_t *n, struct tensors *ts,
                     char *err) {
  struct shape s;
  *n = 0;
  struct stk_workload own; /* the caller's struct, read to its struct_size */
  int rc = stk__workload_take(&own, win, err), ovf = 0;
  if (rc) return rc;
  const struct stk_workload *w = &own;
  rc = shape_of(w, ranks, &s, err);
  if (rc) return rc;
  uint64_t mp = s.tp * s.pp, r = rank;
  if (r >= ranks) return stk__errf(err, STK_EINVAL, "rank %u of %u", rank, ranks);
  uint64_t tpr = r % s.tp, ppr = (r / s.tp) % s.pp, dpr = r / mp, mpr = r % mp;
  (void)tpr;
  if (s.zero == 0 && r >= mp) return 0; /* only the first model-parallel group writes */
  if (!s.transformer) {
    tensor(ts, *n, s.model_size);
    put(out, cap, n, s.model_size, "model_states-%llu.pt", (unsigned long long)r, 0);
  }
  if (s.L > 0) {
    uint64_t per = s.L / s.pp, rem = s.L % s.pp, start, end;
    if (ppr < rem) {
      start = ppr * (per + 1) + 1;
      end = start + per;
    } else {
      start = rem * (per + 1) + (ppr - rem) * per + 1;
      end = start + per - 1;
    }
    if (ppr == s.pp - 1) end = s.L + 2;
    if (ppr == 0) start = 0;
    uint64_t sf = s.zero >= 3 ? s.dp : 1, total = 0;
    int by_layer = s.zero >= 1 && s.zero <= 2;
    if (!by_layer || dpr == 0) {
      for (uint64_t i = start; i <= end; i++) {
        uint64_t b = mul(layer_elems(&s, i, sf, &ovf), s.msz, &ovf);
        total = add(total, b, &ovf);
        if (by_layer && s.pp > 1) {
          layer_run(ts, *n, &s, i, i, sf, &ovf);
          put(out, cap, n, b, "layer_%llu-model_%llu_model_states.pt", i, mpr);
        }
      }
      if (!(by_layer && s.pp > 1)) layer_run(ts, *n, &s, start, end, sf, &ovf);
      if (!by_layer)
        put(out, cap, n, total, "zero_pp_rank_%llu_mp_rank_%llu_model_states.pt", dpr, mpr);
      else if (s.pp == 1)
        put(out, cap, n, total, "model_%llu_model_states.pt", mpr, 0);
    }
    uint64_t p = num_params(&s, &ovf) / (s.zero > 0 ? mul(s.dp, mp, &ovf) : mp);
    if (p > 0) {
      /* three pairs of (params, 5 x hidden), as DLIO's optimizer groups */
      for (int k = 0; k < 6; k++) tensor(ts, *n, mul(k % 2 ? mul(5, s.h, &ovf) : p, s.osz, &ovf));
      uint64_t b = mul(mul(add(p, mul(5, s.h, &ovf), &ovf), 3, &ovf), s.osz, &ovf);
      put(out, cap, n, b, "zero_pp_rank_%llu_mp_rank_%llu_optim_states.pt", dpr, mpr);
    }
  }
  if (ovf) return stk__errf(err, STK_ERANGE, "the checkpoint's sizes overflow 64 bits");
  if (out && *n > cap)
    return stk__errf(err, STK_ERANGE, "rank %u writes %zu files, more than %zu", rank, *n, cap);
  return 0;
}

int stk_ckpt_rank_files(const struct stk_workload *win, uint32_t ranks, uint32_t rank,
                        struct stk_ckpt_file *out, size_t cap, size_t *n, char *err) {
  return rank_walk(win, ranks, rank, out, cap, n, NULL, err);
}

int stk__ckpt_file_tensors(const struct stk_workload *w, uint32_t ranks, uint32_t rank,
                           size_t file, uint64_t *t, size_t cap, size_t *nt, char *err) {
  struct tensors ts = {file, t, cap, 0};
  size_t n;
  *nt = 0;
  int rc = rank_walk(w, ranks, rank, NULL, 0, &n, &ts, err);
  if (rc) return rc;
  if (file >= n) return stk__errf(err, STK_EINVAL, "rank %u has %zu checkpoint files, not %zu", rank, n, file + 1);
  *nt = ts.nt;
  if (ts.nt > cap)
    return stk__errf(err, STK_ERANGE, "checkpoint file %zu of rank %u holds %zu tensors, more than %zu",
                     file, rank, ts.nt, cap);
  return 0;
}

int stk_ckpt_size(const struct stk_workload *win, uint32_t ranks, uint64_t *bytes, uint64_t *files,
                  uint32_t *writers, char *err) {
  *bytes = *files = 0;
  *writers = 0;
  struct stk_workload own;
  int trc = stk__workload_take(&own, win, err);
  if (trc) return trc;
  const struct stk_workload *w = &own;
  size_t cap = (size_t)w->ckpt.num_layers + 8;
  struct stk_ckpt_file *f = malloc(cap * sizeof *f);
  if (!f) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = 0, ovf = 0;
  for (uint32_t r = 0; r < ranks && !rc; r++) {
    size_t n;
    rc = stk_ckpt_rank_files(w, ranks, r, f, cap, &n, err);
    for (size_t i = 0; !rc && i < n; i++) *bytes = add(*bytes, f[i].bytes, &ovf);
    if (!rc && n) (*writers)++, *files += n;
  }
  free(f);
  if (!rc && ovf) rc = stk__errf(err, STK_ERANGE, "the checkpoint's total overflows 64 bits");
  return rc;
}

uint32_t stk_ckpt_model_parallel(const struct stk_workload *win) {
  struct stk_workload own; /* a larger struct than this library's: logged, 1 */
  char err[STK_ERRMSG_MAX];
  if (stk__workload_take(&own, win, err)) {
    stk_log(STK_LOG_ERROR, "%s", err);
    return 1;
  }
  const struct stk_workload *w = &own;
  uint64_t mp = (uint64_t)(w->ckpt.tp ? w->ckpt.tp : 1) * (w->ckpt.pp ? w->ckpt.pp : 1);
  return mp > UINT32_MAX ? UINT32_MAX : (uint32_t)mp;
}
