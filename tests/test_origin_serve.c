/* Origin tests through tests/tools/serve, against real servers: nginx
 * (ranged gets, stat, 404, TLS, directory listings), the fault proxy
 * (503s, 429 with Retry-After, truncated bodies, resets) and an S3 server
 * that verifies SigV4 (moto: get, stat, list, a wrong secret, a session
 * token). Tests named *concurrent* also run under ThreadSanitizer. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/cache/http_impl.h"
#include "../src/cache/origin.h"
#include "stoker/stoker.h"
#include "test.h"
#include "test_origin.h"

/* ---- starting servers --------------------------------------------------- */

/* Path of tests/tools/serve, SKIPping when it or what kind needs is absent. */
static const char *serve_tool(const char *kind) {
  static char path[4096];
  const char *root = getenv("STOKER_ROOT");
  if (!root) SKIP("STOKER_ROOT is not set");
  snprintf(path, sizeof path, "%s/tests/tools/serve", root);
  if (access(path, X_OK) != 0) SKIP("tests/tools/serve is missing");
  if (!strncmp(kind, "nginx", 5) && access("/usr/sbin/nginx", X_OK) != 0)
    SKIP("nginx is not installed (scripts/install-deps test)");
  if (!strcmp(kind, "s3") && test_sh(NULL, "%s setup >/dev/null 2>&1", path) != 0)
    SKIP("moto[server] is not installed in .venv or $STOKER_VENV (scripts/install-deps test)");
  return path;
}

/* Start a server: `serve ARGS`; returns its output lines (caller frees). */
static char *serve(const char *kind, const char *args) {
  const char *tool = serve_tool(kind);
  char *out;
  int rc = test_sh(&out, "%s %s %s 2>serve.err", tool, kind, args);
  if (rc != 0) {
    char *err = (char *)test_read_file("serve.err", NULL);
    test_fail(__FILE__, __LINE__, "serve %s %s failed (%d): %s%s", kind, args, rc, out, err);
  }
  return out;
}

/* Line which (from 0) of s, copied into out. */
static void line_of(const char *s, int which, char *out, size_t n) {
  for (int i = 0; i < which && s; i++) {
    s = strchr(s, '\n');
    if (s) s++;
  }
  CHECK(s != NULL);
  size_t len = strcspn(s, "\n");
  CHECK(len < n);
  memcpy(out, s, len);
  out[len] = 0;
}

/* ---- against nginx ------------------------------------------------------ */

#define BIG (5u << 20) /* a multi-MiB object */

/* nginx serving dir "www" with big.bin (seed 9) and small.txt; its URL. */
static void start_nginx(char *url, size_t n, const char *kind) {
  mkdir("www", 0755);
  mkdir("www/data", 0755);
  write_obj("www/data/big.bin", 9, BIG);
  test_write_file("www/data/small.txt", "hello\n", 6);
  char *out = serve(kind, "www");
  line_of(out, 0, url, n);
  free(out);
}

