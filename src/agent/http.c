/* The agent's HTTP endpoint, served by libmicrohttpd (Debian's
 * libmicrohttpd-dev) rather than hand-written socket code. A scrape copies
 * the exposition built at the last sample, so scrapers never make the
 * agent sample, and their number and speed are bounded by the daemon's
 * limits (connections, per-IP connections, idle timeout, memory). A
 * scraper that sends Accept-Encoding: gzip gets the page gzipped (zlib),
 * compressed once per exposition however many scrapers ask. With a web
 * configuration file (webcfg.c) it serves HTTPS (libmicrohttpd's GnuTLS)
 * and asks for basic auth, on every path; when the file, its certificate
 * or its key changes, the next sample re-reads them: new users apply to the
 * next request, a new certificate to the next connection (a new daemon on
 * the same listening socket), and a file that no longer reads well gets
 * every request a 500 until it does again, as exporter-toolkit answers. */
#include <errno.h>
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "agent_impl.h"

#define MAX_CONNECTIONS 64
#define MAX_PER_IP 32
#define IDLE_TIMEOUT_S 10
#define CONN_MEMORY (32 * 1024)

/* Whether an Accept-Encoding value accepts gzip: a "gzip" or "x-gzip"
 * coding without q=0 (RFC 9110; "*" is not taken as gzip). */
int stk__ag_accepts_gzip(const char *v) {
  for (const char *p = v; p && *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    size_t n = strcspn(p, ";, \t");
    int gz = (n == 4 && !strncasecmp(p, "gzip", 4)) || (n == 6 && !strncasecmp(p, "x-gzip", 6));
    const char *end = p + strcspn(p, ",");
    if (gz) {
      const char *q = p + n;
      double qv = 1;
      for (; q < end; q++)
        if ((*q == 'q' || *q == 'Q') && q[1] == '=') {
          qv = strtod(q + 2, NULL);
          break;
        }
      return qv > 0;
    }
    p = end;
  }
  return 0;
}

/* The exposition gzipped (a copy the caller frees), compressed at most
 * once per exposition. */
static int prometheus_gzip(struct stk_watch *w, char **buf, size_t *len) {
  int rc = 0;
  pthread_mutex_lock(&w->mu);
  stk__ag_expo_fresh(w);
  if (!w->expo_gz && w->expo) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK) {
      uLong cap = deflateBound(&z, (uLong)w->expo_len);
      char *out = malloc(cap);
      z.next_in = (Bytef *)w->expo;
      z.avail_in = (uInt)w->expo_len;
      z.next_out = (Bytef *)out;
      z.avail_out = (uInt)cap;
      if (out && deflate(&z, Z_FINISH) == Z_STREAM_END) {
        w->expo_gz = out;
        w->expo_gz_len = z.total_out;
      } else {
        free(out);
      }
      deflateEnd(&z);
    }
  }
  char *p = w->expo_gz ? malloc(w->expo_gz_len) : NULL;
  if (p) {
    memcpy(p, w->expo_gz, w->expo_gz_len);
    *buf = p;
    *len = w->expo_gz_len;
  } else {
    rc = STK_ENOMEM;
  }
  pthread_mutex_unlock(&w->mu);
  return rc;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **con_cls) {
  (void)version;
  (void)upload;
  (void)con_cls;
  struct stk_watch *w = cls;
  if (*upload_len) {
    *upload_len = 0; /* discard any body; a GET has none */
    return MHD_YES;
  }
  struct MHD_Response *r;
  unsigned status = MHD_HTTP_OK;
  pthread_mutex_lock(&w->web_mu);
  struct ag_webcfg *web = stk__ag_webcfg_ref(w->web);
  int bad = w->web_bad;
  pthread_mutex_unlock(&w->web_mu);
  if (bad) {
    stk__ag_webcfg_unref(web);
    static const char msg[] = "the web configuration file cannot be used (see the agent's log)\n";
    r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_INTERNAL_SERVER_ERROR, r);
    MHD_destroy_response(r);
    return ret;
  }
  int need_auth = stk__ag_webcfg_auth(web);
  if (need_auth) {
    char *pass = NULL;
    char *user = MHD_basic_auth_get_username_password(c, &pass);
    int ok = stk__ag_webcfg_check(web, user, pass);
    if (user) MHD_free(user);
    if (pass) MHD_free(pass);
    if (!ok) {
      stk__ag_webcfg_unref(web);
      static const char msg[] = "unauthorized\n";
      r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
      if (!r) return MHD_NO;
      enum MHD_Result ret = MHD_queue_basic_auth_fail_response(c, "stoker watch", r);
      MHD_destroy_response(r);
      return ret;
    }
  }
  stk__ag_webcfg_unref(web);
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    static const char msg[] = "only GET\n";
    r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    status = MHD_HTTP_METHOD_NOT_ALLOWED;
  } else if (!strcmp(url, "/metrics")) {
    char *buf;
    size_t len;
    int gz = stk__ag_accepts_gzip(
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING));
    /* gzip where asked and it works; else the plain page. */
    if (!(gz && prometheus_gzip(w, &buf, &len) == 0)) {
      gz = 0;
      if (stk_watch_prometheus(w, &buf, &len) != 0) return MHD_NO;
    }
    r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (r) {
      MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
      MHD_add_response_header(r, "Vary", "Accept-Encoding");
      if (gz) MHD_add_response_header(r, "Content-Encoding", "gzip");
    } else {
      free(buf);
    }
  } else if (!strcmp(url, "/")) {
    static const char msg[] = "watch: metrics at /metrics\n";
    r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
  } else {
    static const char msg[] = "not found; metrics are at /metrics\n";
    r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    status = MHD_HTTP_NOT_FOUND;
  }
  if (!r) return MHD_NO;
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

