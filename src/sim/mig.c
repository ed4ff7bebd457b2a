/* NVIDIA MIG geometry as data: the GPU instance profiles of the A100 40 GB,
 * A100 80 GB and H100 80 GB with their compute slices, memory slices and
 * start slots (NVIDIA's MIG user guide, "Supported MIG Profiles"; NVML's
 * nvmlGpuInstancePlacement_t: a placement is the first memory slice and the
 * count of slices occupied, and creation fails on overlap). Layout checks,
 * enumeration of the valid layouts, and reconfiguration. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../base/base.h"
#include "stoker/mig.h"

#define ALL7 7, {0, 1, 2, 3, 4, 5, 6}
#define EVEN4 4, {0, 2, 4, 6}
#define EVEN3 3, {0, 2, 4}
#define HALVES 2, {0, 4}
#define FIRST 1, {0}

static const struct stk_mig_profile A100_40[] = {
    {"1g.5gb", 1, 1, 0, ALL7},  {"1g.5gb+me", 1, 1, 1, ALL7}, {"1g.10gb", 1, 2, 0, EVEN4},
    {"2g.10gb", 2, 2, 0, EVEN3}, {"3g.20gb", 3, 4, 0, HALVES}, {"4g.20gb", 4, 4, 0, FIRST},
    {"7g.40gb", 7, 8, 0, FIRST},
};
/* The 80 GB A100 and the H100 80 GB share the geometry; only names differ
 * from the 40 GB part (twice the memory per slice). */
static const struct stk_mig_profile GB80[] = {
    {"1g.10gb", 1, 1, 0, ALL7},  {"1g.10gb+me", 1, 1, 1, ALL7}, {"1g.20gb", 1, 2, 0, EVEN4},
    {"2g.20gb", 2, 2, 0, EVEN3}, {"3g.40gb", 3, 4, 0, HALVES},  {"4g.40gb", 4, 4, 0, FIRST},
    {"7g.80gb", 7, 8, 0, FIRST},
};

static const struct stk_mig_geometry GEOMS[] = {
    {"a100-40gb", "NVIDIA A100 40GB", 40, sizeof A100_40 / sizeof *A100_40, A100_40},
    {"a100-80gb", "NVIDIA A100 80GB", 80, sizeof GB80 / sizeof *GB80, GB80},
    {"h100-80gb", "NVIDIA H100 80GB", 80, sizeof GB80 / sizeof *GB80, GB80},
};

size_t stk_mig_geometry_count(void) { return sizeof GEOMS / sizeof *GEOMS; }

const struct stk_mig_geometry *stk_mig_geometry_at(size_t i) {
  return i < stk_mig_geometry_count() ? &GEOMS[i] : NULL;
}

const struct stk_mig_geometry *stk_mig_geometry_find(const char *name) {
  for (size_t i = 0; name && i < stk_mig_geometry_count(); i++)
    if (!strcasecmp(name, GEOMS[i].name)) return &GEOMS[i];
  return NULL;
}

int stk_mig_profile_find(const struct stk_mig_geometry *g, const char *name) {
  if (!g || !name) return -1;
  for (size_t i = 0; i < g->nprofiles; i++)
    if (!strcasecmp(name, g->profiles[i].name)) return (int)i;
  unsigned c;
  char tail;
  if (sscanf(name, "%ug%c", &c, &tail) == 1) { /* "3g": no +me, fewest memory slices */
    int best = -1;
    for (size_t i = 0; i < g->nprofiles; i++) {
      const struct stk_mig_profile *p = &g->profiles[i];
      if (p->compute == c && !p->media && (best < 0 || p->memory < g->profiles[best].memory))
        best = (int)i;
    }
    return best;
  }
  return -1;
}

static int valid_start(const struct stk_mig_profile *p, unsigned start) {
  for (unsigned i = 0; i < p->nstarts; i++)
    if (p->starts[i] == start) return 1;
  return 0;
}

static unsigned slices_of(const struct stk_mig_profile *p, unsigned start) {
  return ((1u << p->memory) - 1) << start;
}

int stk_mig_layout_check(const struct stk_mig_geometry *g, const struct stk_mig_layout *l,
                         char *errmsg) {
  unsigned used = 0, compute = 0, media = 0;
  if (l->n > STK_MIG_MAX_INSTANCES)
    return stk__errf(errmsg, STK_EINVAL, "%s: %u instances, at most %d", g->name, l->n,
                     STK_MIG_MAX_INSTANCES);
  for (unsigned i = 0; i < l->n; i++) {
    const struct stk_mig_instance *in = &l->inst[i];
    if (in->profile >= g->nprofiles)
      return stk__errf(errmsg, STK_EINVAL, "%s: instance %u: no profile %u", g->name, i,
                       in->profile);
    const struct stk_mig_profile *p = &g->profiles[in->profile];
    if (!valid_start(p, in->start))
      return stk__errf(errmsg, STK_EINVAL, "%s: instance %u: %s cannot start at slot %u",
                       g->name, i, p->name, in->start);
    unsigned s = slices_of(p, in->start);
    if (used & s)
      return stk__errf(errmsg, STK_EINVAL,
                       "%s: instance %u: %s at slot %u overlaps the memory slices of another "
                       "instance",
                       g->name, i, p->name, in->start);
    if (p->media && media++)
      return stk__errf(errmsg, STK_EINVAL, "%s: instance %u: a second +me instance (%s)",
                       g->name, i, p->name);
    used |= s;
    compute += p->compute;
  }
  if (compute > STK_MIG_COMPUTE_SLICES)
    return stk__errf(errmsg, STK_EINVAL, "%s: %u compute slices, the GPU has %d", g->name,
                     compute, STK_MIG_COMPUTE_SLICES);
  return 0;
}