TEST(origin_http_nginx) {
  char base[256], url[300], err[STK_ERRMSG_MAX];
  start_nginx(base, sizeof base, "nginx");
  snprintf(url, sizeof url, "%s/data", base);
  struct stk_origin *o = open_ok(url, NULL);
  uint8_t *want = make_bytes(9, BIG);
  struct stk_obj_info info, hinfo;

  CHECK_OK(stk__origin_stat(o, "big.bin", &hinfo, err));
  CHECK_EQ(hinfo.size, BIG);
  CHECK(strlen(hinfo.etag) > 4 && !strchr(hinfo.etag, '"'));

  int fd = scratch_fd("dst");
  CHECK_OK(stk__origin_get(o, "big.bin", 0, UINT64_MAX, fd, 0, &info, NULL, err));
  check_fd_bytes(fd, 0, want, BIG);
  CHECK_EQ(info.size, BIG);
  CHECK_STR(info.etag, hinfo.etag);
  /* Ranges: the middle, the tail to the end, the whole as a range (200 or
   * 206 both right), a single byte; written at an offset of the fd. */
  CHECK_OK(stk__origin_get(o, "big.bin", 1234567, 2u << 20, fd, 77, &info, NULL, err));
  check_fd_bytes(fd, 77, want + 1234567, 2u << 20);
  CHECK_EQ(info.size, BIG);
  CHECK_OK(stk__origin_get(o, "big.bin", BIG - 1000, UINT64_MAX, fd, 0, NULL, NULL, err));
  check_fd_bytes(fd, 0, want + BIG - 1000, 1000);
  CHECK_OK(stk__origin_get(o, "big.bin", 0, BIG, fd, 0, NULL, NULL, err));
  check_fd_bytes(fd, 0, want, BIG);
  CHECK_OK(stk__origin_get(o, "big.bin", 42, 1, fd, 0, NULL, NULL, err));
  check_fd_bytes(fd, 0, want + 42, 1);

  /* Past the end, absent objects. */
  CHECK_EQ(stk__origin_get(o, "big.bin", BIG - 10, 11, fd, 0, NULL, NULL, err), STK_ERANGE);
  CHECK_EQ(stk__origin_get(o, "big.bin", BIG + 10, 5, fd, 0, NULL, NULL, err), STK_ERANGE);
  CHECK_EQ(stk__origin_get(o, "nope.bin", 0, UINT64_MAX, fd, 0, NULL, NULL, err), STK_ENOENT);
  CHECK_CONTAINS(err, "/data/nope.bin: not found (HTTP 404)");
  CHECK_EQ(stk__origin_stat(o, "nope.bin", &info, err), STK_ENOENT);

  char *buf;
  size_t len;
  CHECK_OK(stk__origin_get_mem(o, "small.txt", 100, &buf, &len, err));
  CHECK_EQ(len, 6);
  CHECK_STR(buf, "hello\n");
  free(buf);
  CHECK_EQ(stk__origin_get_mem(o, "big.bin", 1000, &buf, &len, err), STK_ERANGE);

  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.retries, 0);
  CHECK(st.bytes >= 2ull * BIG + (2u << 20));
  CHECK(st.errors >= 2);
  CHECK_EQ(st.missing, 2); /* the two lookups of nope.bin: not errors */
  close(fd);
  free(want);
  stk__origin_close(o);
}

struct conc {
  struct stk_origin *o;
  const uint8_t *want;
  int id, failures;
};

/* An HTTP origin lists its folder from the server's directory listing
 * pages, subfolders included, with nginx's exact sizes; the same through
 * nginx's JSON listing; a folder the server gives no listing for cannot be
 * listed (ENOTSUP, saying so). */
TEST(origin_http_lists_directory_pages) {
  char base[256], url[300], err[STK_ERRMSG_MAX];
  start_nginx(base, sizeof base, "nginx");
  mkdir("www/data/sub", 0755);
  write_obj("www/data/sub/x y&z.tar", 3, 1234);
  const char *roots[] = {"%s/data", "%s/_json/data/"};
  for (int k = 0; k < 2; k++) {
    snprintf(url, sizeof url, roots[k], base);
    struct stk_origin *o = open_ok(url, NULL);
    struct list_rec l = {0};
    CHECK_OK(stk__origin_list(o, list_cb, &l, err));
    CHECK_EQ(l.n, 3);
    int seen = 0;
    for (int i = 0; i < l.n; i++) {
      uint64_t want = UINT64_MAX;
      if (!strcmp(l.names[i], "big.bin")) seen |= 1, want = BIG;
      if (!strcmp(l.names[i], "small.txt")) seen |= 2, want = 6;
      if (!strcmp(l.names[i], "sub/x y&z.tar")) seen |= 4, want = 1234;
      CHECK_EQ(l.info[i].size, want);
    }
    CHECK_MSG(seen == 7, "%s: names %s, %s, %s", url, l.names[0], l.names[1], l.names[2]);
    /* The listed names fetch: they are the objects' names, decoded. */
    int fd = scratch_fd("got");
    CHECK_OK(stk__origin_get(o, "sub/x y&z.tar", 0, UINT64_MAX, fd, 0, NULL, NULL, err));
    close(fd);
    stk__origin_close(o);
  }
  snprintf(url, sizeof url, "%s/nope", base);
  struct stk_origin *o = open_ok(url, NULL);
  struct list_rec l = {0};
  CHECK_EQ(stk__origin_list(o, list_cb, &l, err), STK_ENOTSUP);
  CHECK_CONTAINS(err, "/nope/: the server gives no directory listing (HTTP 404)");
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.errors, 0);
  CHECK_EQ(st.missing, 1);
  stk__origin_close(o);
}

