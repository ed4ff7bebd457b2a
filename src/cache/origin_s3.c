/* The S3 origin: s3://bucket/prefix on AWS or any S3-compatible server,
 * through the HTTP engine of origin_http.c. This file resolves the
 * configuration the way AWS's own tools do (options, then the environment,
 * then ~/.aws/credentials and ~/.aws/config), builds path-style or
 * virtual-host-style URLs with keys encoded by S3's rules, signs with
 * libcurl's SigV4 (CURLOPT_AWS_SIGV4), and pages through ListObjectsV2.
 *
 * libcurl 7.88 signs the request line, host, x-amz-date and every header we
 * add, but neither sends x-amz-content-sha256 (which S3 requires) nor sorts
 * the query string: so we send that header with the hash of the empty body
 * (what curl hashes for a GET or HEAD, so signature and header agree), and
 * build ListObjectsV2 queries already in canonical (sorted, encoded) form.
 * The secret key and session token go only to curl and to the engine's
 * list of strings scrubbed from every message. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "http_impl.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define LIST_PAGE_MAX (64u << 20) /* bytes of one ListObjectsV2 page we accept */

struct s3_origin {
  struct stk_origin base;
  struct stk__http *eng;
  char *bucket;
  char *prefix;   /* key prefix of every object: "" or "dir/sub/" */
  char *base_url; /* "http://host:9000/bucket" or "https://bucket.s3.REGION.amazonaws.com" */
  int vhost;      /* base_url is virtual-host style */
  char *sigv4;    /* "aws:amz:REGION:s3", NULL when anonymous */
  char *key_id, *secret;
  char *token;              /* session token, NULL when none */
  struct curl_slist *headers;
  /* GETs': the same and x-amz-checksum-mode, so that S3 sends the CRC32C
   * it stored with a whole object (checked by the engine). */
  struct curl_slist *get_headers;
};

/* ---- configuration --------------------------------------------------- */

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* Path of an AWS shared file: $var, else ~/.aws/name. */
static void aws_file(const char *var, const char *name, char *out, size_t n) {
  const char *p = env(var), *home = env("HOME");
  if (p)
    snprintf(out, n, "%s", p);
  else if (home)
    snprintf(out, n, "%s/.aws/%s", home, name);
  else
    out[0] = 0;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

/* Value of key in [section] of the INI file path into out; 1 when found,
 * 0 when not (or no such file). *have_section is set when the section
 * exists at all. */
static int ini_get(const char *path, const char *section, const char *key, char *out, size_t n,
                   int *have_section) {
  FILE *f = *path ? fopen(path, "r") : NULL;
  if (!f) return 0;
  char line[4096];
  int in = 0, found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    char *s = trim(line);
    if (*s == '#' || *s == ';' || !*s) continue;
    if (*s == '[') {
      char *e = strchr(s, ']');
      if (!e) continue;
      *e = 0;
      in = !strcmp(trim(s + 1), section);
      if (in && have_section) *have_section = 1;
      continue;
    }
    char *eq = strchr(s, '=');
    if (!in || !eq) continue;
    *eq = 0;
    if (!strcasecmp(trim(s), key)) {
      snprintf(out, n, "%s", trim(eq + 1));
      found = 1;
    }
  }
  fclose(f);
  return found;
}

struct s3_conf {
  char region[64];
  char endpoint[1024];
  int custom_endpoint;
  char key_id[256], secret[256], token[4096];
};

/* Where the configuration comes from, in order (as AWS's tools):
 *   credentials: with an explicit opts->s3_profile, that profile of the
 *     shared files; else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
 *     AWS_SESSION_TOKEN, else profile $AWS_PROFILE or "default" of the
 *     credentials file, then of the config file; else none (anonymous).
 *   region: opts, AWS_REGION, AWS_DEFAULT_REGION, the profile's region in
 *     the config file, us-east-1.
 *   endpoint: opts, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS's own. */
