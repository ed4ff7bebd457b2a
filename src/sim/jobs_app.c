/* The measured applications of the Pollux OSDI'21 artifact: throughput by
 * placement and local batch size, and validation runs by batch size. A
 * placement that was measured is interpolated along the batch size only;
 * any other (more than four nodes) is interpolated linearly over a Delaunay
 * triangulation of (nodes, replicas, batch) points, built by Qhull with the
 * options SciPy's LinearNDInterpolator uses, so the simulated throughput is
 * the artifact's own. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libqhull_r/qhull_ra.h>

#include "jobs_impl.h"
#include "sim_impl.h"

/* Per application constants of the artifact's applications.py: the epochs
 * each job runs, and yolov3's largest atomic batch. */
static const struct {
  const char *name;
  int max_epochs, max_local;
} known[] = {
    {"bert", 2, 0},      {"cifar10", 100, 0},    {"ncf", 10, 0},
    {"imagenet", 90, 0}, {"deepspeech2", 80, 0}, {"yolov3", 50, 8},
};

static int need_cols(struct stk__sim_csv *r, const char *const *names, int *cols, int n,
                     char *errmsg) {
  for (int i = 0; i < n; i++) {
    cols[i] = stk__sim_csv_col(r, names[i]);
    if (cols[i] < 0)
      return stk__errf(errmsg, STK_EFORMAT, "%s: no %s column", r->path, names[i]);
  }
  return 0;
}

/* Read a whole numeric CSV with the named columns into rows (malloc'ed,
 * n x ncol). */