/* The listing parser on the pages servers write, and on hostile ones. */
static int page_cb(void *arg, const char *name, int is_dir, uint64_t size) {
  char *out = arg;
  char line[300];
  snprintf(line, sizeof line, "%s%s=%lld;", name, is_dir ? "/" : "",
           size == UINT64_MAX ? -1LL : (long long)size);
  strncat(out, line, 4095 - strlen(out));
  return 0;
}

TEST(origin_listing_parse) {
  char out[4096], err[STK_ERRMSG_MAX];
  const char *nginx = "<html><body><pre><a href=\"../\">../</a>\n<a href=\"sub/\">sub/</a>"
                      "          24-Nov-2026 00:26                   -\n<a href=\"a%20b.tar\">"
                      "a b.tar</a>        24-Nov-2026 00:26               12345\n</pre></body></html>";
  out[0] = 0;
  CHECK_OK(stk__listing_parse(nginx, strlen(nginx), page_cb, out, err));
  CHECK_STR(out, "sub/=-1;a b.tar=12345;");
  const char *python = "<ul>\n<li><a href=\"x.tar\">x.tar</a></li>\n<li><a href=\"d/\">d/</a>"
                       "</li>\n</ul>";
  out[0] = 0;
  CHECK_OK(stk__listing_parse(python, strlen(python), page_cb, out, err));
  CHECK_STR(out, "x.tar=-1;d/=-1;");
  const char *apache = "<tr><td><a href=\"?C=N;O=D\">Name</a></td></tr><tr><td><a href=\"/\">"
                       "Parent Directory</a></td></tr><tr><td><a href=\"s.tar\">s.tar</a></td>"
                       "<td align=\"right\">2026-11-24 00:00  </td><td align=\"right\"> 31K</td>"
                       "</tr>";
  out[0] = 0;
  CHECK_OK(stk__listing_parse(apache, strlen(apache), page_cb, out, err));
  CHECK_STR(out, "s.tar=-1;");
  const char *json = "[{\"name\":\"a.tar\",\"type\":\"file\",\"size\":7},"
                     "{\"name\":\"s\",\"type\":\"directory\"},{\"name\":\"l\",\"type\":\"other\"}]";
  out[0] = 0;
  CHECK_OK(stk__listing_parse(json, strlen(json), page_cb, out, err));
  CHECK_STR(out, "a.tar=7;s/=-1;");
  /* Links that leave the folder are never names. */
  const char *hostile = "<a href=\"../etc/passwd\">x</a><a href=\"/abs\">x</a>"
                        "<a href=\"http://evil/x.tar\">x</a><a href=\"a/%2e%2e/%2e%2e/b\">x</a>"
                        "<a href=\"ok&amp;fine.tar\">x</a><a href=\"bad%zz\">x</a>"
                        "<a href=\"nul%00.tar\">x</a><a href='q.tar?x=1'>x</a><a href=x.tar>x</a>";
  out[0] = 0;
  CHECK_OK(stk__listing_parse(hostile, strlen(hostile), page_cb, out, err));
  CHECK_STR(out, "ok&fine.tar=-1;x.tar=-1;");
  CHECK_EQ(stk__listing_parse("plain text", 10, page_cb, out, err), STK_EFORMAT);
  CHECK_EQ(stk__listing_parse("[1,2", 4, page_cb, out, err), STK_EFORMAT);
}