/* A daemon serving w with web's TLS (if any): on address sa, or on the
 * listening socket fd (fd >= 0: it takes the socket over). */
static struct MHD_Daemon *start_daemon(struct stk_watch *w, const struct ag_webcfg *web,
                                       const struct sockaddr *sa, int fd) {
  unsigned flags = w->httpd_flags;
  struct MHD_OptionItem opt[4] = {{MHD_OPTION_END, 0, NULL}};
  int k = 0;
  if (stk__ag_webcfg_cert(web)) {
    flags |= MHD_USE_TLS;
    opt[k++] =
        (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)stk__ag_webcfg_key(web)};
    opt[k++] =
        (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)stk__ag_webcfg_cert(web)};
  }
  if (fd >= 0)
    opt[k++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, fd, NULL};
  else
    opt[k++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, (void *)sa};
  opt[k] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  return MHD_start_daemon(flags, 0, NULL, NULL, answer, w, MHD_OPTION_ARRAY, opt,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)MAX_PER_IP,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY, MHD_OPTION_END);
}

/* The configuration cannot be used: every request gets a 500 until it
 * can (logged once per reason). */
static void web_bad(struct stk_watch *w, const char *why) {
  pthread_mutex_lock(&w->web_mu);
  int again = w->web_bad && !strcmp(w->web_err, why);
  w->web_bad = 1;
  snprintf(w->web_err, sizeof w->web_err, "%s", why);
  pthread_mutex_unlock(&w->web_mu);
  if (!again)
    stk_log(STK_LOG_WARN, "watch: web configuration: %s; answering 500 until it is fixed", why);
}

void stk__ag_http_refresh(struct stk_watch *w) {
  if (!w->httpd || !w->o.web_config_file) return;
  /* While it is bad, retry at each sample (a certificate it names may
   * appear later); else only when a file it read changed. */
  if (!w->web_bad && !stk__ag_webcfg_changed(w->web)) return;
  struct ag_webcfg *nw = NULL;
  char err[STK_ERRMSG_MAX];
  if (stk__ag_webcfg_load(w->o.web_config_file, &nw, err) != 0) {
    web_bad(w, err);
    return;
  }
  if (!stk__ag_webcfg_same_tls(nw, w->web)) {
    /* A new daemon takes over a copy of the listening socket; the old
     * one stops accepting and ends. A certificate and key GnuTLS refuses
     * leave the old one serving, with 500s. */
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(w->httpd, MHD_DAEMON_INFO_LISTEN_FD);
    int fd = info ? dup(info->listen_fd) : -1;
    struct MHD_Daemon *d = fd >= 0 ? start_daemon(w, nw, NULL, fd) : NULL;
    if (!d) {
      if (fd >= 0) close(fd);
      stk__ag_webcfg_free(nw);
      snprintf(err, sizeof err, "%s: the certificate and key were refused (TLS)",
               w->o.web_config_file);
      web_bad(w, err);
      return;
    }
    MHD_socket old_fd = MHD_quiesce_daemon(w->httpd);
    /* Swap the configuration before the old daemon's requests end. */
    pthread_mutex_lock(&w->web_mu);
    struct ag_webcfg *old = w->web;
    w->web = nw;
    w->web_bad = 0;
    pthread_mutex_unlock(&w->web_mu);
    MHD_stop_daemon(w->httpd);
    if (old_fd != MHD_INVALID_SOCKET) close(old_fd);
    w->httpd = d;
    stk__ag_webcfg_unref(old);
  } else {
    pthread_mutex_lock(&w->web_mu);
    struct ag_webcfg *old = w->web;
    w->web = nw;
    w->web_bad = 0;
    pthread_mutex_unlock(&w->web_mu);
    stk__ag_webcfg_unref(old);
  }
  stk_log(STK_LOG_INFO, "watch: web configuration %s read again", w->o.web_config_file);
}

