/* The cluster model's immutable half: the node list (CPU, memory, GPU count
 * and model per node) read from openb_node_list_*.csv, and the interning of
 * GPU model names into small ids that pod constraints become bitmasks of. */
#include <stdlib.h>
#include <string.h>

#include "sim_impl.h"

uint32_t stk__sim_model_id(const struct stk_sim_cluster *c, const char *name, size_t len) {
  for (uint32_t m = 1; m <= c->nmodels; m++)
    if (strlen(c->model_name[m]) == len && !memcmp(c->model_name[m], name, len)) return m;
  return 0;
}

static int grow(struct stk_sim_cluster *c, uint32_t *cap) {
  uint32_t n = *cap ? *cap * 2 : 1024;
  int32_t *cpu = realloc(c->cpu, n * sizeof *cpu);
  if (cpu) c->cpu = cpu;
  int64_t *mem = realloc(c->mem, n * sizeof *mem);
  if (mem) c->mem = mem;
  uint8_t *ngpu = realloc(c->ngpu, n);
  if (ngpu) c->ngpu = ngpu;
  uint8_t *model = realloc(c->model, n);
  if (model) c->model = model;
  char **name = realloc(c->name, n * sizeof *name);
  if (name) c->name = name;
  if (!cpu || !mem || !ngpu || !model || !name) return STK_ENOMEM;
  *cap = n;
  return 0;
}

int stk_sim_cluster_load(struct stk_sim_cluster **out, const char *path, char *errmsg) {
  *out = NULL;
  struct stk__sim_csv r;
  int rc = stk__sim_csv_open(&r, path, errmsg);
  if (rc) return rc;
  struct stk_sim_cluster *c = calloc(1, sizeof *c);
  if (!c) {
    stk__sim_csv_close(&r);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  int csn = stk__sim_csv_col(&r, "sn"), ccpu = stk__sim_csv_col(&r, "cpu_milli"),
      cmem = stk__sim_csv_col(&r, "memory_mib"), cgpu = stk__sim_csv_col(&r, "gpu"),
      cmodel = stk__sim_csv_col(&r, "model");
  if (ccpu < 0 || cmem < 0 || cgpu < 0) {
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s: not a node list: the header needs cpu_milli, memory_mib and gpu "
                   "(and usually sn and model)",
                   r.path);
    goto fail;
  }
  uint32_t cap = 0;
  while ((rc = stk__sim_csv_next(&r, errmsg)) == 0) {
    if (c->n == cap && (rc = grow(c, &cap)) != 0) {
      stk__errf(errmsg, rc, "%s: out of memory", r.path);
      goto fail;
    }
    int64_t cpu, mem, gpu;
    if ((rc = stk__sim_csv_int(&r, ccpu, 0, INT32_MAX, 0, 0, &cpu, errmsg)) ||
        (rc = stk__sim_csv_int(&r, cmem, 0, (int64_t)1 << 40, 0, 0, &mem, errmsg)) ||
        (rc = stk__sim_csv_int(&r, cgpu, 0, INT32_MAX, 0, 0, &gpu, errmsg)))
      goto fail;
    if (gpu > STK_SIM_MAX_GPUS) {
      rc = stk__errf(errmsg, STK_EFORMAT,
                     "%s:%llu: gpu %lld: at most %d GPUs per node are supported", r.path,
                     (unsigned long long)r.line, (long long)gpu, STK_SIM_MAX_GPUS);
      goto fail;
    }
    const char *model = stk__sim_csv_get(&r, cmodel);
    uint32_t mid = 0;
    if (*model && gpu > 0) {
      size_t len = strlen(model);
      if (strchr(model, '|') || len > 31) {
        rc = stk__errf(errmsg, STK_EFORMAT, "%s:%llu: model '%s' is not a GPU model name", r.path,
                       (unsigned long long)r.line, model);
        goto fail;
      }
      mid = stk__sim_model_id(c, model, len);
      if (!mid) {
        if (c->nmodels == STK_SIM_MAX_MODELS) {
          rc = stk__errf(errmsg, STK_ERANGE, "%s:%llu: more than %d GPU models", r.path,
                         (unsigned long long)r.line, STK_SIM_MAX_MODELS);
          goto fail;
        }
        mid = ++c->nmodels;
        c->model_name[mid] = strdup(model);
        if (!c->model_name[mid]) {
          rc = stk__errf(errmsg, STK_ENOMEM, "out of memory");
          goto fail;
        }
      }
    }
    const char *sn = stk__sim_csv_get(&r, csn);
    char gen[32];
    if (!*sn) {
      snprintf(gen, sizeof gen, "node-%u", c->n);
      sn = gen;
    }
    c->name[c->n] = strdup(sn);
    if (!c->name[c->n]) {
      rc = stk__errf(errmsg, STK_ENOMEM, "out of memory");
      goto fail;
    }
    c->cpu[c->n] = (int32_t)cpu;
    c->mem[c->n] = mem;
    c->ngpu[c->n] = (uint8_t)gpu;
    c->model[c->n] = (uint8_t)mid;
    c->gpus += (uint64_t)gpu;
    c->cpu_total += (uint64_t)cpu;
    c->mem_total += (uint64_t)mem;
    c->gpu_nodes += gpu > 0;
    c->n++;
  }
  if (rc != STK_EOF) goto fail;
  if (c->n == 0) {
    rc = stk__errf(errmsg, STK_EEMPTY, "%s: no nodes after the header", r.path);
    goto fail;
  }
  stk__sim_csv_close(&r);
  *out = c;
  return 0;
fail:
  stk__sim_csv_close(&r);
  stk_sim_cluster_free(c);
  return rc;
}

void stk_sim_cluster_free(struct stk_sim_cluster *c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->n; i++) free(c->name[i]);
  for (uint32_t m = 1; m <= c->nmodels; m++) free(c->model_name[m]);
  free(c->cpu);
  free(c->mem);
  free(c->ngpu);
  free(c->model);
  free(c->name);
  free(c);
}

void stk_sim_cluster_info(const struct stk_sim_cluster *c, struct stk_sim_cluster_info *info) {
  memset(info, 0, sizeof *info);
  info->nodes = c->n;
  info->gpu_nodes = c->gpu_nodes;
  info->models = c->nmodels;
  info->gpus = c->gpus;
  info->cpu_milli = c->cpu_total;
  info->memory_mib = c->mem_total;
}
