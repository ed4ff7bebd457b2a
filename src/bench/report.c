/* Reports of a bench run: JSON with every figure (per accelerator and per
 * epoch), and a self-contained SVG chart: throughput over time on top,
 * the split of accelerator time (compute, data stall, sync stall) below,
 * with AU and its threshold, and the warm-up before the first epoch. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "bench_impl.h"
#include "stoker/bench.h"

static void workload_json(struct stk_json *j, const struct stk_workload *w) {
  stk_json_key(j, "workload");
  stk_json_obj_begin(j);
  stk_json_kstr(j, "name", w->name);
  stk_json_kstr(j, "accelerator", w->accel);
  stk_json_kstr(j, "format", w->format);
  stk_json_kdbl(j, "record_bytes", w->record_bytes);
  stk_json_kdbl(j, "record_bytes_stdev", w->record_stdev);
  stk_json_ku64(j, "files", w->files);
  stk_json_ku64(j, "samples_per_file", w->samples_per_file);
  stk_json_ku64(j, "batch", w->batch);
  stk_json_ku64(j, "read_threads", w->read_threads);
  stk_json_ku64(j, "epochs", w->epochs);
  stk_json_kdbl(j, "compute_s", w->compute_s);
  stk_json_kdbl(j, "compute_stdev_s", w->compute_stdev);
  stk_json_kdbl(j, "au_threshold", w->au_min);
  stk_json_obj_end(j);
}

/* All accelerators of the job, and the number of the first one in r: a
 * gathered result (MPI) holds them all; one process's holds its share. */
static uint64_t job_accelerators(const struct stk_bench_opts *o, const struct stk_bench_result *r) {
  return r->processes > 1 ? r->accelerators : (uint64_t)r->accelerators * (o->world ? o->world : 1);
}

static uint64_t first_accelerator(const struct stk_bench_opts *o,
                                  const struct stk_bench_result *r) {
  return r->processes > 1 ? 0 : (uint64_t)o->rank * r->accelerators;
}

/* The caller's options as far as its struct goes (a larger one: logged,
 * nothing written). */
static int take(struct stk_bench_opts *own, struct stk_workload *w, const struct stk_bench_opts *o) {
  char err[STK_ERRMSG_MAX];
  int rc = stk__bench_opts_take(own, w, o, err);
  if (rc) stk_log(STK_LOG_ERROR, "%s", err);
  return rc;
}

