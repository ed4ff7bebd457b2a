/* stoker watch's HTTP endpoint (libmicrohttpd): scrapes while the agent
 * samples (also run under ThreadSanitizer: the name says concurrent), bad
 * requests, and abusive clients (many idle connections, slow readers, huge
 * headers) that must leave the agent serving with bounded memory; and a
 * real Prometheus server (Debian's prometheus) scraping the agent, whose
 * HTTP API must return the per-job figures the scenario implies. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <zlib.h>

#include "stoker/stoker.h"
#include "test.h"

static const char *fake_nvml(void) {
  const char *p = getenv("STOKER_FAKE_NVML");
  if (!p || access(p, R_OK) != 0) SKIP("the fake NVML is not built (run through make test)");
  return p;
}

static struct stk_watch *serving_agent(int *port) {
  FILE *f = fopen("sc.txt", "w");
  fprintf(f, "gpu 0 name \"NVIDIA H100 80GB HBM3\"\ngpu 1\n"
             "at 0 gpu 0 util 75 power_w 300\nat 0 gpu 1 util 0 power_w 60\n");
  fclose(f);
  mkdir("map", 0755);
  test_write_file("map/0", "A\n", 2);
  mkdir("rt", 0755);
  setenv("FAKE_NVML_SCENARIO", "sc.txt", 1);
  struct stk_watch_opts o = {.nvml_lib = fake_nvml(), .fast_time = 1, .mapping_dir = "map",
                             .runtime_dir = "rt", .hostname = "node1"};
  struct stk_watch *w;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_watch_open(&w, &o, err));
  CHECK_OK(stk_watch_sample(w));
  int rc = stk_watch_serve(w, "127.0.0.1:0", port, err);
  CHECK_MSG(rc == 0, "serve: %s", err);
  CHECK(*port > 0);
  return w;
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* One request; the whole response (malloc'ed; *len bytes, NUL after) or
 * NULL. */
static char *request_len(int port, const char *req, size_t *len) {
  int fd = connect_to(port);
  if (fd < 0) return NULL;
  size_t rl = strlen(req);
  if (write(fd, req, rl) != (ssize_t)rl) {
    close(fd);
    return NULL;
  }
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  if (!n) {
    free(buf);
    return NULL;
  }
  if (len) *len = n;
  return buf;
}

static char *request(int port, const char *req) { return request_len(port, req, NULL); }