static int resolve_conf(const struct stk_origin_opts *o, struct s3_conf *c, const char *red,
                        char *err) {
  const char *profile = o->s3_profile ? o->s3_profile : env("AWS_PROFILE");
  int named = profile != NULL;
  if (!profile) profile = "default";
  char cred_file[1024], conf_file[1024], conf_section[300];
  aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", cred_file, sizeof cred_file);
  aws_file("AWS_CONFIG_FILE", "config", conf_file, sizeof conf_file);
  if (!strcmp(profile, "default"))
    snprintf(conf_section, sizeof conf_section, "default");
  else
    snprintf(conf_section, sizeof conf_section, "profile %s", profile);

  int have_profile = 0;
  if (!o->s3_profile && env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
    snprintf(c->key_id, sizeof c->key_id, "%s", env("AWS_ACCESS_KEY_ID"));
    snprintf(c->secret, sizeof c->secret, "%s", env("AWS_SECRET_ACCESS_KEY"));
    if (env("AWS_SESSION_TOKEN"))
      snprintf(c->token, sizeof c->token, "%s", env("AWS_SESSION_TOKEN"));
    have_profile = 1;
  } else {
    const char *files[2] = {cred_file, conf_file}, *sections[2] = {profile, conf_section};
    for (int i = 0; i < 2 && !c->key_id[0]; i++) {
      if (ini_get(files[i], sections[i], "aws_access_key_id", c->key_id, sizeof c->key_id,
                  &have_profile) &&
          ini_get(files[i], sections[i], "aws_secret_access_key", c->secret, sizeof c->secret,
                  NULL)) {
        ini_get(files[i], sections[i], "aws_session_token", c->token, sizeof c->token, NULL);
      } else {
        c->key_id[0] = c->secret[0] = 0;
      }
    }
  }
  ini_get(conf_file, conf_section, "region", c->region, sizeof c->region, &have_profile);
  if (named && !have_profile)
    return stk__errf(err, STK_EINVAL, "%s: AWS profile '%s' is in neither %s nor %s", red, profile,
                     cred_file, conf_file);

  const char *region = o->s3_region ? o->s3_region : env("AWS_REGION");
  if (!region) region = env("AWS_DEFAULT_REGION");
  if (region) snprintf(c->region, sizeof c->region, "%s", region);
  if (!c->region[0]) snprintf(c->region, sizeof c->region, "us-east-1");
  for (const char *p = c->region; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '-')
      return stk__errf(err, STK_EINVAL, "%s: bad AWS region '%s'", red, c->region);

  const char *ep = o->s3_endpoint ? o->s3_endpoint : env("AWS_ENDPOINT_URL_S3");
  if (!ep) ep = env("AWS_ENDPOINT_URL");
  c->custom_endpoint = ep != NULL;
  if (ep)
    snprintf(c->endpoint, sizeof c->endpoint, "%s", ep);
  else
    snprintf(c->endpoint, sizeof c->endpoint, "https://s3.%s.amazonaws.com", c->region);
  size_t el = strlen(c->endpoint);
  while (el > 0 && c->endpoint[el - 1] == '/') c->endpoint[--el] = 0;
  if (strncasecmp(c->endpoint, "http://", 7) && strncasecmp(c->endpoint, "https://", 8))
    return stk__errf(err, STK_EINVAL, "%s: S3 endpoint '%s' is not an http(s) URL", red,
                     c->endpoint);
  if (strpbrk(c->endpoint, "?#@ "))
    return stk__errf(err, STK_EINVAL, "%s: S3 endpoint '%s' may hold no query, user or space", red,
                     c->endpoint);
  return 0;
}

/* Can bucket be a DNS label of a virtual host over TLS? (Lowercase letters,
 * digits, '-'; a dot would break the certificate's wildcard match.) */
static int vhost_ok(const char *bucket) {
  for (const char *p = bucket; *p; p++)
    if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '-') return 0;
  return 1;
}

static char *base_url(const struct s3_conf *c, const char *bucket, int vhost) {
  size_t n = strlen(c->endpoint) + strlen(bucket) + 3;
  char *u = malloc(n);
  if (!u) return NULL;
  if (vhost) { /* scheme://bucket.host[:port][/path] */
    const char *host = strstr(c->endpoint, "://") + 3;
    snprintf(u, n, "%.*s%s.%s", (int)(host - c->endpoint), c->endpoint, bucket, host);
  } else {
    snprintf(u, n, "%s/%s", c->endpoint, bucket);
  }
  return u;
}

/* ---- open / close ----------------------------------------------------- */

