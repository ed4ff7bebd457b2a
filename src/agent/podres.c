/* Kubernetes pods from the kubelet's pod-resources API (issue 21, §2):
 * which pod, namespace and container holds each GPU, whether or not a
 * process runs on it.
 *
 * The API is one unary gRPC call, v1.PodResourcesLister/List, on the
 * kubelet's unix socket. Rather than link a gRPC library (grpc-c pulls
 * in abseil, protobuf and its own event engine: tens of MiB for one
 * call), the agent speaks the little of HTTP/2 and protobuf that call
 * needs: the connection preface, a SETTINGS frame opening a 16 MiB
 * window, one HEADERS frame with literal (never Huffman-coded, never
 * indexed) header fields, one DATA frame holding the empty request; then
 * it reads frames, acknowledging SETTINGS and PING, collecting stream
 * 1's DATA until END_STREAM. The response headers are not decoded (no
 * HPACK decoder is needed): a call that ends without a message is a gRPC
 * error, whatever its status. The message is parsed by hand: four nested
 * messages, two field kinds (strings and sub-messages); every other
 * field is skipped by its wire type. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent_impl.h"

#define PR_MAX_MSG (16u << 20) /* the kubelet's own default message limit */
#define PR_MAX_FRAME 16384u    /* SETTINGS_MAX_FRAME_SIZE: the default, not raised */
#define PR_TIMEOUT_S 2.0

static const char pr_path[] = "/v1.PodResourcesLister/List";

static double mono_s(void) { return (double)stk_now_ns() / 1e9; }

/* ---- HTTP/2 ---- */

static void put_frame_hdr(uint8_t *p, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream) {
  p[0] = (uint8_t)(len >> 16), p[1] = (uint8_t)(len >> 8), p[2] = (uint8_t)len;
  p[3] = type, p[4] = flags;
  p[5] = (uint8_t)(stream >> 24), p[6] = (uint8_t)(stream >> 16), p[7] = (uint8_t)(stream >> 8),
  p[8] = (uint8_t)stream;
}

/* An HPACK string literal (no Huffman), length under 127. */
static size_t hp_str(uint8_t *p, const char *s) {
  size_t l = strlen(s);
  p[0] = (uint8_t)l;
  memcpy(p + 1, s, l);
  return l + 1;
}

/* The request: preface, SETTINGS, WINDOW_UPDATE, HEADERS, DATA. */
static size_t build_request(uint8_t *out) {
  size_t o = 0;
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  memcpy(out, preface, 24), o = 24;
  /* SETTINGS: INITIAL_WINDOW_SIZE (4) = PR_MAX_MSG + room, so the
   * kubelet never waits for a window update from us. */
  uint32_t win = PR_MAX_MSG + 65536;
  put_frame_hdr(out + o, 6, 4, 0, 0), o += 9;
  out[o++] = 0, out[o++] = 4;
  out[o++] = (uint8_t)(win >> 24), out[o++] = (uint8_t)(win >> 16), out[o++] = (uint8_t)(win >> 8),
  out[o++] = (uint8_t)win;
  /* WINDOW_UPDATE on the connection (its window is not set by SETTINGS). */
  uint32_t inc = win - 65535;
  put_frame_hdr(out + o, 4, 8, 0, 0), o += 9;
  out[o++] = (uint8_t)(inc >> 24), out[o++] = (uint8_t)(inc >> 16), out[o++] = (uint8_t)(inc >> 8),
  out[o++] = (uint8_t)inc;
  /* HEADERS, stream 1, END_HEADERS. Static table: 3 = :method POST,
   * 6 = :scheme http; literals without indexing on static names 4
   * (:path), 1 (:authority), 31 (content-type, 4-bit prefix: 15 + 16);
   * te with a literal name. */
  uint8_t h[128];
  size_t hl = 0;
  h[hl++] = 0x83, h[hl++] = 0x86;
  h[hl++] = 0x04, hl += hp_str(h + hl, pr_path);
  h[hl++] = 0x01, hl += hp_str(h + hl, "localhost");
  h[hl++] = 0x0f, h[hl++] = 0x10, hl += hp_str(h + hl, "application/grpc");
  h[hl++] = 0x00, hl += hp_str(h + hl, "te"), hl += hp_str(h + hl, "trailers");
  put_frame_hdr(out + o, (uint32_t)hl, 1, 0x4, 1), o += 9;
  memcpy(out + o, h, hl), o += hl;
  /* DATA, END_STREAM: a gRPC message, uncompressed, of 0 bytes (the
   * empty ListPodResourcesRequest). */
  put_frame_hdr(out + o, 5, 0, 0x1, 1), o += 9;
  memset(out + o, 0, 5), o += 5;
  return o;
}

