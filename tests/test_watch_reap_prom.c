/* The cross-node reaper (issue 21, §3): with --reap-prometheus the agent
 * acts on a job only where a real Prometheus, holding every node's
 * series, shows the job idle on all its nodes. Two agents stand for two
 * nodes (job 101 idle on one, busy on the other; job 202 idle on both),
 * Debian's Prometheus scrapes them, and a third agent of node a decides. */
#include "test_watch.h"

static int start_node(const char *name, const char *sc) {
  char *out = NULL;
  int rc = test_sh(&out,
                   "mkdir -p %s; FAKE_NVML_SCENARIO=%s %s watch --nvml %s --fast-time --interval 60 "
                   "--samples 30 --keep-serving --listen 127.0.0.1:0 --port-file %s/port "
                   "--mapping-dir map --runtime-dir %s --hostname %s -q >%s/log 2>&1 & "
                   "echo $! > %s/pid; for i in $(seq 300); do [ -s %s/port ] && break; sleep 0.1; done; "
                   "cat %s/port",
                   name, sc, test_stoker_bin(), fake_nvml(), name, name, name, name, name, name, name);
  int port = rc == 0 && out ? atoi(out) : 0;
  free(out);
  CHECK_MSG(port > 0, "agent %s did not start", name);
  return port;
}

/* The value of an instant query (NAN when none). */
static double prom_value(int pport, const char *q) {
  char *out = NULL;
  int rc = test_sh(&out,
                   "curl -s --max-time 5 'http://127.0.0.1:%d/api/v1/query' --data-urlencode 'query=%s' | "
                   "/usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)[\"data\"][\"result\"]; "
                   "print(r[0][\"value\"][1] if r else \"nan\")'",
                   pport, q);
  double v = rc == 0 && out ? strtod(out, NULL) : NAN;
  free(out);
  return v;
}

TEST(watch_reaper_asks_prometheus_across_nodes) {
  if (access("/usr/bin/prometheus", X_OK) != 0) SKIP("no /usr/bin/prometheus");
  char *out = NULL;
  if (test_sh(&out, "command -v curl") != 0) {
    free(out);
    SKIP("no curl");
  }
  free(out);
  mkdir("map", 0755);
  write_str("map/0", "101\n");
  write_str("map/1", "202\n");
  write_str("a.txt", "gpu 0\ngpu 1\nat 0 gpu 0 util 0\nat 0 gpu 1 util 0\n");
  write_str("b.txt", "gpu 0\ngpu 1\nat 0 gpu 0 util 40\nat 0 gpu 1 util 0\n");
  int pa = start_node("a", "a.txt"), pb = start_node("b", "b.txt");
  FILE *f = fopen("prom.yml", "w");
  fprintf(f, "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: stoker\n"
             "    static_configs:\n      - targets: ['127.0.0.1:%d', '127.0.0.1:%d']\n", pa, pb);
  fclose(f);
  CHECK(test_sh(&out,
                "p=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
                "print(s.getsockname()[1])'); /usr/bin/prometheus --config.file=prom.yml "
                "--storage.tsdb.path=tsdb --web.listen-address=127.0.0.1:$p >prom.log 2>&1 & "
                "echo $! > prom.pid; echo $p") == 0);
  int pport = atoi(out);
  free(out);
  /* Wait (bounded) until Prometheus holds both nodes' streaks of both jobs. */
  int ready = 0;
  for (int i = 0; i < 120 && !ready; i++) {
    ready = prom_value(pport, "count(stoker_job_idle_streak_seconds{hpc_job=~\"101|202\"})") == 4 &&
            prom_value(pport, "min(stoker_job_idle_streak_seconds{hpc_job=\"202\"})") >= 1000;
    if (!ready) usleep(250000);
  }
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", pport);
  int acted = 0;
  if (ready) {
    /* Node a's own agent: both its jobs idle past the window. */
    setenv("FAKE_NVML_SCENARIO", "a.txt", 1);
    struct stk_watch_opts o = {.mapping_dir = "map", .interval_s = 60, .reap_after_s = 300,
                               .reap_command = "echo {job} >> reaped.txt", .reap_prometheus = url};
    struct stk_watch *w = agent("a.txt", &o);
    for (int s = 0; s < 7; s++) CHECK_OK(stk_watch_sample(w));
    char *t = expo(w);
    acted = (int)metric(t, "stoker_reaper_actions_total{action=\"act\"}");
    free(t);
    stk_watch_close(w); /* waits for the commands */
  }
  test_sh(NULL, "kill $(cat prom.pid) $(cat a/pid) $(cat b/pid) 2>/dev/null; sleep 0.2");
  CHECK_MSG(ready, "Prometheus never held both nodes' series");
  CHECK_EQ(acted, 2); /* both commands ran, each behind the guard */
  size_t n;
  char *r = (char *)test_read_file("reaped.txt", &n);
  CHECK(r != NULL);
  CHECK_STR(r, "202\n"); /* 101 is busy on node b */
  free(r);
  /* A URL that could break out of the command is refused. */
  struct stk_watch_opts bad = {.reap_after_s = 60, .reap_command = "true",
                               .reap_prometheus = "http://x/'; rm -rf /"};
  struct stk_watch *w;
  char err[STK_ERRMSG_MAX];
  bad.nvml_lib = fake_nvml();
  CHECK(stk_watch_open(&w, &bad, err) != 0);
  CHECK_CONTAINS(err, "cannot be in the URL");
}
