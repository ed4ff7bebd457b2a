/* The idle-job reaper: acts on a job whose GPUs were all idle in every
 * sample for the window (a warning at half of it), through the operator's
 * commands run by /bin/sh without waiting for them; a Slurm job only where
 * squeue puts it on this node alone, any job only where Prometheus (when
 * configured) shows it idle on all its nodes: those checks run in the
 * command's own shell, so the sampler never blocks on slurmctld or
 * Prometheus. */
#include <ctype.h>
#include <fnmatch.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agent_impl.h"

extern char **environ;

static int is_exempt(const struct stk_watch *w, const char *job) {
  for (size_t i = 0; w->exempt[i]; i++)
    if (fnmatch(w->exempt[i], job, 0) == 0) return 1;
  return 0;
}

static int job_id_safe(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '.' || *s == '_' || *s == '-' || *s == ':' || *s == '@'))
      return 0;
  return 1;
}

/* A Slurm job id (123, or an array task 123_4): its nodes can be asked. */
static int slurm_job_id(const char *s) {
  if (!(*s >= '0' && *s <= '9')) return 0;
  for (; *s; s++)
    if (!((*s >= '0' && *s <= '9') || *s == '_')) return 0;
  return 1;
}

/* Expand "{job}", "{minutes}", "{pod}" and "{namespace}" (a job from the
 * kubelet's pod resources) in a command template; -1 (logged) when a
 * value is missing or has characters a shell command cannot take safely. */
static int expand(const struct stk_watch *w, const char *tpl, const char *job, double minutes,
                  char *out, size_t n) {
  size_t o = 0;
  char mins[32];
  snprintf(mins, sizeof mins, "%.0f", minutes);
  const struct ag_pod *pod = stk__ag_job_pod(w, job);
  for (const char *p = tpl; *p && o + 1 < n;) {
    const char *rep = NULL;
    size_t skip = 1;
    if (!strncmp(p, "{job}", 5)) rep = job, skip = 5;
    else if (!strncmp(p, "{minutes}", 9)) rep = mins, skip = 9;
    else if (!strncmp(p, "{pod}", 5)) rep = pod ? pod->pod : "", skip = 5;
    else if (!strncmp(p, "{namespace}", 11)) rep = pod ? pod->ns : "", skip = 11;
    if (rep && (!rep[0] || !job_id_safe(rep))) {
      stk_log(STK_LOG_ERROR, "watch: reaper: job '%s': %.*s is %s; not running '%s'", job,
              (int)skip, p, rep[0] ? "not safe in a shell command" : "unknown (not a pod)", tpl);
      return -1;
    }
    if (rep) {
      size_t l = strlen(rep);
      if (o + l >= n) break;
      memcpy(out + o, rep, l);
      o += l;
    } else {
      out[o++] = *p;
    }
    p += skip;
  }
  out[o] = 0;
  return 0;
}

/* Where Prometheus is configured, the action on any job is guarded by
 * it: run only where the job's idle streak, as every node's agent exports
 * it, is at least the window (less a minute of scrape lag) on all its
 * nodes; else a line on stderr says why and nothing is done. */
static int prom_guard(const struct stk_watch *w, const char *job, const char *cmd, char *out,
                      size_t n) {
  double s = w->o.reap_after_s - 60 > w->o.reap_after_s / 2 ? w->o.reap_after_s - 60
                                                             : w->o.reap_after_s / 2;
  for (const char *c = job; *c; c++)
    if (!isalnum((unsigned char)*c) && !strchr("._-:@/", *c)) return -1;
  const char *u = w->reap_prometheus;
  size_t ul = strlen(u);
  while (ul && u[ul - 1] == '/') ul--;
  int l = snprintf(out, n,
                   "r=$(curl -sfG --max-time 10 '%.*s/api/v1/query' --data-urlencode "
                   "'query=min(stoker_job_idle_streak_seconds{hpc_job=\"%s\"}) >= %.0f' 2>&1); "
                   "case \"$r\" in "
                   "*'\"status\":\"success\"'*'\"result\":[]'*) echo \"stoker watch: reaper: job %s: "
                   "Prometheus shows it busy on another node: not acting\" >&2; exit 0;; "
                   "*'\"status\":\"success\"'*) ;; "
                   "*) echo \"stoker watch: reaper: job %s: cannot ask Prometheus at %.*s "
                   "($r): not acting\" >&2; exit 0;; esac; %s",
                   (int)ul, u, job, s, job, job, (int)ul, u, cmd);
  return l > 0 && (size_t)l < n ? 0 : -1;
}