void stk_bench_json(const struct stk_bench_opts *oin, const struct stk_bench_result *r, FILE *f) {
  struct stk_bench_opts own;
  struct stk_workload wl;
  if (take(&own, &wl, oin)) return;
  const struct stk_bench_opts *o = &own;
  struct stk_json j;
  stk_json_init(&j, f, 2);
  stk_json_obj_begin(&j);
  workload_json(&j, o->w);
  stk_json_kstr(&j, "data", o->data);
  stk_json_ku64(&j, "accelerators", job_accelerators(o, r));
  stk_json_ku64(&j, "processes", r->processes > 1 ? r->processes : (o->world ? o->world : 1));
  stk_json_ku64(&j, "hosts", r->hosts ? r->hosts : 1);
  stk_json_ku64(&j, "accelerators_in_process",
                r->processes > 1 ? r->accelerators / r->processes : r->accelerators);
  stk_json_ku64(&j, "steps_per_epoch", r->steps_per_epoch);
  stk_json_kdbl(&j, "allreduce_s_per_step", o->allreduce_s);
  stk_json_kdbl(&j, "au", r->au);
  stk_json_key(&j, "pass");
  stk_json_bool(&j, r->pass);
  stk_json_kdbl(&j, "samples_per_s", r->samples_per_s);
  stk_json_kdbl(&j, "mib_per_s", r->mib_per_s);
  stk_json_kdbl(&j, "wall_s", r->wall_s);
  stk_json_kdbl(&j, "warmup_s", r->warmup_s);
  stk_json_ku64(&j, "warmup_batches", r->warmup_batches);
  stk_json_kdbl(&j, "cpu_s", (double)r->cpu_ns / 1e9);
  stk_json_kdbl(&j, "cpu_s_per_1000_samples",
                r->loader.samples ? (double)r->cpu_ns / 1e6 / (double)r->loader.samples : NAN);
  stk_json_key(&j, "time_split");
  stk_json_obj_begin(&j);
  stk_json_kdbl(&j, "compute", r->compute_frac);
  stk_json_kdbl(&j, "data_stall", r->data_stall_frac);
  stk_json_kdbl(&j, "sync_stall", r->sync_stall_frac);
  stk_json_kdbl(&j, "sync_stall_from_jitter", r->sync_jitter_frac);
  stk_json_kdbl(&j, "sync_stall_from_wakeups", r->sync_wake_frac);
  stk_json_kdbl(&j, "comm", r->comm_frac);
  stk_json_kdbl(&j, "checkpoint", r->ckpt_frac);
  stk_json_obj_end(&j);
  if (r->ckpt.saves || r->ckpt.loads || r->ckpt_only) {
    const struct stk_bench_ckpt *c = &r->ckpt;
    stk_json_key(&j, "checkpoints");
    stk_json_obj_begin(&j);
    stk_json_key(&j, "only");
    stk_json_bool(&j, r->ckpt_only);
    stk_json_kstr(&j, "dir", c->dir);
    stk_json_ku64(&j, "ranks", c->ranks);
    stk_json_ku64(&j, "writers", c->writers);
    stk_json_ku64(&j, "dlio_bytes", c->dlio_bytes);
    stk_json_ku64(&j, "files", c->files);
    stk_json_kdbl(&j, "scale", c->scale);
    stk_json_ku64(&j, "bytes", c->bytes);
    stk_json_key(&j, "fsync");
    stk_json_bool(&j, c->fsync);
    stk_json_key(&j, "direct");
    stk_json_bool(&j, c->direct);
    stk_json_kstr(&j, "io", c->io == STK_CKPT_IO_TORCH ? "torch" : "tier");
    stk_json_ku64(&j, "saves", c->saves);
    stk_json_kdbl(&j, "save_s", c->save_s);
    stk_json_kdbl(&j, "save_max_s", c->save_max_s);
    stk_json_kdbl(&j, "save_gib_s", c->save_s > 0 ? (double)c->bytes * c->saves / c->save_s / 1073741824.0 : NAN);
    stk_json_ku64(&j, "loads", c->loads);
    stk_json_kdbl(&j, "load_s", c->load_s);
    stk_json_kdbl(&j, "load_max_s", c->load_max_s);
    stk_json_kdbl(&j, "load_gib_s", c->load_s > 0 ? (double)c->bytes * c->loads / c->load_s / 1073741824.0 : NAN);
    stk_json_obj_end(&j);
  }
  stk_json_kstr(&j, "engine", r->engine);
  stk_json_key(&j, "host");
  stk_json_obj_begin(&j);
  stk_json_ku64(&j, "cores", r->host.cores);
  stk_json_kdbl(&j, "busy_cpu_s", r->host.cpu_valid ? r->host.busy_cpu_s : NAN);
  stk_json_kdbl(&j, "steal_cpu_s", r->host.cpu_valid ? r->host.steal_cpu_s : NAN);
  stk_json_kdbl(&j, "device_read_bytes", r->host.io_valid ? (double)r->host.device_read_bytes : NAN);
  stk_json_obj_end(&j);
  stk_json_kstr(&j, "bottleneck", r->bottleneck);
  stk_json_kstr(&j, "verdict", r->verdict);
  stk_json_key(&j, "interrupted");
  stk_json_bool(&j, r->interrupted);
  stk_json_key(&j, "epochs");
  stk_json_arr_begin(&j);
  for (uint32_t e = 0; e < r->epochs; e++) {
    stk_json_obj_begin(&j);
    stk_json_ku64(&j, "epoch", e);
    stk_json_key(&j, "accelerators");
    stk_json_arr_begin(&j);
    for (uint32_t a = 0; a < r->accelerators; a++) {
      const struct stk_bench_epoch *p = &r->per[(size_t)e * r->accelerators + a];
      stk_json_obj_begin(&j);
      stk_json_ku64(&j, "rank", first_accelerator(o, r) + a);
      stk_json_ku64(&j, "steps", p->steps);
      stk_json_kdbl(&j, "au", p->au);
      stk_json_kdbl(&j, "samples_per_s", p->samples_per_s);
      stk_json_kdbl(&j, "wall_s", p->wall_s);
      stk_json_kdbl(&j, "compute_s", p->compute_s);
      stk_json_kdbl(&j, "load_s", p->load_s);
      stk_json_kdbl(&j, "sync_s", p->sync_s);
      stk_json_kdbl(&j, "sync_jitter_s", p->sync_jitter_s);
      stk_json_kdbl(&j, "sync_wake_s", p->sync_wake_s);
      stk_json_kdbl(&j, "comm_s", p->comm_s);
      stk_json_kdbl(&j, "ckpt_s", p->ckpt_s);
      stk_json_kdbl(&j, "first_step_s", p->first_step_s);
      stk_json_obj_end(&j);
    }
    stk_json_arr_end(&j);
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_key(&j, "loader");
  stk_loader_stats_json(&r->loader, &j);
  stk_json_obj_end(&j);
}

/* ---- SVG ------------------------------------------------------------------ */

#define BINS 120
#define W_PX 900
#define PLOT_X 70
#define PLOT_W 790

struct bin {
  double samples, compute, load, sync;
};

static void svg_text(FILE *f, double x, double y, const char *anchor, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void svg_text(FILE *f, double x, double y, const char *anchor, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", x, y, anchor);
  for (const char *p = buf; *p; p++) {
    if (*p == '<')
      fputs("&lt;", f);
    else if (*p == '>')
      fputs("&gt;", f);
    else if (*p == '&')
      fputs("&amp;", f);
    else
      fputc(*p, f);
  }
  fputs("</text>\n", f);
}

/* Add `amount` spread evenly over [t0, t1) to the bins it overlaps. */
static void spread(struct bin *b, double *field0, double t0, double t1, double amount, double dt) {
  if (t1 <= t0) return;
  size_t off = (size_t)((char *)field0 - (char *)b);
  for (int k = (int)(t0 / dt); k < BINS && k * dt < t1; k++) {
    if (k < 0) continue;
    double lo = STK__MAX(t0, k * dt), hi = STK__MIN(t1, (k + 1) * dt);
    if (hi > lo) *(double *)((char *)&b[k] + off) += amount * (hi - lo) / (t1 - t0);
  }
}

void stk_bench_svg(const struct stk_bench_opts *oin, const struct stk_bench_result *r, FILE *f) {
  struct stk_bench_opts own;
  struct stk_workload wl;
  if (take(&own, &wl, oin)) return;
  const struct stk_bench_opts *o = &own;
  struct bin b[BINS];
  memset(b, 0, sizeof b);
  double tmax = r->wall_s > 0 ? r->wall_s : 1, dt = tmax / BINS;
  for (uint64_t i = 0; i < r->ntimeline; i++) {
    const struct stk_bench_step *s = &r->timeline[i];
    double t3 = s->t_end, t2 = t3 - s->sync_s, t1 = t2 - s->compute_s, t0 = t1 - s->load_s;
    spread(b, &b[0].samples, t0, t3, o->w->batch, dt);
    spread(b, &b[0].load, t0, t1, s->load_s, dt);
    spread(b, &b[0].compute, t1, t2, s->compute_s, dt);
    spread(b, &b[0].sync, t2, t3, s->sync_s, dt);
  }
  double peak = 1;
  for (int k = 0; k < BINS; k++) peak = STK__MAX(peak, b[k].samples / dt);
  const double top_y = 60, top_h = 180, bot_y = 290, bot_h = 180, bw = (double)PLOT_W / BINS;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"540\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n",
          W_PX);
  fprintf(f, "<g font-size=\"15\" font-weight=\"bold\">");
  if (r->throughput_only)
    svg_text(f, PLOT_X, 24, "start", "stoker bench: %s %s, %u accelerators: throughput only (compute 0)",
             o->w->name, o->w->accel, (unsigned)job_accelerators(o, r));
  else
    svg_text(f, PLOT_X, 24, "start", "stoker bench: %s %s, %u accelerators: AU %.3f (%s %.2f)",
             o->w->name, o->w->accel, (unsigned)job_accelerators(o, r), r->au,
             r->pass ? "pass, >=" : "FAIL, <", r->au_min);
  fputs("</g>\n", f);
  svg_text(f, PLOT_X, 44, "start", "%s", r->verdict);
  if (r->warmup_s > 0)
    svg_text(f, PLOT_X + PLOT_W, 24, "end", "warm-up %.2f s (not in AU)", r->warmup_s);
  /* Throughput. */
  svg_text(f, 12, top_y + 10, "start", "%.0f", peak);
  svg_text(f, 12, top_y + top_h, "start", "0");
  svg_text(f, PLOT_X + PLOT_W / 2.0, top_y - 4, "middle", "throughput (samples/s)");
  fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"");
  for (int k = 0; k < BINS; k++)
    fprintf(f, "%.1f,%.1f ", PLOT_X + (k + 0.5) * bw, top_y + top_h - b[k].samples / dt / peak * top_h);
  fputs("\"/>\n", f);
  fprintf(f, "<rect x=\"%d\" y=\"%.0f\" width=\"%d\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n",
          PLOT_X, top_y, PLOT_W, top_h);
  /* Time split, stacked per bin, with the AU threshold. */
  svg_text(f, PLOT_X + PLOT_W / 2.0, bot_y - 4, "middle",
           "accelerator time: compute (green), data stall (red), sync stall (orange)");
  for (int k = 0; k < BINS; k++) {
    double tot = b[k].compute + b[k].load + b[k].sync;
    if (tot <= 0) continue;
    double x = PLOT_X + k * bw, y = bot_y + bot_h;
    const double part[3] = {b[k].compute / tot, b[k].load / tot, b[k].sync / tot};
    const char *col[3] = {"#2ca02c", "#d62728", "#ff7f0e"};
    for (int p = 0; p < 3; p++) {
      double h = part[p] * bot_h;
      y -= h;
      if (h > 0.05)
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n", x, y,
                bw + 0.3, h, col[p]);
    }
  }
  double ty = bot_y + bot_h - r->au_min * bot_h;
  fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-dasharray=\"5,4\"/>\n",
          PLOT_X, PLOT_X + PLOT_W, ty, ty);
  svg_text(f, PLOT_X - 4, ty + 4, "end", "AU %.2f", r->au_min);
  fprintf(f, "<rect x=\"%d\" y=\"%.0f\" width=\"%d\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n",
          PLOT_X, bot_y, PLOT_W, bot_h);
  svg_text(f, PLOT_X, bot_y + bot_h + 18, "start", "0 s");
  svg_text(f, PLOT_X + PLOT_W, bot_y + bot_h + 18, "end", "%.1f s", tmax);
  svg_text(f, PLOT_X, bot_y + bot_h + 44, "start",
           "split of accelerator time: compute %.1f%%, data stall %.1f%%, sync stall %.1f%%, "
           "all-reduce %.1f%%; %.0f samples/s, %.1f MiB/s",
           100 * r->compute_frac, 100 * r->data_stall_frac, 100 * r->sync_stall_frac,
           100 * r->comm_frac, r->samples_per_s, r->mib_per_s);
  fputs("</svg>\n", f);
}