static void s3_close(struct stk_origin *o) {
  struct s3_origin *so = (struct s3_origin *)o;
  if (!so) return;
  stk__http_free(so->eng);
  curl_slist_free_all(so->headers);
  curl_slist_free_all(so->get_headers);
  free(so->bucket);
  free(so->prefix);
  free(so->base_url);
  free(so->sigv4);
  free(so->key_id);
  if (so->token) {
    memset(so->token, 0, strlen(so->token));
    free(so->token);
  }
  if (so->secret) { /* do not leave it in freed memory */
    memset(so->secret, 0, strlen(so->secret));
    free(so->secret);
  }
  free(so->base.url);
  free(so);
}

static int add_header(struct curl_slist **list, const char *name, const char *value) {
  size_t n = strlen(name) + strlen(value) + 3;
  char *h = malloc(n);
  if (!h) return STK_ENOMEM;
  snprintf(h, n, "%s: %s", name, value);
  struct curl_slist *l = curl_slist_append(*list, h);
  memset(h, 0, n);
  free(h);
  if (!l) return STK_ENOMEM;
  *list = l;
  return 0;
}

static int s3_open(struct stk_origin **out, const char *url, const struct stk_origin_opts *o,
                   char *err) {
  static const struct stk_origin_opts none;
  if (!o) o = &none;
  char red[1024];
  stk__url_redact(url, red, sizeof red);
  const char *b = url + 5; /* after "s3://" */
  size_t bl = strcspn(b, "/");
  if (bl == 0 || bl > 255)
    return stk__errf(err, STK_EINVAL, "%s: no bucket (s3://bucket/prefix)", red);
  for (size_t i = 0; i < bl; i++)
    if (!isalnum((unsigned char)b[i]) && !strchr(".-_", b[i]))
      return stk__errf(err, STK_EINVAL, "%s: bad bucket name", red);
  const char *pre = b + bl;
  while (*pre == '/') pre++;
  if (strpbrk(pre, "?#")) return stk__errf(err, STK_EINVAL, "%s: an s3:// URL takes no query", red);

  struct s3_conf *c = calloc(1, sizeof *c);
  struct s3_origin *so = calloc(1, sizeof *so);
  int rc = !c || !so ? stk__errf(err, STK_ENOMEM, "out of memory") : 0;
  if (rc == 0) rc = resolve_conf(o, c, red, err);
  if (rc == 0) {
    so->base.ops = &stk__origin_s3;
    so->base.url = strdup(red);
    so->bucket = strndup(b, bl);
    size_t pl = strlen(pre);
    while (pl > 0 && pre[pl - 1] == '/') pl--;
    so->prefix = malloc(pl + 2);
    if (so->prefix) snprintf(so->prefix, pl + 2, "%.*s%s", (int)pl, pre, pl ? "/" : "");
    so->vhost = o->s3_addressing == 2 || (o->s3_addressing == 0 && !c->custom_endpoint &&
                                          vhost_ok(so->bucket ? so->bucket : ""));
    so->base_url = so->bucket ? base_url(c, so->bucket, so->vhost) : NULL;
    if (!so->base.url || !so->bucket || !so->prefix || !so->base_url)
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
  }
  if (rc == 0) rc = stk__http_new(&so->eng, o, err);
  if (rc == 0) rc = stk__http_set_cainfo(so->eng, env("AWS_CA_BUNDLE"));
  if (rc == 0 && c->key_id[0]) {
    size_t n = strlen(c->region) + 16;
    if ((so->sigv4 = malloc(n))) snprintf(so->sigv4, n, "aws:amz:%s:s3", c->region);
    so->key_id = strdup(c->key_id);
    so->secret = strdup(c->secret);
    if (!so->sigv4 || !so->key_id || !so->secret ||
        add_header(&so->headers, "x-amz-content-sha256", EMPTY_SHA256) ||
        (c->token[0] && add_header(&so->headers, "x-amz-security-token", c->token)) ||
        (c->token[0] && !(so->token = strdup(c->token))) ||
        stk__http_add_secret(so->eng, c->secret) || stk__http_add_secret(so->eng, c->token))
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
  }
  for (struct curl_slist *h = so ? so->headers : NULL; rc == 0 && h; h = h->next) {
    struct curl_slist *l = curl_slist_append(so->get_headers, h->data);
    if (!l) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    else so->get_headers = l;
  }
  if (rc == 0 && add_header(&so->get_headers, "x-amz-checksum-mode", "ENABLED"))
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  if (c) {
    memset(c, 0, sizeof *c); /* the secret and token */
    free(c);
  }
  if (rc) {
    s3_close(so ? &so->base : NULL);
    return rc;
  }
  *out = &so->base;
  return 0;
}

