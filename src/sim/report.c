/* Reports of experiment mode: the policy table (mean of seeds beside the
 * paper's published figures), JSON, a long-format CSV with one row per
 * arrived percentage like the artifact's analysis files, and an SVG of the
 * allocation curves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim_impl.h"

/* Allocated GPUs (% of 6,212) on the openb traces with the GPU-node list,
 * mean of 10 seeds, from the artifact's expected results (paper Fig. 9, 11,
 * 12, 14). */
static const struct {
  const char *trace, *policy;
  double at100, at130;
} published[] = {
    {"openb_pod_list_default", "Random", 86.30, 87.47},
    {"openb_pod_list_default", "DotProd", 90.62, 90.85},
    {"openb_pod_list_default", "GpuClustering", 91.65, 91.88},
    {"openb_pod_list_default", "GpuPacking", 91.78, 92.00},
    {"openb_pod_list_default", "BestFit", 92.86, 93.08},
    {"openb_pod_list_default", "FGD", 95.23, 95.39},
    {"openb_pod_list_gpushare40", "BestFit", NAN, 91.69},
    {"openb_pod_list_gpushare40", "FGD", NAN, 94.15},
    {"openb_pod_list_multigpu20", "BestFit", NAN, 93.93},
    {"openb_pod_list_multigpu20", "FGD", NAN, 95.65},
    {"openb_pod_list_cpu100", "BestFit", NAN, 93.44},
    {"openb_pod_list_cpu100", "FGD", NAN, 95.35},
};

static void trace_key(const char *trace, char *out, size_t cap) {
  const char *b = strrchr(trace, '/');
  b = b ? b + 1 : trace;
  snprintf(out, cap, "%s", b);
  size_t n = strlen(out);
  if (n > 4 && !strcmp(out + n - 4, ".csv")) out[n - 4] = 0;
}

double stk_sim_published(const char *trace, const char *policy, int at_pct) {
  if (!trace || !policy) return NAN;
  char key[256];
  trace_key(trace, key, sizeof key);
  for (size_t i = 0; i < STK__ARRAY_LEN(published); i++)
    if (!strcmp(published[i].trace, key) && !strcasecmp(published[i].policy, policy))
      return at_pct == 100 ? published[i].at100 : at_pct == 130 ? published[i].at130 : NAN;
  return NAN;
}

/* Runs grouped by policy in order of first appearance. */
struct group {
  const char *policy;
  size_t first, n;
  double mean100, sd100, meanhi, sdhi, failed, wall;
  double hi_pct;
};

static size_t groups(const struct stk_sim_result *r, size_t n, struct group *g, size_t cap) {
  size_t ng = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < ng && strcmp(g[k].policy, r[i].policy)) k++;
    if (k == ng) {
      if (ng == cap) continue;
      memset(&g[ng], 0, sizeof g[ng]);
      g[ng].policy = r[i].policy;
      g[ng].first = i;
      ng++;
    }
    g[k].n++;
  }
  for (size_t k = 0; k < ng; k++) {
    double s1 = 0, q1 = 0, s2 = 0, q2 = 0, fl = 0, wl = 0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
      if (strcmp(r[i].policy, g[k].policy)) continue;
      double hi = r[i].npct ? (double)(r[i].npct - 1) : 0;
      if (hi > 130) hi = 130;
      g[k].hi_pct = hi;
      double a = stk_sim_result_at(&r[i], 100), b = stk_sim_result_at(&r[i], hi);
      s1 += a, q1 += a * a, s2 += b, q2 += b * b;
      fl += (double)r[i].failed, wl += r[i].wall_s;
      m++;
    }
    double dm = (double)m;
    g[k].mean100 = s1 / dm;
    g[k].meanhi = s2 / dm;
    g[k].sd100 = m > 1 ? sqrt(fmax(0, (q1 - s1 * s1 / dm) / (dm - 1))) : 0;
    g[k].sdhi = m > 1 ? sqrt(fmax(0, (q2 - s2 * s2 / dm) / (dm - 1))) : 0;
    g[k].failed = fl / dm;
    g[k].wall = wl / dm;
  }
  return ng;
}

static void fmt_num(char *buf, size_t cap, double v) {
  if (isnan(v))
    snprintf(buf, cap, "%s", "-");
  else
    snprintf(buf, cap, "%.2f", v);
}