static void *conc_worker(void *p) {
  struct conc *c = p;
  char name[32], err[STK_ERRMSG_MAX];
  snprintf(name, sizeof name, "conc-%d", c->id);
  int fd = scratch_fd(name);
  struct stk_rng r;
  stk_rng_seed(&r, (uint64_t)c->id);
  uint8_t *got = malloc(BIG);
  for (int i = 0; i < 12; i++) {
    uint64_t off = stk_rng_below(&r, BIG), len = 1 + stk_rng_below(&r, BIG - off);
    int rc = stk__origin_get(c->o, "big.bin", off, len, fd, 0, NULL, NULL, err);
    if (rc || stk__pread_full(fd, got, len, 0) || memcmp(got, c->want + off, len)) {
      fprintf(stderr, "    thread %d get %d: rc %d %s\n", c->id, i, rc, rc ? err : "bad bytes");
      c->failures++;
    }
  }
  free(got);
  close(fd);
  return NULL;
}

static void start_faulty(char *url, size_t n, const char *faults);

/* The proxy's counter name, from GET /__proxy/stats. */
static long proxy_stat(const char *proxy, const char *name) {
  char *out, key[64];
  CHECK_EQ(test_sh(&out, "curl -sS %s/__proxy/stats", proxy), 0);
  snprintf(key, sizeof key, "\"%s\": ", name);
  const char *p = strstr(out, key);
  CHECK_MSG(p != NULL, "no %s in %s", name, out);
  long v = atol(p + strlen(key));
  free(out);
  return v;
}

TEST(origin_http_concurrent) {
  /* Through a proxy without faults, which counts client connections. */
  char proxy[256], url[300];
  start_faulty(proxy, sizeof proxy, "");
  CHECK_EQ(test_sh(NULL, "curl -sS -X POST %s/__proxy/reset", proxy), 0); /* serve's probe */
  snprintf(url, sizeof url, "%s/data/", proxy);
  struct stk_origin_opts oo = {.max_conns = 4};
  struct stk_origin *o = open_ok(url, &oo);
  uint8_t *want = make_bytes(9, BIG);
  struct conc c[8];
  pthread_t t[8];
  for (int i = 0; i < 8; i++) {
    c[i] = (struct conc){o, want, i, 0};
    pthread_create(&t[i], NULL, conc_worker, &c[i]);
  }
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(c[i].failures, 0);
  }
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.requests, 96);
  CHECK_EQ(st.errors, 0);
  stk__origin_close(o);
  free(want);
  /* 8 threads, 96 requests, at most max_conns connections: reused. */
  long conns = proxy_stat(proxy, "connections");
  CHECK_MSG(conns >= 1 && conns <= 4 + 1, "%ld connections", conns); /* +1: the stats request */
  CHECK_EQ(proxy_stat(proxy, "forwarded"), 96);
}

TEST(origin_https_nginx) {
  mkdir("www", 0755);
  test_write_file("www/obj", "secure bytes", 12);
  char *out = serve("nginx-tls", "www");
  char url[256], cert[1024], err[STK_ERRMSG_MAX];
  line_of(out, 0, url, sizeof url);
  line_of(out, 1, cert, sizeof cert);
  free(out);
  /* Without the test CA the certificate is refused, for good. */
  unsetenv("STOKER_CA_BUNDLE");
  setenv("CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt", 1);
  struct stk_origin_opts oo = {.max_attempts = 3};
  struct stk_origin *o = open_ok(url, &oo);
  struct stk_obj_info info;
  int rc = stk__origin_stat(o, "obj", &info, err);
  CHECK_MSG(rc != 0, "TLS with an unknown CA succeeded");
  CHECK_CONTAINS(err, "certificate");
  stk__origin_close(o);
  /* With it (STOKER_CA_BUNDLE comes first), it works. */
  setenv("STOKER_CA_BUNDLE", cert, 1);
  o = open_ok(url, &oo);
  char *buf;
  size_t len;
  CHECK_OK(stk__origin_get_mem(o, "obj", 100, &buf, &len, err));
  CHECK_STR(buf, "secure bytes");
  free(buf);
  stk__origin_close(o);
}

