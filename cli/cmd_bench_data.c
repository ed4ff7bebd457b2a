/* stoker bench's data: the dataset a run reads (generated once where
 * missing, after checking the free space) and the page cache around it. */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_bench.h"

/* ---- data ------------------------------------------------------------------ */

/* Whether path already holds a dataset (or a finished generation). */
static int dir_has_entries(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  char marker[4200];
  snprintf(marker, sizeof marker, "%s/.stoker-bench-complete", path);
  if (stat(marker, &st) == 0) return 1;
  struct stk_dataset *ds;
  if (stk_dataset_open(&ds, path, NULL, NULL) == 0) {
    stk_dataset_close(ds);
    return 1;
  }
  return 0;
}

static int gen_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes) {
  (void)bytes;
  if (*(int *)ctx) fprintf(stderr, "\r  generating: %" PRIu64 "/%" PRIu64 " samples", done, total);
  return cli_stop_requested();
}

/* Bytes the generated dataset takes: records plus a little framing. */
static double dataset_bytes(const struct stk_workload *w) {
  return (double)(w->files * w->samples_per_file) * (w->record_bytes + 64);
}

/* Refuse before writing anything when the dataset would not fit: its size
 * plus headroom (5% and 1 GiB, so the file system is not left full) must
 * be free where it goes (the folder, or its nearest existing parent). */
static int check_free_space(const struct bench_args *a) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", a->data);
  struct statvfs v;
  while (statvfs(dir, &v) != 0) {
    char *slash = strrchr(dir, '/');
    if (strcmp(dir, "/") == 0) return 0; /* cannot tell: the writer reports a full disk */
    if (!slash) {
      snprintf(dir, sizeof dir, ".");
      if (statvfs(dir, &v) != 0) return 0; /* cannot tell: the writer reports a full disk */
      break;
    }
    if (slash == dir)
      slash[1] = 0;
    else
      *slash = 0;
  }
  double need = dataset_bytes(&a->w), headroom = need * 0.05 + 1073741824.0;
  double avail = (double)v.f_bavail * (double)v.f_frsize;
  if (need + headroom <= avail) return 0;
  char b1[32], b2[32], b3[32];
  cli_error(a->who, "generating the dataset in %s needs %s plus %s of headroom, but its file "
            "system has %s free: give --data a folder on a larger one, or lower --files",
            a->data, stk_fmt_bytes((uint64_t)need, b1, sizeof b1),
            stk_fmt_bytes((uint64_t)headroom, b2, sizeof b2), stk_fmt_bytes((uint64_t)avail, b3, sizeof b3));
  return -1;
}

/* Use the dataset in a->data, generating it first when the folder is
 * missing or empty (and this process may: under MPI, rank 0, then the first
 * rank of a host that still lacks it). */
int bench_prepare_data(struct bench_args *a, int may_generate) {
  const struct stk_workload *w = &a->w;
  if (!a->data_given) {
    const char *tmp = getenv("TMPDIR");
    snprintf(a->data, sizeof a->data, "%s/stoker-bench-%u/%s-%s-%" PRIu64 "x%" PRIu64 "-%.0f",
             tmp && *tmp ? tmp : "/tmp", (unsigned)getuid(), w->name, w->format, w->files,
             w->samples_per_file, w->record_bytes);
  }
  struct stat st;
  /* A URL (or a path read through a disk tier) is used as it is: data is
   * never generated into an origin. */
  if (a->data_given && (strstr(a->data, "://") || a->cache.dir || stk_dataset_path_is_source(a->data)))
    return 0;
  if (a->data_given && stat(a->data, &st) == 0 && !S_ISDIR(st.st_mode)) {
    cli_error(a->who, "--data %s is not a directory", a->data);
    return -1;
  }
  if (!may_generate || dir_has_entries(a->data)) return 0;
  if (check_free_space(a)) return -1;
  int show = !a->quiet && cli_progress_enabled();
  char total[32];
  stk_fmt_bytes((uint64_t)dataset_bytes(w), total, sizeof total);
  if (!a->quiet)
    fprintf(stderr, "stoker bench: generating %" PRIu64 " %s samples of %.0f bytes (%s in all) in %s (once)\n",
            w->files * w->samples_per_file, w->format, w->record_bytes, total, a->data);
  struct stk_gen_opts g;
  memset(&g, 0, sizeof g);
  g.dir = a->data;
  g.format = w->format;
  g.samples = w->files * w->samples_per_file;
  g.size_mean = (uint64_t)llround(w->record_bytes);
  g.size_stdev = (uint64_t)llround(w->record_stdev);
  g.samples_per_shard = w->samples_per_file;
  g.doc_len_mean = w->doc_tokens; /* megatron: documents of about this many tokens */
  g.seed = 1;
  g.force = !a->data_given;
  char err[STK_ERRMSG_MAX];
  int rc = stk_gen(&g, gen_progress, &show, err);
  if (show) fputs("\r\033[K", stderr);
  if (rc) {
    cli_error(a->who, "cannot generate the dataset: %s", err);
    return -1;
  }
  char marker[4200];
  snprintf(marker, sizeof marker, "%s/.stoker-bench-complete", a->data);
  FILE *f = fopen(marker, "w");
  if (f) fclose(f);
  return 0;
}

/* The bytes of the regular files under a local dataset folder (or the
 * file itself); -1 when it cannot be told (a URL, unreadable). */
static double tree_bytes_sum;
static int tree_add(const char *p, const struct stat *st, int type, struct FTW *f) {
  (void)p, (void)f;
  if (type == FTW_F && S_ISREG(st->st_mode)) tree_bytes_sum += (double)st->st_size;
  return 0;
}
static double data_bytes(const char *path) {
  if (strstr(path, "://")) return -1;
  tree_bytes_sum = 0;
  if (nftw(path, tree_add, 16, FTW_PHYS) != 0) return -1;
  return tree_bytes_sum;
}

void bench_page_cache_warning(const struct bench_args *a) {
  if (a->o.direct || a->quiet) return;
  /* The data's own size, not the workload's nominal one: a folder given
   * with --data holds what it holds. */
  double bytes = data_bytes(a->data);
  if (bytes < 0) return;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  double ram = (double)pages * (double)psz;
  if (pages > 0 && bytes < 5 * ram) {
    char b1[32], b2[32];
    fprintf(stderr,
            "stoker bench: warning: the dataset (%s) is smaller than 5x RAM (%s): reads may come "
            "from the page cache, not storage; use --direct for storage figures\n",
            stk_fmt_bytes((uint64_t)bytes, b1, sizeof b1), stk_fmt_bytes((uint64_t)ram, b2, sizeof b2));
  }
}

int bench_drop_caches(void) {
  if (geteuid() != 0) {
    cli_error("bench", "--drop-caches needs root (it writes /proc/sys/vm/drop_caches)");
    return -1;
  }
  sync();
  FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
  if (!f || fputs("3\n", f) < 0 || fclose(f) != 0) {
    cli_error("bench", "--drop-caches: cannot write /proc/sys/vm/drop_caches: %s", strerror(errno));
    return -1;
  }
  return 0;
}
