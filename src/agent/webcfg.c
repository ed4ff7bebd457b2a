/* TLS and basic auth for /metrics, configured the way Prometheus'
 * exporters are: the exporter-toolkit web configuration file (YAML).
 *
 *   tls_server_config:
 *     cert_file: server.crt     # PEM; relative to the file's directory
 *     key_file: server.key
 *   basic_auth_users:
 *     prometheus: $2y$10$...    # bcrypt hashes (htpasswd -nBC 10)
 *
 * TLS is libmicrohttpd's (GnuTLS); bcrypt is libcrypt's crypt_r (libxcrypt
 * knows $2a$, $2b$, $2y$). Like exporter-toolkit, keys are checked
 * strictly: a key this agent does not implement (client certificates,
 * cipher choices, HTTP headers) is an error naming it, never ignored, so
 * a file written for exporter-toolkit does not silently serve less than
 * it says. A password that verified is remembered (its user, password and
 * hash, at most 16) so a scrape every 15 s does not cost a bcrypt each.
 *
 * As exporter-toolkit re-reads the file (and the certificate) for each
 * request, the agent re-reads them when they change: a configuration
 * records what stat said of each file it read (the file itself, the
 * certificate, the key) before reading it, and stk__ag_webcfg_changed
 * compares (http.c asks at each sample). */
#include <crypt.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "agent_impl.h"

#define WC_MAX_FILE (1 << 20)
#define WC_CACHE 16

/* A file as stat saw it (missing: it could not be stat'ed). */
struct wc_sig {
  char path[4096];
  int missing;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtim, ctim;
};

struct ag_webcfg {
  int refs;             /* holders (the agent, requests in flight); atomic */
  struct wc_sig sig[3]; /* the file, the certificate, the key: nsig of them */
  int nsig;
  char *cert_pem, *key_pem;
  char **users, **hashes;
  size_t nusers;
  pthread_mutex_t mu;
  char *cache[WC_CACHE]; /* "user\0password\0hash" of passwords that verified */
  unsigned ncache;
};