TEST(origin_http_ignored_range) {
  /* Python's http.server answers 200 with the whole file to any Range. */
  mkdir("www", 0755);
  write_obj("www/obj", 3, 100000);
  if (test_sh(NULL, "command -v python3") != 0) SKIP("python3 is not installed");
  CHECK_EQ(
      test_sh(NULL, "cd www && python3 -u -m http.server --bind 127.0.0.1 0 >../py.out 2>&1 &"), 0);
  char *out = NULL;
  int port = 0;
  for (int i = 0; i < 200 && !port; i++) {
    stk_sleep_ns(20000000);
    free(out);
    out = (char *)test_read_file("py.out", NULL);
    const char *p = strstr(out, " port ");
    if (p) port = atoi(p + 6);
  }
  free(out);
  CHECK_MSG(port > 0, "python3 -m http.server did not start");
  char url[128], err[STK_ERRMSG_MAX];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
  struct stk_origin *o = open_ok(url, NULL);
  int fd = scratch_fd("dst");
  uint8_t *want = make_bytes(3, 100000);
  CHECK_OK(stk__origin_get(o, "obj", 0, UINT64_MAX, fd, 0, NULL, NULL, err));
  check_fd_bytes(fd, 0, want, 100000);
  CHECK_OK(stk__origin_get(o, "obj", 0, 100000, fd, 0, NULL, NULL, err)); /* the whole: right */
  /* Poison the fd: a refused response must write nothing. */
  uint8_t zero[64] = {0};
  CHECK(pwrite(fd, zero, sizeof zero, 0) == sizeof zero);
  CHECK_EQ(stk__origin_get(o, "obj", 10, 64, fd, 0, NULL, NULL, err), STK_EIO);
  CHECK_CONTAINS(err, "ignored the Range header");
  check_fd_bytes(fd, 0, zero, sizeof zero);
  CHECK_EQ(stk__origin_get(o, "obj", 0, 64, fd, 0, NULL, NULL, err), STK_EIO);
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.retries, 0); /* not retryable */
  free(want);
  close(fd);
  stk__origin_close(o);
}

/* ---- through the fault proxy ----------------------------------------------- */

/* nginx behind a proxy with faults; the proxy's URL into url. */
static void start_faulty(char *url, size_t n, const char *faults) {
  char base[256], args[512];
  start_nginx(base, sizeof base, "nginx");
  snprintf(args, sizeof args, "%s %s", base, faults);
  char *out = serve("proxy", args);
  line_of(out, 0, url, n);
  free(out);
}

/* n ranged gets of big.bin through o; all bytes must be right. */
static void gets_ok(struct stk_origin *o, int n) {
  uint8_t *want = make_bytes(9, BIG);
  int fd = scratch_fd("dst");
  char err[STK_ERRMSG_MAX];
  for (int i = 0; i < n; i++) {
    uint64_t off = (uint64_t)i * 100003 % (BIG / 2), len = BIG / 2;
    int rc = stk__origin_get(o, "data/big.bin", off, len, fd, 0, NULL, NULL, err);
    CHECK_MSG(rc == 0, "get %d: %s", i, err);
    check_fd_bytes(fd, 0, want + off, len);
  }
  close(fd);
  free(want);
}

TEST(origin_http_proxy_fail_first) {
  char url[256];
  start_faulty(url, sizeof url, "--fail-first 3");
  struct stk_origin *o = open_ok(url, NULL);
  gets_ok(o, 2);
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.retries, 3);
  CHECK_EQ(st.requests, 5);
  CHECK_EQ(st.errors, 0);
  stk__origin_close(o);

  /* With fewer attempts than failures: a clear error after them. */
  start_faulty(url, sizeof url, "--fail-first 5");
  struct stk_origin_opts oo = {.max_attempts = 2};
  o = open_ok(url, &oo);
  int fd = scratch_fd("dst");
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk__origin_get(o, "data/big.bin", 0, 10, fd, 0, NULL, NULL, err), STK_EIO);
  CHECK_CONTAINS(err, "HTTP 503");
  CHECK_CONTAINS(err, "after 2 attempts");
  close(fd);
  stk__origin_close(o);
}

