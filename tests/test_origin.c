/* Origin tests: URL redaction and parsing, S3 key encoding and listing
 * XML, the file origin (get, stat, list, cancel), the HTTP engine's retry
 * budget and cancellation against sockets made here, and, through
 * tests/tools/serve, real servers: nginx (ranged gets, stat, 404, TLS), the
 * fault proxy (503s, 429 with Retry-After, truncated bodies, resets) and an
 * S3 server that verifies SigV4 (moto: get, stat, list, a wrong secret, a
 * session token). Tests
 * named *concurrent* also run under ThreadSanitizer. */
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

/* ---- helpers ---------------------------------------------------------- */

/* Deterministic bytes of a test object: byte i of stream seed. */
static uint8_t *make_bytes(uint64_t seed, size_t n) {
  uint8_t *b = malloc(n ? n : 1);
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  stk_rng_fill(&r, b, n);
  return b;
}

static void write_obj(const char *path, uint64_t seed, size_t n) {
  uint8_t *b = make_bytes(seed, n);
  test_write_file(path, b, n);
  free(b);
}

/* A file of n bytes to receive a get. */
static int scratch_fd(const char *name) {
  int fd = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(fd >= 0);
  return fd;
}

/* Check that fd holds want[0..n) at fd_off. */
static void check_fd_bytes(int fd, uint64_t fd_off, const uint8_t *want, size_t n) {
  uint8_t *got = malloc(n ? n : 1);
  CHECK_OK(stk__pread_full(fd, got, n, fd_off));
  CHECK_MSG(memcmp(got, want, n) == 0, "fetched bytes differ");
  free(got);
}

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

static struct stk_origin *open_ok(const char *url, const struct stk_origin_opts *o) {
  struct stk_origin *org = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk__origin_open(&org, url, o, err);
  CHECK_MSG(rc == 0, "open %s: %s", url, err);
  return org;
}

/* A TCP port on 127.0.0.1 where nothing listens (bound, then closed). */
static int dead_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(getsockname(s, (struct sockaddr *)&a, &len) == 0);
  close(s);
  return ntohs(a.sin_port);
}

/* A socket that listens but never accepts: connects succeed (the backlog),
 * requests are never answered. */
static int mute_listener(int *port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(listen(s, 16) == 0);
  CHECK(getsockname(s, (struct sockaddr *)&a, &len) == 0);
  *port = ntohs(a.sin_port);
  return s;
}

struct list_rec {
  char names[64][128];
  struct stk_obj_info info[64];
  int n;
};

static int list_cb(void *arg, const char *name, const struct stk_obj_info *info) {
  struct list_rec *l = arg;
  CHECK(l->n < 64);
  snprintf(l->names[l->n], sizeof l->names[0], "%s", name);
  l->info[l->n++] = *info;
  return 0;
}

/* ---- pure functions --------------------------------------------------- */

TEST(origin_url_redact) {
  static const char *cases[][2] = {
      {"http://host/a/b.tfrecord", "http://host/a/b.tfrecord"},
      {"https://user:pa55@host:8443/x", "https://***@host:8443/x"},
      {"https://user@host/x", "https://***@host/x"},
      {"https://a:b@c@host/x?y=1", "https://***@host/x?***"},
      {"https://bucket.s3.amazonaws.com/k?X-Amz-Signature=abc&X-Amz-Credential=K",
       "https://bucket.s3.amazonaws.com/k?***"},
      {"http://host/x@y", "http://host/x@y"}, /* '@' in the path is no credential */
      {"s3://bucket/prefix", "s3://bucket/prefix"},
      {"/data/plain/path", "/data/plain/path"},
      {"file:///data/x?q", "file:///data/x?***"},
  };
  char out[256];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stk__url_redact(cases[i][0], out, sizeof out);
    CHECK_STR(out, cases[i][1]);
  }
  /* Truncation stays NUL-terminated and never shows a secret's tail. */
  stk__url_redact("http://user:secret@h/abcdef", out, 10);
  CHECK_STR(out, "http://**");
  CHECK_EQ(stk__origin_is_url("s3://b"), 1);
  CHECK_EQ(stk__origin_is_url("HTTPS://h/x"), 1);
  CHECK_EQ(stk__origin_is_url("/abs/path"), 0);
  CHECK_EQ(stk__origin_is_url("rel/dir:x"), 0);
  CHECK_EQ(stk__origin_is_url("1http://x"), 0);
}