/* ---- requests --------------------------------------------------------- */

/* Fill r's URL (malloc'ed into *url) and display form (*disp) for key
 * (already prefixed), and the signing fields. */
static int prepare(struct s3_origin *so, struct stk__http_req *r, const char *key, char **url,
                   char **disp) {
  size_t kl = strlen(key), n = strlen(so->base_url) + 3 * kl + 2;
  *url = malloc(n);
  *disp = malloc(strlen(so->bucket) + kl + 8);
  if (!*url || !*disp) return STK_ENOMEM;
  size_t k = (size_t)snprintf(*url, n, "%s/", so->base_url);
  stk__url_encode(key, *url + k, n - k, 1);
  sprintf(*disp, "s3://%s/%s", so->bucket, key);
  r->url = *url;
  r->display = *disp;
  r->headers = r->method == STK__HTTP_GET ? so->get_headers : so->headers;
  r->aws_sigv4 = so->sigv4;
  r->user = so->key_id;
  r->password = so->secret;
  r->path_as_is = 1;
  return 0;
}

static int object_request(struct s3_origin *so, struct stk__http_req *r, const char *name,
                          char *err) {
  if (!name || !*name) return stk__errf(err, STK_EINVAL, "%s: empty object name", so->base.url);
  size_t n = strlen(so->prefix) + strlen(name) + 1;
  char *key = malloc(n), *url = NULL, *disp = NULL;
  int rc = key ? 0 : STK_ENOMEM;
  if (key) {
    snprintf(key, n, "%s%s", so->prefix, name);
    rc = prepare(so, r, key, &url, &disp);
  }
  if (rc)
    rc = stk__errf(err, rc, "out of memory");
  else
    rc = stk__http_do(so->eng, r, err);
  free(key);
  free(url);
  free(disp);
  return rc;
}

static int s3_stat(struct stk_origin *o, const char *name, struct stk_obj_info *info, char *err) {
  struct s3_origin *so = (struct s3_origin *)o;
  struct stk__http_req r = {.method = STK__HTTP_HEAD, .fd = -1};
  int rc = object_request(so, &r, name, err);
  if (rc == 0 && info) *info = r.info;
  if (rc == STK_EACCES || (rc == STK_EIO && r.status >= 400 && r.status < 500)) {
    /* A HEAD response has no body, so no S3 error code (SignatureDoesNotMatch,
     * AccessDenied, ...). A one-byte GET fails the same way and says why. */
    struct stk__http_req g = {.method = STK__HTTP_GET, .len = 1, .fd = -1, .mem_max = 1};
    char gerr[STK_ERRMSG_MAX];
    int grc = object_request(so, &g, name, gerr);
    free(g.mem);
    if (grc == rc && err) memcpy(err, gerr, sizeof gerr);
  }
  return rc;
}

static int s3_get(struct stk_origin *o, const char *name, uint64_t off, uint64_t len, int fd,
                  uint64_t fd_off, struct stk_obj_info *info, const int *cancel, char *err) {
  struct stk__http_req r = {.method = STK__HTTP_GET,
                            .off = off,
                            .len = len,
                            .fd = fd,
                            .fd_off = fd_off,
                            .cancel = cancel};
  int rc = object_request((struct s3_origin *)o, &r, name, err);
  if (rc == 0 && info) *info = r.info;
  return rc;
}

/* ---- writes (the checkpoint tier's drain) ------------------------------ */

/* A request with a body is signed over the body's SHA-256: libcurl hashes
 * the POSTFIELDS it sends into the canonical request, and S3 wants the same
 * hash in x-amz-content-sha256, so the header is made per request. */
static int body_headers(struct s3_origin *so, const void *body, size_t len,
                        struct curl_slist **out) {
  unsigned char md[32];
  unsigned int mdl = 0;
  char hex[65];
  *out = NULL;
  if (!EVP_Digest(body ? body : "", len, md, &mdl, EVP_sha256(), NULL) || mdl != 32)
    return STK_ESYS;
  for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
  if (add_header(out, "x-amz-content-sha256", hex) ||
      add_header(out, "Content-Type", "application/octet-stream") ||
      (so->token && add_header(out, "x-amz-security-token", so->token))) {
    curl_slist_free_all(*out);
    *out = NULL;
    return STK_ENOMEM;
  }
  return 0;
}