void stk_sim_write_table(FILE *f, const struct stk_sim_result *r, size_t n, const char *trace) {
  struct group g[64];
  size_t ng = groups(r, n, g, 64);
  if (!ng) return;
  int hi = (int)g[0].hi_pct;
  char h1[16], h2[16];
  snprintf(h1, sizeof h1, "at 100%%");
  snprintf(h2, sizeof h2, "at %d%%", hi);
  int any_pub = 0;
  for (size_t k = 0; k < ng; k++)
    any_pub |= !isnan(stk_sim_published(trace, g[k].policy, 100)) ||
               !isnan(stk_sim_published(trace, g[k].policy, hi));
  fprintf(f, "allocated GPUs, %% of %llu (mean of %zu seed%s",
          (unsigned long long)(r[0].total_gpu_milli / 1000), g[0].n, g[0].n == 1 ? "" : "s");
  if (g[0].n > 1) fprintf(f, ", +- standard deviation");
  fprintf(f, ")\n");
  fprintf(f, "%-14s %-15s %-15s %11s", "policy", h1, h2, "failed pods");
  if (any_pub)
    fprintf(f, "   %-9s %-9s %-9s %s", "paper@100", "paper@130", "delta@100", "delta@130");
  fprintf(f, "\n");
  for (size_t k = 0; k < ng; k++) {
    char a[32], b[32];
    if (g[k].n > 1) {
      snprintf(a, sizeof a, "%6.2f +- %.2f", g[k].mean100, g[k].sd100);
      snprintf(b, sizeof b, "%6.2f +- %.2f", g[k].meanhi, g[k].sdhi);
    } else {
      fmt_num(a, sizeof a, g[k].mean100);
      fmt_num(b, sizeof b, g[k].meanhi);
    }
    fprintf(f, "%-14s %-15s %-15s %11.1f", g[k].policy, a, b, g[k].failed);
    if (any_pub) {
      double p1 = stk_sim_published(trace, g[k].policy, 100),
             p2 = stk_sim_published(trace, g[k].policy, 130);
      char c1[16], c2[16], d1[16], d2[16];
      fmt_num(c1, sizeof c1, p1);
      fmt_num(c2, sizeof c2, p2);
      if (isnan(p1))
        snprintf(d1, sizeof d1, "-");
      else
        snprintf(d1, sizeof d1, "%+.2f", g[k].mean100 - p1);
      if (isnan(p2) || hi != 130)
        snprintf(d2, sizeof d2, "-");
      else
        snprintf(d2, sizeof d2, "%+.2f", g[k].meanhi - p2);
      fprintf(f, "   %-9s %-9s %-9s %s", c1, c2, d1, d2);
    }
    fprintf(f, "\n");
  }
}

static void json_curve(struct stk_json *j, const char *key, const double *v, uint32_t n) {
  stk_json_key(j, key);
  stk_json_arr_begin(j);
  for (uint32_t i = 0; i < n; i++) stk_json_dbl(j, isnan(v[i]) ? NAN : round(v[i] * 1e4) / 1e4);
  stk_json_arr_end(j);
}

/* Mean curve over the runs of group g (NAN-aware). */
static void mean_curve(const struct stk_sim_result *r, size_t n, const char *policy, int which,
                       double *out, uint32_t np) {
  for (uint32_t p = 0; p < np; p++) {
    double s = 0;
    int m = 0;
    for (size_t i = 0; i < n; i++) {
      if (strcmp(r[i].policy, policy) || p >= r[i].npct) continue;
      const double *v = which == 0 ? r[i].alloc : which == 1 ? r[i].frag : r[i].frag_ratio;
      if (isnan(v[p])) continue;
      s += v[p];
      m++;
    }
    out[p] = m ? s / m : NAN;
  }
}