TEST(origin_http_proxy_429) {
  char url[256];
  start_faulty(url, sizeof url, "--p429 0.5 --seed 7");
  struct stk_origin *o = open_ok(url, NULL);
  uint64_t t0 = stk_now_ns();
  gets_ok(o, 4);
  double dt = (stk_now_ns() - t0) / 1e9;
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_MSG(st.retries >= 1, "the seed gave no 429");
  /* Retry-After: 1 was honoured: at least a second per retry (a lower
   * bound; the jittered backoff alone would be ~0.1 s). */
  CHECK_MSG(dt >= 0.95 * (double)st.retries, "%.2f s for %llu retries", dt,
            (unsigned long long)st.retries);
  stk__origin_close(o);

  /* A Retry-After beyond the retry budget ends the request at once. */
  start_faulty(url, sizeof url, "--p429 1");
  struct stk_origin_opts oo = {.retry_max_s = 0.5};
  o = open_ok(url, &oo);
  int fd = scratch_fd("dst");
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk__origin_get(o, "data/big.bin", 0, 10, fd, 0, NULL, NULL, err), STK_EIO);
  CHECK_CONTAINS(err, "too many requests (HTTP 429)");
  CHECK_CONTAINS(err, "Retry-After 1 s is beyond the retry budget");
  close(fd);
  stk__origin_close(o);
}

TEST(origin_http_proxy_truncate_reset) {
  char url[256];
  start_faulty(url, sizeof url, "--p-truncate 0.3 --p-reset 0.2 --p500 0.1 --seed 3");
  struct stk_origin *o = open_ok(url, NULL);
  gets_ok(o, 10);
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_MSG(st.retries >= 2, "only %llu retries", (unsigned long long)st.retries);
  CHECK_EQ(st.errors, 0);
  CHECK(st.bytes >= 10ull * BIG / 2);
  stk__origin_close(o);
}

/* ---- S3 ------------------------------------------------------------------- */

/* Temporary credentials of an S3 test server (an assumed role's). */
struct s3_session {
  char key[128], secret[128], token[1024];
};

/* An S3 server holding dir "src" in bucket "bkt"; endpoint into ep, an IAM
 * user's key and secret, and, if sess, temporary credentials. */
static void start_s3(char *ep, size_t n, char *key, char *secret, struct s3_session *sess) {
  mkdir("src", 0755);
  mkdir("src/ds", 0755);
  mkdir("src/ds/sub", 0755);
  write_obj("src/ds/shard-0.bin", 11, 3u << 20);
  write_obj("src/ds/shard-1.bin", 12, 1000);
  write_obj("src/ds/sub/odd &name+(1).bin", 13, 77);
  write_obj("src/other.bin", 14, 5);
  char *out = serve("s3", "src bkt");
  char creds[256], temp[1400];
  line_of(out, 0, ep, n);
  line_of(out, 1, creds, sizeof creds);
  line_of(out, 2, temp, sizeof temp);
  free(out);
  CHECK(sscanf(creds, "%127s %127s", key, secret) == 2);
  if (sess) CHECK(sscanf(temp, "%127s %127s %1023s", sess->key, sess->secret, sess->token) == 3);
  unsetenv("AWS_PROFILE");
  unsetenv("AWS_SESSION_TOKEN");
  setenv("AWS_SHARED_CREDENTIALS_FILE", "no-such-file", 1);
  setenv("AWS_CONFIG_FILE", "no-such-file", 1);
}