/* One write request to key name (prefixed) with query (canonical form,
 * may be "") and body; the reply body in r->mem on success. */
static int write_request(struct s3_origin *so, struct stk__http_req *r, const char *name,
                         const char *query, const void *body, size_t len, char *err) {
  if (so->base.ops != &stk__origin_s3)
    return stk__errf(err, STK_EINVAL, "%s: not an S3 origin", so->base.url);
  if (!name || !*name) return stk__errf(err, STK_EINVAL, "%s: empty object name", so->base.url);
  size_t n = strlen(so->prefix) + strlen(name) + 1;
  char *key = malloc(n), *url = NULL, *disp = NULL, *full = NULL;
  struct curl_slist *hdrs = NULL;
  int rc = key ? 0 : STK_ENOMEM;
  if (!rc) {
    snprintf(key, n, "%s%s", so->prefix, name);
    rc = prepare(so, r, key, &url, &disp);
  }
  if (!rc && query[0]) {
    size_t fl = strlen(url) + strlen(query) + 2;
    if ((full = malloc(fl))) {
      snprintf(full, fl, "%s?%s", url, query);
      r->url = full;
    } else {
      rc = STK_ENOMEM;
    }
  }
  if (!rc && so->sigv4) rc = body_headers(so, body, len, &hdrs);
  if (rc) {
    rc = stk__errf(err, rc, rc == STK_ENOMEM ? "out of memory" : "%s: cannot hash the body",
                   so->base.url);
  } else {
    r->headers = hdrs;
    r->body = body;
    r->body_len = len;
    r->fd = -1;
    r->mem_max = 1u << 20;
    rc = stk__http_do(so->eng, r, err);
  }
  curl_slist_free_all(hdrs);
  free(key);
  free(url);
  free(full);
  free(disp);
  return rc;
}

int stk__s3_put(struct stk_origin *o, const char *name, const void *body, size_t len, char *err) {
  struct stk__http_req r = {.method = STK__HTTP_PUT};
  int rc = write_request((struct s3_origin *)o, &r, name, "", body, len, err);
  free(r.mem);
  return rc;
}

/* The text of <tag> in a reply, or an error naming what is missing. */
static int reply_field(const struct stk__http_req *r, const char *tag, char *out, size_t n,
                       const char *what, char *err) {
  size_t vl;
  const char *v = r->mem ? stk__xml_elem(r->mem, r->mem + r->mem_len, tag, &vl, NULL) : NULL;
  if (!v || stk__xml_text(v, vl, out, n) <= 0)
    return stk__errf(err, STK_EFORMAT, "%s: reply without a valid <%s>", what, tag);
  return 0;
}

int stk__s3_multipart_begin(struct stk_origin *o, const char *name, char *upload_id, size_t n,
                            char *err) {
  struct stk__http_req r = {.method = STK__HTTP_POST};
  int rc = write_request((struct s3_origin *)o, &r, name, "uploads=", NULL, 0, err);
  if (!rc) rc = reply_field(&r, "UploadId", upload_id, n, name, err);
  free(r.mem);
  return rc;
}

/* "partNumber=N&uploadId=ID" (sorted, encoded) into a malloc'ed string. */
static char *part_query(int part, const char *upload_id) {
  size_t n = 3 * strlen(upload_id) + 48;
  char *q = malloc(n);
  if (!q) return NULL;
  size_t k = part > 0 ? (size_t)snprintf(q, n, "partNumber=%d&uploadId=", part)
                      : (size_t)snprintf(q, n, "uploadId=");
  stk__url_encode(upload_id, q + k, n - k, 0);
  return q;
}

int stk__s3_multipart_part(struct stk_origin *o, const char *name, const char *upload_id,
                           int part, const void *body, size_t len, char *etag, char *err) {
  char *q = part_query(part, upload_id);
  if (!q) return stk__errf(err, STK_ENOMEM, "out of memory");
  struct stk__http_req r = {.method = STK__HTTP_PUT};
  int rc = write_request((struct s3_origin *)o, &r, name, q, body, len, err);
  free(q);
  free(r.mem);
  if (!rc && !r.info.etag[0])
    rc = stk__errf(err, STK_EFORMAT, "%s: part %d: reply without an ETag", name, part);
  if (!rc) snprintf(etag, STK_ETAG_MAX, "%s", r.info.etag);
  return rc;
}