TEST(origin_open_errors) {
  struct stk_origin *o = NULL;
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk__origin_open(&o, "gopher://h/x", NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "unknown URL scheme 'gopher'");
  CHECK_EQ(stk__origin_open(&o, "ftp://u:pw@h/x", NULL, err), STK_EINVAL);
  CHECK(strstr(err, "pw") == NULL);
  CHECK_EQ(stk__origin_open(&o, "no/such/dir", NULL, err), STK_ENOENT);
  CHECK_CONTAINS(err, "no/such/dir");
  test_write_file("plain", "x", 1);
  CHECK_EQ(stk__origin_open(&o, "plain", NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "not a directory");
  CHECK_EQ(stk__origin_open(&o, "file://host/x", NULL, err), STK_EINVAL);
  CHECK_EQ(stk__origin_open(&o, "http://", NULL, err), STK_EINVAL);
  CHECK_EQ(stk__origin_open(&o, "http:///path", NULL, err), STK_EINVAL);
  CHECK_EQ(stk__origin_open(&o, "s3://", NULL, err), STK_EINVAL);
  CHECK_EQ(stk__origin_open(&o, "s3://bad bucket/x", NULL, err), STK_EINVAL);
  struct stk_origin_opts oo = {.s3_endpoint = "ftp://x"};
  CHECK_EQ(stk__origin_open(&o, "s3://b/p", &oo, err), STK_EINVAL);
  CHECK_CONTAINS(err, "not an http(s) URL");
  CHECK(o == NULL);
  /* An unknown profile asked for by name is an error, not anonymous. */
  setenv("AWS_SHARED_CREDENTIALS_FILE", "none", 1);
  setenv("AWS_CONFIG_FILE", "none", 1);
  oo = (struct stk_origin_opts){.s3_profile = "nosuch"};
  CHECK_EQ(stk__origin_open(&o, "s3://b/p", &oo, err), STK_EINVAL);
  CHECK_CONTAINS(err, "profile 'nosuch'");
  /* Remote origins do not connect when opened. */
  o = open_ok("http://127.0.0.1:1/data", NULL);
  CHECK_STR(stk__origin_url(o), "http://127.0.0.1:1/data");
  stk__origin_close(o);
  o = open_ok("https://u:p@h/data/?sig=1", NULL);
  CHECK_STR(stk__origin_url(o), "https://***@h/data/?***");
  stk__origin_close(o);
}

TEST(origin_s3_key_encoding) {
  char out[256];
  CHECK_EQ(stk__url_encode("a/b c+d%e~f_g.h-i", out, sizeof out, 1),
           strlen("a/b%20c%2Bd%25e~f_g.h-i"));
  CHECK_STR(out, "a/b%20c%2Bd%25e~f_g.h-i");
  stk__url_encode("a/b=c&d", out, sizeof out, 0);
  CHECK_STR(out, "a%2Fb%3Dc%26d");
  stk__url_encode("\xc3\xa9t\xc3\xa9/*", out, sizeof out, 1); /* UTF-8 "été", then slash, star */
  CHECK_STR(out, "%C3%A9t%C3%A9/%2A");
  /* Truncation never leaves half an escape. */
  CHECK_EQ(stk__url_encode("ab cd", out, 5, 1), 7);
  CHECK_STR(out, "ab");
}

struct keys {
  char k[8][64];
  uint64_t size[8];
  char etag[8][STK_ETAG_MAX];
  int n, stop_at;
};

static int keys_cb(void *arg, const char *key, const struct stk_obj_info *info) {
  struct keys *k = arg;
  if (k->n == k->stop_at) return 42;
  CHECK(k->n < 8);
  snprintf(k->k[k->n], sizeof k->k[0], "%s", key);
  k->size[k->n] = info->size;
  snprintf(k->etag[k->n], sizeof k->etag[0], "%s", info->etag);
  k->n++;
  return 0;
}

TEST(origin_s3_list_xml) {
  const char *page =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><Prefix>d/</Prefix><KeyCount>3</KeyCount><MaxKeys>3</MaxKeys>"
      "<IsTruncated>true</IsTruncated>"
      "<Contents><Key>d/a&amp;b &lt;1&gt;.bin</Key><LastModified>x</LastModified>"
      "<ETag>&quot;0123abc&quot;</ETag><Size>1048576</Size></Contents>"
      "<Contents><Key>d/caf&#233;&#x2F;&apos;q&apos;</Key><Size>0</Size>"
      "<ETag>\"e-2\"</ETag></Contents>"
      "<Contents><Key>d/big</Key><Size>18446744073709551615</Size></Contents>"
      "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=&amp;</"
      "NextContinuationToken>"
      "</ListBucketResult>";
  struct keys k = {.stop_at = -1};
  int truncated;
  char *token, err[STK_ERRMSG_MAX];
  CHECK_OK(stk__s3_parse_list(page, strlen(page), keys_cb, &k, &truncated, &token, err));
  CHECK_EQ(k.n, 3);
  CHECK_STR(k.k[0], "d/a&b <1>.bin");
  CHECK_EQ(k.size[0], 1048576);
  CHECK_STR(k.etag[0], "0123abc");
  CHECK_STR(k.k[1], "d/caf\xc3\xa9/'q'");
  CHECK_STR(k.etag[1], "e-2");
  CHECK(k.size[2] == UINT64_MAX);
  CHECK_STR(k.etag[2], "");
  CHECK_EQ(truncated, 1);
  CHECK_STR(token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=&");
  free(token);

  /* The callback's nonzero return stops the walk and comes back. */
  k = (struct keys){.stop_at = 1};
  CHECK_EQ(stk__s3_parse_list(page, strlen(page), keys_cb, &k, &truncated, &token, err), 42);
  CHECK_EQ(k.n, 1);

  const char *last = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
  k = (struct keys){.stop_at = -1};
  CHECK_OK(stk__s3_parse_list(last, strlen(last), keys_cb, &k, &truncated, &token, err));
  CHECK_EQ(k.n, 0);
  CHECK_EQ(truncated, 0);
  CHECK(token == NULL);

  static const char *bad[] = {
      "<Error><Code>AccessDenied</Code></Error>",
      "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>a&#0;</Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>a&amp</Key><Size>1</Size></Contents></ListBucketResult>",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    k = (struct keys){.stop_at = -1};
    CHECK_EQ(stk__s3_parse_list(bad[i], strlen(bad[i]), keys_cb, &k, &truncated, &token, err),
             STK_EFORMAT);
  }
}

/* ---- the file origin -------------------------------------------------- */

TEST(origin_file_get_stat_list) {
  mkdir("root", 0755);
  mkdir("root/sub", 0755);
  mkdir("root/sub/deeper", 0755);
  mkdir("root/.hidden", 0755);
  write_obj("root/b.bin", 1, 3 << 20);
  write_obj("root/a.bin", 2, 1000);
  write_obj("root/sub/c.bin", 3, 10);
  write_obj("root/sub/deeper/d.bin", 4, 0);
  write_obj("root/.dot", 5, 10);
  write_obj("root/partial.tmp", 6, 10);
  write_obj("root/.hidden/e.bin", 7, 10);
  CHECK(symlink("a.bin", "root/link.bin") == 0);
  CHECK(symlink("sub", "root/dirlink") == 0); /* not followed: no cycles */
  CHECK(symlink("nowhere", "root/dangling") == 0);

  char cwd[1024], url[1200];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(url, sizeof url, "file://%s/root", cwd);
  struct stk_origin *o = open_ok(url, NULL);
  char err[STK_ERRMSG_MAX];

  struct list_rec l = {0};
  CHECK_OK(stk__origin_list(o, list_cb, &l, err));
  CHECK_EQ(l.n, 5);
  CHECK_STR(l.names[0], "a.bin");
  CHECK_STR(l.names[1], "b.bin");
  CHECK_STR(l.names[2], "link.bin");
  CHECK_STR(l.names[3], "sub/c.bin");
  CHECK_STR(l.names[4], "sub/deeper/d.bin");
  CHECK_EQ(l.info[1].size, 3 << 20);
  CHECK_EQ(l.info[2].size, 1000);

  struct stk_obj_info info, info2;
  CHECK_OK(stk__origin_stat(o, "b.bin", &info, err));
  CHECK_EQ(info.size, 3 << 20);
  CHECK(info.etag[0] != 0);
  CHECK_STR(info.etag, l.info[1].etag);
  CHECK_EQ(stk__origin_stat(o, "nope.bin", &info, err), STK_ENOENT);
  CHECK_CONTAINS(err, "nope.bin");
  CHECK_EQ(stk__origin_stat(o, "sub", &info, err), STK_EIO);
  CHECK_EQ(stk__origin_stat(o, "../root/a.bin", &info, err), STK_EINVAL);
  CHECK_EQ(stk__origin_stat(o, "/etc/passwd", &info, err), STK_EINVAL);

  /* Whole object and a range, into a regular file (copy_file_range) at an
   * offset, and into a memfd (another file system: the pread/pwrite way). */
  uint8_t *want = make_bytes(1, 3 << 20);
  int fd = scratch_fd("dst");
  CHECK_OK(stk__origin_get(o, "b.bin", 0, UINT64_MAX, fd, 100, &info2, NULL, err));
  CHECK_EQ(info2.size, 3 << 20);
  CHECK_STR(info2.etag, info.etag);
  check_fd_bytes(fd, 100, want, 3 << 20);
  CHECK_OK(stk__origin_get(o, "b.bin", 12345, 1 << 20, fd, 0, NULL, NULL, err));
  check_fd_bytes(fd, 0, want + 12345, 1 << 20);
  close(fd);
  int mfd = memfd_create("t", 0);
  CHECK_OK(stk__origin_get(o, "b.bin", 7, (2 << 20) + 3, mfd, 5, NULL, NULL, err));
  check_fd_bytes(mfd, 5, want + 7, (2 << 20) + 3);
  close(mfd);
  free(want);

  /* Ranges past the end, names that do not exist. */
  fd = scratch_fd("dst2");
  CHECK_EQ(stk__origin_get(o, "a.bin", 900, 101, fd, 0, NULL, NULL, err), STK_ERANGE);
  CHECK_CONTAINS(err, "1000 bytes");
  CHECK_EQ(stk__origin_get(o, "a.bin", 1001, UINT64_MAX, fd, 0, NULL, NULL, err), STK_ERANGE);
  CHECK_EQ(stk__origin_get(o, "gone.bin", 0, UINT64_MAX, fd, 0, NULL, NULL, err), STK_ENOENT);
  CHECK_OK(stk__origin_get(o, "a.bin", 1000, UINT64_MAX, fd, 0, NULL, NULL, err)); /* empty */
  CHECK_OK(stk__origin_get(o, "sub/deeper/d.bin", 0, UINT64_MAX, fd, 0, &info, NULL, err));
  CHECK_EQ(info.size, 0);
  close(fd);

  /* A small object into memory. */
  char *buf;
  size_t len;
  CHECK_OK(stk__origin_get_mem(o, "sub/c.bin", 100, &buf, &len, err));
  CHECK_EQ(len, 10);
  uint8_t *c = make_bytes(3, 10);
  CHECK(memcmp(buf, c, 10) == 0 && buf[10] == 0);
  free(c);
  free(buf);
  CHECK_EQ(stk__origin_get_mem(o, "b.bin", 100, &buf, &len, err), STK_ERANGE);
  CHECK(buf == NULL);
  CHECK_OK(stk__origin_get_mem(o, "sub/deeper/d.bin", 100, &buf, &len, err));
  CHECK_EQ(len, 0);
  free(buf);

  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK(st.requests >= 10);
  CHECK(st.bytes >= (3 << 20) + (1 << 20) + (2 << 20));
  CHECK_EQ(st.retries, 0);
  stk__origin_close(o);

  /* A plain relative path works too, and a chdir after opening changes nothing. */
  o = open_ok("root", NULL);
  CHECK_STR(stk__origin_url(o), "root");
  CHECK(chdir("root/sub") == 0);
  CHECK_OK(stk__origin_stat(o, "a.bin", &info, err));
  stk__origin_close(o);
}

struct cancel_arg {
  int *flag;
  uint64_t after_ns;
};

static void *cancel_later(void *p) {
  struct cancel_arg *a = p;
  stk_sleep_ns(a->after_ns);
  __atomic_store_n(a->flag, 1, __ATOMIC_RELEASE);
  return NULL;
}

TEST(origin_file_cancel) {
  mkdir("root", 0755);
  write_obj("root/x", 1, 1 << 20);
  struct stk_origin *o = open_ok("root", NULL);
  char err[STK_ERRMSG_MAX];
  int cancel = 1, fd = scratch_fd("dst");
  CHECK_EQ(stk__origin_get(o, "x", 0, UINT64_MAX, fd, 0, NULL, &cancel, err), STK_ECANCELED);
  /* Mid-copy: a 2 GiB sparse file into /dev/null (not a regular file: the
   * pread/pwrite way, 1 MiB at a time), canceled after 20 ms. */
  int big = open("root/big", O_RDWR | O_CREAT, 0644);
  CHECK(big >= 0 && ftruncate(big, 2ll << 30) == 0);
  close(big);
  int mfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  cancel = 0;
  struct cancel_arg a = {&cancel, 20000000};
  pthread_t t;
  pthread_create(&t, NULL, cancel_later, &a);
  uint64_t t0 = stk_now_ns();
  int rc = stk__origin_get(o, "big", 0, UINT64_MAX, mfd, 0, NULL, &cancel, err);
  uint64_t dt = stk_now_ns() - t0;
  pthread_join(t, NULL);
  /* A machine fast enough to copy 2 GiB in 20 ms may finish first. */
  CHECK_MSG(rc == STK_ECANCELED || (rc == 0 && dt < 20000000), "rc %d after %.3f s", rc, dt / 1e9);
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.errors, 0); /* a cancel is no error */
  close(mfd);
  close(fd);
  stk__origin_close(o);
}

/* ---- the HTTP engine without a server ---------------------------------- */

TEST(origin_http_dead_port) {
  char url[128], err[STK_ERRMSG_MAX];
  int port = dead_port();
  snprintf(url, sizeof url, "http://127.0.0.1:%d/data", port);
  struct stk_origin_opts oo = {.max_attempts = 3, .retry_max_s = 30};
  struct stk_origin *o = open_ok(url, &oo);
  int fd = scratch_fd("dst");
  int rc = stk__origin_get(o, "x.tfrecord", 0, UINT64_MAX, fd, 0, NULL, NULL, err);
  CHECK_EQ(rc, STK_ENET);
  char want[160];
  snprintf(want, sizeof want, "http://127.0.0.1:%d/data/x.tfrecord: cannot connect: ", port);
  CHECK_CONTAINS(err, want);
  CHECK_CONTAINS(err, "Connection refused");
  CHECK_CONTAINS(err, "(after 3 attempts over ");
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.requests, 3);
  CHECK_EQ(st.retries, 2);
  CHECK_EQ(st.errors, 1);
  CHECK_EQ(st.bytes, 0);
  CHECK_EQ(stk__origin_stat(o, "y", NULL, err), STK_ENET);
  struct list_rec l;
  CHECK_EQ(stk__origin_list(o, list_cb, &l, err), STK_ENET); /* its listing page is unreachable */
  CHECK_CONTAINS(err, "cannot connect");
  close(fd);
  stk__origin_close(o);
}