static int read_table(const char *path, const char *const *names, int ncol, double **rows,
                      int *nrows, char *errmsg) {
  struct stk__sim_csv r;
  int rc = stk__sim_csv_open(&r, path, errmsg);
  if (rc) return rc;
  int cols[8];
  rc = need_cols(&r, names, cols, ncol, errmsg);
  double *v = NULL;
  int n = 0, cap = 0;
  while (!rc && (rc = stk__sim_csv_next(&r, errmsg)) == 0) {
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      double *nv = realloc(v, sizeof(double) * (size_t)cap * (size_t)ncol);
      if (!nv) {
        rc = STK_ENOMEM;
        break;
      }
      v = nv;
    }
    for (int i = 0; i < ncol && !rc; i++)
      rc = stk__sim_csv_num(&r, cols[i], -INFINITY, &v[(size_t)n * ncol + i], errmsg);
    n++;
  }
  if (rc == STK_EOF) rc = 0;
  if (!rc && n == 0) rc = stk__errf(errmsg, STK_EEMPTY, "%s: no rows after the header", path);
  stk__sim_csv_close(&r);
  if (rc) {
    free(v);
    return rc;
  }
  *rows = v;
  *nrows = n;
  return 0;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Placement key: GPUs per node, zeros dropped, rotated to the
 * lexicographically smallest rotation (the artifact's normal form). */
static void place_key(const int *per_node, int n, char *key, size_t cap, int *nodes, int *reps) {
  int p[STK__JOBS_MAX_NODES], m = 0, sum = 0;
  for (int i = 0; i < n; i++)
    if (per_node[i] > 0) {
      p[m++] = per_node[i];
      sum += per_node[i];
    }
  int best = 0;
  for (int s = 1; s < m; s++) {
    int c = 0;
    for (int i = 0; i < m && !c; i++) c = p[(s + i) % m] - p[(best + i) % m];
    if (c < 0) best = s;
  }
  size_t o = 0;
  for (int i = 0; i < m && o + 4 < cap; i++)
    o += (size_t)snprintf(key + o, cap - o, i ? ".%d" : "%d", p[(best + i) % m]);
  key[o] = 0;
  *nodes = m;
  *reps = sum;
}

static int cmp_place(const void *a, const void *b) {
  return strcmp(((const struct stk__jplace *)a)->key, ((const struct stk__jplace *)b)->key);
}

static int load_placements(struct stk__japp *a, const char *dir, const char *sfx, char *errmsg) {
  char path[1100];
  snprintf(path, sizeof path, "%s/placements%s.csv", dir, sfx);
  struct stk__sim_csv r;
  int rc = stk__sim_csv_open(&r, path, errmsg);
  if (rc) return rc;
  static const char *const names[] = {"placement", "local_bsz", "step_time", "sync_time"};
  int cols[4];
  rc = need_cols(&r, names, cols, 4, errmsg);
  int cap = 0;
  while (!rc && (rc = stk__sim_csv_next(&r, errmsg)) == 0) {
    const char *ps = stk__sim_csv_get(&r, cols[0]);
    int per[STK__JOBS_MAX_NODES], m = 0;
    for (const char *c = ps; *c; c++) {
      if (*c < '1' || *c > '9' || m == STK__JOBS_MAX_NODES) {
        rc = stk__errf(errmsg, STK_EFORMAT, "%s:%llu: placement '%s' is not a digit per node",
                       path, (unsigned long long)r.line, ps);
        break;
      }
      per[m++] = *c - '0';
    }
    if (!rc && !m)
      rc = stk__errf(errmsg, STK_EFORMAT, "%s:%llu: empty placement", path,
                     (unsigned long long)r.line);
    double b, st, sy;
    if (!rc) rc = stk__sim_csv_num(&r, cols[1], -INFINITY, &b, errmsg);
    if (!rc) rc = stk__sim_csv_num(&r, cols[2], -INFINITY, &st, errmsg);
    if (!rc) rc = stk__sim_csv_num(&r, cols[3], -INFINITY, &sy, errmsg);
    if (rc) break;
    char key[24];
    int nodes, reps;
    place_key(per, m, key, sizeof key, &nodes, &reps);
    struct stk__jplace *p = NULL;
    for (int i = 0; i < a->nplace; i++)
      if (!strcmp(a->place[i].key, key)) p = &a->place[i];
    if (!p) {
      if (a->nplace == cap) {
        cap = cap ? 2 * cap : 64;
        struct stk__jplace *np = realloc(a->place, sizeof *np * (size_t)cap);
        if (!np) {
          rc = STK_ENOMEM;
          break;
        }
        a->place = np;
      }
      p = &a->place[a->nplace++];
      memset(p, 0, sizeof *p);
      snprintf(p->key, sizeof p->key, "%s", key);
      p->nodes = nodes;
      p->replicas = reps;
    }
    double *nb = realloc(p->bsz, sizeof(double) * (size_t)(p->n + 1));
    if (nb) p->bsz = nb;
    double *ns = realloc(p->step, sizeof(double) * (size_t)(p->n + 1));
    if (ns) p->step = ns;
    double *ny = realloc(p->sync, sizeof(double) * (size_t)(p->n + 1));
    if (ny) p->sync = ny;
    if (!nb || !ns || !ny) {
      rc = STK_ENOMEM;
      break;
    }
    /* keep sorted by batch size */
    int i = p->n++;
    while (i > 0 && p->bsz[i - 1] > b) {
      p->bsz[i] = p->bsz[i - 1];
      p->step[i] = p->step[i - 1];
      p->sync[i] = p->sync[i - 1];
      i--;
    }
    p->bsz[i] = b;
    p->step[i] = st;
    p->sync[i] = sy;
    if (a->min_local == 0 || b < a->min_local) a->min_local = (int)b;
    if (b > a->max_local) a->max_local = (int)b;
  }
  if (rc == STK_EOF) rc = 0;
  stk__sim_csv_close(&r);
  if (!rc && !a->nplace) rc = stk__errf(errmsg, STK_EEMPTY, "%s: no rows after the header", path);
  if (!rc) qsort(a->place, (size_t)a->nplace, sizeof *a->place, cmp_place);
  return rc;
}

/* The scattered points: the mean of the measured rows for each distinct
 * (nodes, replicas, batch), in sorted order, then scalability.csv's rows in
 * file order, as the artifact builds them. */
static int build_points(struct stk__japp *a, const char *dir, const char *sfx, char *errmsg) {
  char path[1100];
  snprintf(path, sizeof path, "%s/scalability%s.csv", dir, sfx);
  static const char *const names[] = {"num_nodes", "num_replicas", "local_bsz", "step_time",
                                      "sync_time"};
  double *sc;
  int nsc;
  int rc = read_table(path, names, 5, &sc, &nsc, errmsg);
  if (rc) return rc;
  int total = nsc;
  for (int i = 0; i < a->nplace; i++) total += a->place[i].n;
  double *rows = malloc(sizeof(double) * 5 * (size_t)total);
  a->pts = malloc(sizeof(double) * 3 * (size_t)total);
  a->vals = malloc(sizeof(double) * 2 * (size_t)total);
  if (!rows || !a->pts || !a->vals) {
    free(sc);
    free(rows);
    return STK_ENOMEM;
  }
  int m = 0;
  for (int i = 0; i < a->nplace; i++)
    for (int k = 0; k < a->place[i].n; k++) {
      double *w = &rows[5 * m++];
      w[0] = a->place[i].nodes;
      w[1] = a->place[i].replicas;
      w[2] = a->place[i].bsz[k];
      w[3] = a->place[i].step[k];
      w[4] = a->place[i].sync[k];
    }
  /* sort by (nodes, replicas, batch) and average equal keys */
  for (int i = 1; i < m; i++) { /* insertion sort: a few thousand rows, once */
    double t[5];
    memcpy(t, &rows[5 * i], sizeof t);
    int j = i;
    while (j > 0) {
      double *p = &rows[5 * (j - 1)];
      int gt = p[0] != t[0] ? p[0] > t[0] : p[1] != t[1] ? p[1] > t[1] : p[2] > t[2];
      if (!gt) break;
      memcpy(&rows[5 * j], p, sizeof t);
      j--;
    }
    memcpy(&rows[5 * j], t, sizeof t);
  }
  int np = 0;
  for (int i = 0; i < m;) {
    int j = i;
    double s3 = 0, s4 = 0;
    while (j < m && rows[5 * j] == rows[5 * i] && rows[5 * j + 1] == rows[5 * i + 1] &&
           rows[5 * j + 2] == rows[5 * i + 2]) {
      s3 += rows[5 * j + 3];
      s4 += rows[5 * j + 4];
      j++;
    }
    memcpy(&a->pts[3 * np], &rows[5 * i], 3 * sizeof(double));
    a->vals[2 * np] = s3 / (j - i);
    a->vals[2 * np + 1] = s4 / (j - i);
    np++;
    i = j;
  }
  for (int i = 0; i < nsc; i++, np++) {
    memcpy(&a->pts[3 * np], &sc[5 * i], 3 * sizeof(double));
    a->vals[2 * np] = sc[5 * i + 3];
    a->vals[2 * np + 1] = sc[5 * i + 4];
  }
  free(rows);
  free(sc);
  a->npts = np;
  for (int d = 0; d < 3; d++) {
    a->lo[d] = INFINITY;
    a->hi[d] = -INFINITY;
  }
  for (int i = 0; i < np; i++)
    for (int d = 0; d < 3; d++) {
      a->lo[d] = fmin(a->lo[d], a->pts[3 * i + d]);
      a->hi[d] = fmax(a->hi[d], a->pts[3 * i + d]);
    }
  return 0;
}

/* Delaunay tetrahedra of the points with Qhull ("d Qbb Qc Qz Q12 Qt", the
 * options of scipy.spatial.Delaunay), and each one's barycentric
 * transform; flat tetrahedra are dropped. */
static int triangulate(struct stk__japp *a, char *errmsg) {
  /* A type measured on one machine only (the Sia data's quad: one server
   * of 4 Quadro RTX 6000) has every point at one node count, so the points
   * lie in a plane and Qhull cannot triangulate them (the artifact builds
   * its interpolator only for an unmeasured placement, and there SciPy
   * fails the same way). Its measured placements are looked up as usual; a
   * placement over more nodes takes the nearest measured point (nd_interp's
   * fallback), so cross-node synchronisation is not modelled for it. */
  for (int d = 0; d < 3; d++)
    if (a->lo[d] == a->hi[d]) return 0;
  qhT qh_qh, *qh = &qh_qh;
  QHULL_LIB_CHECK
  qh_zero(qh, NULL);
  FILE *devnull = fopen("/dev/null", "w");
  double *pts = malloc(sizeof(double) * 3 * (size_t)a->npts);
  if (!pts || !devnull) {
    free(pts);
    if (devnull) fclose(devnull);
    return STK_ENOMEM;
  }
  memcpy(pts, a->pts, sizeof(double) * 3 * (size_t)a->npts);
  char opts[] = "qhull d Qbb Qc Qz Q12 Qt";
  int exitcode = qh_new_qhull(qh, 3, a->npts, pts, False, opts, NULL, devnull);
  int rc = 0;
  if (exitcode) {
    rc = stk__errf(errmsg, STK_EFORMAT, "%s: Delaunay triangulation of the throughput points failed",
                   a->name);
  } else {
    facetT *facet;
    int cap = 0;
    FORALLfacets {
      if (facet->upperdelaunay) continue;
      vertexT *vertex, **vertexp;
      int v[4], k = 0;
      FOREACHvertex_(facet->vertices) {
        if (k < 4) v[k] = qh_pointid(qh, vertex->point);
        k++;
      }
      if (k != 4) continue;
      /* T = [p1-p0, p2-p0, p3-p0] columns; store its inverse */
      const double *p0 = &a->pts[3 * v[0]];
      double m[9];
      for (int c = 0; c < 3; c++)
        for (int r = 0; r < 3; r++) m[3 * r + c] = a->pts[3 * v[c + 1] + r] - p0[r];
      double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                   m[2] * (m[3] * m[7] - m[4] * m[6]);
      double scale = 1;
      for (int i = 0; i < 9; i++) scale = fmax(scale, fabs(m[i]));
      if (fabs(det) < 1e-12 * scale * scale * scale) continue;
      if (a->nsimp == cap) {
        cap = cap ? 2 * cap : 256;
        int *ns = realloc(a->simp, sizeof(int) * 4 * (size_t)cap);
        if (ns) a->simp = ns;
        double *nt = realloc(a->tinv, sizeof(double) * 12 * (size_t)cap);
        if (nt) a->tinv = nt;
        if (!ns || !nt) {
          rc = STK_ENOMEM;
          break;
        }
      }
      double *t = &a->tinv[12 * a->nsimp];
      t[0] = (m[4] * m[8] - m[5] * m[7]) / det;
      t[1] = (m[2] * m[7] - m[1] * m[8]) / det;
      t[2] = (m[1] * m[5] - m[2] * m[4]) / det;
      t[3] = (m[5] * m[6] - m[3] * m[8]) / det;
      t[4] = (m[0] * m[8] - m[2] * m[6]) / det;
      t[5] = (m[2] * m[3] - m[0] * m[5]) / det;
      t[6] = (m[3] * m[7] - m[4] * m[6]) / det;
      t[7] = (m[1] * m[6] - m[0] * m[7]) / det;
      t[8] = (m[0] * m[4] - m[1] * m[3]) / det;
      memcpy(&t[9], p0, 3 * sizeof(double));
      memcpy(&a->simp[4 * a->nsimp], v, sizeof v);
      a->nsimp++;
    }
  }
  int curlong, totlong;
  qh_freeqhull(qh, !qh_ALL);
  qh_memfreeshort(qh, &curlong, &totlong);
  fclose(devnull);
  free(pts);
  if (!rc && a->nsimp == 0)
    rc = stk__errf(errmsg, STK_EFORMAT, "%s: throughput points span no volume", a->name);
  return rc;
}

static void nd_interp(const struct stk__japp *a, double x0, double x1, double x2, double *step,
                      double *sync) {
  double x[3] = {x0, x1, x2};
  const double eps = 100 * 2.220446049250313e-16;
  for (int s = 0; s < a->nsimp; s++) {
    const double *t = &a->tinv[12 * s];
    double d[3] = {x[0] - t[9], x[1] - t[10], x[2] - t[11]};
    double c1 = t[0] * d[0] + t[1] * d[1] + t[2] * d[2];
    double c2 = t[3] * d[0] + t[4] * d[1] + t[5] * d[2];
    double c3 = t[6] * d[0] + t[7] * d[1] + t[8] * d[2];
    double c0 = 1 - c1 - c2 - c3;
    if (c0 < -eps || c1 < -eps || c2 < -eps || c3 < -eps) continue;
    const int *v = &a->simp[4 * s];
    *step = c0 * a->vals[2 * v[0]] + c1 * a->vals[2 * v[1]] + c2 * a->vals[2 * v[2]] +
            c3 * a->vals[2 * v[3]];
    *sync = c0 * a->vals[2 * v[0] + 1] + c1 * a->vals[2 * v[1] + 1] +
            c2 * a->vals[2 * v[2] + 1] + c3 * a->vals[2 * v[3] + 1];
    return;
  }
  /* Outside the hull (the artifact would stop here): clamp into the box
   * and take the nearest measured point. */
  double best = INFINITY;
  for (int i = 0; i < a->npts; i++) {
    double dd = 0;
    for (int k = 0; k < 3; k++) {
      double q = fmin(fmax(x[k], a->lo[k]), a->hi[k]);
      double r = (q - a->pts[3 * i + k]) / (a->hi[k] - a->lo[k] + 1);
      dd += r * r;
    }
    if (dd < best) {
      best = dd;
      *step = a->vals[2 * i];
      *sync = a->vals[2 * i + 1];
    }
  }
}

void stk__japp_throughput(const struct stk__japp *a, const int *per_node, int nnodes, double bsz,
                          double *step, double *sync) {
  char key[24];
  int nodes, reps;
  place_key(per_node, nnodes, key, sizeof key, &nodes, &reps);
  struct stk__jplace probe;
  snprintf(probe.key, sizeof probe.key, "%s", key);
  const struct stk__jplace *p =
      bsearch(&probe, a->place, (size_t)a->nplace, sizeof *a->place, cmp_place);
  if (p) {
    if (p->n == 1 || bsz <= p->bsz[0]) {
      *step = p->step[0];
      *sync = p->sync[0];
      return;
    }
    if (bsz >= p->bsz[p->n - 1]) {
      *step = p->step[p->n - 1];
      *sync = p->sync[p->n - 1];
      return;
    }
    int i = 1;
    while (p->bsz[i] < bsz) i++;
    double f = (bsz - p->bsz[i - 1]) / (p->bsz[i] - p->bsz[i - 1]);
    *step = p->step[i - 1] + f * (p->step[i] - p->step[i - 1]);
    *sync = p->sync[i - 1] + f * (p->sync[i] - p->sync[i - 1]);
    return;
  }
  nd_interp(a, nodes < 16 ? nodes : 16, reps, bsz, step, sync);
}

static void bounds(const struct stk__japp *a, double bsz, int *lo, int *hi) {
  if (bsz <= a->val[0].bsz) {
    *lo = *hi = 0;
    return;
  }
  if (bsz >= a->val[a->nval - 1].bsz) {
    *lo = *hi = a->nval - 1;
    return;
  }
  int i = 0;
  while (a->val[i + 1].bsz <= bsz) i++;
  *lo = i;
  *hi = a->val[i].bsz == bsz ? i : i + 1;
}

static double lerp_col(const struct stk__japp *a, double bsz, int epoch, size_t off) {
  int lo, hi;
  bounds(a, bsz, &lo, &hi);
  const double *cl = *(double *const *)((const char *)&a->val[lo] + off);
  const double *ch = *(double *const *)((const char *)&a->val[hi] + off);
  if (lo == hi) return cl[epoch];
  double bl = a->val[lo].bsz, bh = a->val[hi].bsz;
  if (bsz < bl) bsz = bl;
  return ((bsz - bl) * ch[epoch] + (bh - bsz) * cl[epoch]) / (bh - bl);
}

void stk__japp_grad(const struct stk__japp *a, double bsz, int epoch, double *sqr, double *var) {
  if (epoch >= a->max_epochs) epoch = a->max_epochs - 1;
  *sqr = lerp_col(a, bsz, epoch, offsetof(struct stk__jval, sqr));
  *var = lerp_col(a, bsz, epoch, offsetof(struct stk__jval, var));
}

double stk__japp_iteration(const struct stk__japp *a, double bsz, int epoch) {
  if (epoch >= a->max_epochs) epoch = a->max_epochs - 1;
  return lerp_col(a, bsz, epoch, offsetof(struct stk__jval, iteration));
}

static void app_free(struct stk__japp *a) {
  for (int i = 0; i < a->nval; i++) {
    free(a->val[i].progress);
    free(a->val[i].iteration);
    free(a->val[i].metric);
    free(a->val[i].sqr);
    free(a->val[i].var);
  }
  free(a->val);
  for (int i = 0; i < a->nplace; i++) {
    free(a->place[i].bsz);
    free(a->place[i].step);
    free(a->place[i].sync);
  }
  free(a->place);
  free(a->progress_at);
  free(a->pts);
  free(a->vals);
  free(a->simp);
  free(a->tinv);
}

/* type: NULL for the Pollux artifact's files (placements.csv and
 * scalability.csv, its per-application constants), else a GPU type of the
 * Sia artifact (placements-TYPE.csv, scalability-TYPE.csv and its
 * constants: the batch limits of the measurements, deepspeech2's local
 * batch of at most 57 on rtx). */
static int load_app(struct stk__japp *a, const char *dir, const char *name, const char *type,
                    char *errmsg) {
  char sfx[40] = "";
  if (type) snprintf(sfx, sizeof sfx, "-%.30s", type);
  snprintf(a->name, sizeof a->name, "%.31s", name);
  DIR *d = opendir(dir);
  if (!d) return stk__errf(errmsg, stk__from_errno(errno), "%s: cannot open: %s", dir, strerror(errno));
  int bszs[64], nb = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int b;
    char tail[8];
    if (sscanf(e->d_name, "validation-%d.%7s", &b, tail) == 2 && !strcmp(tail, "csv") && b > 0 &&
        nb < 64)
      bszs[nb++] = b;
  }
  closedir(d);
  if (!nb) return stk__errf(errmsg, STK_EEMPTY, "%s: no validation-BSZ.csv files", dir);
  qsort(bszs, (size_t)nb, sizeof(int), cmp_int);
  a->val = calloc((size_t)nb, sizeof *a->val);
  if (!a->val) return STK_ENOMEM;
  int minlen = -1;
  for (int i = 0; i < nb; i++) {
    char path[1100];
    snprintf(path, sizeof path, "%s/validation-%d.csv", dir, bszs[i]);
    static const char *const names[] = {"progress", "iteration", "metric", "grad_sqr", "grad_var"};
    double *rows;
    int n;
    int rc = read_table(path, names, 5, &rows, &n, errmsg);
    if (rc) return rc;
    struct stk__jval *v = &a->val[a->nval++];
    v->bsz = bszs[i];
    v->n = n;
    double **cols[5] = {&v->progress, &v->iteration, &v->metric, &v->sqr, &v->var};
    for (int c = 0; c < 5; c++) {
      *cols[c] = malloc(sizeof(double) * (size_t)n);
      if (!*cols[c]) {
        free(rows);
        return STK_ENOMEM;
      }
      for (int k = 0; k < n; k++) (*cols[c])[k] = rows[5 * k + c];
    }
    free(rows);
    if (minlen < 0 || n < minlen) minlen = n;
  }
  int rc = load_placements(a, dir, sfx, errmsg);
  if (rc) return rc;
  a->init_bsz = a->val[0].bsz;
  a->max_bsz = a->val[a->nval - 1].bsz;
  a->max_epochs = minlen;
  for (size_t k = 0; k < STK__ARRAY_LEN(known); k++)
    if (!strcmp(known[k].name, name)) {
      if (known[k].max_epochs < a->max_epochs) a->max_epochs = known[k].max_epochs;
      if (known[k].max_local && !type) a->max_local = known[k].max_local;
    }
  if (type && !strcmp(name, "deepspeech2") && !strcmp(type, "rtx")) a->max_local = 57;
  a->progress_at = malloc(sizeof(double) * (size_t)(a->max_epochs + 1));
  if (!a->progress_at) return STK_ENOMEM;
  a->progress_at[0] = 0;
  for (int ep = 1; ep <= a->max_epochs; ep++) {
    double m = INFINITY;
    for (int i = 0; i < a->nval; i++) m = fmin(m, a->val[i].progress[ep - 1]);
    a->progress_at[ep] = m;
  }
  rc = build_points(a, dir, sfx, errmsg);
  if (!rc) rc = triangulate(a, errmsg);
  return rc;
}

