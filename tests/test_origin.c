/* Origin tests without a server: URL redaction and parsing, S3 key
 * encoding and listing XML, the file origin (get, stat, list, cancel), and
 * the HTTP engine's retry budget and cancellation against sockets made
 * here. The tests against real servers are in test_origin_serve.c. */
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

/* ---- helpers ---------------------------------------------------------- */

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

