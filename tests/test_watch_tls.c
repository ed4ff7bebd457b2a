/* The agent's endpoint with TLS and basic auth (issue 21, §4), configured
 * by Prometheus exporter-toolkit's web configuration file: a self-signed
 * certificate made here with openssl, a bcrypt hash made here with
 * libcrypt, scraped with curl. */
#include <crypt.h>

#include "test_watch.h"

static struct stk_watch *tls_agent(const char *cfg, int *port, char *err, int *rc) {
  write_str("sc.txt", "gpu 0\nat 0 gpu 0 util 75\n");
  struct stk_watch_opts o = {.web_config_file = cfg};
  struct stk_watch *w = agent("sc.txt", &o);
  CHECK_OK(stk_watch_sample(w));
  *rc = stk_watch_serve(w, "127.0.0.1:0", port, err);
  return w;
}

/* curl's HTTP status for a scrape (000 when no HTTP answer came). */
static int curl_status(const char *args, int port, const char *scheme) {
  char *out = NULL;
  test_sh(&out, "curl -s -o body.txt -w '%%{http_code}' --max-time 10 %s %s://127.0.0.1:%d/metrics",
          args, scheme, port);
  int code = out ? atoi(out) : -1;
  free(out);
  return code;
}

static void bcrypt_hash(const char *pass, char *out, size_t n) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  CHECK(crypt_gensalt_rn("$2b$", 5, NULL, 0, salt, sizeof salt) != NULL);
  struct crypt_data cd;
  memset(&cd, 0, sizeof cd);
  const char *h = crypt_r(pass, salt, &cd);
  CHECK(h != NULL && h[0] == '$');
  snprintf(out, n, "%s", h);
}

TEST(watch_tls_and_basic_auth) {
  char *out = NULL;
  if (test_sh(&out, "command -v openssl && command -v curl") != 0) {
    free(out);
    SKIP("openssl or curl is not installed");
  }
  free(out);
  mkdir("cfg", 0755);
  CHECK(test_sh(&out, "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                      "-keyout cfg/k.pem -out cfg/c.pem -days 2 -subj /CN=localhost "
                      "-addext subjectAltName=IP:127.0.0.1 2>&1") == 0);
  free(out);
  char hash[128], yml[512];
  bcrypt_hash("s3cret", hash, sizeof hash);
  /* Paths relative to the file's directory, as exporter-toolkit reads them. */
  snprintf(yml, sizeof yml,
           "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n"
           "basic_auth_users:\n  prometheus: '%s'\n", hash);
  write_str("cfg/web.yml", yml);
  int port, rc;
  char err[STK_ERRMSG_MAX];
  struct stk_watch *w = tls_agent("cfg/web.yml", &port, err, &rc);
  CHECK_MSG(rc == 0, "serve: %s", err);
  CHECK_EQ(curl_status("--cacert cfg/c.pem -u prometheus:s3cret", port, "https"), 200);
  size_t n;
  char *body = (char *)test_read_file("body.txt", &n);
  CHECK(body != NULL);
  CHECK_CONTAINS(body, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"");
  free(body);
  /* Again: the remembered password, same answer. */
  CHECK_EQ(curl_status("--cacert cfg/c.pem -u prometheus:s3cret", port, "https"), 200);
  CHECK_EQ(curl_status("--cacert cfg/c.pem -u prometheus:wrong", port, "https"), 401);
  CHECK_EQ(curl_status("--cacert cfg/c.pem -u nobody:s3cret", port, "https"), 401);
  CHECK_EQ(curl_status("--cacert cfg/c.pem", port, "https"), 401);
  CHECK(test_sh(&out, "curl -s -D - -o /dev/null --cacert cfg/c.pem https://127.0.0.1:%d/", port) == 0);
  CHECK_CONTAINS(out, "WWW-Authenticate: Basic realm=\"stoker watch\"");
  free(out);
  /* The certificate is checked by the client: without the CA, refused;
   * plain HTTP gets no page. */
  CHECK_EQ(curl_status("-u prometheus:s3cret", port, "https"), 0);
  CHECK(curl_status("-u prometheus:s3cret", port, "http") != 200);
  stk_watch_close(w);

  /* Basic auth alone, over plain HTTP. */
  snprintf(yml, sizeof yml, "basic_auth_users:\n  prometheus: %s\n", hash);
  write_str("auth.yml", yml);
  w = tls_agent("auth.yml", &port, err, &rc);
  CHECK_MSG(rc == 0, "serve: %s", err);
  CHECK_EQ(curl_status("-u prometheus:s3cret", port, "http"), 200);
  CHECK_EQ(curl_status("", port, "http"), 401);
  stk_watch_close(w);
}