TEST(origin_http_retry_budget) {
  /* Many attempts allowed, but only 0.6 s: the time budget ends it. */
  char url[128], err[STK_ERRMSG_MAX];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", dead_port());
  struct stk_origin_opts oo = {.max_attempts = 1000, .retry_max_s = 0.6};
  struct stk_origin *o = open_ok(url, &oo);
  int fd = scratch_fd("dst");
  uint64_t t0 = stk_now_ns();
  CHECK_EQ(stk__origin_get(o, "x", 0, 10, fd, 0, NULL, NULL, err), STK_ENET);
  double dt = (stk_now_ns() - t0) / 1e9;
  CHECK_MSG(dt >= 0.6 && dt < 10, "gave up after %.2f s", dt);
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK(st.requests >= 3 && st.requests < 1000); /* backoff, not a busy loop */
  close(fd);
  stk__origin_close(o);
}

TEST(origin_http_cancel_and_stall) {
  int port;
  int ls = mute_listener(&port);
  char url[128], err[STK_ERRMSG_MAX];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
  struct stk_origin_opts oo = {.max_attempts = 1, .stall_timeout_s = 1};
  struct stk_origin *o = open_ok(url, &oo);
  int fd = scratch_fd("dst");
  /* No answer: the stall timeout ends it. */
  CHECK_EQ(stk__origin_get(o, "x", 0, UINT64_MAX, fd, 0, NULL, NULL, err), STK_ETIMEDOUT);
  CHECK_CONTAINS(err, "timed out");
  stk__origin_close(o);

  /* A long stall timeout, and a cancel after 150 ms ends it promptly. */
  oo.stall_timeout_s = 60;
  o = open_ok(url, &oo);
  int cancel = 0;
  struct cancel_arg a = {&cancel, 150000000};
  pthread_t t;
  pthread_create(&t, NULL, cancel_later, &a);
  uint64_t t0 = stk_now_ns();
  CHECK_EQ(stk__origin_get(o, "x", 0, UINT64_MAX, fd, 0, NULL, &cancel, err), STK_ECANCELED);
  double dt = (stk_now_ns() - t0) / 1e9;
  pthread_join(t, NULL);
  CHECK_MSG(dt < 5, "cancel took %.2f s", dt);
  stk__origin_close(o);

  /* Canceled while backing off between attempts. */
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", dead_port());
  oo = (struct stk_origin_opts){.max_attempts = 1000, .retry_max_s = 600};
  o = open_ok(url, &oo);
  cancel = 0;
  a.after_ns = 300000000;
  pthread_create(&t, NULL, cancel_later, &a);
  CHECK_EQ(stk__origin_get(o, "x", 0, UINT64_MAX, fd, 0, NULL, &cancel, err), STK_ECANCELED);
  pthread_join(t, NULL);
  struct stk_origin_stats st;
  stk__origin_stats(o, &st);
  CHECK_EQ(st.errors, 0);
  stk__origin_close(o);
  close(fd);
  close(ls);
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
