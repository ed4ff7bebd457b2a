/* stoker ckpt: look after a checkpoint directory of the checkpoint tier
 * (include/stoker/ckpt.h): list, verify, save files as a checkpoint, drain
 * to an origin, restore (re-staging from the origin), collect partial
 * checkpoints. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

const char cmd_ckpt_usage[] =
    "usage: stoker ckpt ACTION DIR [ARGS] [OPTIONS]\n"
    "\n"
    "DIR is a node-local checkpoint directory (stk_ckpt's opts.dir); each\n"
    "checkpoint in it is one rank's shard of one step.\n"
    "\n"
    "  ls DIR|URL [--json]\n"
    "        every checkpoint: step, rank, objects, bytes, complete or partial,\n"
    "        drained to the origin or not, in use by a process; at an origin's URL\n"
    "        (s3://bucket/prefix, file://...), the ones drained there\n"
    "  verify DIR|URL\n"
    "        read every object of every complete checkpoint and check its size and\n"
    "        CRC32C; exit 1 when one fails; at a URL, read back from the origin in\n"
    "        parallel ranged gets\n"
    "  save DIR --step N FILE... [--rank R --world W] [--origin URL]\n"
    "        save the files as checkpoint N of rank R (objects named by the\n"
    "        files' names), committed atomically; with --origin, drained too\n"
    "  drain DIR --origin URL [--rank R]\n"
    "        copy every complete checkpoint not yet drained to URL (a directory,\n"
    "        file://, http(s):// taking PUT, or s3://bucket/prefix), objects first,\n"
    "        manifest last; a drain cut short resumes where it stopped\n"
    "  restore DIR [--origin URL] [--rank R] [--step N] [--to OUT] [--no-stage]\n"
    "        load the newest complete checkpoint of rank R (or step N), every CRC\n"
    "        checked, re-staging it from the origin when the local copy is missing\n"
    "        or corrupt (--no-stage: read from the origin into memory only, no\n"
    "        local copy written); --to writes its objects as files under OUT\n"
    "  gc DIR\n"
    "        remove partial checkpoints (a save cut short) no process is writing\n"
    "  gc URL [--keep-last N]\n"
    "        at an origin: remove each rank's complete checkpoints beyond its newest\n"
    "        N, and partial ones older than its newest complete one; manifest\n"
    "        first, so a gc cut short leaves nothing that looks complete\n"
    "\n"
    "options:\n"
    "  --origin URL      where checkpoints are drained to and restored from\n"
    "  --rank R          the rank (default 0); --world W the ranks in the job (save)\n"
    "  --step N          the step (save: required; restore: default the newest)\n"
    "  --to OUT          restore: write the objects as files under OUT\n"
    "  --keep-last N     save, drain: keep N checkpoints of the rank locally (drained\n"
    "                    ones are evicted first; one not yet drained never is);\n"
    "                    gc URL: keep each rank's newest N at the origin\n"
    "  --threads N       writer and reader threads (default 4)\n"
    "  --no-direct       buffered writes even where O_DIRECT works\n"
    "  --no-stage        restore: read the origin's copy into memory, not into DIR\n"
    "  --json            ls: JSON on stdout\n"
    "  --s3-endpoint URL, --s3-region R, --s3-profile P   as for datasets\n";

enum { O_ORIGIN = 256, O_RANK, O_WORLD, O_STEP, O_TO, O_KEEP, O_THREADS, O_NODIRECT, O_JSON,
       O_EP, O_REGION, O_PROFILE, O_NOSTAGE };

static const struct option options[] = {
    {"origin", 1, 0, O_ORIGIN},    {"rank", 1, 0, O_RANK},       {"world", 1, 0, O_WORLD},
    {"step", 1, 0, O_STEP},        {"to", 1, 0, O_TO},           {"keep-last", 1, 0, O_KEEP},
    {"threads", 1, 0, O_THREADS},  {"no-direct", 0, 0, O_NODIRECT}, {"json", 0, 0, O_JSON},
    {"s3-endpoint", 1, 0, O_EP},   {"s3-region", 1, 0, O_REGION}, {"s3-profile", 1, 0, O_PROFILE},
    {"no-stage", 0, 0, O_NOSTAGE}, {0, 0, 0, 0}};

struct args {
  struct stk_ckpt_opts o;
  uint64_t step;
  int have_step, json;
  const char *to;
  char **files;
  int nfiles;
};

/* ---- ls ---------------------------------------------------------------- */