int stk__s3_multipart_complete(struct stk_origin *o, const char *name, const char *upload_id,
                               int parts, char (*etags)[STK_ETAG_MAX], char *err) {
  size_t n = 64 + (size_t)parts * (STK_ETAG_MAX + 64);
  char *xml = malloc(n), *q = part_query(0, upload_id);
  if (!xml || !q) {
    free(xml);
    free(q);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  size_t k = (size_t)snprintf(xml, n, "<CompleteMultipartUpload>");
  for (int i = 0; i < parts; i++)
    k += (size_t)snprintf(xml + k, n - k,
                          "<Part><PartNumber>%d</PartNumber><ETag>\"%s\"</ETag></Part>", i + 1,
                          etags[i]);
  k += (size_t)snprintf(xml + k, n - k, "</CompleteMultipartUpload>");
  struct stk__http_req r = {.method = STK__HTTP_POST};
  int rc = write_request((struct s3_origin *)o, &r, name, q, xml, k, err);
  /* S3 may answer 200 and still fail the completion, in the body. */
  if (!rc && r.mem && memmem(r.mem, r.mem_len, "<Error>", 7)) {
    char code[128] = "";
    reply_field(&r, "Code", code, sizeof code, name, NULL);
    rc = stk__errf(err, STK_EIO, "%s: completing the multipart upload failed: %s", name,
                   code[0] ? code : "an error in the reply");
  }
  free(r.mem);
  free(xml);
  free(q);
  return rc;
}

void stk__s3_multipart_abort(struct stk_origin *o, const char *name, const char *upload_id) {
  char *q = part_query(0, upload_id);
  if (!q) return;
  struct s3_origin *so = (struct s3_origin *)o;
  struct stk__http_req r = {.method = STK__HTTP_DELETE};
  char err[STK_ERRMSG_MAX];
  write_request(so, &r, name, q, NULL, 0, err);
  free(r.mem);
  free(q);
}

int stk__s3_delete(struct stk_origin *o, const char *name, char *err) {
  struct stk__http_req r = {.method = STK__HTTP_DELETE};
  int rc = write_request((struct s3_origin *)o, &r, name, "", NULL, 0, err);
  free(r.mem);
  return rc;
}

/* ---- ListObjectsV2 ---------------------------------------------------- */

int stk__s3_parse_list(const char *xml, size_t len,
                       int (*cb)(void *arg, const char *key, const struct stk_obj_info *info),
                       void *arg, int *truncated, char **next_token, char *err) {
  const char *end = xml + len, *p = xml, *c, *next;
  size_t cl, vl;
  char key[4096], num[32], etag[STK_ETAG_MAX + 8];
  *truncated = 0;
  *next_token = NULL;
  if (!memmem(xml, len, "<ListBucketResult", 17))
    return stk__errf(err, STK_EFORMAT, "not a ListObjectsV2 response");
  while ((c = stk__xml_elem(p, end, "Contents", &cl, &next))) {
    const char *ce = c + cl, *k = stk__xml_elem(c, ce, "Key", &vl, NULL);
    if (!k || stk__xml_text(k, vl, key, sizeof key) <= 0)
      return stk__errf(err, STK_EFORMAT, "listing entry without a valid <Key>");
    const char *s = stk__xml_elem(c, ce, "Size", &vl, NULL);
    struct stk_obj_info info = {0};
    if (!s || vl == 0 || vl >= sizeof num)
      return stk__errf(err, STK_EFORMAT, "listing entry '%s' without a <Size>", key);
    memcpy(num, s, vl);
    num[vl] = 0;
    if (stk_parse_u64(num, &info.size))
      return stk__errf(err, STK_EFORMAT, "listing entry '%s': bad <Size> '%s'", key, num);
    const char *e = stk__xml_elem(c, ce, "ETag", &vl, NULL);
    if (e && stk__xml_text(e, vl, etag, sizeof etag) > 0) {
      size_t el = strlen(etag);
      const char *a = etag;
      if (el >= 2 && etag[0] == '"' && etag[el - 1] == '"') a++, el -= 2;
      snprintf(info.etag, sizeof info.etag, "%.*s", (int)el, a);
    }
    int rc = cb(arg, key, &info);
    if (rc) return rc;
    p = next;
  }
  const char *t = stk__xml_elem(xml, end, "IsTruncated", &vl, NULL);
  *truncated = t && vl == 4 && !memcmp(t, "true", 4);
  const char *tok = stk__xml_elem(xml, end, "NextContinuationToken", &vl, NULL);
  if (tok) {
    char *v = malloc(vl + 1);
    if (!v) return stk__errf(err, STK_ENOMEM, "out of memory");
    if (stk__xml_text(tok, vl, v, vl + 1) < 0) {
      free(v);
      return stk__errf(err, STK_EFORMAT, "bad <NextContinuationToken>");
    }
    *next_token = v;
  }
  return 0;
}

struct list_ctx {
  const char *prefix;
  size_t prefix_len;
  int (*cb)(void *arg, const char *name, const struct stk_obj_info *info);
  void *arg;
};

/* Keys outside the prefix cannot come back, but a server may be loose;
 * "directory" placeholders (keys ending in '/') are not objects. */
static int list_item(void *arg, const char *key, const struct stk_obj_info *info) {
  struct list_ctx *lc = arg;
  if (strncmp(key, lc->prefix, lc->prefix_len)) return 0;
  const char *name = key + lc->prefix_len;
  size_t nl = strlen(name);
  if (nl == 0 || name[nl - 1] == '/') return 0;
  return lc->cb(lc->arg, name, info);
}

static int s3_list(struct stk_origin *o,
                   int (*cb)(void *arg, const char *name, const struct stk_obj_info *info),
                   void *arg, char *err) {
  struct s3_origin *so = (struct s3_origin *)o;
  struct list_ctx lc = {so->prefix, strlen(so->prefix), cb, arg};
  char *token = NULL;
  int rc = 0;
  for (int page = 0; rc == 0; page++) {
    /* The query in SigV4 canonical form: names sorted, values encoded. */
    size_t n = strlen(so->base_url) + 3 * strlen(so->prefix) + (token ? 3 * strlen(token) : 0) + 80;
    char *url = malloc(n), *disp = malloc(strlen(so->base.url) + 32);
    if (!url || !disp) {
      free(url);
      free(disp);
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
      break;
    }
    /* Path style lists "http://ep/bucket?...", a virtual host "https://b.ep/?..." */
    size_t k = (size_t)snprintf(url, n, "%s%s?", so->base_url, so->vhost ? "/" : "");
    if (token) {
      k += (size_t)snprintf(url + k, n - k, "continuation-token=");
      k += stk__url_encode(token, url + k, n - k, 0);
      k += (size_t)snprintf(url + k, n - k, "&");
    }
    k += (size_t)snprintf(url + k, n - k, "list-type=2");
    if (so->prefix[0]) {
      k += (size_t)snprintf(url + k, n - k, "&prefix=");
      stk__url_encode(so->prefix, url + k, n - k, 0);
    }
    sprintf(disp, "%s (listing, page %d)", so->base.url, page + 1);
    struct stk__http_req r = {.method = STK__HTTP_GET,
                              .off = 0,
                              .len = UINT64_MAX,
                              .fd = -1,
                              .mem_max = LIST_PAGE_MAX,
                              .url = url,
                              .display = disp,
                              .headers = so->headers,
                              .aws_sigv4 = so->sigv4,
                              .user = so->key_id,
                              .password = so->secret,
                              .path_as_is = 1};
    rc = stk__http_do(so->eng, &r, err);
    free(url);
    int truncated = 0;
    char *next = NULL;
    if (rc == 0) {
      char perr[STK_ERRMSG_MAX] = "";
      rc = stk__s3_parse_list(r.mem, r.mem_len, list_item, &lc, &truncated, &next, perr);
      if (rc && perr[0]) stk__errf(err, rc, "%s: %s", disp, perr); /* else cb's own code */
    }
    free(r.mem);
    free(disp);
    if (rc == 0 && truncated && (!next || !*next || (token && !strcmp(next, token))))
      rc = stk__errf(err, STK_EFORMAT, "%s: truncated listing without a new continuation token",
                     so->base.url);
    free(token);
    token = next;
    if (rc == 0 && !truncated) break;
  }
  free(token);
  return rc;
}

static void s3_stats(struct stk_origin *o, struct stk_origin_stats *st) {
  stk__http_stats(((struct s3_origin *)o)->eng, st);
}

const struct stk_origin_ops stk__origin_s3 = {
    .scheme = "s3",
    .open = s3_open,
    .stat = s3_stat,
    .get = s3_get,
    .list = s3_list,
    .stats = s3_stats,
    .close = s3_close,
};