static char *scrape(int port) { return request(port, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n"); }

struct scraper { int port, ok, n; };

static void *scraper_main(void *arg) {
  struct scraper *s = arg;
  for (int i = 0; i < s->n; i++) {
    char *r = scrape(s->port);
    if (r && strstr(r, " 200 ") && strstr(r, "stoker_watch_samples_total") &&
        strstr(r, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""))
      s->ok++;
    free(r);
  }
  return NULL;
}

TEST(watch_http_concurrent_scrapes) {
  signal(SIGPIPE, SIG_IGN);
  int port;
  struct stk_watch *w = serving_agent(&port);
  struct scraper sc[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    sc[i] = (struct scraper){port, 0, 25};
    CHECK(pthread_create(&th[i], NULL, scraper_main, &sc[i]) == 0);
  }
  for (int s = 0; s < 100; s++) CHECK_OK(stk_watch_sample(w));
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK_EQ(sc[i].ok, 25);
  }
  char *r = scrape(port);
  CHECK(r != NULL);
  CHECK_CONTAINS(r, "Content-Type: text/plain; version=0.0.4");
  CHECK_CONTAINS(r, "stoker_watch_samples_total 101\n");
  free(r);
  stk_watch_close(w);
}

TEST(watch_http_bad_requests) {
  signal(SIGPIPE, SIG_IGN);
  int port;
  struct stk_watch *w = serving_agent(&port);
  char *r = request(port, "POST /metrics HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello");
  CHECK(r != NULL);
  CHECK_CONTAINS(r, " 405 ");
  free(r);
  r = request(port, "GET /nope HTTP/1.0\r\n\r\n");
  CHECK(r != NULL);
  CHECK_CONTAINS(r, " 404 ");
  free(r);
  /* A header far beyond the connection's memory: refused, nothing else. */
  size_t big = 200000;
  char *req = malloc(big + 64);
  strcpy(req, "GET /metrics HTTP/1.0\r\nX-Big: ");
  size_t l = strlen(req);
  memset(req + l, 'a', big);
  strcpy(req + l + big, "\r\n\r\n");
  r = request(port, req);
  CHECK(!r || !strstr(r, " 200 "));
  free(r);
  free(req);
  r = scrape(port);
  CHECK(r != NULL);
  CHECK_CONTAINS(r, " 200 ");
  free(r);
  stk_watch_close(w);
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
  if (f) fclose(f);
  return v;
}

TEST(watch_http_abusive_clients) {
  signal(SIGPIPE, SIG_IGN);
  int port;
  struct stk_watch *w = serving_agent(&port);
  for (int s = 0; s < 5; s++) CHECK_OK(stk_watch_sample(w));
  char *r = scrape(port);
  CHECK(r != NULL);
  free(r);
  long rss0 = rss_kib();
  enum { N = 300 };
  int fds[N];
  /* Idle connections and half-sent requests (slowloris), then clients that
   * ask and never read (slow readers). The daemon refuses those beyond its
   * connection limit. */
  for (int i = 0; i < N; i++) {
    fds[i] = connect_to(port);
    if (fds[i] < 0) continue;
    if (i % 3 == 1) {
      const char *part = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
      (void)!write(fds[i], part, strlen(part));
    } else if (i % 3 == 2) {
      const char *full = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
      int small = 1024;
      setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
      (void)!write(fds[i], full, strlen(full));
    }
  }
  /* The agent goes on sampling under the siege. */
  for (int s = 0; s < 20; s++) CHECK_OK(stk_watch_sample(w));
  long rss1 = rss_kib();
  for (int i = 0; i < N; i++)
    if (fds[i] >= 0) close(fds[i]);
  /* Once they are gone, scrapes are served again (the daemon notices the
   * closed sockets on its next poll; allow it a few tries). */
  int ok = 0;
  for (int tries = 0; tries < 100 && !ok; tries++) {
    r = scrape(port);
    ok = r && strstr(r, " 200 ") && strstr(r, "stoker_watch_samples_total 26\n");
    free(r);
    if (!ok) usleep(100000);
  }
  CHECK(ok);
  CHECK_MSG(rss1 - rss0 < 32 * 1024, "RSS grew by %ld KiB under 300 abusive connections", rss1 - rss0);
  stk_watch_close(w);
}

/* A real Prometheus server on loopback scrapes `stoker watch` (which
 * replays a scenario in fast time and then keeps serving its figures). */
TEST(watch_prometheus_scrapes_agent) {
  if (access("/usr/bin/prometheus", X_OK) != 0) SKIP("prometheus is not installed (apt-get install prometheus)");
  const char *lib = fake_nvml();
  FILE *f = fopen("sc.txt", "w");
  fprintf(f, "gpu 0\ngpu 1\n");
  static const double u0[6] = {100, 20, 0, 0, 50, 100};
  for (int s = 0; s < 6; s++) fprintf(f, "at %d gpu 0 util %g power_w 200\nat %d gpu 1 util 100 power_w 300\n", s, u0[s], s);
  fclose(f);
  mkdir("map", 0755);
  test_write_file("map/0", "job-a\n", 6);
  test_write_file("map/1", "job-b\n", 6);
  char *out = NULL;
  int rc = test_sh(&out,
                   "FAKE_NVML_SCENARIO=sc.txt %s watch --nvml %s --fast-time --samples 6 --keep-serving "
                   "--listen 127.0.0.1:0 --port-file port --mapping-dir map --runtime-dir . --hostname n1 -q "
                   ">agent.log 2>&1 & echo $! > agent.pid; "
                   "for i in $(seq 100); do [ -s port ] && break; sleep 0.1; done; cat port",
                   test_stoker_bin(), lib);
  CHECK_MSG(rc == 0 && atoi(out) > 0, "agent did not start: %s", out);
  int port = atoi(out);
  free(out);
  /* Prometheus: its own port, its own data directory. */
  f = fopen("prom.yml", "w");
  fprintf(f, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             "scrape_configs:\n  - job_name: stoker\n    static_configs:\n"
             "      - targets: ['127.0.0.1:%d']\n", port);
  fclose(f);
  rc = test_sh(&out,
               "p=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])'); "
               "echo $p > prom.port; /usr/bin/prometheus --config.file=prom.yml --storage.tsdb.path=tsdb "
               "--web.listen-address=127.0.0.1:$p >prom.log 2>&1 & echo $! > prom.pid; echo $p");
  CHECK(rc == 0);
  int pport = atoi(out);
  free(out);
  /* Wait (bounded) until the queries return the scenario's figures: job-a's
   * idle GPU-seconds, and job-b's GPU utilization under dcgm's name. */
  double idle = 0;
  for (int k = 1; k < 6; k++) idle += 1 - u0[k] / 100;
  char want[64];
  snprintf(want, sizeof want, "%g", idle);
  int found = 0;
  char *last = NULL;
  for (int tries = 0; tries < 120 && found < 2; tries++) {
    const char *q = found == 0 ? "stoker_job_gpu_idle_seconds_total{hpc_job=\"job-a\"}"
                               : "DCGM_FI_DEV_GPU_UTIL{hpc_job=\"job-b\",gpu=\"1\",Hostname=\"n1\"}";
    const char *expect = found == 0 ? want : "100";
    free(last);
    last = NULL;
    rc = test_sh(&last,
                 "curl -s --max-time 5 'http://127.0.0.1:%d/api/v1/query' --data-urlencode 'query=%s' | "
                 "/usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)[\"data\"][\"result\"]; "
                 "print(\"%%g\" %% float(r[0][\"value\"][1]) if r else \"none\")'",
                 pport, q);
    if (rc == 0 && !strncmp(last, expect, strlen(expect)) && last[strlen(expect)] == '\n')
      found++;
    else
      usleep(250000);
  }
  char *logs = NULL;
  if (found < 2) test_sh(&logs, "tail -5 prom.log agent.log");
  test_sh(NULL, "kill $(cat prom.pid) $(cat agent.pid) 2>/dev/null; sleep 0.2");
  CHECK_MSG(found == 2, "Prometheus did not return the expected figure %d (want %s, last: %s) %s",
            found, found ? "100" : want, last ? last : "-", logs ? logs : "");
  free(last);
  free(logs);
}

/* The body of a response (after its headers) and its length. */
static const char *body_of(const char *resp, size_t n, size_t *len) {
  const char *b = strstr(resp, "\r\n\r\n");
  CHECK(b != NULL);
  b += 4;
  *len = n - (size_t)(b - resp);
  return b;
}

/* A scraper that sends Accept-Encoding: gzip (Prometheus does) gets the
 * same page gzipped; one that does not, or refuses it (q=0), gets it
 * plain. */
TEST(watch_http_gzip_on_request) {
  signal(SIGPIPE, SIG_IGN);
  int port;
  struct stk_watch *w = serving_agent(&port);
  size_t pn, gn, n2, n3;
  char *plain = request_len(port, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n", &pn);
  char *gz = request_len(port, "GET /metrics HTTP/1.0\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n", &gn);
  char *refused = request_len(port, "GET /metrics HTTP/1.0\r\nAccept-Encoding: gzip;q=0, br\r\n\r\n", &n2);
  char *listed = request_len(port, "GET /metrics HTTP/1.0\r\nAccept-Encoding: deflate, X-GZIP;q=0.5\r\n\r\n", &n3);
  CHECK(plain && gz && refused && listed);
  CHECK(strstr(plain, "Content-Encoding") == NULL);
  CHECK(strstr(refused, "Content-Encoding") == NULL);
  CHECK_CONTAINS(gz, "Content-Encoding: gzip\r\n");
  CHECK_CONTAINS(gz, "Vary: Accept-Encoding\r\n");
  CHECK_CONTAINS(listed, "Content-Encoding: gzip\r\n");
  size_t plen, glen;
  const char *pb = body_of(plain, pn, &plen), *gb = body_of(gz, gn, &glen);
  CHECK(glen < plen);
  /* It inflates to the plain page, byte for byte. */
  char *out = malloc(plen + 1);
  z_stream z;
  memset(&z, 0, sizeof z);
  CHECK(inflateInit2(&z, 15 + 16) == Z_OK);
  z.next_in = (Bytef *)gb;
  z.avail_in = (uInt)glen;
  z.next_out = (Bytef *)out;
  z.avail_out = (uInt)plen + 1;
  CHECK_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  CHECK_EQ(z.total_out, plen);
  inflateEnd(&z);
  CHECK(memcmp(out, pb, plen) == 0);
  free(out);
  free(plain);
  free(gz);
  free(refused);
  free(listed);
  stk_watch_close(w);
}