void stk_sim_write_json(FILE *f, const struct stk_sim_result *r, size_t n, const char *trace) {
  struct group g[64];
  size_t ng = groups(r, n, g, 64);
  struct stk_json j;
  stk_json_init(&j, f, 2);
  stk_json_obj_begin(&j);
  if (trace) stk_json_kstr(&j, "trace", trace);
  if (n) {
    stk_json_ku64(&j, "total_gpus", r[0].total_gpu_milli / 1000);
    stk_json_kdbl(&j, "inflate", r[0].inflate);
  }
  stk_json_key(&j, "policies");
  stk_json_arr_begin(&j);
  for (size_t k = 0; k < ng; k++) {
    uint32_t np = r[g[k].first].npct;
    double *curve = malloc((np ? np : 1) * sizeof *curve);
    if (!curve) np = 0;
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "policy", g[k].policy);
    stk_json_ku64(&j, "seeds", g[k].n);
    stk_json_kdbl(&j, "alloc_at_100", g[k].mean100);
    stk_json_kdbl(&j, "alloc_at_100_sd", g[k].sd100);
    stk_json_kdbl(&j, "alloc_at_end_pct", g[k].hi_pct);
    stk_json_kdbl(&j, "alloc_at_end", g[k].meanhi);
    stk_json_kdbl(&j, "alloc_at_end_sd", g[k].sdhi);
    stk_json_kdbl(&j, "published_at_100", stk_sim_published(trace, g[k].policy, 100));
    stk_json_kdbl(&j, "published_at_130", stk_sim_published(trace, g[k].policy, 130));
    stk_json_kdbl(&j, "failed_pods_mean", g[k].failed);
    stk_json_kdbl(&j, "wall_s_mean", g[k].wall);
    mean_curve(r, n, g[k].policy, 0, curve, np);
    json_curve(&j, "alloc", curve, np);
    mean_curve(r, n, g[k].policy, 1, curve, np);
    json_curve(&j, "frag_gpus", curve, np);
    mean_curve(r, n, g[k].policy, 2, curve, np);
    json_curve(&j, "frag_ratio", curve, np);
    stk_json_obj_end(&j);
    free(curve);
  }
  stk_json_arr_end(&j);
  stk_json_key(&j, "runs");
  stk_json_arr_begin(&j);
  for (size_t i = 0; i < n; i++) {
    const struct stk_sim_result *x = &r[i];
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "policy", x->policy);
    stk_json_ku64(&j, "seed", x->seed);
    stk_json_ku64(&j, "pods", x->pods);
    stk_json_ku64(&j, "placed", x->placed);
    stk_json_ku64(&j, "failed", x->failed);
    stk_json_ku64(&j, "failed_never_fit", x->failed_never_fit);
    stk_json_key(&j, "failed_by_class");
    stk_json_obj_begin(&j);
    stk_json_ku64(&j, "cpu", x->failed_by_class[0]);
    stk_json_ku64(&j, "share", x->failed_by_class[1]);
    stk_json_ku64(&j, "one_gpu", x->failed_by_class[2]);
    stk_json_ku64(&j, "multi_gpu", x->failed_by_class[3]);
    stk_json_obj_end(&j);
    stk_json_ku64(&j, "events", x->events);
    stk_json_kdbl(&j, "wall_s", x->wall_s);
    stk_json_kdbl(&j, "cpu_s", x->cpu_s);
    stk_json_kdbl(&j, "events_per_s", x->wall_s > 0 ? (double)x->events / x->wall_s : NAN);
    stk_json_ku64(&j, "arrived_gpu_milli", x->arrived_gpu_milli);
    stk_json_ku64(&j, "used_gpu_milli", x->used_gpu_milli);
    stk_json_kdbl(&j, "alloc_at_100", stk_sim_result_at(x, 100));
    stk_json_kdbl(&j, "final_alloc", x->final_alloc);
    stk_json_kdbl(&j, "final_frag_gpus", x->final_frag);
    stk_json_kdbl(&j, "final_frag_ratio", x->final_frag_ratio);
    json_curve(&j, "alloc", x->alloc, x->npct);
    json_curve(&j, "frag_gpus", x->frag, x->npct);
    json_curve(&j, "frag_ratio", x->frag_ratio, x->npct);
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_obj_end(&j);
  fputc('\n', f);
}

static void csv_row(FILE *f, const char *policy, const char *seed, uint32_t p, double a, double fr,
                    double ra) {
  fprintf(f, "%s,%s,%u,", policy, seed, p);
  if (isnan(a))
    fprintf(f, ",,\n");
  else
    fprintf(f, "%.4f,%.4f,%.4f\n", a, fr, isnan(ra) ? 0 : ra);
}

void stk_sim_write_csv(FILE *f, const struct stk_sim_result *r, size_t n) {
  fprintf(f, "policy,seed,arrived_pct,alloc_pct,frag_gpus,frag_ratio_pct\n");
  struct group g[64];
  size_t ng = groups(r, n, g, 64);
  for (size_t k = 0; k < ng; k++) {
    for (size_t i = 0; i < n; i++) {
      if (strcmp(r[i].policy, g[k].policy)) continue;
      char seed[32];
      snprintf(seed, sizeof seed, "%llu", (unsigned long long)r[i].seed);
      for (uint32_t p = 0; p < r[i].npct; p++)
        csv_row(f, r[i].policy, seed, p, r[i].alloc[p], r[i].frag[p], r[i].frag_ratio[p]);
    }
    if (g[k].n > 1) {
      uint32_t np = r[g[k].first].npct;
      double *a = malloc(3 * (size_t)np * sizeof *a);
      if (!a) continue;
      double *fr = a + np, *ra = fr + np;
      mean_curve(r, n, g[k].policy, 0, a, np);
      mean_curve(r, n, g[k].policy, 1, fr, np);
      mean_curve(r, n, g[k].policy, 2, ra, np);
      for (uint32_t p = 0; p < np; p++) csv_row(f, g[k].policy, "mean", p, a[p], fr[p], ra[p]);
      free(a);
    }
  }
}