struct lister {
  struct stk_json *j;
  int n, partial;
};

static int list_one(void *arg, const struct stk_ckpt_info *in) {
  struct lister *L = arg;
  L->n++;
  L->partial += !in->complete;
  if (L->j) {
    stk_json_obj_begin(L->j);
    stk_json_kstr(L->j, "name", in->name);
    stk_json_ku64(L->j, "step", in->step);
    stk_json_ku64(L->j, "rank", in->rank);
    stk_json_ku64(L->j, "world", in->world);
    stk_json_ku64(L->j, "objects", in->objects);
    stk_json_ku64(L->j, "bytes", in->bytes);
    stk_json_key(L->j, "complete");
    stk_json_bool(L->j, in->complete);
    stk_json_key(L->j, "drained");
    stk_json_bool(L->j, in->drained);
    stk_json_key(L->j, "busy");
    stk_json_bool(L->j, in->busy);
    stk_json_obj_end(L->j);
    return 0;
  }
  char b[32];
  if (in->complete)
    printf("  step %-12" PRIu64 " rank %u/%u  %4u objects %10s  %s%s\n", in->step, in->rank,
           in->world, in->objects, stk_fmt_bytes(in->bytes, b, sizeof b),
           in->drained ? "drained" : "not drained", in->busy ? ", in use" : "");
  else
    printf("  step %-12" PRIu64 " rank %u    partial (%s)\n", in->step, in->rank,
           in->busy ? "being written" : "a save cut short; `stoker ckpt gc` removes it");
  return 0;
}

static int do_ls(struct args *a) {
  char err[STK_ERRMSG_MAX];
  struct stk_json j;
  struct lister L = {0};
  if (a->json) {
    stk_json_init(&j, stdout, 2);
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "dir", a->o.dir);
    stk_json_key(&j, "checkpoints");
    stk_json_arr_begin(&j);
    L.j = &j;
  } else {
    printf("%s:\n", a->o.dir);
  }
  if (stk_ckpt_list_opts(a->o.dir, &a->o, list_one, &L, err)) {
    fflush(stdout);
    cli_error("ckpt", "%s", err);
    return CLI_FAIL;
  }
  if (a->json) {
    stk_json_arr_end(&j);
    stk_json_obj_end(&j);
    putchar('\n');
  } else {
    printf("%d checkpoints, %d partial\n", L.n, L.partial);
  }
  return CLI_OK;
}

/* ---- verify ------------------------------------------------------------ */

struct verifier {
  const char *dir;
  const struct stk_ckpt_opts *o;
  int checked, bad, partial;
};

static int verify_one(void *arg, const struct stk_ckpt_info *in) {
  struct verifier *v = arg;
  if (!in->complete) {
    v->partial++;
    return 0;
  }
  char err[STK_ERRMSG_MAX];
  v->checked++;
  if (stk_ckpt_verify_opts(v->dir, in->name, v->o, err)) {
    v->bad++;
    cli_error("ckpt", "%s", err);
  }
  return 0;
}

static int do_verify(struct args *a) {
  char err[STK_ERRMSG_MAX];
  struct verifier v = {.dir = a->o.dir, .o = &a->o};
  if (stk_ckpt_list_opts(a->o.dir, &a->o, verify_one, &v, err)) {
    cli_error("ckpt", "%s", err);
    return CLI_FAIL;
  }
  printf("%s: %d checkpoints checked, %d corrupt, %d partial (ignored)\n", a->o.dir, v.checked,
         v.bad, v.partial);
  return v.bad ? CLI_FAIL : CLI_OK;
}

/* ---- save, drain, restore ----------------------------------------------- */

