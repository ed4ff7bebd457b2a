/* Checkpoint objects drained to S3: small ones in one PUT, larger ones as a
 * multipart upload whose parts go up in parallel (each read from the local
 * file into memory, so a retry can resend it and SigV4 can hash it). An
 * upload that fails is aborted; the object is put again whole by the
 * resumed drain, since S3 shows an object only once it is complete. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cache/cache_impl.h"
#include "ckpt_impl.h"

#define PART_MIN (16u << 20)  /* bytes per part; more for objects over 10,000 parts */
#define PARTS_MAX 10000
#define PART_THREADS 4

struct upload {
  struct stk_origin *o;
  const char *name;
  char id[1024];
  int fd;
  uint64_t size, part;
  char (*etags)[STK_ETAG_MAX];
};

static int put_part(void *arg, size_t i, char *err) {
  struct upload *u = arg;
  uint64_t off = (uint64_t)i * u->part, len = STK__MIN(u->part, u->size - off);
  void *buf = malloc(len);
  if (!buf) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = stk__pread_full(u->fd, buf, len, off);
  if (rc)
    rc = stk__errf(err, rc, "%s: local copy unreadable at %llu", u->name, (unsigned long long)off);
  else
    rc = stk__s3_multipart_part(u->o, u->name, u->id, (int)i + 1, buf, len, u->etags[i], err);
  free(buf);
  return rc;
}

int stk__ckpt_s3_put_file(struct stk_origin *o, const char *name, int fd, uint64_t size, char *err) {
  if (size <= PART_MIN) {
    void *buf = malloc(size ? size : 1);
    if (!buf) return stk__errf(err, STK_ENOMEM, "out of memory");
    int rc = stk__pread_full(fd, buf, size, 0);
    if (rc)
      rc = stk__errf(err, rc, "%s: local copy unreadable", name);
    else
      rc = stk__s3_put(o, name, buf, size, err);
    free(buf);
    return rc;
  }
  struct upload u = {.o = o, .name = name, .fd = fd, .size = size, .part = PART_MIN};
  while ((size + u.part - 1) / u.part > PARTS_MAX) u.part *= 2;
  size_t parts = (size_t)((size + u.part - 1) / u.part);
  if (!(u.etags = calloc(parts, sizeof *u.etags))) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = stk__s3_multipart_begin(o, name, u.id, sizeof u.id, err);
  if (!rc) rc = stk__ckpt_pfor(PART_THREADS, parts, put_part, &u, err);
  if (!rc) rc = stk__s3_multipart_complete(o, name, u.id, (int)parts, u.etags, err);
  if (rc && u.id[0]) stk__s3_multipart_abort(o, name, u.id);
  free(u.etags);
  return rc;
}

int stk__ckpt_s3_put_mem(struct stk_origin *o, const char *name, const char *text, size_t len,
                         char *err) {
  return stk__s3_put(o, name, text, len, err);
}