static const char *colors[] = {"#7f7f7f", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};

void stk_sim_write_svg(FILE *f, const struct stk_sim_result *r, size_t n, const char *title) {
  struct group g[64];
  size_t ng = groups(r, n, g, 64);
  const double W = 820, H = 520, L = 70, R = 170, T = 50, B = 60;
  double pw = W - L - R, ph = H - T - B;
  uint32_t np = 0;
  for (size_t i = 0; i < n; i++) np = r[i].npct > np ? r[i].npct : np;
  if (np < 2) np = 2;
  double xmax = (double)(np - 1);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H, W, H);
  fprintf(f, "<text x=\"%.0f\" y=\"28\" font-size=\"15\" text-anchor=\"middle\">", L + pw / 2);
  for (const char *p = title ? title : "GPU allocation"; *p; p++) {
    if (*p == '<')
      fputs("&lt;", f);
    else if (*p == '&')
      fputs("&amp;", f);
    else
      fputc(*p, f);
  }
  fprintf(f, "</text>\n");
  for (int y = 0; y <= 100; y += 10) {
    double py = T + ph - y / 100.0 * ph;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, py,
            L + pw, py);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n", L - 6, py + 4, y);
  }
  for (int x = 0; x <= (int)xmax; x += 10) {
    double px = L + x / xmax * pw;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", px, T,
            px, T + ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", px, T + ph + 18,
            x);
  }
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#333\"/>\n",
          L, T, pw, ph);
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">arrived GPU demand, %% of "
          "capacity</text>\n",
          L + pw / 2, H - 18);
  fprintf(f,
          "<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">allocated "
          "GPUs, %% of "
          "capacity</text>\n",
          T + ph / 2);
  double *curve = malloc((size_t)ng * np * sizeof *curve);
  if (!curve) return;
  for (size_t k = 0; k < ng; k++) mean_curve(r, n, g[k].policy, 0, curve + k * np, np);
  for (size_t k = 0; k < ng; k++) {
    const char *col = colors[k % STK__ARRAY_LEN(colors)];
    const double *c = curve + k * np;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"", col);
    for (uint32_t p = 0; p < np; p++)
      if (!isnan(c[p])) fprintf(f, "%.1f,%.1f ", L + p / xmax * pw, T + ph - c[p] / 100.0 * ph);
    fprintf(f, "\"/>\n");
    double ly = T + 20 + 20.0 * (double)k;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"3\"/>\n",
            L + pw + 14, ly, L + pw + 34, ly, col);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s %.1f%%</text>\n", L + pw + 40, ly + 4, g[k].policy,
            g[k].meanhi);
  }
  /* An inset magnifies where the policies part: arrived demand from 90% on,
   * allocation from just below the lowest curve to 100%. It sits in the
   * empty lower right of the main plot. */
  uint32_t x0 = 90;
  if (np > x0 + 2) {
    double ymin = 100;
    for (size_t k = 0; k < ng; k++)
      for (uint32_t p = x0; p < np; p++)
        if (!isnan(curve[k * np + p]) && curve[k * np + p] < ymin) ymin = curve[k * np + p];
    ymin = floor(ymin / 5) * 5;
    if (ymin > 95) ymin = 95;
    double ix = L + pw * 0.52, iy = T + ph * 0.50, iw = pw * 0.44, ih = ph * 0.42;
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" "
            "stroke=\"#333\"/>\n",
            ix, iy, iw, ih);
    for (double y = ymin; y <= 100.001; y += 5) {
      double py = iy + ih - (y - ymin) / (100 - ymin) * ih;
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ix,
              py, ix + iw, py);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\">%.0f</text>\n",
              ix - 3, py + 3, y);
    }
    double span = xmax - x0;
    for (int x = (int)x0; x <= (int)xmax; x += 10) {
      double px = ix + (x - x0) / span * iw;
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%d</text>\n",
              px, iy + ih + 12, x);
    }
    for (size_t k = 0; k < ng; k++) {
      const double *c = curve + k * np;
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
              colors[k % STK__ARRAY_LEN(colors)]);
      for (uint32_t p = x0; p < np; p++)
        if (!isnan(c[p]) && c[p] >= ymin)
          fprintf(f, "%.1f,%.1f ", ix + (p - x0) / span * iw,
                  iy + ih - (c[p] - ymin) / (100 - ymin) * ih);
      fprintf(f, "\"/>\n");
    }
  }
  free(curve);
  fprintf(f, "</svg>\n");
}