static int open_ckpt(struct args *a, struct stk_ckpt **c) {
  char err[STK_ERRMSG_MAX];
  if (stk_ckpt_open(c, &a->o, err)) {
    cli_error("ckpt", "%s", err);
    return CLI_FAIL;
  }
  return CLI_OK;
}

static int finish_drain(struct stk_ckpt *c, struct args *a) {
  char err[STK_ERRMSG_MAX];
  int rc = stk_ckpt_drain_wait(c, err);
  struct stk_ckpt_stats st = {0};
  stk_ckpt_stats(c, &st);
  stk_ckpt_close(c);
  if (rc) {
    cli_error("ckpt", "%s", err);
    return CLI_FAIL;
  }
  char b[32];
  double s = (double)st.drain_ns / 1e9;
  printf("%s: rank %u: %" PRIu64 " checkpoints drained to %s, %s in %.2f s\n", a->o.dir,
         a->o.rank, st.drains, a->o.origin, stk_fmt_bytes(st.drain_bytes, b, sizeof b), s);
  return CLI_OK;
}

static int do_save(struct args *a) {
  if (!a->have_step || a->nfiles == 0) {
    cli_error("ckpt", "save: --step N and at least one FILE are required");
    return CLI_USAGE;
  }
  struct stk_ckpt_obj *objs = calloc((size_t)a->nfiles, sizeof *objs);
  int rc = objs ? CLI_OK : CLI_FAIL;
  for (int i = 0; rc == CLI_OK && i < a->nfiles; i++) {
    size_t len = 0;
    FILE *f = fopen(a->files[i], "rb");
    char *data = NULL;
    if (f) {
      struct stat st;
      if (fstat(fileno(f), &st) == 0 && (data = malloc((size_t)st.st_size + 1)))
        len = fread(data, 1, (size_t)st.st_size, f);
      if (!data || len != (size_t)st.st_size || ferror(f)) {
        free(data);
        data = NULL;
      }
      fclose(f);
    }
    if (!data) {
      cli_error("ckpt", "%s: cannot read: %s", a->files[i], strerror(errno ? errno : EIO));
      rc = CLI_FAIL;
      break;
    }
    const char *base = strrchr(a->files[i], '/');
    objs[i] = (struct stk_ckpt_obj){base ? base + 1 : a->files[i], data, len};
  }
  struct stk_ckpt *c = NULL;
  if (rc == CLI_OK) rc = open_ckpt(a, &c);
  char err[STK_ERRMSG_MAX];
  if (rc == CLI_OK && stk_ckpt_save(c, a->step, objs, (size_t)a->nfiles, err)) {
    cli_error("ckpt", "%s", err);
    rc = CLI_FAIL;
  }
  for (int i = 0; objs && i < a->nfiles; i++) free((void *)objs[i].data);
  free(objs);
  if (rc == CLI_OK) {
    struct stk_ckpt_stats st = {0};
    stk_ckpt_stats(c, &st);
    char b[32];
    double s = (double)st.save_ns / 1e9;
    printf("%s: step %" PRIu64 " of rank %u saved: %d objects, %s in %.3f s (%.1f MiB/s)\n",
           a->o.dir, a->step, a->o.rank, a->nfiles, stk_fmt_bytes(st.save_bytes, b, sizeof b), s,
           s > 0 ? (double)st.save_bytes / 1048576.0 / s : 0);
    if (a->o.origin) return finish_drain(c, a);
  }
  stk_ckpt_close(c);
  return rc;
}