static int io_full(int fd, void *buf, size_t n, int wr, double deadline) {
  uint8_t *p = buf;
  while (n) {
    int left = (int)((deadline - mono_s()) * 1000);
    if (left <= 0) return ETIMEDOUT;
    struct pollfd pf = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
    int pr = poll(&pf, 1, left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return errno;
    if (pr == 0) return ETIMEDOUT;
    ssize_t r = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return errno;
    if (r == 0) return ECONNRESET;
    p += r, n -= (size_t)r;
  }
  return 0;
}

int stk__ag_podres_call(const char *sock, uint8_t **msg, size_t *len, char *why, size_t whyn) {
  *msg = NULL, *len = 0;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(sock) >= sizeof sa.sun_path) {
    snprintf(why, whyn, "%s: socket path too long", sock);
    return -1;
  }
  memcpy(sa.sun_path, sock, strlen(sock) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    snprintf(why, whyn, "%s: cannot connect: %s", sock, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  double deadline = mono_s() + PR_TIMEOUT_S;
  uint8_t req[256];
  size_t rl = build_request(req);
  uint8_t *frame = malloc(PR_MAX_FRAME), *data = NULL;
  size_t dlen = 0, dcap = 0;
  int rc = frame ? io_full(fd, req, rl, 1, deadline) : ENOMEM, done = 0;
  const char *what = NULL;
  while (!rc && !done && !what) {
    uint8_t h[9];
    if ((rc = io_full(fd, h, 9, 0, deadline))) break;
    uint32_t flen = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
    uint8_t type = h[3], flags = h[4];
    uint32_t stream = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) &
                      0x7fffffffu;
    if (flen > PR_MAX_FRAME) {
      what = "a frame over the 16 KiB it may send";
      break;
    }
    if ((rc = io_full(fd, frame, flen, 0, deadline))) break;
    if (type == 0 && stream == 1) { /* DATA */
      const uint8_t *p = frame;
      uint32_t n = flen;
      if (flags & 0x8) { /* PADDED */
        if (!n || frame[0] >= n) {
          what = "a malformed padded DATA frame";
          break;
        }
        n -= 1u + frame[0], p++;
      }
      if (dlen + n > PR_MAX_MSG + 5) {
        what = "a message over 16 MiB";
        break;
      }
      if (dlen + n > dcap) {
        size_t nc = dcap ? dcap * 2 : 65536;
        while (nc < dlen + n) nc *= 2;
        uint8_t *q = realloc(data, nc);
        if (!q) {
          rc = ENOMEM;
          break;
        }
        data = q, dcap = nc;
      }
      memcpy(data + dlen, p, n), dlen += n;
      done = flags & 0x1;
    } else if (type == 1 && stream == 1) { /* HEADERS: not decoded */
      done = flags & 0x1;
    } else if (type == 4 && !(flags & 0x1)) { /* SETTINGS: acknowledge */
      uint8_t ack[9];
      put_frame_hdr(ack, 0, 4, 0x1, 0);
      (void)io_full(fd, ack, 9, 1, deadline); /* the answer may come all the same */
    } else if (type == 6 && !(flags & 0x1) && flen == 8) { /* PING: answer */
      uint8_t pong[17];
      put_frame_hdr(pong, 8, 6, 0x1, 0);
      memcpy(pong + 9, frame, 8);
      (void)io_full(fd, pong, 17, 1, deadline);
    } else if (type == 3 && stream == 1) {
      what = "a reset of the call (RST_STREAM)";
    } else if (type == 7) {
      what = "a GOAWAY";
    }
  }
  close(fd);
  free(frame);
  if (rc || what) {
    if (what)
      snprintf(why, whyn, "%s: the kubelet answered %s", sock, what);
    else
      snprintf(why, whyn, "%s: List call failed: %s", sock, strerror(rc));
    free(data);
    return -1;
  }
  /* gRPC's length-prefixed message: flag 0 (not compressed), BE32 length. */
  if (dlen == 0) {
    snprintf(why, whyn, "%s: the kubelet answered no message (a gRPC error status; is the "
                        "pod-resources API enabled?)", sock);
    free(data);
    return -1;
  }
  uint32_t ml = dlen >= 5 ? (uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 |
                                (uint32_t)data[3] << 8 | data[4]
                          : 0;
  if (dlen < 5 || data[0] != 0 || ml != dlen - 5) {
    snprintf(why, whyn, "%s: the kubelet's answer is not one uncompressed gRPC message", sock);
    free(data);
    return -1;
  }
  memmove(data, data + 5, ml);
  *msg = data, *len = ml;
  return 0;
}

/* ---- protobuf ---- */

struct pb {
  const uint8_t *p, *e;
};

static int pb_varint(struct pb *b, uint64_t *v) {
  *v = 0;
  for (int s = 0; s < 64 && b->p < b->e; s += 7) {
    uint8_t c = *b->p++;
    *v |= (uint64_t)(c & 0x7f) << s;
    if (!(c & 0x80)) return 0;
  }
  return -1;
}

/* The next field: its number and, for length-delimited ones, its bytes
 * (sub set; wt 2); other wire types are skipped (wt says which). 1 at the
 * end, 0 on a field, -1 when malformed. */
static int pb_next(struct pb *b, uint32_t *num, int *wt, struct pb *sub) {
  if (b->p >= b->e) return 1;
  uint64_t key, v;
  if (pb_varint(b, &key) || key >> 3 == 0 || key >> 3 > 0x1fffffff) return -1;
  *num = (uint32_t)(key >> 3), *wt = (int)(key & 7);
  switch (*wt) {
  case 0: return pb_varint(b, &v);
  case 1:
  case 5: {
    size_t n = *wt == 1 ? 8 : 4;
    if ((size_t)(b->e - b->p) < n) return -1;
    b->p += n;
    return 0;
  }
  case 2:
    if (pb_varint(b, &v) || v > (uint64_t)(b->e - b->p)) return -1;
    sub->p = b->p, sub->e = b->p + v;
    b->p += v;
    return 0;
  default: return -1; /* groups (3, 4) are not in this API */
  }
}

static void pb_str(const struct pb *s, char *out, size_t n) {
  size_t l = (size_t)(s->e - s->p);
  if (l >= n) l = n - 1;
  memcpy(out, s->p, l);
  out[l] = 0;
  for (size_t i = 0; i < l; i++)
    if (!out[i]) out[i] = '_';
}

static int add_pod(struct ag_pod **pods, unsigned *n, unsigned *cap, const struct ag_pod *p) {
  if (*n >= AG_MAX_PODS) return 0;
  if (*n == *cap) {
    unsigned nc = *cap ? *cap * 2 : 16;
    void *q = realloc(*pods, nc * sizeof **pods);
    if (!q) return -1;
    *pods = q, *cap = nc;
  }
  (*pods)[(*n)++] = *p;
  return 0;
}

/* ContainerDevices: 1 resource_name, 2 device_ids (repeated). */
static int parse_devices(struct pb b, struct ag_pod *cur, struct ag_pod **pods, unsigned *n,
                         unsigned *cap) {
  struct pb s, ids[64];
  char res[128] = "";
  unsigned nids = 0;
  uint32_t num;
  int wt, r;
  while ((r = pb_next(&b, &num, &wt, &s)) == 0) {
    if (wt != 2) continue;
    if (num == 1) pb_str(&s, res, sizeof res);
    if (num == 2 && nids < 64) ids[nids++] = s;
  }
  if (r < 0) return -1;
  if (strncmp(res, "nvidia.com/", 11)) return 0; /* not a GPU: CPUs, NICs, ... */
  for (unsigned k = 0; k < nids; k++) {
    pb_str(&ids[k], cur->dev, sizeof cur->dev);
    if (add_pod(pods, n, cap, cur)) return -1;
  }
  return 0;
}

/* ContainerResources: 1 name, 2 devices. */
static int parse_container(struct pb b, struct ag_pod *cur, struct ag_pod **pods, unsigned *n,
                           unsigned *cap) {
  struct pb s, devs = b;
  uint32_t num;
  int wt, r;
  cur->container[0] = 0;
  while ((r = pb_next(&b, &num, &wt, &s)) == 0)
    if (wt == 2 && num == 1) pb_str(&s, cur->container, sizeof cur->container);
  if (r < 0) return -1;
  while ((r = pb_next(&devs, &num, &wt, &s)) == 0)
    if (wt == 2 && num == 2 && parse_devices(s, cur, pods, n, cap)) return -1;
  return r < 0 ? -1 : 0;
}

int stk__ag_parse_podres(const uint8_t *msg, size_t len, struct ag_pod **pods, unsigned *n,
                         unsigned *cap) {
  struct pb top = {msg, msg + len}, pr, s;
  uint32_t num, num2;
  int wt, wt2, r, r2;
  *n = 0;
  /* ListPodResourcesResponse: 1 pod_resources (repeated). */
  while ((r = pb_next(&top, &num, &wt, &pr)) == 0) {
    if (wt != 2 || num != 1) continue;
    /* PodResources: 1 name, 2 namespace, 3 containers; names first (a
     * writer may put them after the containers). */
    struct ag_pod cur = {0};
    struct pb q = pr;
    while ((r2 = pb_next(&q, &num2, &wt2, &s)) == 0) {
      if (wt2 == 2 && num2 == 1) pb_str(&s, cur.pod, sizeof cur.pod);
      if (wt2 == 2 && num2 == 2) pb_str(&s, cur.ns, sizeof cur.ns);
    }
    if (r2 < 0) return -1;
    q = pr;
    while ((r2 = pb_next(&q, &num2, &wt2, &s)) == 0)
      if (wt2 == 2 && num2 == 3 && parse_container(s, &cur, pods, n, cap)) return -1;
    if (r2 < 0) return -1;
  }
  return r < 0 ? -1 : 0;
}

/* ---- the agent's use ---- */

/* The GPU a device id names, and its unit: a GPU's UUID or index (with
 * or without a time-slicing replica suffix, "GPU-...::3": unit -1), or a
 * MIG device's UUID (its instance). -1 when none. */
static int pod_gpu(const struct stk_watch *w, const char *dev, int *unit) {
  char id[96];
  snprintf(id, sizeof id, "%s", dev);
  char *c = strstr(id, "::");
  if (c) *c = 0;
  *unit = -1;
  for (unsigned i = 0; i < w->ngpus; i++) {
    const struct ag_gpu *g = &w->gpus[i];
    if (g->uuid[0] && !strcmp(g->uuid, id)) return (int)i;
    for (unsigned m = 0; m < g->s.nmig && m < 8; m++)
      if (g->s.mig[m].uuid[0] && !strcmp(g->s.mig[m].uuid, id)) {
        *unit = (int)m;
        return (int)i;
      }
  }
  char *end;
  unsigned long v = strtoul(id, &end, 10);
  if (id[0] >= '0' && id[0] <= '9' && !*end && v < w->ngpus) return (int)v;
  return -1;
}

void stk__ag_pod_job(const struct ag_pod *p, char *job) {
  /* A long name is cut (kept consistent: the reaper finds the pod by it). */
  if (snprintf(job, AG_JOB_LEN, "%s/%s", p->ns, p->pod) < 0) job[0] = 0;
}

void stk__ag_read_pods(struct stk_watch *w) {
  for (unsigned i = 0; i < AG_MAX_GPUS; i++) {
    w->gpus[i].kube = 0;
    memset(w->gpus[i].mig_kube, 0, sizeof w->gpus[i].mig_kube);
  }
  if (!w->podres_socket) return;
  int due = !w->pods_polled || w->now - w->pods_at >= AG_PODS_S - 1e-9;
  if (due) {
    w->pods_polled = 1;
    w->pods_at = w->now;
    uint8_t *msg;
    size_t len;
    char why[512];
    int rc = stk__ag_podres_call(w->podres_socket, &msg, &len, why, sizeof why);
    /* Parsed aside, so a bad answer leaves the last good one in place. */
    struct ag_pod *np = NULL;
    unsigned nn = 0, ncap = 0;
    if (rc == 0 && stk__ag_parse_podres(msg, len, &np, &nn, &ncap) != 0) {
      snprintf(why, sizeof why, "%s: the kubelet's List answer is not a ListPodResourcesResponse",
               w->podres_socket);
      rc = -1;
    }
    free(msg);
    if (rc == 0) {
      free(w->pods);
      w->pods = np, w->npods = nn, w->pods_cap = ncap;
    } else {
      free(np);
    }
    if (rc) {
      /* Keep the last good answer: a kubelet restart does not free GPUs. */
      w->podres_errors++;
      if (!w->podres_failing) stk_log(STK_LOG_WARN, "watch: pod resources: %s", why);
      w->podres_failing = 1;
    } else {
      if (w->podres_failing) stk_log(STK_LOG_INFO, "watch: pod resources: read again");
      w->podres_failing = 0;
    }
  }
  for (unsigned k = 0; k < w->npods; k++) {
    const struct ag_pod *p = &w->pods[k];
    int unit, gi = pod_gpu(w, p->dev, &unit);
    if (gi < 0) continue; /* a device NVML does not show */
    struct ag_gpu *g = &w->gpus[gi];
    /* The mapping directory is the operator's word. */
    if (g->mapped || stk__ag_unit_mapped(g, unit)) continue;
    char job[AG_JOB_LEN];
    stk__ag_pod_job(p, job);
    if (stk__ag_gpu_add_job(g, unit, job) == 0) {
      if (unit < 0) g->kube = 1;
      else g->mig_kube[unit] = 1;
      for (unsigned a = 0; a < g->nalloc; a++)
        if (g->alloc[a].unit == unit && !strcmp(g->alloc[a].job, job)) g->alloc[a].pod = p;
    }
  }
}

const struct ag_pod *stk__ag_job_pod(const struct stk_watch *w, const char *job) {
  char id[AG_JOB_LEN];
  for (unsigned k = 0; k < w->npods; k++) {
    stk__ag_pod_job(&w->pods[k], id);
    if (!strcmp(id, job)) return &w->pods[k];
  }
  return NULL;
}