static int cmp_name(const void *x, const void *y) {
  return strcmp(((const struct stk__japp *)x)->name, ((const struct stk__japp *)y)->name);
}

int stk_sim_apps_load(struct stk_sim_apps **out, const char *traces_dir, char *errmsg) {
  return stk_sim_apps_load_type(out, traces_dir, NULL, errmsg);
}

int stk_sim_apps_load_type(struct stk_sim_apps **out, const char *traces_dir, const char *type,
                           char *errmsg) {
  *out = NULL;
  DIR *d = opendir(traces_dir);
  if (!d)
    return stk__errf(errmsg, stk__from_errno(errno), "%s: cannot open: %s", traces_dir,
                     strerror(errno));
  struct stk_sim_apps *s = calloc(1, sizeof *s);
  if (!s) {
    closedir(d);
    return STK_ENOMEM;
  }
  int rc = 0, cap = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    /* the Sia artifact's pipeline-parallel GPT (its own step-time model)
     * is not modelled; no workload here runs it */
    if (type && !strcmp(e->d_name, "gpt_pmp")) continue;
    char dir[1024], probe[1100];
    snprintf(dir, sizeof dir, "%s/%s", traces_dir, e->d_name);
    snprintf(probe, sizeof probe, "%s/placements%s%.30s.csv", dir, type ? "-" : "",
             type ? type : "");
    FILE *f = fopen(probe, "r");
    if (!f) continue;
    fclose(f);
    if (s->n == cap) {
      cap = cap ? 2 * cap : 8;
      struct stk__japp *na = realloc(s->app, sizeof *na * (size_t)cap);
      if (!na) {
        rc = STK_ENOMEM;
        break;
      }
      s->app = na;
    }
    memset(&s->app[s->n], 0, sizeof s->app[0]);
    rc = load_app(&s->app[s->n++], dir, e->d_name, type, errmsg);
  }
  closedir(d);
  if (!rc && s->n == 0)
    rc = stk__errf(errmsg, STK_EEMPTY, "%s: no application directories (placements%s%s.csv)",
                   traces_dir, type ? "-" : "", type ? type : "");
  if (rc) {
    stk_sim_apps_free(s);
    return rc;
  }
  qsort(s->app, (size_t)s->n, sizeof *s->app, cmp_name);
  *out = s;
  return 0;
}

void stk_sim_apps_free(struct stk_sim_apps *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) app_free(&s->app[i]);
  free(s->app);
  free(s);
}

const struct stk__japp *stk__japp_find(const struct stk_sim_apps *s, const char *name) {
  for (int i = 0; s && i < s->n; i++)
    if (!strcmp(s->app[i].name, name)) return &s->app[i];
  return NULL;
}