unsigned stk_mig_layout_compute(const struct stk_mig_geometry *g, const struct stk_mig_layout *l) {
  unsigned c = 0;
  for (unsigned i = 0; i < l->n; i++) c += g->profiles[l->inst[i].profile].compute;
  return c;
}

int stk_mig_layout_add(const struct stk_mig_geometry *g, struct stk_mig_layout *l, int profile,
                       int start, char *errmsg) {
  if (profile < 0 || (size_t)profile >= g->nprofiles)
    return stk__errf(errmsg, STK_EINVAL, "%s: no profile %d", g->name, profile);
  if (l->n >= STK_MIG_MAX_INSTANCES)
    return stk__errf(errmsg, STK_ENOSPC, "%s: already %d instances", g->name,
                     STK_MIG_MAX_INSTANCES);
  const struct stk_mig_profile *p = &g->profiles[profile];
  struct stk_mig_layout t = *l;
  t.n++;
  t.inst[l->n].profile = (uint8_t)profile;
  if (start >= 0) {
    t.inst[l->n].start = (uint8_t)start;
    int rc = stk_mig_layout_check(g, &t, errmsg);
    if (rc == 0) *l = t;
    return rc;
  }
  for (unsigned i = 0; i < p->nstarts; i++) {
    t.inst[l->n].start = p->starts[i];
    if (stk_mig_layout_check(g, &t, NULL) == 0) {
      *l = t;
      return 0;
    }
  }
  return stk__errf(errmsg, STK_ENOSPC, "%s: no free start slot for %s", g->name, p->name);
}

/* Depth-first over the (profile, start) candidates in a fixed order, each
 * set visited once. */
struct enum_ctx {
  const struct stk_mig_geometry *g;
  struct stk_mig_instance cand[64];
  unsigned ncand;
  uint64_t all, maximal;
};

static void enumerate(struct enum_ctx *e, struct stk_mig_layout *l, unsigned from) {
  e->all++;
  if (l->n >= STK_MIG_MAX_INSTANCES) {
    e->maximal++;
    return;
  }
  int extendable = 0;
  for (unsigned c = 0; c < e->ncand && !extendable; c++) {
    l->inst[l->n] = e->cand[c];
    l->n++;
    if (stk_mig_layout_check(e->g, l, NULL) == 0) extendable = 1;
    l->n--;
  }
  if (!extendable) e->maximal++;
  for (unsigned c = from; c < e->ncand; c++) {
    l->inst[l->n] = e->cand[c];
    l->n++;
    if (stk_mig_layout_check(e->g, l, NULL) == 0) enumerate(e, l, c + 1);
    l->n--;
  }
}

void stk_mig_count_layouts(const struct stk_mig_geometry *g, uint32_t mask, uint64_t *all,
                           uint64_t *maximal) {
  struct enum_ctx e = {.g = g};
  for (unsigned p = 0; p < g->nprofiles; p++)
    if (mask & (1u << p))
      for (unsigned s = 0; s < g->profiles[p].nstarts; s++)
        e.cand[e.ncand++] = (struct stk_mig_instance){(uint8_t)p, g->profiles[p].starts[s]};
  struct stk_mig_layout l = {0};
  enumerate(&e, &l, 0);
  /* the empty layout is counted in all; it is maximal only with no profile */
  if (all) *all = e.all;
  if (maximal) *maximal = e.maximal;
}

static int has(const struct stk_mig_layout *l, struct stk_mig_instance in) {
  for (unsigned i = 0; i < l->n; i++)
    if (l->inst[i].profile == in.profile && l->inst[i].start == in.start) return 1;
  return 0;
}

int stk_mig_reconfigure(const struct stk_mig_geometry *g, struct stk_mig_layout *cur,
                        uint32_t busy, const struct stk_mig_layout *target, double now,
                        double delay_s, double *ready_at, char *errmsg) {
  char why[STK_ERRMSG_MAX];
  if (stk_mig_layout_check(g, target, why))
    return stk__errf(errmsg, STK_EINVAL, "reconfigure: invalid target: %s", why);
  int created = 0;
  for (unsigned i = 0; i < cur->n; i++)
    if (!has(target, cur->inst[i]) && (busy & (1u << i)))
      return stk__errf(errmsg, STK_EBUSY,
                       "reconfigure: instance %u (%s at slot %u) is busy; a GPU's instances "
                       "change only when the instances removed are empty",
                       i, g->profiles[cur->inst[i].profile].name, cur->inst[i].start);
  for (unsigned i = 0; i < target->n; i++)
    if (!has(cur, target->inst[i])) created = 1;
  *cur = *target;
  if (ready_at) *ready_at = created ? now + delay_s : now;
  return 0;
}