TEST(watch_web_config_errors) {
  static const struct {
    const char *yml, *want;
  } cases[] = {
      {"tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_ca_file: ca.pem\n",
       "tls_server_config.client_ca_file is not supported"},
      {"tls_server_config:\n  cert_file: c.pem\n", "needs cert_file and key_file"},
      {"tls_server_config:\n  cert_file: none.pem\n  key_file: none.pem\n", "none.pem: cannot open"},
      {"basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice: not a bcrypt hash"},
      {"http_server_config:\n  http2: false\n", "http_server_config is not supported"},
      {"basic_auth_users: [a, b]\n", "basic_auth_users: expected a mapping"},
      {"tls_server_config: {cert_file: [\n", "web.yml:"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_str("web.yml", cases[i].yml);
    int port, rc;
    char err[STK_ERRMSG_MAX];
    struct stk_watch *w = tls_agent("web.yml", &port, err, &rc);
    CHECK_MSG(rc != 0, "case %zu served", i);
    CHECK_CONTAINS(err, cases[i].want);
    stk_watch_close(w);
  }
  /* An empty file: no TLS, no auth, served as without one. */
  write_str("web.yml", "");
  int port, rc;
  char err[STK_ERRMSG_MAX];
  struct stk_watch *w = tls_agent("web.yml", &port, err, &rc);
  CHECK_MSG(rc == 0, "serve: %s", err);
  stk_watch_close(w);
}

static void make_cert(const char *cert, const char *key) {
  char *out = NULL;
  CHECK(test_sh(&out, "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                      "-keyout %s -out %s -days 2 -subj /CN=localhost "
                      "-addext subjectAltName=IP:127.0.0.1 2>&1", key, cert) == 0);
  free(out);
}

/* Replace a file as an operator's tooling does (write, then rename over). */
static void replace_file(const char *path, const char *text) {
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  write_str(tmp, text);
  CHECK(rename(tmp, path) == 0);
}

/* exporter-toolkit reads the file (and the certificate) for each request;
 * the agent reads them again when one changes, at its next sample: new
 * users for the next request, a new certificate for the next connection
 * on the same port, and a file that no longer reads well gets each
 * request a 500 (as exporter-toolkit answers) until it is fixed. */
TEST(watch_web_config_reread_on_change) {
  char *out = NULL;
  if (test_sh(&out, "command -v openssl && command -v curl") != 0) {
    free(out);
    SKIP("openssl or curl is not installed");
  }
  free(out);
  mkdir("cfg", 0755);
  make_cert("cfg/c.pem", "cfg/k.pem");
  CHECK(test_sh(&out, "cp cfg/c.pem ca1.pem") == 0);
  free(out);
  char h1[128], h2[128], yml[512];
  bcrypt_hash("first", h1, sizeof h1);
  bcrypt_hash("second", h2, sizeof h2);
  static const char tls[] = "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n";
  snprintf(yml, sizeof yml, "%sbasic_auth_users:\n  prometheus: '%s'\n", tls, h1);
  write_str("cfg/web.yml", yml);
  int port, rc;
  char err[STK_ERRMSG_MAX];
  struct stk_watch *w = tls_agent("cfg/web.yml", &port, err, &rc);
  CHECK_MSG(rc == 0, "serve: %s", err);
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:first", port, "https"), 200);
  CHECK_OK(stk_watch_sample(w)); /* nothing changed: the same */
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:first", port, "https"), 200);

  /* A new password. */
  snprintf(yml, sizeof yml, "%sbasic_auth_users:\n  prometheus: '%s'\n", tls, h2);
  replace_file("cfg/web.yml", yml);
  CHECK_OK(stk_watch_sample(w));
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:first", port, "https"), 401);
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:second", port, "https"), 200);

  /* Broken: 500 for everyone, the right password too; fixed: served. */
  replace_file("cfg/web.yml", "basic_auth_users: [\n");
  CHECK_OK(stk_watch_sample(w));
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:second", port, "https"), 500);
  CHECK_OK(stk_watch_sample(w)); /* still broken: still 500 */
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:second", port, "https"), 500);
  replace_file("cfg/web.yml", yml);
  CHECK_OK(stk_watch_sample(w));
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:second", port, "https"), 200);

  /* The certificate and key rotated in place (the file itself unchanged):
   * the new one is served on the same port, the old one no longer. */
  make_cert("c2.pem", "k2.pem");
  CHECK(test_sh(&out, "cp c2.pem ca2.pem && mv k2.pem cfg/k.pem && mv c2.pem cfg/c.pem") == 0);
  free(out);
  CHECK_OK(stk_watch_sample(w));
  CHECK_EQ(curl_status("--cacert ca2.pem -u prometheus:second", port, "https"), 200);
  CHECK_EQ(curl_status("--cacert ca1.pem -u prometheus:second", port, "https"), 0);

  /* A certificate that does not match its key: refused, so 500s (over the
   * connection the last good one serves) until they match again. */
  CHECK(test_sh(&out, "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                      "-keyout other.pem -out cfg/c.pem.new -days 2 -subj /CN=localhost "
                      "-addext subjectAltName=IP:127.0.0.1 2>&1 && mv cfg/c.pem.new cfg/c.pem") == 0);
  free(out);
  CHECK_OK(stk_watch_sample(w));
  CHECK_EQ(curl_status("--cacert ca2.pem -u prometheus:second", port, "https"), 500);
  stk_watch_close(w);
}

/* TLS turned on in a running agent's file: HTTPS from the next sample on,
 * on the same port, and no plain HTTP page any more. */
TEST(watch_web_config_tls_turned_on) {
  char *out = NULL;
  if (test_sh(&out, "command -v openssl && command -v curl") != 0) {
    free(out);
    SKIP("openssl or curl is not installed");
  }
  free(out);
  make_cert("c.pem", "k.pem");
  write_str("web.yml", "");
  int port, rc;
  char err[STK_ERRMSG_MAX];
  struct stk_watch *w = tls_agent("web.yml", &port, err, &rc);
  CHECK_MSG(rc == 0, "serve: %s", err);
  CHECK_EQ(curl_status("", port, "http"), 200);
  replace_file("web.yml", "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n");
  CHECK_OK(stk_watch_sample(w));
  CHECK_EQ(curl_status("--cacert c.pem", port, "https"), 200);
  CHECK(curl_status("", port, "http") != 200);
  stk_watch_close(w);
}