int stk_watch_serve(struct stk_watch *w, const char *listen, int *port_out, char *errmsg) {
  const char *colon = listen ? strrchr(listen, ':') : NULL;
  if (!colon)
    return stk__errf(errmsg, STK_EINVAL, "--listen '%s': expected HOST:PORT or :PORT",
                     listen ? listen : "");
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || end == colon + 1 || port < 0 || port > 65535)
    return stk__errf(errmsg, STK_EINVAL, "--listen '%s': bad port", listen);
  struct sockaddr_in6 a6;
  struct sockaddr_in a4;
  memset(&a6, 0, sizeof a6);
  memset(&a4, 0, sizeof a4);
  char host[256];
  size_t hl = (size_t)(colon - listen);
  if (hl >= sizeof host) return stk__errf(errmsg, STK_EINVAL, "--listen '%s': host too long", listen);
  memcpy(host, listen, hl);
  host[hl] = 0;
  if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = 0;
  }
  const struct sockaddr *sa;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
#ifdef MHD_USE_EPOLL
  flags |= MHD_USE_EPOLL;
#endif
  if (!host[0] || !strcmp(host, "*") || !strcmp(host, "0.0.0.0")) {
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons((uint16_t)port);
    sa = (const struct sockaddr *)&a4;
  } else if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
    a4.sin_family = AF_INET;
    a4.sin_port = htons((uint16_t)port);
    sa = (const struct sockaddr *)&a4;
  } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons((uint16_t)port);
    sa = (const struct sockaddr *)&a6;
    flags |= MHD_USE_IPv6;
  } else if (!strcmp(host, "localhost")) {
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a4.sin_port = htons((uint16_t)port);
    sa = (const struct sockaddr *)&a4;
  } else {
    return stk__errf(errmsg, STK_EINVAL, "--listen '%s': '%s' is not an IP address", listen, host);
  }
  struct ag_webcfg *web = NULL;
  if (w->o.web_config_file) {
    int rc = stk__ag_webcfg_load(w->o.web_config_file, &web, errmsg);
    if (rc) return rc;
    flags |= MHD_USE_ITC; /* MHD_quiesce_daemon, for a new certificate */
  }
  if (stk__ag_webcfg_cert(web) && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    stk__ag_webcfg_free(web);
    return stk__errf(errmsg, STK_EINVAL, "%s: TLS asked for, but this libmicrohttpd has none",
                     w->o.web_config_file);
  }
  w->web = web; /* before the first request */
  w->web_bad = 0;
  w->httpd_flags = flags;
  struct MHD_Daemon *d = start_daemon(w, web, sa, -1);
  if (!d) {
    int tls = stk__ag_webcfg_cert(web) != NULL;
    w->web = NULL;
    stk__ag_webcfg_free(web);
    return stk__errf(errmsg, STK_EIO, "cannot listen on %s (address in use, not allowed%s)", listen,
                     tls ? ", or a certificate and key TLS refused" : "");
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  if (port_out) *port_out = info ? info->port : (int)port;
  w->httpd = d;
  return 0;
}

void stk__ag_http_stop(struct stk_watch *w) {
  if (w->httpd) MHD_stop_daemon(w->httpd);
  w->httpd = NULL;
  stk__ag_webcfg_unref(w->web);
  w->web = NULL;
  w->web_bad = 0;
}