/* Write object name under out, refusing names that would leave it. */
static int write_obj(const char *out, const char *name, const void *p, uint64_t n) {
  if (name[0] == '/' || !strcmp(name, "..") || !strncmp(name, "../", 3) || strstr(name, "/../") ||
      (strlen(name) >= 3 && !strcmp(name + strlen(name) - 3, "/.."))) {
    cli_error("ckpt", "restore: object name '%s' would leave %s; not written", name, out);
    return -1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", out, name);
  for (char *s = path + strlen(out) + 1; (s = strchr(s, '/')); s++) {
    *s = 0;
    mkdir(path, 0755);
    *s = '/';
  }
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, (size_t)n, f) != n || fclose(f) != 0) {
    cli_error("ckpt", "restore: %s: cannot write: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

static int do_restore(struct args *a) {
  struct stk_ckpt *c;
  if (open_ckpt(a, &c)) return CLI_FAIL;
  char err[STK_ERRMSG_MAX];
  struct stk_ckpt_data *d;
  uint64_t t0 = stk_now_ns();
  if (stk_ckpt_load(c, a->have_step ? a->step : UINT64_MAX, &d, err)) {
    cli_error("ckpt", "%s", err);
    stk_ckpt_close(c);
    return CLI_FAIL;
  }
  double s = (double)(stk_now_ns() - t0) / 1e9;
  struct stk_ckpt_stats st = {0};
  stk_ckpt_stats(c, &st);
  int rc = CLI_OK;
  if (a->to && mkdir(a->to, 0755) != 0 && errno != EEXIST) {
    cli_error("ckpt", "restore: %s: cannot create: %s", a->to, strerror(errno));
    rc = CLI_FAIL;
  }
  for (size_t i = 0; a->to && rc == CLI_OK && i < stk_ckpt_data_count(d); i++) {
    uint64_t n;
    const void *p = stk_ckpt_data_bytes(d, i, &n);
    if (write_obj(a->to, stk_ckpt_data_name(d, i), p, n)) rc = CLI_FAIL;
  }
  char b[32];
  if (rc == CLI_OK)
    printf("%s: step %" PRIu64 " of rank %u restored%s: %zu objects, %s, CRCs checked, in %.3f s%s%s\n",
           a->o.dir, stk_ckpt_data_step(d), a->o.rank,
           !st.restaged        ? ""
           : a->o.no_stage     ? " (read from the origin, not staged)"
                               : " (re-staged from the origin)",
           stk_ckpt_data_count(d), stk_fmt_bytes(st.restore_bytes, b, sizeof b), s,
           a->to ? " into " : "", a->to ? a->to : "");
  stk_ckpt_data_free(d);
  stk_ckpt_close(c);
  return rc;
}

struct ranks {
  uint32_t v[4096];
  int n;
};

static int add_rank(void *arg, const struct stk_ckpt_info *in) {
  struct ranks *r = arg;
  for (int i = 0; i < r->n; i++)
    if (r->v[i] == in->rank) return 0;
  if (r->n < 4096) r->v[r->n++] = in->rank;
  return 0;
}

static int do_drain(struct args *a, int rank_given) {
  if (!a->o.origin) {
    cli_error("ckpt", "drain: --origin URL is required");
    return CLI_USAGE;
  }
  struct ranks r = {.n = 0};
  char err[STK_ERRMSG_MAX];
  if (rank_given) {
    r.v[r.n++] = a->o.rank;
  } else if (stk_ckpt_list(a->o.dir, add_rank, &r, err)) {
    cli_error("ckpt", "%s", err);
    return CLI_FAIL;
  }
  int rc = CLI_OK;
  for (int i = 0; i < r.n; i++) {
    a->o.rank = r.v[i];
    a->o.world = r.v[i] + 1; /* only a save writes it */
    struct stk_ckpt *c;
    if (open_ckpt(a, &c)) return CLI_FAIL; /* open queues what is not drained */
    if (finish_drain(c, a)) rc = CLI_FAIL;
  }
  if (r.n == 0) printf("%s: no checkpoints\n", a->o.dir);
  return rc;
}

int cmd_ckpt_run(int argc, char **argv) {
  struct args a;
  memset(&a, 0, sizeof a);
  stk_ckpt_opts_init(&a.o);
  int c, rank_given = 0;
  uint64_t v;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
    switch (c) {
      case O_ORIGIN: a.o.origin = optarg; break;
      case O_RANK:
        if (cli_u64("ckpt", "--rank", optarg, 0, 99999, &v)) return CLI_USAGE;
        a.o.rank = (uint32_t)v;
        rank_given = 1;
        break;
      case O_WORLD:
        if (cli_u64("ckpt", "--world", optarg, 1, 100000, &v)) return CLI_USAGE;
        a.o.world = (uint32_t)v;
        break;
      case O_STEP:
        if (cli_u64("ckpt", "--step", optarg, 0, 999999999999ull, &a.step)) return CLI_USAGE;
        a.have_step = 1;
        break;
      case O_TO: a.to = optarg; break;
      case O_KEEP:
        if (cli_u64("ckpt", "--keep-last", optarg, 1, UINT32_MAX, &v)) return CLI_USAGE;
        a.o.keep_last = (uint32_t)v;
        break;
      case O_THREADS:
        if (cli_u64("ckpt", "--threads", optarg, 1, 64, &v)) return CLI_USAGE;
        a.o.threads = (uint32_t)v;
        break;
      case O_NODIRECT: a.o.direct = -1; break;
      case O_NOSTAGE: a.o.no_stage = 1; break;
      case O_JSON: a.json = 1; break;
      case O_EP: a.o.s3_endpoint = optarg; break;
      case O_REGION: a.o.s3_region = optarg; break;
      case O_PROFILE: a.o.s3_profile = optarg; break;
      default:
        fprintf(stderr, "`stoker help ckpt` lists the options\n");
        return CLI_USAGE;
    }
  }
  if (optind + 2 > argc) {
    cli_error("ckpt", "missing %s (ls, verify, save, drain, restore, gc DIR)",
              optind < argc ? "DIR" : "ACTION");
    return CLI_USAGE;
  }
  const char *act = argv[optind++];
  a.o.dir = argv[optind++];
  a.files = argv + optind;
  a.nfiles = argc - optind;
  if (!a.o.world) a.o.world = a.o.rank + 1;
  if (strcmp(act, "save") && a.nfiles) {
    cli_error("ckpt", "%s: unexpected argument '%s'", act, a.files[0]);
    return CLI_USAGE;
  }
  int url = strstr(a.o.dir, "://") != NULL;
  if (url && strcmp(act, "ls") && strcmp(act, "verify") && strcmp(act, "gc")) {
    cli_error("ckpt", "%s: %s takes a local directory (a URL is for ls, verify, gc and --origin)",
              a.o.dir, act);
    return CLI_USAGE;
  }
  if (!url && !strcmp(act, "gc") && a.o.keep_last) {
    cli_error("ckpt", "gc: --keep-last is for an origin's URL (locally, save and drain keep N)");
    return CLI_USAGE;
  }
  struct stat st;
  if (!url && strcmp(act, "save") && strcmp(act, "restore") && stat(a.o.dir, &st) != 0) {
    cli_error("ckpt", "%s: %s", a.o.dir, strerror(errno));
    return CLI_FAIL;
  }
  if (!strcmp(act, "ls")) return do_ls(&a);
  if (!strcmp(act, "verify")) return do_verify(&a);
  if (!strcmp(act, "save")) return do_save(&a);
  if (!strcmp(act, "drain")) return do_drain(&a, rank_given);
  if (!strcmp(act, "restore")) return do_restore(&a);
  if (!strcmp(act, "gc")) {
    char err[STK_ERRMSG_MAX];
    uint32_t removed;
    if (url ? stk_ckpt_gc_origin_opts(a.o.dir, &a.o, a.o.keep_last, &removed, err)
            : stk_ckpt_gc(a.o.dir, &removed, err)) {
      cli_error("ckpt", "%s", err);
      return CLI_FAIL;
    }
    if (url && a.o.keep_last)
      printf("%s: %u checkpoints removed (each rank keeps its newest %u complete)\n", a.o.dir,
             removed, a.o.keep_last);
    else if (url)
      printf("%s: %u partial checkpoints removed (every complete one kept)\n", a.o.dir, removed);
    else
      printf("%s: %u partial checkpoints removed\n", a.o.dir, removed);
    return CLI_OK;
  }
  cli_error("ckpt", "no action '%s' (ls, verify, save, drain, restore, gc)", act);
  return CLI_USAGE;
}