TEST(origin_s3_get_stat_list) {
  char ep[256], key[128], secret[128], err[STK_ERRMSG_MAX];
  struct s3_session sess;
  start_s3(ep, sizeof ep, key, secret, &sess);
  setenv("AWS_ACCESS_KEY_ID", key, 1);
  setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
  setenv("AWS_ENDPOINT_URL", ep, 1);
  struct stk_origin *o = open_ok("s3://bkt/ds/", NULL);
  CHECK_STR(stk__origin_url(o), "s3://bkt/ds/");

  struct list_rec l = {0};
  CHECK_OK(stk__origin_list(o, list_cb, &l, err));
  CHECK_EQ(l.n, 3);
  CHECK_STR(l.names[0], "shard-0.bin");
  CHECK_STR(l.names[1], "shard-1.bin");
  CHECK_STR(l.names[2], "sub/odd &name+(1).bin");
  CHECK_EQ(l.info[0].size, 3u << 20);
  CHECK_EQ(l.info[2].size, 77);

  struct stk_obj_info info;
  CHECK_OK(stk__origin_stat(o, "shard-0.bin", &info, err));
  CHECK_EQ(info.size, 3u << 20);
  CHECK_STR(info.etag, l.info[0].etag);
  CHECK_OK(stk__origin_stat(o, "sub/odd &name+(1).bin", &info, err));
  CHECK_EQ(info.size, 77);

  uint8_t *want = make_bytes(11, 3u << 20);
  int fd = scratch_fd("dst");
  CHECK_OK(stk__origin_get(o, "shard-0.bin", 0, UINT64_MAX, fd, 0, &info, NULL, err));
  check_fd_bytes(fd, 0, want, 3u << 20);
  CHECK_OK(stk__origin_get(o, "shard-0.bin", 99999, 1u << 20, fd, 3, &info, NULL, err));
  check_fd_bytes(fd, 3, want + 99999, 1u << 20);
  CHECK_EQ(info.size, 3u << 20);
  free(want);
  want = make_bytes(13, 77);
  CHECK_OK(stk__origin_get(o, "sub/odd &name+(1).bin", 0, UINT64_MAX, fd, 0, NULL, NULL, err));
  check_fd_bytes(fd, 0, want, 77);
  free(want);

  CHECK_EQ(stk__origin_get(o, "missing.bin", 0, UINT64_MAX, fd, 0, NULL, NULL, err), STK_ENOENT);
  CHECK_CONTAINS(err, "s3://bkt/ds/missing.bin: not found (HTTP 404 NoSuchKey");
  CHECK_EQ(stk__origin_stat(o, "missing.bin", &info, err), STK_ENOENT);
  stk__origin_close(o);

  /* The whole bucket, with temporary credentials: their session token is
   * sent and signed (a wrong one is refused, with S3's 400 InvalidToken). */
  setenv("AWS_ACCESS_KEY_ID", sess.key, 1);
  setenv("AWS_SECRET_ACCESS_KEY", sess.secret, 1);
  setenv("AWS_SESSION_TOKEN", "token-abc", 1);
  o = open_ok("s3://bkt", NULL);
  CHECK(stk__origin_stat(o, "other.bin", &info, err) != 0);
  CHECK(stk__origin_get(o, "other.bin", 0, UINT64_MAX, fd, 0, NULL, NULL, err) != 0);
  CHECK_CONTAINS(err, "InvalidToken");
  CHECK(strstr(err, "token-abc") == NULL);
  stk__origin_close(o);
  setenv("AWS_SESSION_TOKEN", sess.token, 1);
  o = open_ok("s3://bkt", NULL);
  l.n = 0;
  CHECK_OK(stk__origin_list(o, list_cb, &l, err));
  CHECK_EQ(l.n, 4);
  CHECK_STR(l.names[0], "ds/shard-0.bin");
  CHECK_STR(l.names[3], "other.bin");
  char *buf;
  size_t len;
  CHECK_OK(stk__origin_get_mem(o, "ds/shard-1.bin", 4096, &buf, &len, err));
  CHECK_EQ(len, 1000);
  free(buf);
  stk__origin_close(o);
  close(fd);
}