/* The action on a Slurm job, guarded: only where squeue says the job
 * runs on this node alone (one node's idle GPUs say nothing of the
 * others'); else it logs why and does nothing. Where Slurm has no squeue
 * (not a Slurm node), the command runs as given. */
static int slurm_guard(const char *job, const char *cmd, char *out, size_t n) {
  int l = snprintf(out, n,
                   "if command -v squeue >/dev/null 2>&1; then "
                   "n=$(squeue -h -j %s -o %%D 2>/dev/null); "
                   "if [ \"$n\" != 1 ]; then echo \"stoker watch: reaper: job %s runs on "
                   "${n:-an unknown number of} nodes; idle GPUs on this node alone are not "
                   "enough: not acting\" >&2; exit 0; fi; fi; %s",
                   job, job, cmd);
  return l > 0 && (size_t)l < n ? 0 : -1;
}

/* Collect the reaper's commands that have ended. */
static void collect_kids(struct stk_watch *w) {
  for (unsigned i = 0; i < w->nkids;) {
    int st;
    pid_t r = waitpid(w->kids[i], &st, WNOHANG);
    if (r == w->kids[i] || r < 0) {
      if (r > 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
        stk_log(STK_LOG_WARN, "watch: reaper: command %d failed (status %d)", (int)r,
                WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      w->kids[i] = w->kids[--w->nkids];
      continue;
    }
    i++;
  }
}

static void run_command(struct stk_watch *w, const char *cmd) {
  collect_kids(w);
  if (w->nkids >= STK__ARRAY_LEN(w->kids)) {
    stk_log(STK_LOG_ERROR, "watch: reaper: 64 commands still running; not running '%s'", cmd);
    return;
  }
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
  if (rc != 0) {
    stk_log(STK_LOG_ERROR, "watch: reaper: cannot run '%s': %s", cmd, strerror(rc));
    return;
  }
  w->kids[w->nkids++] = pid;
}

void stk__ag_reaper(struct stk_watch *w) {
  collect_kids(w);
  if (!(w->o.reap_after_s > 0)) return;
  for (unsigned i = 0; i < w->njobs; i++) {
    struct ag_job *j = &w->jobs[i];
    if (j->idle_streak_s <= 0) {
      j->warned = j->acted = 0;
      continue;
    }
    if (is_exempt(w, j->id)) continue;
    char cmd[2048];
    if (!j->warned && j->idle_streak_s >= w->o.reap_warn_s) {
      j->warned = 1;
      w->reaper_warn++;
      stk_log(STK_LOG_WARN,
              "watch: reaper: job %s: all %u GPUs idle for %.1f min; acting at %.1f min%s",
              j->id, j->gpus, j->idle_streak_s / 60, w->o.reap_after_s / 60,
              w->o.reap_dry_run ? " (dry run)" : "");
      if (w->reap_warn_command && !w->o.reap_dry_run &&
          expand(w, w->reap_warn_command, j->id, j->idle_streak_s / 60, cmd, sizeof cmd) == 0)
        run_command(w, cmd);
    }
    if (!j->acted && j->idle_streak_s >= w->o.reap_after_s) {
      j->acted = 1;
      if (expand(w, w->reap_command ? w->reap_command : "", j->id, j->idle_streak_s / 60, cmd,
                 sizeof cmd) != 0)
        continue;
      char guarded[3072];
      if (w->reap_prometheus && cmd[0]) {
        if (prom_guard(w, j->id, cmd, guarded, sizeof guarded) != 0) continue;
      } else if (slurm_job_id(j->id) && cmd[0]) {
        if (slurm_guard(j->id, cmd, guarded, sizeof guarded) != 0) continue;
      } else {
        snprintf(guarded, sizeof guarded, "%s", cmd);
      }
      if (w->o.reap_dry_run) {
        w->reaper_dry++;
        stk_log(STK_LOG_WARN, "watch: reaper: dry run: job %s idle %.1f min: would run: %s",
                j->id, j->idle_streak_s / 60, cmd[0] ? cmd : "(no command)");
      } else {
        w->reaper_act++;
        stk_log(STK_LOG_WARN, "watch: reaper: job %s idle %.1f min: running: %s%s", j->id,
                j->idle_streak_s / 60, cmd,
                !strcmp(guarded, cmd)  ? ""
                : w->reap_prometheus   ? " (if Prometheus shows it idle on all its nodes)"
                                       : " (if squeue puts the job on this node alone)");
        run_command(w, guarded);
      }
    }
  }
}