static void sig_take(struct wc_sig *s, const char *path) {
  struct stat st;
  memset(s, 0, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s", path);
  if (stat(path, &st) != 0) {
    s->missing = 1;
    return;
  }
  s->dev = st.st_dev;
  s->ino = st.st_ino;
  s->size = st.st_size;
  s->mtim = st.st_mtim;
  s->ctim = st.st_ctim;
}

static int sig_same(const struct wc_sig *a, const struct wc_sig *b) {
  return a->missing == b->missing && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         a->mtim.tv_sec == b->mtim.tv_sec && a->mtim.tv_nsec == b->mtim.tv_nsec &&
         a->ctim.tv_sec == b->ctim.tv_sec && a->ctim.tv_nsec == b->ctim.tv_nsec;
}

int stk__ag_webcfg_changed(const struct ag_webcfg *c) {
  for (int i = 0; c && i < c->nsig; i++) {
    struct wc_sig now;
    sig_take(&now, c->sig[i].path);
    if (!sig_same(&now, &c->sig[i])) return 1;
  }
  return 0;
}

/* Read path into a new string, its stat recorded first in c's next
 * signature slot (so a change during the read shows at the next check). */
static char *read_text(const char *path, char *errmsg, int *rc);
static char *read_signed(struct ag_webcfg *c, const char *path, char *errmsg, int *rc) {
  if (c->nsig < 3) sig_take(&c->sig[c->nsig++], path);
  return read_text(path, errmsg, rc);
}

static char *read_text(const char *path, char *errmsg, int *rc) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    *rc = stk__errf(errmsg, STK_EIO, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  char *b = malloc(WC_MAX_FILE + 1);
  size_t n = b ? fread(b, 1, WC_MAX_FILE + 1, f) : 0;
  fclose(f);
  if (!b || n > WC_MAX_FILE) {
    free(b);
    *rc = stk__errf(errmsg, b ? STK_EINVAL : STK_ENOMEM, "%s: over 1 MiB", path);
    return NULL;
  }
  b[n] = 0;
  return b;
}

/* path relative to the configuration file's directory, as exporter-toolkit. */
static void resolve(const char *cfg, const char *path, char *out, size_t n) {
  const char *slash = strrchr(cfg, '/');
  if (path[0] == '/' || !slash)
    snprintf(out, n, "%s", path);
  else
    snprintf(out, n, "%.*s/%s", (int)(slash - cfg), cfg, path);
}

static const char *scalar(yaml_document_t *d, yaml_node_t *n) {
  (void)d;
  return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

void stk__ag_webcfg_free(struct ag_webcfg *c) {
  if (!c) return;
  free(c->cert_pem);
  free(c->key_pem);
  for (size_t i = 0; i < c->nusers; i++) free(c->users[i]), free(c->hashes[i]);
  free(c->users);
  free(c->hashes);
  for (unsigned i = 0; i < c->ncache; i++) free(c->cache[i]);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* Parse the tls_server_config mapping m. */
static int parse_tls(struct ag_webcfg *c, const char *path, yaml_document_t *d, yaml_node_t *m,
                     char *errmsg) {
  if (m->type != YAML_MAPPING_NODE)
    return stk__errf(errmsg, STK_EINVAL, "%s: tls_server_config: expected a mapping", path);
  const char *cert = NULL, *key = NULL;
  for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
    const char *k = scalar(d, yaml_document_get_node(d, p->key));
    const char *v = scalar(d, yaml_document_get_node(d, p->value));
    if (!k || !v)
      return stk__errf(errmsg, STK_EINVAL, "%s: tls_server_config: keys and values must be text",
                       path);
    if (!strcmp(k, "cert_file")) cert = v;
    else if (!strcmp(k, "key_file")) key = v;
    else if (!strcmp(k, "client_auth_type") && (!strcmp(v, "NoClientCert") || !v[0])) continue;
    else
      return stk__errf(errmsg, STK_EINVAL,
                       "%s: tls_server_config.%s is not supported by stoker watch (it reads "
                       "cert_file and key_file)", path, k);
  }
  if (!cert || !key)
    return stk__errf(errmsg, STK_EINVAL, "%s: tls_server_config needs cert_file and key_file", path);
  char full[4096];
  int rc = 0;
  resolve(path, cert, full, sizeof full);
  if (!(c->cert_pem = read_signed(c, full, errmsg, &rc))) return rc;
  resolve(path, key, full, sizeof full);
  if (!(c->key_pem = read_signed(c, full, errmsg, &rc))) return rc;
  return 0;
}

static int parse_users(struct ag_webcfg *c, const char *path, yaml_document_t *d, yaml_node_t *m,
                       char *errmsg) {
  if (m->type != YAML_MAPPING_NODE)
    return stk__errf(errmsg, STK_EINVAL, "%s: basic_auth_users: expected a mapping", path);
  size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
  c->users = calloc(n + 1, sizeof *c->users);
  c->hashes = calloc(n + 1, sizeof *c->hashes);
  if (!c->users || !c->hashes) return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", path);
  for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
    const char *k = scalar(d, yaml_document_get_node(d, p->key));
    const char *v = scalar(d, yaml_document_get_node(d, p->value));
    if (!k || !v || !k[0])
      return stk__errf(errmsg, STK_EINVAL, "%s: basic_auth_users: expected user: bcrypt-hash",
                       path);
    if (strncmp(v, "$2a$", 4) && strncmp(v, "$2b$", 4) && strncmp(v, "$2y$", 4))
      return stk__errf(errmsg, STK_EINVAL, "%s: basic_auth_users.%s: not a bcrypt hash ($2y$...)",
                       path, k);
    c->users[c->nusers] = strdup(k);
    c->hashes[c->nusers] = strdup(v);
    if (!c->users[c->nusers] || !c->hashes[c->nusers++])
      return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", path);
  }
  return 0;
}

int stk__ag_webcfg_load(const char *path, struct ag_webcfg **out, char *errmsg) {
  *out = NULL;
  int rc = 0;
  struct ag_webcfg *c = calloc(1, sizeof *c);
  if (!c) return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", path);
  c->refs = 1;
  pthread_mutex_init(&c->mu, NULL);
  char *text = read_signed(c, path, errmsg, &rc);
  if (!text) {
    stk__ag_webcfg_free(c);
    return rc;
  }
  yaml_parser_t yp;
  yaml_document_t d;
  yaml_parser_initialize(&yp);
  yaml_parser_set_input_string(&yp, (const unsigned char *)text, strlen(text));
  if (!yaml_parser_load(&yp, &d)) {
    rc = stk__errf(errmsg, STK_EINVAL, "%s:%zu: %s", path, yp.problem_mark.line + 1,
                   yp.problem ? yp.problem : "not YAML");
    yaml_parser_delete(&yp);
    free(text);
    stk__ag_webcfg_free(c);
    return rc;
  }
  yaml_node_t *root = yaml_document_get_root_node(&d);
  if (root && root->type == YAML_MAPPING_NODE) {
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
         !rc && p < root->data.mapping.pairs.top; p++) {
      const char *k = scalar(&d, yaml_document_get_node(&d, p->key));
      yaml_node_t *v = yaml_document_get_node(&d, p->value);
      int empty = v && v->type == YAML_SCALAR_NODE && !v->data.scalar.length;
      if (k && !strcmp(k, "tls_server_config") && !empty) rc = parse_tls(c, path, &d, v, errmsg);
      else if (k && !strcmp(k, "basic_auth_users") && !empty) rc = parse_users(c, path, &d, v, errmsg);
      else if (!empty)
        rc = stk__errf(errmsg, STK_EINVAL,
                       "%s: %s is not supported by stoker watch (it reads tls_server_config and "
                       "basic_auth_users)", path, k ? k : "a non-text key");
    }
  } else if (root && !(root->type == YAML_SCALAR_NODE && !root->data.scalar.length)) {
    rc = stk__errf(errmsg, STK_EINVAL, "%s: expected a mapping at the top", path);
  }
  yaml_document_delete(&d);
  yaml_parser_delete(&yp);
  free(text);
  if (rc) {
    stk__ag_webcfg_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

struct ag_webcfg *stk__ag_webcfg_ref(struct ag_webcfg *c) {
  if (c) __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
  return c;
}

void stk__ag_webcfg_unref(struct ag_webcfg *c) {
  if (c && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) stk__ag_webcfg_free(c);
}

int stk__ag_webcfg_same_tls(const struct ag_webcfg *a, const struct ag_webcfg *b) {
  const char *ca = stk__ag_webcfg_cert(a), *cb = stk__ag_webcfg_cert(b);
  const char *ka = stk__ag_webcfg_key(a), *kb = stk__ag_webcfg_key(b);
  if (!ca || !cb) return !ca && !cb;
  return !strcmp(ca, cb) && ka && kb && !strcmp(ka, kb);
}

const char *stk__ag_webcfg_cert(const struct ag_webcfg *c) { return c ? c->cert_pem : NULL; }
const char *stk__ag_webcfg_key(const struct ag_webcfg *c) { return c ? c->key_pem : NULL; }
int stk__ag_webcfg_auth(const struct ag_webcfg *c) { return c && c->nusers; }

/* a == b in time independent of where they differ. */
static int same(const char *a, size_t al, const char *b, size_t bl) {
  unsigned char d = al != bl;
  for (size_t i = 0; i < al && i < bl; i++) d |= (unsigned char)(a[i] ^ b[i]);
  return !d;
}

int stk__ag_webcfg_check(struct ag_webcfg *c, const char *user, const char *pass) {
  if (!user || !pass) return 0;
  const char *hash = NULL;
  for (size_t i = 0; i < c->nusers; i++)
    if (!strcmp(c->users[i], user)) hash = c->hashes[i];
  /* An unknown user still costs a bcrypt (of the first user's hash), so
   * timing does not tell which users exist. */
  const char *h = hash ? hash : c->hashes[0];
  size_t ul = strlen(user), pl = strlen(pass), hl = strlen(h);
  pthread_mutex_lock(&c->mu);
  for (unsigned i = 0; hash && i < c->ncache; i++) {
    const char *e = c->cache[i];
    size_t el = strlen(e);
    if (same(e, el, user, ul) && same(e + el + 1, strlen(e + el + 1), pass, pl) &&
        !strcmp(e + el + 1 + strlen(e + el + 1) + 1, h)) {
      pthread_mutex_unlock(&c->mu);
      return 1;
    }
  }
  pthread_mutex_unlock(&c->mu);
  struct crypt_data *cd = calloc(1, sizeof *cd);
  if (!cd) return 0;
  const char *r = crypt_r(pass, h, cd);
  int ok = hash && r && r[0] != '*' && same(r, strlen(r), h, hl);
  free(cd);
  if (ok) {
    char *e = malloc(ul + pl + hl + 3);
    if (e) {
      memcpy(e, user, ul + 1);
      memcpy(e + ul + 1, pass, pl + 1);
      memcpy(e + ul + pl + 2, h, hl + 1);
      pthread_mutex_lock(&c->mu);
      if (c->ncache == WC_CACHE) free(c->cache[--c->ncache]);
      memmove(c->cache + 1, c->cache, c->ncache * sizeof *c->cache);
      c->cache[0] = e;
      c->ncache++;
      pthread_mutex_unlock(&c->mu);
    }
  }
  return ok;
}