TEST(origin_s3_credentials_file) {
  char ep[256], key[128], secret[128], err[STK_ERRMSG_MAX];
  start_s3(ep, sizeof ep, key, secret, NULL);
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_ENDPOINT_URL");
  setenv("AWS_ENDPOINT_URL_S3", ep, 1);
  FILE *f = fopen("creds", "w");
  fprintf(f,
          "# test\n[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n\n"
          "[ci]\n  aws_access_key_id=%s\naws_secret_access_key = %s  \n",
          key, secret);
  fclose(f);
  f = fopen("config", "w");
  fprintf(f, "[profile ci]\nregion = us-east-1\n");
  fclose(f);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "creds", 1);
  setenv("AWS_CONFIG_FILE", "config", 1);
  struct stk_origin_opts oo = {.s3_profile = "ci"};
  struct stk_origin *o = open_ok("s3://bkt/ds", &oo);
  struct stk_obj_info info;
  CHECK_OK(stk__origin_stat(o, "shard-1.bin", &info, err));
  CHECK_EQ(info.size, 1000);
  stk__origin_close(o);
  /* AWS_PROFILE names it too. */
  setenv("AWS_PROFILE", "ci", 1);
  o = open_ok("s3://bkt/ds", NULL);
  CHECK_OK(stk__origin_stat(o, "shard-1.bin", &info, err));
  stk__origin_close(o);
  /* The default profile's unknown key: refused. */
  unsetenv("AWS_PROFILE");
  o = open_ok("s3://bkt/ds", NULL);
  int fd = scratch_fd("dst");
  CHECK_EQ(stk__origin_get(o, "shard-1.bin", 0, 10, fd, 0, NULL, NULL, err), STK_EACCES);
  CHECK_CONTAINS(err, "InvalidAccessKeyId");
  stk__origin_close(o);
  /* No credentials at all: anonymous requests, which this bucket refuses. */
  setenv("AWS_SHARED_CREDENTIALS_FILE", "none", 1);
  o = open_ok("s3://bkt/ds", NULL);
  CHECK_EQ(stk__origin_get(o, "shard-1.bin", 0, 10, fd, 0, NULL, NULL, err), STK_EACCES);
  CHECK_CONTAINS(err, "AccessDenied");
  stk__origin_close(o);
  close(fd);
}

TEST(origin_s3_wrong_secret) {
  char ep[256], key[128], secret[128], err[STK_ERRMSG_MAX];
  struct s3_session sess;
  start_s3(ep, sizeof ep, key, secret, &sess);
  /* Temporary credentials with the right token and a wrong secret: the
   * token is valid, so the signature is what S3 refuses. */
  const char *bad = "WrongSecretKeyZZ9", *token = sess.token;
  setenv("AWS_ACCESS_KEY_ID", sess.key, 1);
  setenv("AWS_SECRET_ACCESS_KEY", bad, 1);
  setenv("AWS_SESSION_TOKEN", token, 1);
  struct stk_origin_opts oo = {.s3_endpoint = ep, .s3_region = "us-east-1", .s3_addressing = 1};
  struct stk_origin *o = open_ok("s3://bkt/ds", &oo);
  int fd = scratch_fd("dst");
  CHECK_EQ(stk__origin_get(o, "shard-1.bin", 0, UINT64_MAX, fd, 0, NULL, NULL, err), STK_EACCES);
  CHECK_CONTAINS(err, "s3://bkt/ds/shard-1.bin: access denied (HTTP 403 SignatureDoesNotMatch");
  CHECK(strstr(err, bad) == NULL);
  CHECK(strstr(err, token) == NULL);
  struct list_rec l;
  CHECK_EQ(stk__origin_list(o, list_cb, &l, err), STK_EACCES);
  CHECK_CONTAINS(err, "SignatureDoesNotMatch");
  CHECK(strstr(err, bad) == NULL && strstr(err, token) == NULL);
  /* stat and get_mem start with a HEAD, whose refusal has no body: the
   * reason is asked for with a GET. */
  CHECK_EQ(stk__origin_stat(o, "shard-1.bin", NULL, err), STK_EACCES);
  CHECK_CONTAINS(err, "SignatureDoesNotMatch");
  CHECK(strstr(err, bad) == NULL && strstr(err, token) == NULL);
  char *buf;
  size_t len;
  CHECK_EQ(stk__origin_get_mem(o, "shard-1.bin", 4096, &buf, &len, err), STK_EACCES);
  CHECK_CONTAINS(err, "s3://bkt/ds/shard-1.bin: access denied (HTTP 403 SignatureDoesNotMatch");
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.retries, 0); /* 403 is final */
  close(fd);
  stk__origin_close(o);
}
