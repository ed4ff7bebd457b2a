/* The agent's non-GPU sources: the host from /proc (CPU, memory, PSI), the
 * job of a process from its cgroup, the dcgm-exporter job-mapping directory,
 * and the loaders' publication files. Everything read from files written by
 * others is bounded and checked: a bad file is counted and skipped. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/publication.h"
#include "agent_impl.h"

/* Read a small file (at most n-1 bytes) into buf; -1 when absent. */
static ssize_t slurp(const char *path, char *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -1;
  }
  ssize_t got = 0;
  while ((size_t)got < n - 1) {
    ssize_t r = read(fd, buf + got, n - 1 - (size_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += r;
  }
  close(fd);
  buf[got] = 0;
  return got;
}

void stk__ag_host_sample(struct stk_watch *w, double dt) {
  struct ag_host *h = &w->host;
  char path[600], buf[8192];
  (void)dt;
  h->cpu_busy = h->cpu_steal = NAN;
  snprintf(path, sizeof path, "%s/stat", w->proc_root);
  if (slurp(path, buf, sizeof buf) > 0 && !strncmp(buf, "cpu ", 4)) {
    unsigned long long v[10] = {0};
    int n = sscanf(buf + 4, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    if (n >= 8) {
      /* guest time is already inside user and nice. */
      uint64_t total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
      uint64_t idle = v[3] + v[4], steal = v[7];
      uint64_t busy = total - idle - steal;
      if (h->cpu_prev[0] && total > h->cpu_prev[0]) {
        double dtot = (double)(total - h->cpu_prev[0]);
        h->cpu_busy = (double)(busy - h->cpu_prev[1]) / dtot;
        h->cpu_steal = (double)(steal - h->steal_prev) / dtot;
      }
      h->cpu_prev[0] = total;
      h->cpu_prev[1] = busy;
      h->steal_prev = steal;
      h->cpu_s[0] = (double)busy / (double)w->clk_tck;
      h->cpu_s[1] = (double)steal / (double)w->clk_tck;
      h->cpu_s[2] = (double)idle / (double)w->clk_tck;
    }
  } else {
    h->cpu_s[0] = h->cpu_s[1] = h->cpu_s[2] = NAN;
  }
  h->mem_total = h->mem_avail = NAN;
  snprintf(path, sizeof path, "%s/meminfo", w->proc_root);
  if (slurp(path, buf, sizeof buf) > 0) {
    const char *p = strstr(buf, "MemTotal:");
    if (p) h->mem_total = strtod(p + 9, NULL) * 1024;
    p = strstr(buf, "MemAvailable:");
    if (p) h->mem_avail = strtod(p + 13, NULL) * 1024;
  }
  static const char *const res[3] = {"cpu", "memory", "io"};
  for (int r = 0; r < 3; r++) {
    for (int k = 0; k < 2; k++) h->psi_avg10[r][k] = h->psi_total_s[r][k] = NAN;
    snprintf(path, sizeof path, "%s/pressure/%s", w->proc_root, res[r]);
    if (slurp(path, buf, sizeof buf) <= 0) continue;
    for (int k = 0; k < 2; k++) {
      const char *line = strstr(buf, k ? "full " : "some ");
      if (!line) continue;
      const char *a = strstr(line, "avg10=");
      const char *t = strstr(line, "total=");
      const char *nl = strchr(line, '\n');
      if (a && (!nl || a < nl)) h->psi_avg10[r][k] = strtod(a + 6, NULL) / 100.0;
      if (t && (!nl || t < nl)) h->psi_total_s[r][k] = strtod(t + 6, NULL) / 1e6;
    }
  }
}

/* utime+stime (ticks) and start time (ticks) from a PROC/PID/stat line. */
int stk__ag_parse_stat(const char *buf, uint64_t *cpu_ticks, uint64_t *start) {
  const char *s = strrchr(buf, ')');
  if (!s) return -1;
  /* After ')': field 3 is the state; utime and stime are 14 and 15, the
   * start time 22. */
  unsigned long long v[23] = {0};
  int field = 3;
  for (const char *p = s + 1; *p && field <= 22; field++) {
    while (*p == ' ') p++;
    char *end;
    v[field] = strtoull(p, &end, 10);
    if (end == p) { /* the state letter */
      while (*p && *p != ' ') p++;
    } else {
      p = end;
    }
  }
  if (field <= 22) return -1;
  *cpu_ticks = v[14] + v[15];
  *start = v[22];
  return 0;
}

static int pc_cmp(const void *a, const void *b) {
  uint32_t x = ((const struct ag_pcache *)a)->pid, y = ((const struct ag_pcache *)b)->pid;
  return x < y ? -1 : x > y;
}

/* Read PROC/PID/stat through the process's kept descriptor (a third of the
 * cost of opening it each time), or open one. 0 and the figures, or -1. */
static int stat_via_fd(struct stk_watch *w, uint32_t pid, struct ag_pcache *old, int *fd_out,
                       uint64_t *ticks, uint64_t *start) {
  char buf[1024];
  *fd_out = -1;
  if (old && old->fd >= 0) {
    ssize_t n = pread(old->fd, buf, sizeof buf - 1, 0);
    int fd = old->fd;
    old->fd = -1; /* handed over, or closed below */
    w->pc_fds--;
    if (n > 0) {
      buf[n] = 0;
      if (stk__ag_parse_stat(buf, ticks, start) == 0) {
        *fd_out = fd;
        w->pc_fds++;
        return 0;
      }
    }
    close(fd); /* the process ended: its descriptor reads nothing */
  }
  char path[600];
  snprintf(path, sizeof path, "%s/%u/stat", w->proc_root, pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) {
    close(fd);
    return -1;
  }
  buf[n] = 0;
  if (stk__ag_parse_stat(buf, ticks, start) != 0) {
    close(fd);
    return -1;
  }
  if (w->pc_fds < w->pc_fd_max) {
    *fd_out = fd;
    w->pc_fds++;
  } else {
    close(fd);
  }
  return 0;
}

const char *stk__ag_proc_info(struct stk_watch *w, uint32_t pid, double *cpu_s) {
  /* Seen already in this sample (a process on several GPUs)? */
  for (unsigned i = w->npc_cur; i-- > 0 && i + 8 >= w->npc_cur;)
    if (w->pc_cur[i].pid == pid) {
      if (cpu_s) *cpu_s = w->pc_cur[i].cpu_s;
      return w->pc_cur[i].job;
    }
  if (w->npc_cur == w->pc_cap_cur) {
    unsigned nc = w->pc_cap_cur ? w->pc_cap_cur * 2 : 256;
    void *q = realloc(w->pc_cur, nc * sizeof *w->pc_cur);
    if (!q) {
      if (cpu_s) *cpu_s = NAN;
      return "";
    }
    w->pc_cur = q;
    w->pc_cap_cur = nc;
  }
  struct ag_pcache key = {.pid = pid};
  struct ag_pcache *old =
      w->npc_prev ? bsearch(&key, w->pc_prev, w->npc_prev, sizeof key, pc_cmp) : NULL;
  struct ag_pcache *e = &w->pc_cur[w->npc_cur++];
  e->pid = pid;
  uint64_t ticks = 0, start = 0;
  int alive = stat_via_fd(w, pid, old, &e->fd, &ticks, &start) == 0;
  e->start = start;
  e->cpu_s = alive ? (double)ticks / (double)w->clk_tck : NAN;
  if (cpu_s) *cpu_s = e->cpu_s;
  if (old && old->start == start) { /* the same process (or still none) */
    memcpy(e->job, old->job, AG_JOB_LEN);
  } else if (stk__ag_cgroup_job(w, pid, e->job) != 0) {
    e->job[0] = 0;
  }
  return e->job;
}

static void close_fds(struct stk_watch *w, struct ag_pcache *a, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    if (a[i].fd >= 0) {
      close(a[i].fd);
      a[i].fd = -1;
      w->pc_fds--;
    }
}

void stk__ag_proc_cache_swap(struct stk_watch *w) {
  /* Processes not seen in this sample give their descriptors back. */
  close_fds(w, w->pc_prev, w->npc_prev);
  if (w->npc_cur) qsort(w->pc_cur, w->npc_cur, sizeof *w->pc_cur, pc_cmp);
  struct ag_pcache *t = w->pc_prev;
  unsigned tc = w->pc_cap_prev;
  w->pc_prev = w->pc_cur;
  w->npc_prev = w->npc_cur;
  w->pc_cap_prev = w->pc_cap_cur;
  w->pc_cur = t;
  w->pc_cap_cur = tc;
  w->npc_cur = 0;
}

void stk__ag_proc_cache_free(struct stk_watch *w) {
  close_fds(w, w->pc_prev, w->npc_prev);
  close_fds(w, w->pc_cur, w->npc_cur);
  free(w->pc_prev);
  free(w->pc_cur);
}

static int job_char_ok(int c) {
  return isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '/' || c == '@';
}

int stk__ag_cgroup_job(const struct stk_watch *w, uint32_t pid, char *job) {
  char path[600], buf[4096];
  snprintf(path, sizeof path, "%s/%u/cgroup", w->proc_root, pid);
  if (slurp(path, buf, sizeof buf) <= 0) return -1;
  return stk__ag_parse_cgroup(buf, job);
}

int stk__ag_parse_cgroup(const char *buf, char *job) {
  /* Slurm: ".../job_123/step_0/..." (cgroup v1 and v2). */
  for (const char *p = buf; (p = strstr(p, "job_")); p += 4) {
    if (p != buf && p[-1] != '/') continue;
    size_t n = 0;
    while (isdigit((unsigned char)p[4 + n])) n++;
    if (n && n < AG_JOB_LEN - 1 && (p[4 + n] == '/' || p[4 + n] == '\n' || !p[4 + n])) {
      memcpy(job, p + 4, n);
      job[n] = 0;
      return 0;
    }
  }
  /* Kubernetes: "kubepods...pod<UID>" with '-' or '_' in the UID. */
  const char *k = strstr(buf, "kubepods");
  if (k) {
    const char *p = k;
    while ((p = strstr(p, "pod"))) {
      p += 3;
      size_t n = 0;
      while (n < 36 && (isxdigit((unsigned char)p[n]) || p[n] == '-' || p[n] == '_')) n++;
      if (n == 36) {
        memcpy(job, "pod-", 4);
        for (size_t i = 0; i < n; i++) job[4 + i] = p[i] == '_' ? '-' : p[i];
        job[4 + n] = 0;
        return 0;
      }
    }
  }
  return -1;
}

/* One mapping file: job ids, one a line. 0, or -1 when malformed (a line
 * too long, a character a job id cannot hold, too many jobs). */
static int read_map_file(const char *path, char jobs[][AG_JOB_LEN], unsigned max, unsigned *n,
                         char *why, size_t whyn) {
  char buf[4096];
  ssize_t len = slurp(path, buf, sizeof buf);
  *n = 0;
  if (len < 0) {
    snprintf(why, whyn, "%.200s: cannot read: %s", path, strerror(errno));
    return -1;
  }
  if ((size_t)len == sizeof buf - 1) {
    snprintf(why, whyn, "%.200s: larger than 4 KiB", path);
    return -1;
  }
  return stk__ag_parse_map(path, buf, jobs, max, n, why, whyn);
}

int stk__ag_parse_map(const char *path, char *buf, char jobs[][AG_JOB_LEN], unsigned max,
                      unsigned *n, char *why, size_t whyn) {
  *n = 0;
  if (strlen(buf) >= 4096) {
    snprintf(why, whyn, "%.200s: larger than 4 KiB", path);
    return -1;
  }
  int lineno = 0;
  for (char *line = buf, *next; line && *line; line = next) {
    lineno++;
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    size_t l = strlen(line);
    while (l && (line[l - 1] == '\r' || line[l - 1] == ' ' || line[l - 1] == '\t')) line[--l] = 0;
    if (!l) continue;
    if (l >= AG_JOB_LEN) {
      snprintf(why, whyn, "%.200s:%d: job id longer than %d characters", path, lineno, AG_JOB_LEN - 1);
      return -1;
    }
    for (size_t i = 0; i < l; i++)
      if (!job_char_ok((unsigned char)line[i])) {
        snprintf(why, whyn, "%.200s:%d: character 0x%02x cannot be in a job id", path, lineno,
                 (unsigned char)line[i]);
        return -1;
      }
    if (*n >= max) {
      snprintf(why, whyn, "%.200s: more than %u jobs", path, max);
      return -1;
    }
    memcpy(jobs[*n], line, l + 1);
    (*n)++;
  }
  return 0;
}

void stk__ag_read_mapping(struct stk_watch *w) {
  for (unsigned i = 0; i < AG_MAX_GPUS; i++) {
    w->gpus[i].mapped = 0;
    w->gpus[i].nalloc = 0;
    for (int m = 0; m < 8; m++) w->gpus[i].mig_mapped[m] = 0;
  }
  if (!w->mapping_dir) return;
  if (!w->map_jobs && !(w->map_jobs = malloc(AG_MAP_MAX_JOBS * sizeof *w->map_jobs))) return;
  DIR *d = opendir(w->mapping_dir);
  if (!d) return; /* absent until the first job starts: not an error */
  struct dirent *e;
  while ((e = readdir(d))) {
    unsigned gpu, gi;
    char tail;
    int two = sscanf(e->d_name, "%u.%u%c", &gpu, &gi, &tail) == 2;
    int one = !two && sscanf(e->d_name, "%u%c", &gpu, &tail) == 1;
    if (!one && !two) continue;
    for (const char *c = e->d_name; *c; c++)
      if (!isdigit((unsigned char)*c) && *c != '.') one = two = 0;
    if ((!one && !two) || gpu >= AG_MAX_GPUS) continue;
    char path[1024], why[256];
    snprintf(path, sizeof path, "%s/%s", w->mapping_dir, e->d_name);
    char(*jobs)[AG_JOB_LEN] = w->map_jobs;
    unsigned n;
    if (read_map_file(path, jobs, AG_MAP_MAX_JOBS, &n, why, sizeof why) != 0) {
      w->mapping_errors++;
      if (strcmp(why, w->mapping_err_last) != 0) {
        stk_log(STK_LOG_WARN, "watch: job mapping: %s; file ignored", why);
        snprintf(w->mapping_err_last, sizeof w->mapping_err_last, "%s", why);
      }
      continue;
    }
    struct ag_gpu *g = &w->gpus[gpu];
    int unit = -1;
    if (two) { /* a MIG instance's file: ignored until the instance exists */
      for (unsigned m = 0; m < g->s.nmig && m < 8; m++)
        if (g->s.mig[m].gi_id == gi) unit = (int)m;
      if (unit < 0) continue;
    }
    for (unsigned k = 0; k < n; k++) stk__ag_gpu_add_job(g, unit, jobs[k]);
    if (n && unit < 0) g->mapped = 1;
    if (n && unit >= 0) g->mig_mapped[unit] = 1;
  }
  closedir(d);
}

/* ---- loader publications ----
 *
 * The runtime directory is writable by every user, so each file in it is
 * untrusted input (docs/internals/watch.md, "Publications are untrusted").
 * A file is tracked by name and inode: read by copy at each sample through
 * a descriptor kept open, checked by the version rule of
 * stoker/publication.h, and believed only for a live process of its own
 * owner. A file that fails is counted once, by reason, and remembered as
 * rejected (descriptor closed) until that name holds another inode. Live
 * entries sit first in w->loaders, so the rest of the agent sees
 * w->loaders[0 .. nloaders) only. */

const char *const ag_pub_reject_names[AG_REJ_N] = {"size",  "format",  "version", "busy", "io",
                                                   "owner", "swapped", "type",    "limit"};

int stk__ag_parse_uids(const char *buf, uint32_t uids[4]) {
  const char *p = strstr(buf, "\nUid:");
  if (!p && !strncmp(buf, "Uid:", 4)) p = buf - 1;
  if (!p) return -1;
  p += 5;
  for (int i = 0; i < 4; i++) {
    char *end;
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') return -1;
    unsigned long long v = strtoull(p, &end, 10);
    if (v > UINT32_MAX) return -1;
    uids[i] = (uint32_t)v;
    p = end;
  }
  return 0;
}

int stk__ag_pid_has_uid(const struct stk_watch *w, uint32_t pid, uint32_t uid) {
  char path[600], buf[4096];
  uint32_t uids[4];
  snprintf(path, sizeof path, "%s/%u/status", w->proc_root, pid);
  if (slurp(path, buf, sizeof buf) <= 0 || stk__ag_parse_uids(buf, uids) != 0) return -1;
  for (int i = 0; i < 4; i++)
    if (uids[i] == uid) return 1;
  return 0;
}

static void reject(struct stk_watch *w, struct ag_loader *L, enum ag_pub_reject why) {
  w->loader_errors[why]++;
  if (L->fd >= 0) close(L->fd);
  L->fd = -1;
  L->state = AG_PUB_REJECTED;
  stk_log(STK_LOG_DEBUG, "watch: loader publication %s skipped: %s", L->name,
          ag_pub_reject_names[why]);
}

static void untrack(struct stk_watch *w, unsigned i) {
  if (w->loaders[i].fd >= 0) close(w->loaders[i].fd);
  w->loaders[i] = w->loaders[--w->ntracked];
}

/* Start tracking name (a new file, or another inode under a known name;
 * st is its lstat): open it without following links or blocking, and
 * keep the descriptor. */
static void track(struct stk_watch *w, struct ag_loader *L, int dfd, const char *prefix,
                  const char *name, const struct stat *st) {
  memset(L, 0, sizeof *L);
  if (snprintf(L->name, sizeof L->name, "%s%s", prefix, name) < 0) L->name[0] = 0;
  L->seen = 1;
  L->ino = (uint64_t)st->st_ino;
  L->uid = (uint32_t)st->st_uid;
  L->fd = -1;
  if (!S_ISREG(st->st_mode)) {
    reject(w, L, AG_REJ_TYPE); /* a link, a FIFO, a directory */
    return;
  }
  L->fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  struct stat fst;
  if (L->fd < 0 || fstat(L->fd, &fst) != 0 || (uint64_t)fst.st_ino != L->ino) {
    /* Gone or replaced since the lstat, or no descriptor to spare: look
     * again next sample. */
    L->state = AG_PUB_GONE;
    return;
  }
  L->state = AG_PUB_NEW;
}

static int loader_alive(const struct stk_watch *w, const struct stk_pub *p) {
  if (p->flags & STK_PUB_CLOSED) return 0;
  uint64_t t = stk__pid_start_ticks(w->proc_root, (long)p->pid);
  if (!t) return 0;
  return !p->pid_start_ticks || t == p->pid_start_ticks;
}

/* Remove a stale file (its process gone without closing it), only if the
 * name still holds the inode that was judged. */
static void remove_stale(const struct stk_watch *w, const struct ag_loader *L) {
  char path[1024];
  struct stat st;
  if (strchr(L->name, '/')) return; /* a pod's: its /dev/shm goes with it */
  snprintf(path, sizeof path, "%s/%s", w->runtime_dir, L->name);
  if (lstat(path, &st) == 0 && (uint64_t)st.st_ino == L->ino) unlink(path);
}

/* Read a tracked file (new or live) once for this sample. */
static void refresh(struct stk_watch *w, struct ag_loader *L) {
  struct stk_pub pub;
  int rc = stk__pub_read_fd(L->fd, &pub);
  switch (rc) {
  case STK__PUB_OK: break;
  case STK__PUB_NEW:
    /* Its writer is still making it (microseconds); not for long. A file
     * that was good and is now empty was cut. */
    if (L->state == AG_PUB_NEW && ++L->tries < AG_PUB_NEW_SAMPLES) return;
    struct stat st;
    reject(w, L, fstat(L->fd, &st) == 0 && st.st_size == 0 ? AG_REJ_SIZE : AG_REJ_FORMAT);
    return;
  case STK__PUB_BUSY:
    /* Its writer kept it changing: keep the last copy, if any, for a
     * while; a writer that never lets go is not a loader. */
    if (++L->busy >= AG_PUB_BUSY_SAMPLES) reject(w, L, AG_REJ_BUSY);
    return;
  case STK__PUB_SIZE: reject(w, L, AG_REJ_SIZE); return;
  case STK__PUB_VERSION: reject(w, L, AG_REJ_VERSION); return;
  case STK__PUB_IO: reject(w, L, AG_REJ_IO); return;
  default: reject(w, L, AG_REJ_FORMAT); return;
  }
  if (!loader_alive(w, &pub)) {
    if (!(pub.flags & STK_PUB_CLOSED)) remove_stale(w, L);
    L->state = AG_PUB_GONE;
    return;
  }
  int own = stk__ag_pid_has_uid(w, pub.pid, L->uid);
  if (own < 0) { /* ended just now: forget it, look again next sample */
    L->state = AG_PUB_GONE;
    return;
  }
  if (!own) {
    stk_log(STK_LOG_WARN,
            "watch: %s%s%s (owner uid %u) names pid %u, a process of another user; ignored",
            strchr(L->name, '/') ? "" : w->runtime_dir, strchr(L->name, '/') ? "" : "/", L->name,
            L->uid, pub.pid);
    reject(w, L, AG_REJ_OWNER);
    return;
  }
  L->busy = 0;
  if (L->state == AG_PUB_LIVE && pub.pid != L->pub.pid) L->have_prev = 0; /* another process */
  L->pub = pub;
  L->state = AG_PUB_LIVE;
}

/* Scan one publication directory (its names prefixed with prefix in
 * w->loaders: "" for the runtime directory, "pod-PID/" for a pod's). */
static void scan_dir(struct stk_watch *w, DIR *d, const char *prefix, unsigned *added,
                     unsigned *left_out) {
  struct dirent *e;
  char full[sizeof w->loaders[0].name];
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (strncmp(e->d_name, "loader-", 7) || l < 12 || strcmp(e->d_name + l - 4, ".pub") ||
        strlen(prefix) + l >= sizeof full)
      continue;
    if (snprintf(full, sizeof full, "%s%s", prefix, e->d_name) >= (int)sizeof full) continue;
    /* The name's inode now (not d_ino, which overlayfs may not keep equal
     * to st_ino): a file renamed over a tracked one shows here. */
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    unsigned i;
    for (i = 0; i < w->ntracked; i++)
      if (!strcmp(w->loaders[i].name, full)) break;
    if (i < w->ntracked) {
      struct ag_loader *L = &w->loaders[i];
      if ((uint64_t)st.st_ino == L->ino) {
        L->seen = 1;
        continue;
      }
      if (L->state != AG_PUB_REJECTED) {
        /* Another file put in a tracked one's place: no loader does that. */
        w->loader_errors[AG_REJ_SWAPPED]++;
        stk_log(STK_LOG_DEBUG, "watch: loader publication %s was replaced", L->name);
      }
      if (L->fd >= 0) close(L->fd);
      track(w, L, dirfd(d), prefix, e->d_name, &st); /* the name's new file, judged afresh */
      continue;
    }
    if (*added >= 256) continue; /* bounded work per sample: the rest next time */
    unsigned of_owner = 0;
    for (unsigned k = 0; k < w->ntracked; k++) of_owner += w->loaders[k].uid == (uint32_t)st.st_uid;
    if (w->ntracked >= AG_MAX_PUB_FILES || of_owner >= AG_MAX_PUB_PER_UID) {
      (*left_out)++;
      continue;
    }
    if (w->ntracked == w->loaders_cap) {
      unsigned nc = w->loaders_cap ? w->loaders_cap * 2 : 16;
      void *q = realloc(w->loaders, nc * sizeof *w->loaders);
      if (!q) continue;
      w->loaders = q;
      w->loaders_cap = nc;
    }
    (*added)++;
    track(w, &w->loaders[w->ntracked++], dirfd(d), prefix, e->d_name, &st);
  }
}

/* A pod's own publication directory, /dev/shm/stoker under the root of
 * GPU process pid (its container's), opened one component at a time
 * without following a link (the container's user owns those names); -1
 * when it has none, or it is the host's (same root as the agent's), or
 * one already scanned this sample (seen: device and inode pairs). */
static int pod_dir(const struct stk_watch *w, uint32_t pid, const struct stat *host_root,
                   dev_t (*seen)[2], unsigned *nseen, unsigned max) {
  char p[512];
  snprintf(p, sizeof p, "%s/%u/root", w->proc_root, pid);
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || (st.st_dev == host_root->st_dev && st.st_ino == host_root->st_ino)) {
    close(fd);
    return -1;
  }
  static const char *const comp[] = {"dev", "shm", "stoker"};
  for (size_t i = 0; i < 3 && fd >= 0; i++) {
    int n = openat(fd, comp[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(fd);
    fd = n;
  }
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  for (unsigned k = 0; k < *nseen; k++)
    if (seen[k][0] == st.st_dev && seen[k][1] == (dev_t)st.st_ino) {
      close(fd);
      return -1;
    }
  if (*nseen < max) seen[*nseen][0] = st.st_dev, seen[*nseen][1] = (dev_t)st.st_ino, (*nseen)++;
  return fd;
}

void stk__ag_loaders_sample(struct stk_watch *w) {
  for (unsigned i = 0; i < w->ntracked; i++) w->loaders[i].seen = 0;
  unsigned added = 0, left_out = 0, nseen = 0;
  dev_t seen[AG_MAX_POD_DIRS + 1][2];
  DIR *d = opendir(w->runtime_dir);
  if (d) {
    struct stat st;
    if (fstat(dirfd(d), &st) == 0) seen[0][0] = st.st_dev, seen[0][1] = (dev_t)st.st_ino, nseen = 1;
    scan_dir(w, d, "", &added, &left_out);
    closedir(d);
  }
  /* Pods' own /dev/shm/stoker, through their GPU processes' roots: no
   * hostPath for the training pods (issue 21, section 4). */
  struct stat host_root;
  if (w->o.pod_publications && stat("/", &host_root) == 0)
    for (unsigned gi = 0; gi < w->ngpus; gi++)
      for (unsigned k = 0; k < w->gpus[gi].nprocs && nseen <= AG_MAX_POD_DIRS; k++) {
        uint32_t pid = w->gpus[gi].procs[k].pid;
        /* Only a Kubernetes pod's process, by its cgroup as read at the
         * last sample (the cache: no /proc read here for host processes). */
        struct ag_pcache key = {.pid = pid};
        const struct ag_pcache *c =
            w->npc_prev ? bsearch(&key, w->pc_prev, w->npc_prev, sizeof key, pc_cmp) : NULL;
        if (!c || strncmp(c->job, "pod-", 4)) continue;
        int fd = pod_dir(w, pid, &host_root, seen, &nseen, AG_MAX_POD_DIRS + 1);
        if (fd < 0) continue;
        DIR *pd = fdopendir(fd);
        if (!pd) {
          close(fd);
          continue;
        }
        char prefix[32];
        snprintf(prefix, sizeof prefix, "pod-%u/", pid);
        scan_dir(w, pd, prefix, &added, &left_out);
        closedir(pd);
      }
  if (left_out) {
    w->loader_errors[AG_REJ_LIMIT] += left_out;
    stk_log(STK_LOG_DEBUG,
            "watch: %u loader publications left out: %u tracked in all, or %u of one owner",
            left_out, AG_MAX_PUB_FILES, AG_MAX_PUB_PER_UID);
  }
  /* Files no longer there are forgotten; new and live ones are read. */
  for (unsigned i = 0; i < w->ntracked;) {
    struct ag_loader *L = &w->loaders[i];
    if (L->seen && (L->state == AG_PUB_NEW || L->state == AG_PUB_LIVE)) refresh(w, L);
    if (!L->seen || L->state == AG_PUB_GONE) {
      untrack(w, i);
      continue;
    }
    i++;
  }
  /* Live entries first: the agent reads w->loaders[0 .. nloaders). */
  unsigned live = 0;
  for (unsigned i = 0; i < w->ntracked; i++)
    if (w->loaders[i].state == AG_PUB_LIVE) {
      if (i != live) {
        struct ag_loader t = w->loaders[live];
        w->loaders[live] = w->loaders[i];
        w->loaders[i] = t;
      }
      live++;
    }
  w->nloaders = live;
}

void stk__ag_loaders_free(struct stk_watch *w) {
  while (w->ntracked) untrack(w, w->ntracked - 1);
  w->nloaders = 0;
  free(w->loaders);
}
